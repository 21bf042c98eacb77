"""The whole machine by default, and no second compile (issue 16): ppo.py on CartPole-v1 at its defaults, run as a
user runs it, for 30 seeds (the main job), 1 and 8 seeds.

For each seed count, `--repeats` rounds; in each round, in turn:
- `default, first`: default devices (one per core) with an empty compilation cache: the first compile;
- `default, cached`: the same command again, the cache now holding its programs: the cached compile;
- `1 device`: `--num-devices 1` (the cache warm for it too: a round's first run of it compiles);
- `before` (with --baseline DIR): DIR's ppo.py (a checkout of an earlier commit, e.g. `git worktree add /tmp/before
  53fe40f`) with its own defaults.
Compile time and env steps/s come from each run's summary.json (`compile_s`: tracing, lowering and compiling, or
loading, the training program; `sps`: env steps of all agents per second of training), `wall` is the whole process
(imports, every program, evaluation, files); medians over the rounds. The programs alternate, so load drifts hit
them alike.

    python benchmarks/studies/bench_devices.py --baseline /tmp/before    # about 15 min on a 2-core CPU
    python benchmarks/studies/bench_devices.py --seeds 1 8 --repeats 5

    python benchmarks/studies/bench_devices.py --stress 50                # 50 short 2-device runs, none may hang

Writes benchmarks/results/devices.md (and stress.md). Timings depend on load: run it on an idle machine.
"""

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
# The stress runs: every script, short, on 2 host devices (a 2-seed split), in turn.
STRESS = [
    ("ppo.py", ["--num-seeds", "4", "--total-timesteps", "20480"]),
    ("dqn_tabular_q.py", ["--agent", "dqn", "--num-seeds", "4", "--total-timesteps", "20000"]),
    ("pqn.py", ["--num-seeds", "4", "--total-timesteps", "20480"]),
    ("reinforce.py", ["--num-seeds", "4", "--total-timesteps", "20480"]),
    ("td3.py", ["--num-seeds", "4", "--total-timesteps", "3000", "--learning-starts", "1000"]),
    ("dqn_tabular_q.py", ["--agent", "tabular", "--env", "GridWorld-v0", "--num-seeds", "4"]),
]


@dataclass(frozen=True)
class Args:
    seeds: tuple[int, ...] = (30, 1, 8)
    """seed counts to measure"""
    repeats: int = 3
    """rounds per seed count (medians over them)"""
    baseline: str | None = None
    """a checkout of an earlier commit whose ppo.py runs as `before` (its own venv-less imports, this Python)"""
    stress: int = 0
    """instead: this many consecutive short runs of every script on 2 host devices; a run past --timeout hangs"""
    timeout: int = 300
    """seconds before a run counts as hung"""
    out: str = os.path.join(RESULTS, "devices.md")


def run(root, flags, env, timeout):
    """One run of root/ppo.py (or another script: flags[0] if it ends in .py) -> (summary.json, wall seconds)."""
    script = flags[0] if flags and flags[0].endswith(".py") else "ppo.py"
    flags = flags[1:] if flags and flags[0].endswith(".py") else flags
    with tempfile.TemporaryDirectory() as out_dir:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, os.path.join(root, script), *flags, "--out-dir", out_dir],
                                capture_output=True, text=True, cwd=out_dir, env=env, timeout=timeout)
        wall = time.perf_counter() - start
        if result.returncode:
            raise SystemExit(f"{script} {' '.join(flags)} failed:\n{result.stderr[-2000:]}")
        (name,) = os.listdir(out_dir)
        with open(os.path.join(out_dir, name, "summary.json")) as f:
            return json.load(f), wall


def measure(args, num_seeds, cache):
    env = {**os.environ, "SCANRL_COMPILE_CACHE": cache}
    env.pop("XLA_FLAGS", None)  # the scripts' own defaults
    flags = ["--env", "CartPole-v1", "--num-seeds", str(num_seeds)]
    rows = {"default, first": [], "default, cached": [], "1 device": [], "before": []}
    for round_ in range(args.repeats):
        shutil.rmtree(cache, ignore_errors=True)
        rows["default, first"].append(run(ROOT, flags, env, args.timeout))
        rows["default, cached"].append(run(ROOT, flags, env, args.timeout))
        rows["1 device"].append(run(ROOT, [*flags, "--num-devices", "1"], env, args.timeout))
        if args.baseline:
            rows["before"].append(run(args.baseline, flags, env, args.timeout))
        print(f"{num_seeds} seeds, round {round_ + 1}: " + ", ".join(
            f"{k} {v[-1][0]['compile_s']:.1f} s / {v[-1][0]['sps']:.0f} sps" for k, v in rows.items() if v),
            flush=True)
    return {k: v for k, v in rows.items() if v}


def table(results, args):
    lines = [f"`python benchmarks/studies/bench_devices.py{' --baseline DIR' if args.baseline else ''} --repeats "
             f"{args.repeats}`: ppo.py, CartPole-v1, defaults (500k env steps per seed); medians of {args.repeats} "
             f"rounds, programs alternating. {machine()}", "",
             "| seeds | run | devices | compile s | wall s | env steps/s | vs before |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for num_seeds, rows in results.items():
        before = statistics.median(s["sps"] for s, _ in rows["before"]) if "before" in rows else None
        for label, runs in rows.items():
            sps = statistics.median(s["sps"] for s, _ in runs)
            ratio = f"{sps / before:.2f}x" if before else ""
            lines.append(f"| {num_seeds} | {label} | {runs[0][0]['num_devices']} | "
                         f"{statistics.median(s['compile_s'] for s, _ in runs):.1f} | "
                         f"{statistics.median(w for _, w in runs):.1f} | {sps:,.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def machine():
    import jax

    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    return f"{model}, {len(os.sched_getaffinity(0))} cores, jax {jax.__version__}, Python {platform.python_version()}."


def stress(args):
    """`args.stress` runs, cycling through STRESS, each on 2 host devices; -> markdown."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    times, hung = [], []
    for i in range(args.stress):
        script, flags = STRESS[i % len(STRESS)]
        try:
            summary, wall = run(ROOT, [script, *flags], env, args.timeout)
            assert summary["num_devices"] == 2, summary["num_devices"]
            times.append(wall)
            status = f"{wall:.1f} s"
        except subprocess.TimeoutExpired:
            hung.append(f"{script} {' '.join(flags)}")
            status = "HUNG"
        print(f"run {i + 1}/{args.stress}: {script} {' '.join(flags)}: {status}", flush=True)
    return (f"`python benchmarks/studies/bench_devices.py --stress {args.stress}`: {args.stress} consecutive runs on "
            f"2 host devices, cycling through {len(STRESS)} short runs of every script; a run past {args.timeout} s "
            f"counts as hung. {machine()}\n\nRuns: {len(times)} finished (wall {min(times):.1f}-{max(times):.1f} s, "
            f"median {statistics.median(times):.1f} s), {len(hung)} hung{': ' + '; '.join(hung) if hung else ''}.\n")


def main(args: Args):
    os.makedirs(RESULTS, exist_ok=True)
    if args.stress:
        text = stress(args)
        out = os.path.join(os.path.dirname(args.out), "stress.md")
    else:
        with tempfile.TemporaryDirectory() as cache_root:
            results = {n: measure(args, n, os.path.join(cache_root, "cache")) for n in args.seeds}
        text = table(results, args)
        out = args.out
    with open(out, "w") as f:
        f.write(text)
    print(text + f"\nwritten to {out}")


if __name__ == "__main__":
    main(tyro.cli(Args))
