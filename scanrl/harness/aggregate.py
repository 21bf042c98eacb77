"""Aggregate statistics over seeds, as rliable reports them (Agarwal et al. 2021): the interquartile mean (IQM) and
percentile confidence intervals from a stratified bootstrap, in numpy. Scores come as a matrix (num_runs, num_tasks);
one run's seeds on one env are (num_seeds, 1). `summarize(returns)` is summary.json's `eval_return_iqm`.

NaN: `iqm` is NaN when any score is (as `np.mean`); `stratified_bootstrap_ci` hands NaNs to its statistic; `summarize`
drops NaN runs and counts them (`n_nan`)."""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

INTERVAL_REPS = 50_000  # rliable's default for interval estimates
# Resampled values held at once: memory stays about 8 bytes x this (plus the statistic's temporaries).
_BATCH_VALUES = 2_000_000


class Estimate(NamedTuple):
    """A point estimate and its confidence interval (floats for a scalar statistic, arrays for a vector one)."""

    point: float | np.ndarray
    low: float | np.ndarray
    high: float | np.ndarray


def iqm(scores, axis=None):
    """Interquartile mean, as `scipy.stats.trim_mean(scores, 0.25, axis)`: int(0.25 * n) cut from each end of the
    sorted values (n < 4: the mean). `axis`: None, an int or a tuple of axes taken together. NaN if any value is."""
    x = np.asarray(scores, dtype=float)
    x, axis = (x.reshape(-1), 0) if axis is None else (x, axis)
    axes = tuple(a % x.ndim for a in np.atleast_1d(axis))
    kept = [a for a in range(x.ndim) if a not in axes]
    x = np.transpose(x, kept + list(axes)).reshape([x.shape[a] for a in kept] + [-1])
    n = x.shape[-1]
    if n == 0:
        raise ValueError("iqm of no values")
    cut = int(0.25 * n)
    result = np.sort(x, axis=-1)[..., cut:n - cut].mean(axis=-1)
    # np.sort puts NaNs last, where the cut could hide them: any NaN makes the result NaN.
    result = np.where(np.isnan(x).any(axis=-1), np.nan, result)
    return float(result) if result.ndim == 0 else result


def stratified_bootstrap_ci(score_matrix, statistic: Callable | None = None, reps: int = INTERVAL_REPS,
                            confidence: float = 0.95, seed: int = 0) -> Estimate:
    """The statistic of `score_matrix` (num_runs, num_tasks; 1-D: one task) and its percentile interval over `reps`
    resamples that draw num_runs runs with replacement within each task, as rliable's `StratifiedBootstrap`.
    `statistic(stack)` maps (batch, num_runs, num_tasks) to (batch,) or (batch, k); default: each matrix's IQM.
    The same seed gives the same interval; resamples are drawn in batches, so memory is bounded for any `reps`."""
    x = np.asarray(score_matrix, dtype=float)
    x = x[:, None] if x.ndim == 1 else x  # one task
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"scores must be a non-empty (num_runs, num_tasks) matrix, got shape {np.shape(score_matrix)}")
    statistic = statistic or (lambda stack: iqm(stack, axis=(-2, -1)))
    if not reps > 0:
        raise ValueError(f"reps must be positive, got {reps}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    num_runs, num_tasks = x.shape
    rng, tasks = np.random.default_rng(seed), np.arange(num_tasks)
    batch = max(1, min(reps, _BATCH_VALUES // x.size))
    replicates = []
    for start in range(0, reps, batch):
        runs = rng.integers(0, num_runs, size=(min(batch, reps - start), num_runs, num_tasks))
        replicates.append(np.asarray(statistic(x[runs, tasks]), dtype=float))
    replicates = np.concatenate(replicates, axis=0)
    low, high = np.percentile(replicates, [50 * (1 - confidence), 50 * (1 + confidence)], axis=0)
    point = np.asarray(statistic(x[None]), dtype=float)[0]
    return Estimate(float(point), float(low), float(high)) if point.ndim == 0 else Estimate(point, low, high)


def summarize(returns, seed: int = 0, reps: int = INTERVAL_REPS, confidence: float = 0.95) -> dict:
    """One run's returns, one per seed, as JSON-ready numbers: IQM and its interval (`ci`), mean, std (ddof 0), min,
    max, `n` (seeds used) and `n_nan` (seeds with a NaN return, dropped); None where no seed is left."""
    x = np.asarray(returns, dtype=float).reshape(-1)
    finite = x[~np.isnan(x)]
    out = {"iqm": None, "ci": None, "mean": None, "std": None, "min": None, "max": None,
           "n": int(finite.size), "n_nan": int(x.size - finite.size), "confidence": confidence}
    if finite.size:
        estimate = stratified_bootstrap_ci(finite, reps=reps, confidence=confidence, seed=seed)
        out.update(iqm=estimate.point, ci=[estimate.low, estimate.high], mean=float(finite.mean()),
                   std=float(finite.std()), min=float(finite.min()), max=float(finite.max()))
    return out


def nanmean(values):
    """Mean of the non-NaN values; NaN (without a warning) if there are none."""
    values = np.asarray(values, dtype=float)
    return np.nan if np.all(np.isnan(values)) else float(np.nanmean(values))
