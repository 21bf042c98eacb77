"""The harness's contract, checked on any script, a fork included: `python -m scanrl.tools.contract SCRIPT [flags]`.

A tiny run of the script in a temporary directory (2 seeds, 4 iterations in 4 chunks, unless its flags say
otherwise; longer where the script's own checks refuse so short a run, as sac.py's --learning-starts does), then:
- `make_train(Config(...))` makes one agent's whole run, as the README uses it (traced; the run compiles it);
- the run is named after the script's file (ppo.py copied as ppo_kl.py writes `ppo_kl` runs), and `--eval` of
  another script's run exits 2 naming both;
- `--resume` of the run cut after its second chunk (with the run's --env, as your own env needs) gives the
  uninterrupted run's metrics.csv, summary and parameters, bit for bit (the checkpoint holds all of the algorithm's
  state);
- `--eval` reproduces the summary's eval returns (the policy the harness evaluates is the one trained);
- the evaluated policy reads the trained agent: agent 0 and an agent re-initialised from another key, on agent 0's
  evaluation episodes, do not act alike at every step (where they do, as a Q-table that learned nothing on these
  states does, its actions must at least read the agent's arrays);
- each numeric field of the script's own sets the program's shape, or changes the metrics when swept (one program, a
  point per field against the base point; a second value, then a run 16 times as long, for a field that showed no
  effect), or is read nowhere with this config (e.g. another learner's field).
Prints one line per check, a failure inside the script's code with its file:line, never a traceback; exits 0 when all
pass, 1 otherwise, 2 for flags the script refuses. The flags after the script are its own (`--env Acrobot-v1
--num-envs 2`).
"""

import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import tyro

from scanrl.harness.flags import ConfigError

# XLA's lowest backend optimisation and XLA:CPU's older emitter, for the programs whose rounding need not be a run's
# (the sweep's points, and the trained and re-initialised agents' actions, are compared within one program): what
# that saves is in docs/development.md, "The contract check".
QUICK_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


class ContractFailure(Exception):
    """A check that did not hold: its message says what differed."""


def load_script(path):
    """The script at `path` as a module named after its file, as `python path` would run it (but not as __main__)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path) or not path.endswith(".py"):
        raise SystemExit(f"error: {path} is not a Python script")
    sys.path.insert(0, os.path.dirname(path))
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    sys.modules[name] = module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:  # SystemExit: not an Exception; sys.exit(0) passed every check unseen
        del sys.modules[name]
        if isinstance(error, SystemExit):
            raise SystemExit(f"error: {path} exits as it is imported (sys.exit({error.code!r})): a script trains only "
                             "under `if __name__ == \"__main__\":`, so the contract can import it") from None
        raise SystemExit(f"error: {path} fails as it is imported: {one_line(error, path)}") from None
    if not hasattr(module, "ALGORITHM"):
        raise SystemExit(f"error: {path} defines no ALGORITHM (a harness.Algorithm); is it a scanrl script?")
    return module


def tiny_config(algorithm, flags, out_dir):
    """The script's config from `flags`, tiny where they do not say: 2 seeds, 2 eval episodes, about 4 iterations in
    4 chunks, every checkpoint kept, in `out_dir`."""
    from scanrl.harness.flags import given_fields

    config = tyro.cli(algorithm.config, args=list(flags))
    given = given_fields(algorithm, flags)
    tiny = {k: v for k, v in {"num_seeds": 2, "eval_episodes": 2, "log_every": 1}.items() if k not in given}
    config = dataclasses.replace(config, **tiny, out_dir=out_dir, run_name="whole", keep_checkpoints=4)
    if "total_timesteps" not in given:
        config = dataclasses.replace(config, total_timesteps=4 * algorithm.steps_per_iteration(config))
        while config.total_timesteps < 2**24 and not holds(algorithm.check, config, errors=ConfigError):
            # A budget the script cannot train (sac.py learns only after --learning-starts): twice as long.
            config = dataclasses.replace(config, total_timesteps=2 * config.total_timesteps)
    return dataclasses.replace(config, num_chunks=min(4, algorithm.num_iterations(config)))


def run_main(module, config):
    """The script's `main(config)` -> what it printed; a SystemExit (an error line) is a failure with the line."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            module.main(config)
    except SystemExit as exit_:
        said = (out.getvalue().strip().splitlines() or ["(it printed nothing)"])[-1]
        raise ContractFailure(f"{module.ALGORITHM.script} exited {exit_.code}: {said}") from None
    return out.getvalue()


