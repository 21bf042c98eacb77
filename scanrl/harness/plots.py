"""The figures of a run: learning_curve.png (each seed's latest episode return carried forward, their mean over seeds
with its 95% band) and with --sweep learning_curves.png (every point on one axes), saved by `files.save_figure`; and
as a command, `python -m scanrl.harness.plots RUN_DIR ...`, several runs' curves on one plot."""

import numpy as np

from scanrl.harness.files import save_figure
from scanrl.harness.metrics import plural

CARRIED_NOTE = "each seed's value at a step: that of its latest finished episodes"


def carry_forward(values):
    """(agents, iterations), NaN where nothing was measured -> each row's last measured value so far (NaN before its
    first)."""
    values = np.asarray(values, dtype=float)
    index = np.where(np.isnan(values), 0, np.arange(values.shape[1]))
    np.maximum.accumulate(index, axis=1, out=index)
    return np.take_along_axis(values, index, axis=1)


def carried_returns(metrics, key="episode_return"):
    """carry_forward of `metrics[key]`, only the agents that finished an episode; None if none did."""
    carried = carry_forward(metrics[key])
    covered = ~np.all(np.isnan(carried), axis=1)
    return carried[covered] if covered.any() else None


def mean_band(carried):
    """-> (first iteration where every agent has a value; then from there on: the mean over agents, the half-width of
    its 95% confidence interval (Student's t), the min and the max)."""
    start = int(np.argmax(~np.isnan(carried).any(axis=0)))
    tail, n = carried[:, start:], len(carried)
    half = np.zeros(tail.shape[1])
    if n > 1:
        from scipy.special import stdtrit  # Student's t quantile: scipy.stats would add 0.8 s to a run's end

        half = stdtrit(n - 1, 0.975) * tail.std(0, ddof=1) / np.sqrt(n)
    return start, tail.mean(0), half, tail.min(0), tail.max(0)


def shared_ylim(curves):
    """One y-range, with a margin, for every sweep point's plot; None if no point has a finished episode."""
    if not curves:
        return None
    low, high = min(np.nanmin(c) for c in curves), max(np.nanmax(c) for c in curves)
    margin = 0.05 * (high - low) or max(1.0, 0.05 * abs(high))
    return low - margin, high + margin


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_carried(ax, steps, carried, num_agents, label="", color=None, full=True):
    """The mean of the carried-forward curves, its 95% interval and (`full`) the min-max range; each agent's own
    curve too where there are few."""
    start, mean, half, low, high = mean_band(carried)
    covered, x = len(carried), steps[start:]
    if full and 1 < covered <= 10:
        for row in carried:
            ax.plot(steps, row, color="0.6", linewidth=0.6, alpha=0.6, drawstyle="steps-post")
        ax.plot([], [], color="0.6", linewidth=0.6, label="each seed")
    over = plural(covered, "seed") + (f" of {num_agents} (the others finished no episode)" if covered < num_agents
                                      else "")
    # Steps, not slopes: a carried value holds until the next episode ends.
    (line,) = ax.plot(x, mean, color=color, linewidth=2 if full else 1.5, drawstyle="steps-post",
                      label=f"{label}mean over {over}" if covered > 1 else f"{label}{over}")
    if covered > 1:
        ax.fill_between(x, np.maximum(mean - half, low), np.minimum(mean + half, high), color=line.get_color(),
                        alpha=0.3, step="post", label=f"{label}95% interval of the mean" if full else None)
        if full:
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.1, step="post",
                            label="min to max over seeds")


def _no_episodes(ax, steps):
    ax.text(0.5, 0.5, f"no episode ended in {int(steps[-1]):,} env steps:\ntrain for longer to see a curve",
            transform=ax.transAxes, ha="center", va="center")
    ax.set_xlim(0, max(1, int(steps[-1])))


def plot_learning_curve(path, metrics, title, ylim=None):
    """Episode return (carried forward: no gaps) against env steps over the seeds that finished any episode; a second
    panel for the episode length where it tells what the return does not (a constant-reward goal env). -> path."""
    plt = _pyplot()
    steps = np.asarray(metrics["env_steps"][0], dtype=float)
    returns = carried_returns(metrics)
    lengths = carried_returns(metrics, "episode_length") if "episode_length" in metrics else None
    with_length = (lengths is not None and returns is not None and np.nanmax(lengths) > np.nanmin(lengths)
                   and not np.allclose(lengths, returns, equal_nan=True))
    fig, axes = plt.subplots(2 if with_length else 1, 1, figsize=(7, 6.5 if with_length else 4), sharex=True,
                             squeeze=False)
    ax = axes[0, 0]
    if returns is None:
        _no_episodes(ax, steps)
    else:
        _plot_carried(ax, steps, returns, len(metrics["episode_return"]))
        ax.legend(loc="best", fontsize=8)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_ylabel("episode return")
    ax.set_title(title)
    if with_length:
        _plot_carried(axes[1, 0], steps, lengths, len(metrics["episode_return"]))
        axes[1, 0].set_ylabel("episode length")
    axes[-1, 0].set_xlabel(f"env steps per agent ({CARRIED_NOTE})", fontsize=8)
    return save_figure(fig, path)


