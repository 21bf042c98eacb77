"""The figures of a run: learning_curve.png (each seed's latest episode return carried forward, their mean over seeds
with its 95% band) and with --sweep learning_curves.png (every point on one axes), saved by `files.save_figure`; and
as a command, `python -m scanrl.harness.plots RUN_DIR ...`, several runs' curves on one plot, their metrics.csv read a
block at a time."""

import contextlib
import csv
import json
import os

import numpy as np

from scanrl.harness.files import save_figure
from scanrl.harness.metrics import plural

CARRIED_NOTE = "each seed's value at a step: that of its latest finished episodes"


def carry_forward(values, dtype=float):
    """(agents, iterations), NaN where nothing was measured -> each row's last measured value so far (NaN before its
    first), as `dtype`."""
    values = np.asarray(values, dtype=dtype)
    index = np.where(np.isnan(values), 0, np.arange(values.shape[1], dtype=np.int32))  # no run has 2**31 iterations
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


BLOCK_BYTES = 1 << 22  # metrics.csv is read a few MB of lines at a time, whatever its length
MAX_POINTS = 2_000  # iterations a curve of several runs' plot is drawn at: more than its pixels, the last among them


def read_metrics(path, key="episode_return"):
    """metrics.csv as `metrics.MetricsCsv` writes it (a row per iteration and seed, a seed after another), streamed:
    -> (env steps per agent (iterations,), `key` (seeds, iterations) as float32, a note or None), nothing else of it
    kept. Only whole rows and iterations count: the last line is a row once it ends with a newline and has every
    column (a run appends its rows as chunks end, and a kill can cut them; a resumed run writes the file whole again),
    and an iteration once it has every seed's row; the note says what was dropped. ValueError (one line naming the
    file) for a missing column, a cell that is not a number or rows out of their order."""
    try:
        with open(path, encoding="utf-8", newline="\n") as f:  # "\r" alone ends no line: a cut "\r\n" stays cut
            header = f.readline()
            names = next(csv.reader([header.rstrip("\r\n")]), []) if header.endswith("\n") else []
            if not names:
                raise ValueError(f"{path} has no rows yet")
            for name in ("seed", "env_steps", key):
                if name not in names:
                    raise ValueError(f"{path} has no {name} column (its columns: {', '.join(names)})")
            return _read_rows(f, path, names, [names.index(n) for n in ("seed", "env_steps", key)])
    except (UnicodeDecodeError, csv.Error) as error:
        raise ValueError(f"{path} is not a metrics.csv a run wrote: {error}") from None


def _read_rows(f, path, names, columns):
    """read_metrics' rows after the header: only `columns` (seed, env_steps, the key) parsed, a block at a time."""
    values, steps, seeds, order, row, cut = [], [], [], None, 0, None
    blocks = iter(lambda: f.readlines(BLOCK_BYTES), [])
    block = next(blocks, [])
    while block:
        following = next(blocks, [])
        if not following and (not block[-1].endswith("\n") or block[-1].count(",") != len(names) - 1):
            cut = row + len(block) + 1  # its line: the file's last, cut as it was written
            block.pop()
            if not block:
                break
        read = _numbers(block, path, row, names, columns)
        if order is None:  # the first iteration's seeds: the rows before the first seed's second one
            seeds.append(read["seed"])
            so_far = np.concatenate(seeds)
            again = np.flatnonzero(so_far == so_far[0])[1:2]
            if len(again) or not following:
                order = so_far[:again[0]] if len(again) else so_far
                _check_order(path, order, so_far, 0)
        else:
            _check_order(path, order, read["seed"], row)
        index = row + np.arange(len(block))
        steps.append(read["env_steps"][index % len(order) == 0 if order is not None else index == 0])
        values.append(read["value"])
        row, block = row + len(block), following
    if not row:
        raise ValueError(f"{path} has no whole row yet" if cut else f"{path} has no rows yet")
    iterations, partial = divmod(row, len(order))
    dropped = ([f"its last row, cut (line {cut})"] if cut else []) + (
        [f"iteration {iterations + 1}'s rows of {partial} of its {len(order)} seeds"] if partial else [])
    note = (f"note: {path}: read up to iteration {iterations}; dropped {' and '.join(dropped)} (a run writing it, or "
            "killed as it wrote, leaves it so)") if dropped else None
    values = np.concatenate(values)[:iterations * len(order)].reshape(iterations, len(order)).T
    return np.concatenate(steps)[:iterations], np.ascontiguousarray(values), note


ROW = np.dtype([("seed", np.int64), ("env_steps", np.float64), ("value", np.float32)])


