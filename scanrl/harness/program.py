"""One agent's program, made once per run (`plan` -> `Job`): the script's parts (again inside the program for each
agent's swept values), the swept fields checked, the agents' state and evaluation as shapes and the memory check, their
keys and names, where the run lives (one process or several), a piece of training (a scan of `update`), the evaluation
and the initial state; vmapped over a device's agents, split over the devices. Agents are point-major: agent
p * num_seeds + s trains sweep point p with seed `seed + s`, so every point sees the seeds of a run without --sweep."""

import dataclasses
import itertools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from scanrl.harness import jax_private
from scanrl.harness.agents import choose_devices, local_agents, over_agents, placement, to_agents
from scanrl.harness.algorithm import REQUIRED_METRICS
from scanrl.harness.flags import MAX_COUNT, ConfigError, flag
from scanrl.harness.memory import checked_state
from scanrl.harness.metrics import plural
from scanrl.harness.sweeps import point_label

# With threefry, fold_in(key, i) equals split(key, n)[i] for every i < n: folding a small number into an agent's
# root key gives a key its init split off. No split of the root into fewer than 2**32 keys reaches this one.
EVALUATION_FOLD = 2**32 - 1


def agent_parts(algorithm, config):
    """`parts(swept) -> (config, init, update)` of one agent: the run's own (made once) without swept values; with them
    (traced scalars), those of the config holding them, so the script reads each agent's value."""
    base = (config, *algorithm.make_train_parts(config))

    def parts(swept):
        agent_config = dataclasses.replace(config, **swept)
        return (agent_config, *algorithm.make_train_parts(agent_config)) if swept else base

    return parts


class Evaluate(NamedTuple):
    """One agent's evaluation (see `make_evaluate`): whole, or in pieces the host runs until every episode ended."""

    returns: Callable  # (key, runner) -> the return of each episode, (eval_episodes,)
    start: Callable  # (key, runner) -> envs.Evaluation before the first step
    steps: Callable  # (key, runner, evaluation, until) -> envs.Evaluation at step `until` or once all episodes ended
    max_steps: int  # the env's time limit: no episode is played longer


def make_evaluate(algorithm, config, sampled=False) -> Evaluate:
    """One agent's evaluation: the first episode of each of `eval_episodes` envs played by its deterministic policy
    (`sampled`: the policy training acts with, on the same episodes), from its evaluation key and its runner."""
    from scanrl import envs

    env, env_params = envs.make_vec(config.env, config.eval_episodes)
    max_steps = int(env_params.max_steps_in_episode)

    def start(key, runner):
        return envs.evaluation_start(env, env_params, eval_policy(algorithm, config, runner, key, sampled), key)

    def steps(key, runner, evaluation, until):
        act = eval_policy(algorithm, config, runner, key, sampled)
        return envs.evaluation_steps(env, env_params, act, key, evaluation, until)

    return Evaluate(lambda key, runner: steps(key, runner, start(key, runner), max_steps).returns, start, steps,
                    max_steps)


def eval_policy(algorithm, config, runner, key, sampled):
    """The deterministic policy, or (`sampled`) the sampled one drawing its actions from a key folded from `key`
    (the episodes' key): the same episodes either way. It sees observations as training did (`normalized_policy`)."""
    from scanrl import envs

    act = algorithm.policy(config, runner, **{"key": jax.random.fold_in(key, EVALUATION_FOLD)} if sampled else {})
    return envs.normalized_policy(act, runner)


def evaluation_keys(keys) -> np.ndarray:
    """Each agent's evaluation key, from its root key `PRNGKey(seed)`; never one its training uses."""
    return np.asarray(jax.vmap(lambda key: jax.random.fold_in(key, EVALUATION_FOLD))(keys))