def plot_sweep(path, steps, curves, labels, title, num_seeds):
    """Every sweep point's carried-forward mean return and its 95% band on one axes. -> path."""
    plt = _pyplot()
    steps = np.asarray(steps, dtype=float)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.get_cmap("tab10" if len(curves) <= 10 else "viridis")
    for p, (carried, label) in enumerate(zip(curves, labels, strict=True)):
        color = colors(p if len(curves) <= 10 else p / max(1, len(curves) - 1))
        if carried is None:
            ax.plot([], [], color=color, label=f"{label}: no episode ended")
        else:
            _plot_carried(ax, steps, carried, num_seeds, f"{label}: ", color, full=False)
    if all(c is None for c in curves):
        _no_episodes(ax, steps)
    ax.set_xlabel(f"env steps per agent ({CARRIED_NOTE}; bands: 95% interval of the mean)", fontsize=8)
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=7)
    return save_figure(fig, path)


def read_curves(run_dir, key="episode_return"):
    """A run directory's metrics.csv as (env steps per agent, (seeds, iterations) of `key`); a sweep's directory
    holds a metrics.csv per point: -> [(label, steps, values)] for each."""
    import contextlib
    import csv
    import json
    import os

    path = os.path.join(run_dir, "metrics.csv")
    if not os.path.isfile(path):
        points = sorted(d for d in os.listdir(run_dir) if os.path.isfile(os.path.join(run_dir, d, "metrics.csv"))) \
            if os.path.isdir(run_dir) else []
        if not points:
            raise ValueError(f"{run_dir} holds no metrics.csv: name a run directory (runs/<run name>)")
        return [c for d in points for c in read_curves(os.path.join(run_dir, d), key)]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or key not in rows[0]:
        raise ValueError(f"{path} has no {key} column" if rows else f"{path} has no rows yet")
    seeds = list(dict.fromkeys(r["seed"] for r in rows))
    iterations = len(rows) // len(seeds)  # rows come as whole iterations, one per seed
    values = np.array([float(r[key]) for r in rows[:iterations * len(seeds)]]).reshape(iterations, len(seeds)).T
    steps = np.array([float(r["env_steps"]) for r in rows[:iterations * len(seeds):len(seeds)]])
    env = ""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        with open(os.path.join(run_dir, "config.json")) as f:
            env = f" on {json.load(f)['env']}"
    return [(f"{os.path.normpath(run_dir)}{env}", steps, values)]


def plot_runs(path, run_dirs, key="episode_return"):
    """The learning curves of several runs on one axes: each one's interquartile mean over seeds of `key` (carried
    forward), with the 95% stratified-bootstrap interval of that IQM at each step. -> the final IQM per curve."""
    from scanrl.harness import aggregate

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    finals = {}
    for label, steps, values in (c for d in run_dirs for c in read_curves(d, key)):
        carried = carry_forward(values)
        carried = carried[~np.all(np.isnan(carried), axis=1)]
        if not len(carried):
            ax.plot([], [], label=f"{label}: no episode ended")
            continue
        start = int(np.argmax(~np.isnan(carried).any(axis=0)))
        point, low, high = aggregate.stratified_bootstrap_ci(
            carried[:, start:], lambda stack: aggregate.iqm(stack, axis=-2), reps=2_000)
        (line,) = ax.plot(steps[start:], point, drawstyle="steps-post", label=f"{label} ({len(carried)} seeds)")
        ax.fill_between(steps[start:], low, high, color=line.get_color(), alpha=0.25, step="post")
        finals[label] = (float(point[-1]), float(low[-1]), float(high[-1]), len(carried))
    ax.set_title(f"{key.replace('_', ' ')}: IQM over seeds, 95% stratified-bootstrap interval", fontsize=10)
    ax.set_xlabel(f"env steps per agent ({CARRIED_NOTE})", fontsize=8)
    ax.set_ylabel(f"{key.replace('_', ' ')} (IQM over seeds)")
    ax.legend(loc="best", fontsize=7)
    save_figure(fig, path)
    return finals


def main(argv=None) -> int:
    """`python -m scanrl.harness.plots RUN_DIR [RUN_DIR ...] [--out FILE] [--metric KEY]`: several runs' learning
    curves (a sweep's directory: each of its points) on one plot, e.g. a fork against the script it came from."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m scanrl.harness.plots", description=main.__doc__.split(": ", 1)[1])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (runs/<run name>)")
    parser.add_argument("--out", default="learning_curves.png", help="the PNG to write (default: %(default)s)")
    parser.add_argument("--metric", default="episode_return", help="a column of metrics.csv (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.out.endswith(".png"):
        parser.exit(2, f"error: --out {args.out}: name a .png file\n")
    try:
        finals = plot_runs(args.out, args.run_dirs, args.metric)
    except (ValueError, OSError) as error:
        parser.exit(2, f"error: {error}\n")
    for label, (point, low, high, n) in finals.items():
        print(f"{label}: final {args.metric} IQM {point:.2f} [{low:.2f}, {high:.2f}] over {n} seeds")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
