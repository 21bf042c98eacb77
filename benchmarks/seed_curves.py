"""Every seed's learning curve, one panel per run directory: where an aggregate hides what one seed did.

    python benchmarks/seed_curves.py runs/td3-a runs/td3-b --out seeds.png [--metric episode_return] [--titles A B]

Each panel draws the metric of every seed of one run (its `metrics.csv`, rows with no finished episode skipped) and
names the seeds whose deterministic evaluation (`summary.json`) was lowest. docs/learning.md uses it for the fragile
seeds of TD3 and PQN.
"""

import csv
import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass

import tyro


@dataclass(frozen=True)
class Args:
    run_dirs: tyro.conf.Positional[tuple[str, ...]]
    """run directories (each with metrics.csv and summary.json)"""
    out: str = "seed_curves.png"
    """the PNG to write"""
    metric: str = "episode_return"
    """the metrics.csv column to draw"""
    titles: tuple[str, ...] = ()
    """a title per run directory (default: its name and env)"""
    highlight: int = 2
    """how many of the lowest-evaluated seeds to draw in colour"""


def fail(message):
    """Bad input: one line on stderr, exit 2."""
    print(f"seed_curves.py: {message}", file=sys.stderr)
    sys.exit(2)


def read_run(run_dir, metric):
    """-> (title, {seed: ([env_steps], [value])}, {seed: eval return})."""
    curves = defaultdict(lambda: ([], []))
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            value = float(row[metric]) if row.get(metric) not in (None, "", "nan") else math.nan
            if not math.isnan(value):
                steps, values = curves[int(row["seed"])]
                steps.append(int(row["env_steps"]))
                values.append(value)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    # summary.json lists the agents in order; metrics.csv names them by seed (--seed, --seed + 1, ...)
    evals = dict(zip(sorted(curves), summary.get("eval_return") or [], strict=False))
    title = f"{os.path.basename(os.path.normpath(run_dir))}: {config.get('env', '')}"
    return title, dict(curves), evals


def main():
    args = tyro.cli(Args)
    if not args.run_dirs:
        fail("name at least one run directory")
    if args.titles and len(args.titles) != len(args.run_dirs):
        fail(f"--titles has {len(args.titles)} titles for {len(args.run_dirs)} run directories; give one per directory")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.run_dirs), figsize=(6 * len(args.run_dirs), 4), squeeze=False)
    for i, (ax, run_dir) in enumerate(zip(axes[0], args.run_dirs, strict=True)):
        try:
            title, curves, evals = read_run(run_dir, args.metric)
        except (OSError, ValueError, KeyError) as error:
            fail(f"{run_dir}: {error}")
        worst = sorted((e, s) for s, e in evals.items() if e is not None)[: args.highlight]
        worst_seeds = {s for _, s in worst}
        for seed, (steps, values) in sorted(curves.items()):
            if seed in worst_seeds:
                ax.plot(steps, values, lw=1.6, label=f"seed {seed} (eval {evals[seed]:.0f})", zorder=3)
            else:
                ax.plot(steps, values, color="0.6", lw=0.8, alpha=0.8)
        ax.plot([], [], color="0.6", lw=0.8, label="the other seeds")
        ax.set_title(args.titles[i] if args.titles else title, fontsize=10)
        ax.set_xlabel("env steps per seed")
        ax.set_ylabel(args.metric.replace("_", " "))
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