def check_metrics(script, update, metrics):
    """ConfigError naming `update`'s line for a metrics dict without a key the harness reads or with one it adds."""
    code = getattr(update, "__code__", None)
    where = f"{script}:{code.co_firstlineno}" if code else script
    if missing := [(key, meaning) for key, meaning in REQUIRED_METRICS.items() if key not in metrics]:
        raise ConfigError(f"{where}: the metrics dict `update` returns has no {missing[0][0]!r} ({missing[0][1]}); the "
                          "harness reads it for the progress lines and the summary: add it")
    if added := sorted({"env_steps", "nonfinite"} & set(metrics)):
        raise ConfigError(f"{where}: the metrics dict `update` returns holds {' and '.join(added)}, which the "
                          "harness adds itself; rename it in the metrics dict")


def learned_finite(runner):
    """In the jit: True if no flax `TrainState` in `runner` (its params, optimizer state and any field a subclass adds,
    such as batch statistics; else, as in a Q-table, no float of the runner) holds a NaN or an infinity. Env states
    and replay buffers are not read: they may hold infinities by design, and a buffer is large."""
    from flax.training.train_state import TrainState

    states = [x for x in jax.tree.leaves(runner, is_leaf=lambda x: isinstance(x, TrainState))
              if isinstance(x, TrainState)]
    leaves = [x for x in jax.tree.leaves(states or runner) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    return jnp.array([jnp.isfinite(x).all() for x in leaves], bool).all()


def dtype_of(config, name):
    """A swept field's type inside the compiled program."""
    return np.int32 if isinstance(getattr(config, name), int) else np.float32


def fields_read_each(algorithm, config, parts, names) -> dict:
    """{field: whether the program (init, two iterations, evaluation) reads it, or the error tracing it alone raised}:
    `names` traced together, once; where that fails, each half apart, down to the fields that fail."""
    key = jax.random.PRNGKey(0)

    def program(values):
        agent_config, init, update = parts(values)
        runner, metrics = jax.lax.scan(lambda runner, _: update(runner), init(key), None, 2)
        return metrics, make_evaluate(algorithm, agent_config).returns(key, runner)

    try:
        shapes = {name: jax.ShapeDtypeStruct((), dtype_of(config, name)) for name in names}  # leaves: keys sorted
        return dict(zip(sorted(names), jax_private.inputs_read(program, shapes), strict=True)) if names else {}
    except Exception as error:
        if len(names) == 1:
            return {names[0]: error}
        half = len(names) // 2
        return {**fields_read_each(algorithm, config, parts, names[:half]),
                **fields_read_each(algorithm, config, parts, names[half:])}


def check_swept(algorithm, config, names, parts):
    """ConfigError naming the field, before anything is compiled or written, for a swept field the program cannot
    take one value per agent of (a shape, a loop length, a Python branch), and for one that changes nothing it
    computes, so every point would train alike (a fork's unused new field, a field of a part switched off)."""
    read = fields_read_each(algorithm, config, parts, list(names))
    for name in names:
        if isinstance(error := read[name], Exception):
            cause = (str(error).strip().splitlines() or [""])[0][:160]
            raise ConfigError(f"--sweep {name}: {algorithm.script} needs one value of {flag(name)} for the whole "
                              f"compiled program (it sets a shape, a loop length or a Python branch: "
                              f"{type(error).__name__}: {cause}); run one job per value")
    for name in names:
        if not read[name]:
            raise ConfigError(f"--sweep {name}: the value of config.{name} changes nothing {algorithm.script} "
                              "computes with this config (no metric, no trained policy), so every point would train "
                              "alike; read it in the compiled program, or drop it from --sweep")


def seed_keys(config) -> np.ndarray:
    """`jax.random.PRNGKey(seed + i)` for every seed of the run, (num_seeds, 2) uint32, in one vmapped call."""
    seeds = np.arange(config.num_seeds, dtype=np.uint32) + np.uint32(config.seed)
    return np.asarray(jax.vmap(jax.random.PRNGKey)(seeds))


class AgentNames:
    """Agent i's name in messages: its seed ("6"), and in a sweep its point ("6 at learning_rate=0.001")."""

    def __init__(self, config, points):
        self.seed, self.num_seeds, self.points = config.seed, config.num_seeds, points

    def __getitem__(self, i):
        p, s = divmod(i, self.num_seeds)
        return str(self.seed + s) if len(self.points) == 1 else f"{self.seed + s} at {point_label(self.points[p])}"


def agent_layout(config, points):
    """-> (keys, swept {field: (agents,) int32 or float32}, names), one row per agent (point-major); numpy arrays,
    built in time linear in the agents, and the agents' names made only when asked for."""
    keys = np.tile(seed_keys(config), (len(points), 1))
    swept = {k: np.repeat(np.array([p[k] for p in points], dtype_of(config, k)), config.num_seeds) for k in points[0]}
    return keys, swept, AgentNames(config, points)


def piece_length(num_iterations, config) -> int:
    """The iterations in one piece of the compiled scan: the largest divisor of the run's iterations within
    --log-every (and a chunk), so one program of a static scan length runs every piece, and a resumed run the same."""
    most = max(1, min(config.log_every, num_iterations // (config.num_chunks or 1)))
    return max(d for d in range(1, most + 1) if num_iterations % d == 0)


CHECKPOINT_S = 60  # seconds of training between checkpoints without --num-chunks: what a kill loses at most, about


@dataclasses.dataclass
class Job:
    """A run's plan, before anything is compiled or written: its agents, their devices and the programs."""

    algorithm: object
    config: object
    points: list
    keys: np.ndarray  # each agent's root key
    swept: dict  # each agent's swept values, split over the devices
    names: AgentNames  # agents' names in messages
    mesh: Mesh
    sharding: NamedSharding
    processes: object  # where the run lives: `agents.OneProcess` or `processes.ManyProcesses`
    parts: Callable  # `agent_parts`
    abstract_runner: object  # every agent's state as shapes, split over the devices
    segment: Callable  # the training program, a piece of the scan, not compiled
    evaluate: tuple  # the final evaluation of every agent (its start and its steps), not compiled
    length: int  # iterations in a piece
    num_iterations: int
    ends: list | None  # the iteration after each chunk (--num-chunks); None: a chunk ends every CHECKPOINT_S
    eval_steps: int  # the env's time limit: the longest an evaluation episode is played
    lead: bool  # process 0, which writes the run directory and wandb
    local_agents: list  # the agents this process trains
    eval_keys: np.ndarray  # each agent's evaluation key
    metric_keys: list  # metrics.csv's columns after seed and iteration, filled when `segment` is traced

    def describe(self) -> str:
        """What trains, how long, its checkpoints and its devices: a run's first line (the run directory follows)."""
        config, sweep = self.config, len(self.points) > 1
        described = (f"{plural(config.num_seeds, 'seed')} x {len(self.points)} sweep points" if sweep
                     else plural(len(self.keys), "agent"))
        step = self.algorithm.steps_per_iteration(config)
        steps = f"{config.total_timesteps:,} steps"
        if self.num_iterations * step != config.total_timesteps:  # say so where it rounds down
            steps = (f"{self.num_iterations * step:,} steps (--total-timesteps {config.total_timesteps:,} in whole "
                     f"iterations of {step:,})")
        chunks = f"checkpoints every {CHECKPOINT_S} s" if self.ends is None else f"{config.num_chunks} chunk(s)"
        return (f"{self.algorithm.name} on {config.env}: {described} x {steps}, {chunks}, on "
                f"{self.mesh.devices.size} device(s)")

    def fresh_agents(self, compiler_options=None):
        """Every agent's `init`, split over the devices, with the host's structure of the runner (a sweep's init gives
        it static parts of its own). All run on the first device, a device's agents at a time, then move: one compile,
        never two host devices at once (a deadlock on XLA:CPU, docs/reliability.md). `compiler_options`: XLA's."""
        jitted, shards, compiled = jax.jit(jax.vmap(lambda key, swept: self.parts(swept)[1](key))), [], None
        placement = self.sharding.addressable_devices_indices_map(self.keys.shape[:1])
        first = next(iter(placement))
        for device, index in placement.items():
            local = jax.device_put((self.keys[index], {k: v[index] for k, v in self.swept.items()}), first)
            compiled = compiled or jitted.lower(*local).compile(compiler_options)
            shards.append(jax.device_put(jax.block_until_ready(compiled(*local)), device))
        runner = jax.tree.map(lambda *xs: jax.make_array_from_single_device_arrays(
            (len(self.keys),) + xs[0].shape[1:], self.sharding, list(xs)), *shards)
        return jax.tree.unflatten(jax.tree.structure(self.abstract_runner), jax.tree.leaves(runner))


def plan(algorithm, config, points, sampled=False) -> Job:
    """The run's `Job`. ConfigError, before anything per agent is made, for a swept field the program cannot take, or
    agents whose state and evaluation outgrow memory. `sampled`: --eval-sampled."""
    num_agents = config.num_seeds * len(points)
    if num_agents > MAX_COUNT:  # the programs hold counts as int32
        raise ConfigError(f"agents (--num-seeds x sweep points): {num_agents:,} is more than the {MAX_COUNT:,} "
                          "(2**31 - 1) the compiled program can count; lower --num-seeds")
    parts = agent_parts(algorithm, config)
    check_swept(algorithm, config, points[0], parts)
    evaluation = make_evaluate(algorithm, config, sampled)
    abstract = checked_state(config, jax.vmap(lambda key, values: parts(values)[1](key)), evaluation.start,
                             jax.ShapeDtypeStruct((num_agents, 2), jnp.uint32),
                             {k: jax.ShapeDtypeStruct((num_agents,), dtype_of(config, k)) for k in points[0]})
    keys, swept, names = agent_layout(config, points)
    eval_keys = evaluation_keys(keys)
    num_iterations = algorithm.num_iterations(config)
    length = piece_length(num_iterations, config)
    ends = None
    if config.num_chunks is not None:  # chunks of whole pieces, as equal as can be, the shorter ones last
        size, longer = divmod(num_iterations // length, config.num_chunks)
        ends = list(itertools.accumulate(length * (size + (i < longer)) for i in range(config.num_chunks)))
    steps, metric_keys = algorithm.steps_per_iteration(config), []
    devices = choose_devices(config, num_agents)
    # Recorded in config.json and the checkpoints: --resume trains on as many devices (its numbers depend on the split).
    config = dataclasses.replace(config, num_devices=len(devices))
    mesh = Mesh(np.array(devices), ("agents",))
    sharding = NamedSharding(mesh, PartitionSpec("agents"))
    abstract_runner = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), abstract)

    def segment(runner, start, swept):
        """`length` iterations of the agent's `update` from iteration `start` (`lax.scan`), each one's metrics with
        `env_steps` and `nonfinite` added; the runner handed back with the host's structure."""
        _, init, update = parts(swept)
        if swept:  # the runner's static parts (an optimizer's functions) close over another trace's swept values
            built = jax.eval_shape(init, jax.ShapeDtypeStruct((2,), jnp.uint32))
            runner = jax.tree.unflatten(jax.tree.structure(built), jax.tree.leaves(runner))

        def iteration(runner, i):
            runner, metrics = update(runner)
            check_metrics(algorithm.script, update, metrics)
            metric_keys[:] = ["env_steps", *metrics, "nonfinite"]  # the script's order (jax orders a dict's keys)
            return runner, {"env_steps": (i + 1) * steps, **metrics, "nonfinite": ~learned_finite(runner)}

        runner, rows = jax.lax.scan(iteration, runner, start + jnp.arange(length, dtype=jnp.int32))
        return jax.tree.unflatten(jax.tree.structure(abstract_runner), jax.tree.leaves(runner)), rows

    def evaluation_of(swept):
        return make_evaluate(algorithm, parts(swept)[0], sampled) if swept else evaluation

    evaluate = (over_agents(lambda key, runner, swept: evaluation_of(swept).start(key, runner), mesh, (0, 0, 0)),
                over_agents(lambda key, runner, swept, carry, until: evaluation_of(swept).steps(key, runner, carry,
                                                                                               until),
                            mesh, (0, 0, 0, 0, None)))
    return Job(algorithm, config, points, keys, to_agents(swept, sharding), names, mesh, sharding, placement(),
               parts, abstract_runner, over_agents(segment, mesh, (0, None, 0)), evaluate, length, num_iterations, ends,
               evaluation.max_steps, jax.process_index() == 0, local_agents(sharding, num_agents),
               eval_keys, metric_keys)