def check_make_train(module, config):
    """make_train of the plain config traces to one agent's whole run: the scan of `update` the command line runs,
    its metrics on an iteration axis."""
    import jax

    algorithm = module.ALGORITHM
    config = dataclasses.replace(config, num_chunks=None)
    _, metrics = jax.eval_shape(module.make_train(config), jax.random.PRNGKey(config.seed))
    rows = algorithm.num_iterations(config)
    shapes = {k: v.shape for k, v in metrics.items() if v.shape != (rows,)}
    if shapes:
        raise ContractFailure(f"make_train's metrics have shapes {shapes}, not ({rows},): is it the scan of update "
                              f"over the {rows} iterations?")
    return f"{rows} iterations, metrics {', '.join(metrics)}"


def check_name(module, config, whole):
    from scanrl.harness.resume import read_run_config

    algorithm = module.ALGORITHM
    saved = json.loads(Path(whole, "config.json").read_text())
    if saved["algo"] != algorithm.name:
        raise ContractFailure(f"config.json names the algorithm {saved['algo']!r}, the script {algorithm.name!r}")
    other = Path(whole).parent / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**saved, "algo": f"not_{algorithm.name}"}))
    try:
        read_run_config(algorithm, str(other), "--eval")
    except ConfigError as error:
        if algorithm.name not in str(error) or f"not_{algorithm.name}" not in str(error):
            raise ContractFailure(f"--eval of another script's run: {error}") from None
        stem = os.path.splitext(algorithm.script)[0]
        return f"{algorithm.name!r}" + ("" if algorithm.name == stem else f" (set in the script; its file is {stem})")
    raise ContractFailure("--eval of another script's run was accepted")


def restored_leaves(module, config, run_dir):
    """Every array of a run's newest checkpoint, and its step."""
    import jax

    step, runner = restored_runner(module, config, run_dir)
    return step, [np.asarray(x) for x in jax.tree.leaves(runner)]


def restored_runner(module, config, run_dir):
    """The step of a run's newest checkpoint and every agent's state in it."""
    from scanrl.harness.checkpoints import Checkpoints
    from scanrl.harness.program import plan
    from scanrl.harness.sweeps import sweep_points

    algorithm = module.ALGORITHM
    with contextlib.redirect_stdout(io.StringIO()):  # its notes (devices) are not the contract's
        job = plan(algorithm, config, sweep_points(algorithm, config))
    with Checkpoints(run_dir) as checkpoints:
        runner, _, step = checkpoints.restore("--eval", algorithm.name, config, job.abstract_runner, False)
    return step, runner


def check_resume(module, config, whole):
    cut = os.path.join(os.path.dirname(whole), "cut")
    shutil.copytree(whole, cut)
    steps = sorted(int(s) for s in os.listdir(os.path.join(cut, "checkpoints")) if s.isdigit())
    if len(steps) < 2:
        raise ContractFailure(f"the run wrote {len(steps)} checkpoint(s); give it at least 2 chunks")
    for step in steps[len(steps) // 2:]:
        shutil.rmtree(os.path.join(cut, "checkpoints", str(step)))
    os.remove(os.path.join(cut, "summary.json"))
    run_main(module, module.ALGORITHM.config(resume=cut, env=config.env))  # as `--resume cut --env ...` makes it
    if Path(whole, "metrics.csv").read_bytes() != Path(cut, "metrics.csv").read_bytes():
        raise ContractFailure("metrics.csv of the resumed run differs from the uninterrupted run's")
    expected, got = (json.loads(Path(d, "summary.json").read_text()) for d in (whole, cut))
    for key in ("final_return", "eval_return", "env_steps"):
        if got[key] != expected[key]:
            raise ContractFailure(f"summary.json's {key}: {got[key]} resumed, {expected[key]} uninterrupted")
    (step_a, a), (step_b, b) = (restored_leaves(module, config, d) for d in (whole, cut))
    if step_a != step_b or any(not np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=True)):
        raise ContractFailure("the resumed run's final parameters differ from the uninterrupted run's")
    return f"cut after iteration {steps[len(steps) // 2 - 1]} of {steps[-1]}: metrics, summary and state equal"


