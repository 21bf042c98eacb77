"""What the default chunking costs, and what a checkpoint weighs.

1. The main job, `python ppo.py --env CartPole-v1 --num-seeds 30`, with the default chunks (about 30 s each, so
   Ctrl-C or SIGTERM stop it within about a minute) against `--num-chunks 1`, the two taking turns, `--repeats`
   runs each; `train_s` from each run's summary.json (compile apart), medians.
2. One checkpoint of each script at its defaults: the agents' state in bytes (from the shapes, per seed and for
   30 seeds) and on disk (one checkpoint of a 1-seed default run), for the replay-buffer scripts (dqn, td3) and
   ppo for scale.

    python benchmarks/studies/bench_chunks.py                  # both parts, 3 runs each of the main job
    python benchmarks/studies/bench_chunks.py --only checkpoints

Writes benchmarks/results/chunks.md. Timings depend on load: run it on an idle machine.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Literal

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "benchmarks", "results")

# script, flags of its default run as `auto` would train it, the run's label
CHECKPOINT_CASES = [
    ("dqn_tabular_q.py", ["--env", "CartPole-v1", "--agent", "dqn"], "dqn CartPole-v1 (buffer 10,000)"),
    ("td3.py", [], "td3 Pendulum-v1 (buffer 50,000: the run's length)"),
    ("ppo.py", [], "ppo CartPole-v1 (no buffer)"),
]


@dataclass(frozen=True)
class Args:
    only: Literal["all", "main_job", "checkpoints"] = "all"
    repeats: int = 3
    """runs of the main job per chunking (they alternate)"""
    num_seeds: int = 30
    out: str = os.path.join(RESULTS, "chunks.md")


def run(script, flags, out_dir):
    """Runs a script as a user would; -> (its run directory, summary.json)."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, script), *flags, "--out-dir", out_dir],
                            capture_output=True, text=True, cwd=ROOT)
    if result.returncode:
        raise SystemExit(f"{script} {' '.join(flags)} failed:\n{result.stderr[-2000:]}")
    (name,) = os.listdir(out_dir)
    with open(os.path.join(out_dir, name, "summary.json")) as f:
        return os.path.join(out_dir, name), json.load(f)


def main_job(args):
    rows = {"default": [], "1": []}
    chunks = None
    for repeat in range(args.repeats):
        for label in rows:
            with tempfile.TemporaryDirectory() as out_dir:
                flags = ["--num-seeds", str(args.num_seeds)] + ([] if label == "default" else ["--num-chunks", "1"])
                run_dir, summary = run("ppo.py", flags, out_dir)
                with open(os.path.join(run_dir, "config.json")) as f:
                    chunks = json.load(f)["num_chunks"] if label == "default" else chunks
                rows[label].append(summary["train_s"])
                print(f"run {repeat + 1}, --num-chunks {label}: train {summary['train_s']:.1f} s, "
                      f"{summary['sps']:.0f} env steps/s", flush=True)
    default, single = statistics.median(rows["default"]), statistics.median(rows["1"])
    lines = [f"Main job: `ppo.py --env CartPole-v1 --num-seeds {args.num_seeds}`, train_s (compile apart), "
             f"{args.repeats} runs each, alternating:", "",
             "| chunks | train s (runs) | median | per chunk |", "|---|---|---:|---:|"]
    for label, count, median in (("default", chunks, default), ("1", 1, single)):
        runs = ", ".join(f"{t:.1f}" for t in rows[label])
        lines.append(f"| {count} ({label}) | {runs} | {median:.1f} | {median / count:.1f} s |")
    lines += ["", f"Default chunking costs {100 * (default / single - 1):+.1f}% of the median train time.", ""]
    return lines


def checkpoints():
    sys.path.insert(0, ROOT)
    lines = ["One checkpoint at each script's defaults (state from the shapes; on disk: one checkpoint of a 1-seed "
             "default run):", "", "| run | state per seed | 30 seeds | on disk, 1 seed |", "|---|---:|---:|---:|"]
    for script, flags, label in CHECKPOINT_CASES:
        with tempfile.TemporaryDirectory() as out_dir:
            run_dir, _ = run(script, flags + ["--num-seeds", "1"], out_dir)
            steps = sorted(int(s) for s in os.listdir(os.path.join(run_dir, "checkpoints")) if s.isdigit())
            newest = os.path.join(run_dir, "checkpoints", str(steps[-1]))
            on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(newest) for f in fs)
            state = state_bytes(script, flags)
        lines.append(f"| {label} | {state / 1e6:.1f} MB | {30 * state / 1e6:.0f} MB | {on_disk / 1e6:.1f} MB |")
    return lines + [""]


def state_bytes(script, flags):
    """Bytes of one agent's runner state (everything a checkpoint holds but the metrics) at the script's defaults."""
    code = (f"import sys, jax, tyro; sys.path.insert(0, {ROOT!r}); from scanrl import harness; import importlib; "
            f"m = importlib.import_module({script[:-3]!r}); "
            f"c = tyro.cli(m.Config, args={flags!r}); init, _ = m.make_train_parts(c); "
            "s = jax.eval_shape(init, jax.random.PRNGKey(0)); "
            "print(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(s)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return int(result.stdout.split()[-1])


def main(args: Args):
    lines = []
    if args.only in ("all", "checkpoints"):
        lines += checkpoints()
    if args.only in ("all", "main_job"):
        lines += main_job(args)
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main(tyro.cli(Args))
