"""Aggregate statistics over runs, as rliable reports them (Agarwal et al. 2021, "Deep Reinforcement Learning at the
Edge of the Statistical Precipice"), in numpy: the interquartile mean (IQM), percentile confidence intervals from a
stratified bootstrap, and performance profiles (the fraction of runs scoring above each threshold).

Scores come as a matrix `(num_runs, num_tasks)`: one column per env, one row per seed (one run's seeds on one env
are `(num_seeds, 1)`). Envs of different scales go on one axis through `normalize`. One run's summary is one call:

    summary["eval_return_iqm"] = summarize(eval_returns)     # {"iqm", "ci", "mean", "std", "min", "max", "n", ...}

NaN: `iqm` returns NaN when any score is NaN (as `np.mean` does; scipy's trim_mean would instead trim NaNs away
when they sort into the cut tails). `stratified_bootstrap_ci` hands NaNs to the statistic, so its NaN policy is the
statistic's. `performance_profile` refuses NaN (a comparison would count it as below every threshold).
`summarize` drops NaN runs and says how many it dropped (`n_nan`).
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

# rliable's defaults: 50,000 bootstrap replications for interval estimates, 2,000 for performance profiles.
INTERVAL_REPS = 50_000
PROFILE_REPS = 2_000
# Resampled values held at once: memory stays about 8 bytes x this (plus the statistic's temporaries).
_BATCH_VALUES = 2_000_000


class Estimate(NamedTuple):
    """A point estimate and its confidence interval (floats for a scalar statistic, arrays for a vector one)."""

    point: float | np.ndarray
    low: float | np.ndarray
    high: float | np.ndarray


class Profile(NamedTuple):
    """A performance profile: at each threshold `taus[i]`, the fraction of runs scoring above it and its interval."""

    taus: np.ndarray
    fraction: np.ndarray
    low: np.ndarray
    high: np.ndarray


def iqm(scores, axis=None):
    """Interquartile mean: the mean of the values left after cutting int(0.25 * n) from each end of the sorted
    values, as `scipy.stats.trim_mean(scores, 0.25, axis)` (n = 1, 2, 3 cut nothing: the plain mean). `axis`: None
    for all values, an int or a tuple of ints for those axes together. NaN if any value reduced over is NaN."""
    x = np.asarray(scores, dtype=float)
    if axis is None:
        x = x.reshape(-1)
        axis = (0,)
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


def _matrix(score_matrix) -> np.ndarray:
    x = np.asarray(score_matrix, dtype=float)
    if x.ndim == 1:
        x = x[:, None]  # one task
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"scores must be a non-empty (num_runs, num_tasks) matrix, got shape {np.shape(score_matrix)}")
    return x


def _matrix_iqm(stack):
    return iqm(stack, axis=(-2, -1))


def stratified_bootstrap_ci(score_matrix, statistic: Callable | None = None, reps: int = INTERVAL_REPS,
                            confidence: float = 0.95, seed: int = 0) -> Estimate:
    """The statistic of `score_matrix` (num_runs, num_tasks) and its percentile confidence interval over `reps`
    stratified bootstrap resamples: each resample draws num_runs runs with replacement within each task (column),
    independently across tasks, as rliable's `StratifiedBootstrap` (without task bootstrap). A 1-D array is one
    task. `statistic(stack)` gets a stack of matrices (batch, num_runs, num_tasks) and returns one value per matrix,
    (batch,), or one vector, (batch, k); the default is the IQM of each matrix. The interval is the (1 - confidence)
    / 2 and (1 + confidence) / 2 quantiles of the resampled statistics (numpy's linear interpolation). The same
    seed gives the same interval; with one run per task every resample is the data, so the interval is the point.
    The resamples are drawn in batches, so memory stays bounded for any `reps`."""
    x = _matrix(score_matrix)
    statistic = _matrix_iqm if statistic is None else statistic
    if not reps > 0:
        raise ValueError(f"reps must be positive, got {reps}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    num_runs, num_tasks = x.shape
    rng = np.random.default_rng(seed)
    tasks = np.arange(num_tasks)
    batch = max(1, min(reps, _BATCH_VALUES // x.size))
    replicates = []
    for start in range(0, reps, batch):
        size = min(batch, reps - start)
        runs = rng.integers(0, num_runs, size=(size, num_runs, num_tasks))
        replicates.append(np.asarray(statistic(x[runs, tasks]), dtype=float))
    replicates = np.concatenate(replicates, axis=0)
    low, high = np.percentile(replicates, [50 * (1 - confidence), 50 * (1 + confidence)], axis=0)
    point = np.asarray(statistic(x[None]), dtype=float)[0]
    if point.ndim == 0:
        return Estimate(float(point), float(low), float(high))
    return Estimate(point, low, high)


def performance_profile(score_matrix, taus, reps: int = PROFILE_REPS, confidence: float = 0.95,
                        seed: int = 0) -> Profile:
    """rliable's run-score profile: at each threshold tau, the fraction of all runs (over every task) whose score
    is above tau (strictly), with stratified-bootstrap percentile intervals (see `stratified_bootstrap_ci`).
    `score_matrix` is (num_runs, num_tasks); normalise envs of different scales first (`normalize`)."""
    x = _matrix(score_matrix)
    if np.isnan(x).any():
        raise ValueError("performance_profile: the scores hold NaN; drop those runs first")
    taus = np.asarray(taus, dtype=float).reshape(-1)

    def fraction_above(stack):
        return (stack[..., None] > taus).mean(axis=(-3, -2))

    estimate = stratified_bootstrap_ci(x, fraction_above, reps, confidence, seed)
    return Profile(taus, estimate.point, estimate.low, estimate.high)


def normalize(scores, low, high):
    """(scores - low) / (high - low): 0 at `low` (e.g. a random policy's score), 1 at `high` (e.g. a published
    score), so envs of different scales share one axis. `low` and `high` are numbers or one per task (the last
    axis); NaN scores stay NaN."""
    scores, low, high = (np.asarray(v, dtype=float) for v in (scores, low, high))
    if np.any(high == low):
        raise ValueError("normalize: high equals low, the range is empty")
    return (scores - low) / (high - low)


def summarize(returns, seed: int = 0, reps: int = INTERVAL_REPS, confidence: float = 0.95) -> dict:
    """One run's returns, one per seed, as JSON-ready numbers: the IQM with its stratified-bootstrap interval
    (`ci`: [low, high]), mean, population std (numpy's, ddof 0), min, max, `n` (seeds used) and `n_nan` (seeds
    dropped for a NaN return: no episode to average). Values that need at least one seed are None without one."""
    x = np.asarray(returns, dtype=float).reshape(-1)
    finite = x[~np.isnan(x)]
    out = {"iqm": None, "ci": None, "mean": None, "std": None, "min": None, "max": None,
           "n": int(finite.size), "n_nan": int(x.size - finite.size), "confidence": confidence}
    if finite.size:
        estimate = stratified_bootstrap_ci(finite, reps=reps, confidence=confidence, seed=seed)
        out.update(iqm=estimate.point, ci=[estimate.low, estimate.high], mean=float(finite.mean()),
                   std=float(finite.std()), min=float(finite.min()), max=float(finite.max()))
    return out