def check_eval(module, config, whole):
    expected = [f"{r:.2f}" for r in json.loads(Path(whole, "summary.json").read_text())["eval_return"]]
    printed = run_main(module, module.ALGORITHM.config(eval=whole, env=config.env))
    means = [line.split("mean ")[1].split()[0] for line in printed.splitlines() if line.startswith("seed ")]
    if means != expected:
        raise ContractFailure(f"--eval's means {means}, summary.json's eval_return {expected}")
    return f"eval returns {', '.join(expected)}"


def check_policy(module, config, whole):
    import jax

    _, runner = restored_runner(module, config, whole)
    return policy_reads_agent(module.ALGORITHM, config, jax.tree.map(lambda x: np.asarray(x)[0], runner))


def policy_reads_agent(algorithm, config, trained):
    """Agent 0 (`trained`: its state) plays its evaluation episodes as --eval does, and at each step an agent
    re-initialised from another key is asked for its action on the same observation (normalised as for agent 0, so
    only the policy's reading of the agent differs) -> the detail: at how many steps they act differently. Where they
    never do, the policy's actions must read some array of the agent (a tiny run may have learned nothing that changes
    these actions: a Q-table still zero on the states visited); ContractFailure if they read none."""
    import jax
    import jax.numpy as jnp

    from scanrl import envs
    from scanrl.harness import jax_private
    from scanrl.harness.program import evaluation_keys, seed_keys

    env, env_params = envs.make_vec(config.env, config.eval_episodes)
    key = evaluation_keys(seed_keys(config))[0]
    init, _ = algorithm.make_train_parts(config)
    other = jax.random.PRNGKey(config.seed + config.num_seeds)  # a seed the run did not train
    fresh = jax.jit(init).lower(other).compile(QUICK_COMPILE)(other)

    def play(trained, fresh):
        a, b = (envs.normalized_policy(algorithm.policy(config, runner), trained) for runner in (trained, fresh))

        def step(carry, obs, start):
            memory_a, memory_b, differ, steps = carry
            memory_a, action = a.step(memory_a, obs, start)
            memory_b, other = b.step(memory_b, obs, start)
            unlike = sum(jnp.any((x != y).reshape(len(obs), -1), axis=1) for x, y in
                         zip(jax.tree.leaves(action), jax.tree.leaves(other), strict=True))
            return (memory_a, memory_b, differ + jnp.sum(unlike > 0), steps + len(obs)), action

        paired = envs.RecurrentPolicy(lambda n: (a.initial_carry(n), b.initial_carry(n), 0, 0), step)
        evaluation = envs.evaluation_start(env, env_params, paired, key)
        evaluation = envs.evaluation_steps(env, env_params, paired, key, evaluation,
                                           int(env_params.max_steps_in_episode))
        return evaluation.memory[2:]

    differ, steps = (int(x) for x in jax.jit(play).lower(trained, fresh).compile(QUICK_COMPILE)(trained, fresh))
    if differ:
        return f"agent 0 and an agent re-initialised from another key act differently at {differ} of {steps} steps"

    def actions(runner, obs):
        policy = envs.as_recurrent(algorithm.policy(config, runner))
        return policy.step(policy.initial_carry(len(obs)), obs, jnp.ones(len(obs), bool))[1]

    obs = jax.eval_shape(lambda: env.reset(key, env_params)[0])
    read = jax_private.inputs_read(actions, jax.eval_shape(lambda: fresh), obs)[:len(jax.tree.leaves(fresh))]
    if not any(read):
        raise ContractFailure(f"the evaluated policy ignores the trained parameters: agent 0 and an agent "
                              f"re-initialised from another key act alike at all {steps} steps of its evaluation, and "
                              f"its actions read none of the agent's arrays (`policy(config, runner)` must act with "
                              "the runner's)")
    return (f"agent 0 and a re-initialised agent act alike at all {steps} steps of its evaluation (nothing the tiny "
            "run learned changes these actions), and its actions read the agent's arrays")


