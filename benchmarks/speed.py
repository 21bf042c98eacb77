"""Compile time, run time and env steps/s of any scanrl script (a fork included), for several numbers of seeds.

    python benchmarks/speed.py ppo.py                                     # ppo.py's defaults, 1, 8 and 32 seeds
    python benchmarks/speed.py ppo.py --seeds 1 4 -- --env Pendulum-v1 --total-timesteps 200000
    python benchmarks/speed.py td3.py --seeds 1 32 -- --total-timesteps 8000 --learning-starts 4000
    python benchmarks/speed.py dqn_tabular_q.py pqn.py --seeds 1 8 --target-return 475 -- --env CartPole-v1
    python benchmarks/speed.py /tmp/a.py /tmp/b.py --seeds 30 --repeats 8   # A/B of two variants of a script
    python benchmarks/speed.py "sac.py" "sac.py --num-envs 16 --batch-size 1024 --updates-per-step 0.125" \\
        --seeds 10 --target-return -200 -- --env Pendulum-v1 --total-timesteps 20000   # two recipes of one script

A script given with flags of its own (one quoted argument) gets them after the shared ones, so two recipes of one
script take turns as two scripts do.
The flags after `--` are the scripts' own, parsed by each script's `Config` as its command line parses them
(`--num-seeds` is set by each row). Each row compiles `jax.jit(jax.vmap(make_train(config)))` over the seeds' keys
once (compile s), then times `--repeats` whole runs and reports the median (run s). With several scripts, their runs
take turns within each seed count, so load drifts hit them alike. This is the README's `make_train` on one device,
not the command line's run (which splits the agents over a device per core and writes files): it measures the
algorithm's compiled program alone. env steps/s count every seed's env steps (`steps_per_iteration x
num_iterations`); updates/s is given for scripts that report `updates` (td3.py, sac.py); final return is the mean
return of the episodes that ended in the last 10% of the iterations, over every seed (NaN if none did).

`--target-return R` adds the env steps after which the median seed's mean return, over the episodes that ended in
the last `--window` env steps, first reaches R, and the training seconds to get there (taking the run's time as even
over its env steps). `--out FILE` also writes the rows as JSON, each with its config (as in
benchmarks/results/ppo_cartpole.json, written by the timer this script replaced). Timings depend on load: compare
rows of one invocation, on an idle machine.
"""

import dataclasses
import json
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scanrl import harness  # noqa: E402

harness.prepare_jax("speed")  # the scripts' XLA_FLAGS, before JAX makes its backend

import jax  # noqa: E402
import numpy as np  # noqa: E402
import tyro  # noqa: E402

from scanrl.harness.program import seed_keys  # noqa: E402
from scanrl.tools.contract import load_script  # noqa: E402


@dataclass(frozen=True)
class Args:
    scripts: tyro.conf.Positional[tuple[str, ...]]
    """the scripts to time (paths, each with flags of its own if quoted with them); flags after `--` are all's"""
    seeds: tuple[int, ...] = (1, 8, 32)
    """numbers of vmapped seeds to time, one row per script each"""
    repeats: int = 3
    """timed runs per row; the median is reported"""
    target_return: float | None = None
    """also report the env steps and training seconds until the median seed reaches this return"""
    window: int = 20_000
    """env steps over which --target-return averages the returns of the episodes that ended"""
    out: str | None = None
    """also write the rows to this JSON file"""


@dataclass
class Program:
    """One script at one seed count, compiled."""

    module: object
    config: object
    keys: np.ndarray
    compiled: object
    compile_s: float
    run_times: list
    metrics: dict | None = None


def script_config(module, flags):
    """The script's Config from its own flags, checked as its command line checks it."""
    config = tyro.cli(module.Config, args=list(flags))
    try:
        harness.check(module.ALGORITHM, config)
    except harness.ConfigError as error:
        raise SystemExit(f"error: {module.ALGORITHM.script}: {error}") from None
    return config


def compile_program(module, config) -> Program:
    keys = seed_keys(config)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(module.make_train(config))).lower(keys).compile()
    return Program(module, config, keys, compiled, time.perf_counter() - start, [])


def run_program(program: Program):
    start = time.perf_counter()
    _, metrics = jax.block_until_ready(program.compiled(program.keys))
    program.run_times.append(time.perf_counter() - start)
    program.metrics = jax.tree.map(np.asarray, metrics)


def env_steps(program: Program) -> np.ndarray:
    """Each iteration's env steps per seed, at its end."""
    algorithm = program.module.ALGORITHM
    iterations = algorithm.num_iterations(program.config)
    return algorithm.steps_per_iteration(program.config) * np.arange(1, iterations + 1)


