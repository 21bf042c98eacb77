"""--sweep: its grid of points, their names, the checks that a swept field can take one value per agent (and changes
what the program computes), and each point's rows. Agents are point-major: agent p * num_seeds + s trains sweep
point p with seed `seed + s`, so every point sees the seeds of a run without --sweep."""

import dataclasses
import itertools

import jax
import numpy as np

from scanrl.harness import jax_private
from scanrl.harness.flags import MAX_COUNT, ConfigError, Flags, flag, require_finite


def sweepable_fields(config) -> tuple[str, ...]:
    """The fields --sweep may vary: the script's own numeric fields (not booleans, not the shared flags); whether the
    program can take one value per agent of each is known only when traced (`check_swept`)."""
    shared = {f.name for f in dataclasses.fields(Flags)}
    return tuple(f.name for f in dataclasses.fields(config) if f.name not in shared
                 and type(getattr(config, f.name)) in (int, float))


def sweep_points(algorithm, config) -> list[dict]:
    """The grid of --sweep values, one dict {field: value} per point (one empty point without --sweep); the last
    --sweep flag varies fastest. A bad spec raises ConfigError."""
    sweepable = sweepable_fields(config)
    fields, grids = [], []
    for spec in config.sweep:
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        name = {"lr": "learning_rate"}.get(name, name)  # --sweep's short names
        if not sep or not name or not values.strip():
            raise ConfigError(f"--sweep {spec!r} is malformed; write field=v1,v2,... (e.g. --sweep lr=1e-3,3e-4)")
        if name in ("seed", "num_seeds"):
            raise ConfigError(f"--sweep {name}: seeds are vmapped already; use --seed and --num-seeds")
        if name not in {f.name for f in dataclasses.fields(config)}:
            raise ConfigError(f"--sweep {spec!r}: {algorithm.script} has no field {name!r}; sweepable: "
                              f"{', '.join(sweepable)}")
        if name not in sweepable:
            raise ConfigError(f"--sweep {name}: only the script's own numeric fields can be swept in one program "
                              f"({', '.join(sweepable)}); run one job per value")
        if name in fields:
            raise ConfigError(f"--sweep {name} is given twice; list all its values in one flag")
        try:
            parsed = [float(v) for v in values.split(",")]
        except ValueError:
            raise ConfigError(f"--sweep {spec!r}: the values must be numbers separated by commas, "
                              "e.g. --sweep lr=1e-3,3e-4") from None
        if isinstance(getattr(config, name), int):
            if not all(v.is_integer() for v in parsed):
                raise ConfigError(f"--sweep {spec!r}: {flag(name)} takes whole numbers")
            parsed = [int(v) for v in parsed]
            if any(abs(v) > MAX_COUNT for v in parsed):
                raise ConfigError(f"--sweep {spec!r}: {flag(name)} is an int32 inside the compiled program; keep its "
                                  f"values within +-{MAX_COUNT:,}")
        if len(set(parsed)) < len(parsed):
            raise ConfigError(f"--sweep {spec!r} repeats a value")
        fields.append(name)
        grids.append(parsed)
    return [dict(zip(fields, values, strict=True)) for values in itertools.product(*grids)]


def point_label(point: dict) -> str:
    """`learning_rate=0.001,ent_coef=0`: a sweep point's name, also its directory in the run directory."""
    return ",".join(f"{k}={v:g}" for k, v in point.items())


def sweep_overrides(algorithm, config, points) -> list[str]:
    """A note for each swept field whose own flag was set too (not the default): the run says the sweep's values
    replace it rather than silently drop the flag."""
    if not config.sweep:
        return []
    defaults = algorithm.config(env=config.env)  # a default may depend on the env (dqn_tabular_q's learner)
    return [f"note: --sweep {name}={','.join(f'{p[name]:g}' for p in points)} overrides {flag(name)} "
            f"{getattr(config, name)}: each point trains with its own value" for name in points[0]
            if getattr(config, name) != getattr(defaults, name)]


def check_sweep_points(algorithm, config, points):
    """ConfigError naming the point unless the algorithm accepts each sweep point's values on their own."""
    if not config.sweep:
        return
    for point in points:
        try:
            point_config = dataclasses.replace(config, sweep=(), **point)
            require_finite(point_config)
            algorithm.validate(point_config)
        except ConfigError as error:
            raise ConfigError(f"--sweep {point_label(point)}: {error}") from None


def dtype_of(config, name):
    """A swept field's type inside the compiled program."""
    return np.int32 if isinstance(getattr(config, name), int) else np.float32


def swept_values(config, points) -> dict:
    """{field: one value per agent} of the swept fields (none without --sweep), point-major like the agents."""
    return {k: np.repeat(np.array([p[k] for p in points], dtype_of(config, k)), config.num_seeds)
            for k in points[0]}


def probe_program(algorithm, config, name):
    """`program(value)`: one agent's init, two iterations and evaluation with `value` as its swept `name` -> the
    iterations' metrics and the trained policy's returns (traced by `check_swept` and the contract)."""
    from scanrl.harness.evaluation import make_evaluate

    parts, key = agent_parts(algorithm, config), jax.random.PRNGKey(0)

    def program(value):
        agent_config, init, update = parts({name: value})
        runner, metrics = jax.lax.scan(lambda runner, _: update(runner), init(key), None, 2)
        return metrics, make_evaluate(algorithm, agent_config).returns(key, runner)

    return program


def check_swept(algorithm, config, points):
    """ConfigError naming the field, before anything is compiled or written, for a swept field the program cannot
    take one value per agent of (a shape, a loop length, a Python branch), and for one that changes nothing it
    computes, so every point would train alike (a fork's unused new field, a field of a part switched off)."""
    for name in points[0]:
        try:
            reads = jax_private.reads_its_input(probe_program(algorithm, config, name),
                                                jax.ShapeDtypeStruct((), dtype_of(config, name)))
        except Exception as error:
            cause = (str(error).strip().splitlines() or [""])[0][:160]
            raise ConfigError(f"--sweep {name}: {algorithm.script} needs one value of {flag(name)} for the whole "
                              f"compiled program (it sets a shape, a loop length or a Python branch: "
                              f"{type(error).__name__}: {cause}); run one job per value") from None
        if not reads:
            raise ConfigError(f"--sweep {name}: the value of config.{name} changes nothing {algorithm.script} "
                              "computes with this config (no metric, no trained policy), so every point would train "
                              "alike; read it in the compiled program, or drop it from --sweep")


def point_rows(tree, p, num_seeds):
    """Sweep point p's rows (its agents) of every array."""
    return jax.tree.map(lambda x: x[p * num_seeds:(p + 1) * num_seeds], tree)


class AgentNames:
    """Agent i's name in messages: its seed ("6"), and in a sweep its point ("6 at learning_rate=0.001")."""

    def __init__(self, config, points):
        self.seed, self.num_seeds, self.points = config.seed, config.num_seeds, points

    def __getitem__(self, i):
        p, s = divmod(i, self.num_seeds)
        return str(self.seed + s) if len(self.points) == 1 else f"{self.seed + s} at {point_label(self.points[p])}"


def agent_parts(algorithm, config):
    """`parts(swept) -> (config, init, update)` of one agent: without swept values the run's own, made once; with
    them (traced scalars), those of the config holding them, so wherever the script reads a swept field it reads the
    agent's value."""
    base = (config, *algorithm.make_train_parts(config))

    def parts(swept):
        if not swept:
            return base
        agent_config = dataclasses.replace(config, **swept)
        return (agent_config, *algorithm.make_train_parts(agent_config))

    return parts

