"""The report's figures: per algorithm, the learning curves (IQM over seeds, 95% band) and the performance profile."""

import textwrap

import numpy as np

from scanrl.envs.custom import import_reference
from scanrl.harness import aggregate
from scanrl.harness.files import replaced

from .scores import PROFILE_REPS, performance_profile

CURVE_REPS = PROFILE_REPS  # bootstrap replications per curve band (2,000, as rliable's profiles)


def plot_curves(path, algo, results):
    """One panel per entry: the IQM over seeds of the episode return against env steps (metrics.csv, binned), its
    95% stratified-bootstrap band, the published reference and the random policy's score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, MaxNLocator

    cols = min(3, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    envs = [r.entry.env for r in results]
    for ax, r in zip(axes.flat, results, strict=False):
        e = r.entry
        steps, returns = r.curve
        ok = ~np.isnan(returns).any(axis=0)  # points where every seed finished an episode
        if ok.any():
            band = aggregate.stratified_bootstrap_ci(returns[:, ok], lambda s: aggregate.iqm(s, axis=-2),
                                                     reps=CURVE_REPS, seed=0)
            ax.plot(steps[ok], band.point, color="tab:blue", label=f"IQM of {returns.shape[0]} seeds")
            ax.fill_between(steps[ok], band.low, band.high, color="tab:blue", alpha=0.25, label="95% CI")
        if e.reference.value is not None:
            ax.axhline(e.reference.value, color="tab:green", ls="--", lw=1, label=f"reference {e.reference.text}")
        if e.low is not None:
            ax.axhline(e.low, color="gray", ls=":", lw=1, label="random policy")
        # by env (a file's env by its name: memory_chain_50), or by entry where two recipes share an env
        own = import_reference(e.env)  # None for a suite's id with a backend suffix (brax/halfcheetah:mjx)
        ax.set_title((own[1] if own else e.env) if envs.count(e.env) == 1 else e.name, fontsize=10)
        ax.set_xlabel("env steps per seed")
        ax.xaxis.set_major_locator(MaxNLocator(5))  # a few ticks, named 250k, 1M: no run-together labels
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylabel("episode return")
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(results):]:
        ax.axis("off")
    fig.suptitle(f"{algo}: IQM over seeds, 95% CI", fontsize=11)
    fig.tight_layout()
    with replaced(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


def plot_profile(path, algo, envs_used, scores):
    """The run-score performance profile of normalised scores (seeds, envs), with its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    taus = np.linspace(min(0.0, scores.min()), max(1.0, scores.max()), 201)
    profile = performance_profile(scores, taus, seed=0)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(taus, profile.fraction, color="tab:blue", label=f"{algo}: {scores.shape[0]} seeds x {len(envs_used)} "
            f"env{'s' if len(envs_used) > 1 else ''}")
    ax.fill_between(taus, profile.low, profile.high, color="tab:blue", alpha=0.25, label="95% CI")
    ax.set_xlabel("normalised eval return tau (0: random policy, 1: the env's high score)")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    named = ', '.join(env.rpartition(':')[2] for env in envs_used)
    ax.set_title(textwrap.fill(f"{algo}: performance profile over {named}", 80), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with replaced(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
