"""The figures of a run: learning_curve.png (each seed's latest episode return carried forward, their mean over seeds
with its 95% band) and with --sweep learning_curves.png (every point on one axes), saved by `files.save_figure`.
Several runs' curves on one plot are a command beside the harness: `python -m scanrl.tools.compare`."""

import numpy as np

from scanrl.harness.files import save_figure
from scanrl.harness.metrics import plural

CARRIED_NOTE = "each seed's value at a step: that of its latest finished episodes"


def carry_forward(values, dtype=float):
    """(agents, iterations) with NaN gaps -> each row's last measured value so far (NaN before), as `dtype`."""
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


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_carried(ax, steps, carried, num_agents, label="", color=None, full=True):
    """The curves' mean, its 95% interval and (`full`) the min-max range; each agent's curve where few."""
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
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.1, step="post", label="min to max over seeds")


def _no_episodes(ax, steps):
    ax.text(0.5, 0.5, f"no episode ended in {int(steps[-1]):,} env steps:\ntrain for longer to see a curve",
            transform=ax.transAxes, ha="center", va="center")
    ax.set_xlim(0, max(1, int(steps[-1])))


def plot_learning_curve(path, metrics, title, ylim=None):
    """Episode return (carried forward: no gaps) against env steps over the seeds that finished any episode; a second
    panel for the episode length where it tells what the return does not (a constant-reward goal env). -> path."""
    plt = pyplot()
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
    ax.set(ylabel="episode return", title=title)
    if with_length:
        _plot_carried(axes[1, 0], steps, lengths, len(metrics["episode_return"]))
        axes[1, 0].set_ylabel("episode length")
    axes[-1, 0].set_xlabel(f"env steps per agent ({CARRIED_NOTE})", fontsize=8)
    return save_figure(fig, path)


def plot_sweep(path, steps, curves, labels, title, num_seeds):
    """Every sweep point's carried-forward mean return and its 95% band on one axes. -> path."""
    plt = pyplot()
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
    ax.set(ylabel="episode return", title=title)
    ax.legend(loc="best", fontsize=7)
    return save_figure(fig, path)