def _numbers(lines, path, row, names, columns):
    """The `columns` (seed, env_steps, the key) of `lines`, the rows after `row`, as an array of ROW; ValueError
    naming the first line that is not a row of numbers (found again, cell by cell, once numpy's parser refused)."""
    try:
        return np.loadtxt(lines, ROW, comments=None, delimiter=",", usecols=columns, ndmin=1)
    except ValueError as error:
        for i, line in enumerate(lines):
            cells = line.rstrip("\r\n").split(",")
            where = f"{path}, line {row + i + 2}"
            if len(cells) != len(names):
                raise ValueError(f"{where}: {len(cells)} cells, where the header names {len(names)}") from None
            for at, kind in zip(columns, ROW.fields.values(), strict=True):
                try:
                    np.asarray([cells[at]]).astype(kind[0])
                except ValueError:
                    what = "an integer" if kind[0] == np.int64 else "a number"
                    raise ValueError(f"{where}: {names[at]} {cells[at][:40]!r} is not {what}") from None
        raise ValueError(f"{path}, lines {row + 2} to {row + len(lines) + 1}: {error}") from None


def _check_order(path, order, seeds, row):
    """ValueError unless `seeds` (of the rows after `row`) take `order`, the first iteration's, in turn."""
    seen, first = np.unique(order, return_index=True)
    if len(seen) < len(order):
        i = min(set(range(len(order))) - set(first))
        raise ValueError(f"{path}, line {i + 2}: seed {order[i]}'s second row in the first iteration")
    expected = order[(row + np.arange(len(seeds))) % len(order)]
    if not np.array_equal(seeds, expected):
        i = int(np.argmax(seeds != expected))
        raise ValueError(f"{path}, line {row + i + 2}: seed {seeds[i]} where seed {expected[i]}'s row was due (a row "
                         "per seed each iteration, in the first iteration's order)")


def read_curves(run_dir, key="episode_return"):
    """A run directory's metrics.csv as [(label, env steps per agent, (seeds, iterations) of `key`)] (a note printed
    for rows left out); a sweep's directory holds a metrics.csv per point: one for each."""
    path = os.path.join(run_dir, "metrics.csv")
    if not os.path.isfile(path):
        points = sorted(d for d in os.listdir(run_dir) if os.path.isfile(os.path.join(run_dir, d, "metrics.csv"))) \
            if os.path.isdir(run_dir) else []
        if not points:
            raise ValueError(f"{run_dir} holds no metrics.csv: name a run directory (runs/<run name>)")
        return [c for d in points for c in read_curves(os.path.join(run_dir, d), key)]
    steps, values, note = read_metrics(path, key)
    if note:
        print(note, flush=True)
    env = ""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        with open(os.path.join(run_dir, "config.json")) as f:
            env = f" on {json.load(f)['env']}"
    return [(f"{os.path.normpath(run_dir)}{env}", steps, values)]


def iqm_curve(steps, values):
    """A run's curve for `plot_runs`: (steps, IQM over seeds of the carried-forward `values`, its 95% interval, seeds)
    at up to MAX_POINTS steps from the first where every seed has a value, the last among them; None if no episode
    ended."""
    from scanrl.harness import aggregate

    carried = carry_forward(values, np.float32)
    carried = carried[~np.all(np.isnan(carried), axis=1)]
    if not len(carried):
        return None
    start = int(np.argmax(~np.isnan(carried).any(axis=0)))
    drawn = np.unique(np.linspace(start, len(steps) - 1, MAX_POINTS).round().astype(int))
    point, low, high = aggregate.stratified_bootstrap_ci(
        carried[:, drawn], lambda stack: aggregate.iqm(stack, axis=-2), reps=2_000)
    return steps[drawn], point, low, high, len(carried)


def plot_runs(path, run_dirs, key="episode_return"):
    """The learning curves of several runs on one axes: each one's interquartile mean over seeds of `key` (carried
    forward), with the 95% stratified-bootstrap interval of that IQM at each step (`iqm_curve`). -> the final IQM
    per curve."""
    curves = [(label, iqm_curve(steps, values)) for d in run_dirs for label, steps, values in read_curves(d, key)]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    finals = {}
    for label, curve in curves:
        if curve is None:
            ax.plot([], [], label=f"{label}: no episode ended")
            continue
        steps, point, low, high, seeds = curve
        (line,) = ax.plot(steps, point, drawstyle="steps-post", label=f"{label} ({seeds} seeds)")
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.25, step="post")
        finals[label] = (float(point[-1]), float(low[-1]), float(high[-1]), seeds)
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