def steps_to_return(metrics, steps, target, window) -> np.ndarray:
    """Per seed: the env steps after which the mean return of the episodes that ended in the last `window` env steps
    first reaches `target` (inf if it never does). A window, not one iteration: an iteration may see only one or two
    episodes end."""
    k = min(len(steps), max(1, window // int(steps[0])))  # iterations per window (at most the run)
    returns = metrics["episode_return"]
    episodes = metrics["episodes"] if "episodes" in metrics else np.isfinite(returns).astype(float)
    summed = [np.cumsum(np.pad(x, ((0, 0), (1, 0))), -1) for x in (np.nan_to_num(returns) * episodes, episodes)]
    totals, counts = (x[:, k:] - x[:, :-k] for x in summed)  # window sums ending at iterations k-1, k, ...
    mean = np.where(counts > 0, totals / np.maximum(counts, 1), -np.inf)
    reached = mean >= target
    return np.where(reached.any(-1), steps[k - 1:][reached.argmax(-1)], np.inf)


def final_return(metrics) -> float:
    """The mean return of the episodes that ended in the last 10% of the iterations, over every seed (as
    summary.json's final_return, per seed there); NaN if none ended."""
    returns = metrics["episode_return"]
    last = slice(-max(1, returns.shape[1] // 10), None)
    episodes = metrics["episodes"] if "episodes" in metrics else np.isfinite(returns).astype(float)
    count = episodes[:, last].sum()
    return float((np.nan_to_num(returns[:, last]) * episodes[:, last]).sum() / count) if count else float("nan")


def row(program: Program, label: str, args: Args) -> dict:
    steps = env_steps(program)
    seeds, run_s = program.config.num_seeds, statistics.median(program.run_times)
    metrics = program.metrics
    result = dict(script=label, seeds=seeds, compile_s=program.compile_s, run_s=run_s,
                  sps=int(steps[-1]) * seeds / run_s, final_return=final_return(metrics))
    if "updates" in metrics:
        result["updates_per_s"] = float(metrics["updates"][:, -1].sum()) / run_s
    if args.target_return is not None:
        reached = steps_to_return(metrics, steps, args.target_return, args.window)
        median = float(np.median(reached))
        result.update(steps_to_target=None if np.isinf(median) else median,
                      seconds_to_target=None if np.isinf(median) else run_s * median / int(steps[-1]),
                      seeds_at_target=int(np.isfinite(reached).sum()))
    return {**result, "config": dataclasses.asdict(program.config)}


def header(args: Args, updates: bool) -> list[str]:
    columns = ["script", "seeds", "compile s", "run s", "env steps/s (all seeds)", "env steps/s per seed"]
    columns += ["updates/s (all seeds)"] * updates + ["final return"]
    if args.target_return is not None:
        target = f"{args.target_return:g}"
        columns += [f"env steps to {target} (median seed)", f"train s to {target}", "seeds that reach it"]
    return [f"| {' | '.join(columns)} |", "|---|" + "---:|" * (len(columns) - 1)]


def table_line(r: dict, args: Args, updates: bool) -> str:
    cells = [r["script"], str(r["seeds"]), f"{r['compile_s']:.1f}", f"{r['run_s']:.2f}", f"{r['sps']:,.0f}",
             f"{r['sps'] / r['seeds']:,.0f}"]
    if updates:
        cells.append(f"{r['updates_per_s']:,.0f}" if "updates_per_s" in r else "-")
    cells.append(f"{r['final_return']:.1f}")
    if args.target_return is not None:
        reached = r["steps_to_target"] is not None
        cells += [f"{r['steps_to_target']:,.0f}" if reached else "not reached",
                  f"{r['seconds_to_target']:.1f}" if reached else "-", f"{r['seeds_at_target']} of {r['seeds']}"]
    return f"| {' | '.join(cells)} |"


def main(args: Args, flags) -> int:
    if not args.scripts:
        raise SystemExit("error: name a script to time, e.g. python benchmarks/speed.py ppo.py")
    if args.repeats < 1 or min(args.seeds, default=0) < 1:
        raise SystemExit("error: --repeats and every --seeds value must be at least 1")
    given = [shlex.split(spec) for spec in args.scripts]  # each: a path, then flags of its own
    modules = [load_script(path) for path, *_ in given]
    configs = [script_config(module, [*flags, *own]) for module, (_, *own) in zip(modules, given, strict=True)]
    labels = [" ".join([module.ALGORITHM.script, *own]) for module, (_, *own) in zip(modules, given, strict=True)]
    updates = any("updates" in jax.eval_shape(m.make_train(c), jax.random.PRNGKey(0))[1]  # the metrics' keys
                  for m, c in zip(modules, configs, strict=True))
    print(f"jax {jax.__version__} ({jax.default_backend()}), {harness.available_cores()} cores, "
          f"{platform.processor() or platform.machine()}; median of {args.repeats} runs, compile apart, one device")
    for module, config, label in zip(modules, configs, labels, strict=True):
        algorithm = module.ALGORITHM
        print(f"- {label}: {config.env}, {algorithm.num_iterations(config)} iterations of "
              f"{algorithm.steps_per_iteration(config):,} env steps per seed")
    print("", *header(args, updates), sep="\n", flush=True)
    rows = []
    for num_seeds in args.seeds:
        programs = [compile_program(m, dataclasses.replace(c, num_seeds=num_seeds))
                    for m, c in zip(modules, configs, strict=True)]
        for _ in range(args.repeats):
            for program in programs:  # in turn: a drift in the machine's load falls on every script alike
                run_program(program)
        for program, label in zip(programs, labels, strict=True):
            rows.append(row(program, label, args))
            print(table_line(rows[-1], args, updates), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    ours, theirs = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    sys.exit(main(tyro.cli(Args, args=ours, description=__doc__), theirs))