def other_values(value, ok):
    """Other values of a field that `ok(v)` accepts, those likeliest to show an effect first."""
    candidates = [value * 2, value + 1, value // 2] if isinstance(value, int) else \
        [value * 1.5, value * 0.5, value + 0.1, value - 0.1] if value else [0.1, 0.01, 1.0]
    return [v for v in dict.fromkeys(candidates) if v != value and ok(v)]


def changed_metrics(algorithm, config, values):
    """The fields of `values` ({field: other values}) of which some value, swept alone, changes some metric: one
    compiled program with a base point and one point per field and value (one seed each)."""
    import jax

    from scanrl.harness.loop import run_pieces
    from scanrl.harness.program import plan

    base = {k: getattr(config, k) for k in values}
    owners, points = [], [base]
    for name, others in values.items():
        owners += [name] * len(others)
        points += [{**base, name: v} for v in others]
    config = dataclasses.replace(config, sweep=("contract",), num_seeds=1, num_chunks=1)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        job = plan(algorithm, config, points)  # its notes (devices) are not the contract's
    scalar = jax.ShapeDtypeStruct((), np.int32)
    compiled = job.segment.lower(job.abstract_runner, scalar, job.swept).compile(QUICK_COMPILE)
    _, metrics, _ = run_pieces(compiled, job, job.fresh_agents(QUICK_COMPILE), 0, job.num_iterations, None)
    keys = [k for k in metrics if k not in ("env_steps", "nonfinite")]
    changed = {owners[i - 1] for i in range(1, len(points))
               if not all(np.array_equal(metrics[k][0], metrics[k][i], equal_nan=True) for k in keys)}
    return [name for name in values if name in changed]


def holds(fn, *args, errors=Exception) -> bool:
    """Whether `fn(*args)` returns without raising one of `errors`."""
    try:
        fn(*args)
        return True
    except errors:
        return False


def check_fields(module, config):
    """Each numeric field: fixed per program, changing the metrics, or read nowhere with this config (what --sweep
    refuses). One read but changing no metric fails: a sweep of it would train alike and nothing would say so."""
    from scanrl.harness.program import agent_parts, fields_read_each
    from scanrl.harness.sweeps import check_sweep_points, sweepable_fields

    algorithm, swept = module.ALGORITHM, dataclasses.replace(config, sweep=("contract",))
    fixed, unread, left = [], [], {}
    for name in sweepable_fields(config):
        left[name] = other_values(getattr(config, name), lambda v, name=name: holds(
            check_sweep_points, algorithm, swept, [{name: v}], errors=ConfigError))[:2]
        if not left[name]:
            fixed.append(f"{name} (no other value accepted)")
            del left[name]
    # what --sweep checks: one value per agent (else fixed per program), read by the program (else unread)
    for name, reads in fields_read_each(algorithm, config, agent_parts(algorithm, config), list(left)).items():
        if isinstance(reads, Exception):
            fixed.append(name)
        elif not reads:
            unread.append(name)
        else:
            continue
        del left[name]
    changed = []
    # A tiny run may not show a value's effect: another value of each field, then a second for the fields that showed
    # none, then both in a run 16 times as long (a tabular learner that has not yet reached its goal has learned nothing
    # a learning rate could change). One value first: each is an agent of the program, and most fields show at once.
    for longer, tried in ((1, slice(0, 1)), (1, slice(1, 2)), (16, slice(0, 2))):
        if values := {k: v[tried] for k, v in left.items() if v[tried]}:
            run = dataclasses.replace(config, total_timesteps=longer * config.total_timesteps)
            shown = changed_metrics(algorithm, run, values)
            changed += shown
            left = {k: v for k, v in left.items() if k not in shown}
    notes = (f"fixed per program: {', '.join(fixed) or '-'}; read nowhere with this config (--sweep refuses them): "
             f"{', '.join(unread) or '-'}")
    if left:
        raise ContractFailure(f"{', '.join(left)} read but changed no metric with two other values, in the tiny run "
                              "or one 16 times as long (a sweep of them would train alike, and nothing would say "
                              f"so); {notes}")
    return f"{len(changed)} change the metrics ({', '.join(changed) or '-'}); {notes}"


def one_line(error, script) -> str:
    """An exception raised in a script's code (or the harness's) as one line: its type, its message's first line and
    where it was raised, the innermost line of `script` it passed through, else the innermost of all."""
    frames = [frame for e in (error, error.__cause__ or error.__context__) if e is not None
              for frame in traceback.extract_tb(e.__traceback__)]
    if isinstance(error, SyntaxError) and error.filename:
        frames.append(traceback.FrameSummary(error.filename, error.lineno, ""))
    mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(script or "")] or frames[-1:]
    message = (str(error).strip().splitlines() or [""])[0]
    at = ""
    if mine:
        shown = os.path.relpath(mine[-1].filename)
        at = f" ({mine[-1].filename if shown.startswith('..') else shown}:{mine[-1].lineno})"
    return f"{type(error).__name__}{': ' + message if message else ''}{at}"


