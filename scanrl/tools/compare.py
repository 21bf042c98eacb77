"""`python -m scanrl.tools.compare RUN_DIR [RUN_DIR ...]`: several runs' learning curves on one plot (each one's IQM
over seeds with its 95% stratified-bootstrap interval), e.g. a fork against the script it came from; each run's
metrics.csv read a block at a time, as a run writes it (a cut last row dropped with a note)."""

import contextlib
import csv
import json
import os

import numpy as np

from scanrl.harness import aggregate
from scanrl.harness.files import save_figure
from scanrl.harness.plots import CARRIED_NOTE, carry_forward, pyplot

BLOCK_BYTES = 1 << 22  # metrics.csv is read a few MB of lines at a time, whatever its length
MAX_POINTS = 2_000  # iterations a curve of several runs' plot is drawn at: more than its pixels, the last among them


def read_metrics(path, key="episode_return"):
    """metrics.csv as `metrics.MetricsCsv` writes it (a row per iteration and seed, a seed after another), streamed:
    -> (env steps per agent (iterations,), `key` (seeds, iterations) as float32, a note or None), nothing else of it
    kept. Only whole rows and iterations count: the last line is a row once it ends with a newline and has every
    column (a run appends its rows as chunks end, and a kill can cut them; a resumed run writes the file whole again),
    and an iteration once it has every seed's row; the note says what was dropped, and which infinite values are drawn
    as no value. ValueError (one line naming the file) for a missing column, a cell that is not a number, a blank line,
    line ends that are not a run's (\r\n or \n) or rows out of their order."""
    try:  # utf-8-sig: a byte-order mark (a spreadsheet's) is not part of the first column's name
        with open(path, encoding="utf-8-sig", newline="\n") as f:  # "\r" alone ends no line: a cut "\r\n" stays cut
            header = f.readline()
            if "\r" in header.removesuffix("\n").removesuffix("\r"):
                raise ValueError(f"{path}: its lines end in \\r alone or \\r\\r\\n, not as a run writes them (\\r\\n "
                                 "or \\n)")
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
    notes = [f"read up to iteration {iterations}; dropped {' and '.join(dropped)} (a run writing it, or killed as it "
             "wrote, leaves it so)"] if dropped else []
    steps, values = np.concatenate(steps)[:iterations], np.concatenate(values)[:iterations * len(order)]
    if (back := np.flatnonzero(np.diff(steps) < 0)).size:  # a run appends its iterations in order
        raise ValueError(f"{path}, line {(back[0] + 1) * len(order) + 2}: env_steps {steps[back[0] + 1]:.0f} after "
                         f"{steps[back[0]]:.0f}: rows out of their iterations' order")
    if (infinite := np.flatnonzero(np.isinf(values))).size:  # an interval over them is none: [x, nan]
        notes.append(f"{names[columns[2]]} is infinite in {infinite.size} row(s), the first at line {infinite[0] + 2}; "
                     "drawn as no value there")
        values[infinite] = np.nan
    note = f"note: {path}: {'; '.join(notes)}" if notes else None
    return steps, np.ascontiguousarray(values.reshape(iterations, len(order)).T), note


ROW = np.dtype([("seed", np.int64), ("env_steps", np.float64), ("value", np.float32)])


def _numbers(lines, path, row, names, columns):
    """The `columns` (seed, env_steps, the key) of `lines`, the rows after `row`, as an array of ROW; ValueError
    naming the first line that is not a row of numbers (found again, cell by cell, once numpy's parser refused)."""
    try:
        read = np.loadtxt(lines, ROW, comments=None, delimiter=",", usecols=columns, ndmin=1)
        if len(read) == len(lines):
            return read
        error = "a row is missing"  # numpy skips blank lines: found below
    except (ValueError, OverflowError) as failure:  # OverflowError: a seed past int64
        error = failure
    for i, line in enumerate(lines):
        body, where = line.removesuffix("\n").removesuffix("\r"), f"{path}, line {row + i + 2}"
        if not body.strip() or "\r" in body:
            raise ValueError(f"{where}: {'a blank line' if not body.strip() else 'a carriage return inside it'}, "
                             "which a run never writes")
        cells = body.split(",")
        if len(cells) != len(names):
            raise ValueError(f"{where}: {len(cells)} cells, where the header names {len(names)}")
        for at, kind in zip(columns, ROW.fields.values(), strict=True):
            try:
                np.asarray([cells[at]]).astype(kind[0])
            except (ValueError, OverflowError):
                what = "an integer (64 bits)" if kind[0] == np.int64 else "a number"
                raise ValueError(f"{where}: {names[at]} {cells[at][:40]!r} is not {what}") from None
    raise ValueError(f"{path}, lines {row + 2} to {row + len(lines) + 1}: {error}")


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
    plt = pyplot()
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
    """`python -m scanrl.tools.compare RUN_DIR [RUN_DIR ...] [--out FILE] [--metric KEY]`: several runs' learning
    curves (a sweep's directory: each of its points) on one plot, e.g. a fork against the script it came from."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m scanrl.tools.compare", description=main.__doc__.split(": ", 1)[1])
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