def run_checks(checks, script=None) -> int:
    """Runs each (title, fn) in turn, printing one line each (`fn` returns a detail, or raises; an error of the script
    `script` or the harness with where it was raised) -> how many failed; after a failed run, the checks that need it
    are skipped."""
    failed = 0
    for title, fn in checks:
        start = time.perf_counter()
        try:
            detail = fn()
            print(f"  ok    {title}{': ' + detail if detail else ''} ({time.perf_counter() - start:.1f} s)", flush=True)
        except Exception as error:
            failed += 1
            print(f"  FAIL  {title}: {error if isinstance(error, ContractFailure) else one_line(error, script)}",
                  flush=True)
            if title == "a run":
                print("  (the other checks need the run)")
                break
    return failed


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    module = load_script(argv[0])
    algorithm = module.ALGORITHM
    from scanrl.harness.cli import check

    with tempfile.TemporaryDirectory(prefix="scanrl-contract-") as tmp:
        try:
            config = tiny_config(algorithm, argv[1:], tmp)
            check(algorithm, config)
            iterations = algorithm.num_iterations(config)
        except (ConfigError, SystemExit) as error:
            message = str(error) if isinstance(error, ConfigError) else "the flags do not parse (see --help)"
            print(f"error: {algorithm.script}: {message}; pass the script's flags for a tiny run after its path",
                  file=sys.stderr)
            return 2
        except Exception as error:  # the script's own checks or sizes failing
            print(f"error: {algorithm.script}: its tiny run's config: {one_line(error, module.__file__)}",
                  file=sys.stderr)
            return 1
        whole = os.path.join(tmp, "whole")
        longer = (f" ({iterations} iterations: the script's checks refuse fewer; flags that shorten what it needs, "
                  "e.g. --learning-starts, make the check faster)") if iterations > 4 and "--total-timesteps" not in \
            " ".join(argv[1:]) else ""
        print(f"contract of {algorithm.script}: {config.num_seeds} seeds x {config.total_timesteps} steps on "
              f"{config.env} in {config.num_chunks} chunks{longer}", flush=True)
        checks = [
            ("make_train(Config(...)) makes one agent's run", lambda: check_make_train(module, config)),
            ("a run", lambda: (run_main(module, config), "")[1]),
            ("the run is named after the script", lambda: check_name(module, config, whole)),
            ("--resume equals the uninterrupted run", lambda: check_resume(module, config, whole)),
            ("--eval reproduces the summary", lambda: check_eval(module, config, whole)),
            ("the policy reads the trained agent", lambda: check_policy(module, config, whole)),
            ("every numeric field is fixed, changes the metrics, or is unused",
             lambda: check_fields(module, config)),
        ]
        failed = run_checks(checks, module.__file__)
    print(f"{algorithm.script}: {'all checks passed' if not failed else f'{failed} check(s) failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
