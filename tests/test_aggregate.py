"""scanrl/harness/aggregate.py (IQM, stratified-bootstrap intervals) and the learning suite's performance profiles and
normalisation (benchmarks/suite/scores.py, built on it), against hand-computed values, scipy.stats.trim_mean and
plain-Python loops."""

import json
import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from benchmarks.suite.scores import normalize, performance_profile
from scanrl.harness import aggregate

FINITE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
# Scores with ties: few distinct values.
TIED = st.sampled_from([0.0, 1.0, 2.5, -3.0])


def matrices(elements=FINITE, max_runs=12, max_tasks=4):
    shapes = st.tuples(st.integers(1, max_runs), st.integers(1, max_tasks))
    return shapes.flatmap(lambda shape: arrays(float, shape, elements=elements))


def loop_iqm(values):
    """The IQM written out: sort, cut int(n / 4) from each end, average the rest."""
    values = sorted(float(v) for v in values)
    cut = int(0.25 * len(values))
    kept = values[cut:len(values) - cut]
    return sum(kept) / len(kept)


@pytest.mark.parametrize("values, expected", [
    (range(1, 9), 4.5),  # cut 2 each end: mean of 3, 4, 5, 6
    ([7.0], 7.0),  # n = 1, 2, 3 cut nothing: the mean
    ([1.0, 4.0], 2.5),
    ([1.0, 2.0, 9.0], 4.0),
    ([1.0, 2.0, 3.0, 100.0], 2.5),  # n = 4 cuts one each end
    ([1, 1, 1, 1, 5, 5, 5, 5], 3.0),  # ties across the cut
    ([0, 0, 0, 0, 0, 0, 0, 10], 0.0),
    ([-5, 2, 2, 2, 2, 50], 2.0),
])
def test_iqm_hand_computed(values, expected):
    assert aggregate.iqm(values) == pytest.approx(expected)


def test_iqm_of_a_matrix_takes_all_values_and_axis_takes_columns():
    x = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [400.0, 40.0]])
    assert aggregate.iqm(x) == pytest.approx(loop_iqm(x.ravel()))  # 8 values, cut 2 each end: 3, 10, 20, 30
    np.testing.assert_allclose(aggregate.iqm(x, axis=0), [2.5, 25.0])
    np.testing.assert_allclose(aggregate.iqm(x, axis=1), [5.5, 11.0, 16.5, 220.0])


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, np.nan], [np.nan, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]])
def test_iqm_is_nan_when_any_value_is(values):
    # sorted, the NaN lands in the cut tail; it must not be trimmed away silently
    assert math.isnan(aggregate.iqm(values))


@settings(max_examples=60, deadline=None)
@given(matrices())
def test_iqm_matches_scipy_trim_mean_and_a_loop(x):
    expected = scipy.stats.trim_mean(x, 0.25, axis=None)
    assert aggregate.iqm(x) == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert aggregate.iqm(x) == pytest.approx(loop_iqm(x.ravel()), rel=1e-9, abs=1e-6)
    np.testing.assert_allclose(aggregate.iqm(x, axis=0), scipy.stats.trim_mean(x, 0.25, axis=0), rtol=1e-9,
                               atol=1e-6)


def loop_bootstrap(x, reps, confidence, seed):
    """Stratified bootstrap written out with loops, drawing the same run indices as `stratified_bootstrap_ci`
    (one batch): replicate r takes, in task t, runs idx[r, 0, t], ..., idx[r, n - 1, t]."""
    num_runs, num_tasks = x.shape
    idx = np.random.default_rng(seed).integers(0, num_runs, size=(reps, num_runs, num_tasks))
    replicates = []
    for r in range(reps):
        resampled = [[x[idx[r, i, t], t] for t in range(num_tasks)] for i in range(num_runs)]
        replicates.append(scipy.stats.trim_mean(np.array(resampled), 0.25, axis=None))
    tail = 100 * (1 - confidence) / 2
    return np.percentile(replicates, tail), np.percentile(replicates, 100 - tail)


@settings(max_examples=25, deadline=None)
@given(matrices(max_runs=8, max_tasks=3), st.integers(0, 2**31), st.sampled_from([0.5, 0.9, 0.95]))
def test_bootstrap_matches_a_loop(x, seed, confidence):
    estimate = aggregate.stratified_bootstrap_ci(x, reps=200, confidence=confidence, seed=seed)
    low, high = loop_bootstrap(x, 200, confidence, seed)
    assert estimate.point == pytest.approx(scipy.stats.trim_mean(x, 0.25, axis=None), rel=1e-9, abs=1e-6)
    assert (estimate.low, estimate.high) == pytest.approx((low, high), rel=1e-9, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.one_of(matrices(), matrices(elements=TIED)), st.integers(0, 2**31))
def test_interval_contains_the_point_estimate(x, seed):
    estimate = aggregate.stratified_bootstrap_ci(x, reps=300, seed=seed)
    assert estimate.low <= estimate.point + 1e-9 and estimate.point <= estimate.high + 1e-9


def test_fixed_seed_gives_a_fixed_interval():
    x = np.random.default_rng(3).normal(size=(10, 3))
    first = aggregate.stratified_bootstrap_ci(x, reps=5_000, seed=7)
    assert aggregate.stratified_bootstrap_ci(x, reps=5_000, seed=7) == first
    assert aggregate.stratified_bootstrap_ci(x, reps=5_000, seed=8) != first


def test_batches_do_not_change_the_interval_for_large_reps(monkeypatch):
    # Many reps are drawn in batches to bound memory; the batch size must not change what is drawn.
    x = np.random.default_rng(4).normal(size=(10, 2))
    whole = aggregate.stratified_bootstrap_ci(x, reps=3_000, seed=1)
    monkeypatch.setattr(aggregate, "_BATCH_VALUES", 20 * 7)  # batches of 7 replicates
    assert aggregate.stratified_bootstrap_ci(x, reps=3_000, seed=1) == pytest.approx(whole)


@pytest.mark.parametrize("x, point", [([[5.0]], 5.0), ([[3.0, 7.0]], 5.0), ([4.0, 4.0, 4.0, 4.0], 4.0)])
def test_one_run_or_all_ties_collapse_the_interval_to_the_point(x, point):
    estimate = aggregate.stratified_bootstrap_ci(x, reps=1_000, seed=0)
    assert estimate == (point, point, point)


def test_bootstrap_resamples_runs_within_each_task():
    """Column t holds 1000 t + run: every replicate must keep, per column, num_runs values of that column only
    (stratified), and columns must draw their runs independently (not whole rows, as an unstratified bootstrap)."""
    num_runs, num_tasks = 10, 3
    x = np.arange(num_tasks)[None, :] * 1000.0 + np.arange(num_runs)[:, None]
    stacks = []

    def keep(stack):
        stacks.append(stack.copy())
        return stack.mean(axis=(-2, -1))

    aggregate.stratified_bootstrap_ci(x, keep, reps=500, seed=0)
    replicates = np.concatenate(stacks[:-1])  # the last call is the point estimate on the data itself
    assert replicates.shape == (500, num_runs, num_tasks)
    task, run = np.divmod(replicates, 1000.0)
    assert np.all(task == np.arange(num_tasks))  # each column only ever holds its own task's runs
    assert np.all((run >= 0) & (run < num_runs))
    rows_differ = np.any(run[:, :, 1:] != run[:, :, :1], axis=(1, 2))
    assert rows_differ.mean() > 0.9  # runs drawn per task, not as whole rows
    duplicates = [len(np.unique(run[r, :, 0])) < num_runs for r in range(len(run))]
    assert np.mean(duplicates) > 0.9  # with replacement


def test_statistic_gets_stacks_and_may_return_vectors():
    x = np.random.default_rng(5).normal(size=(6, 2))
    estimate = aggregate.stratified_bootstrap_ci(x, lambda s: s.mean(axis=-2), reps=400, seed=0)
    np.testing.assert_allclose(estimate.point, x.mean(axis=0))
    assert estimate.low.shape == estimate.high.shape == (2,)
    assert np.all(estimate.low <= estimate.point) and np.all(estimate.point <= estimate.high)


@pytest.mark.parametrize("bad, message", [(np.zeros((0, 2)), "non-empty"), (np.zeros((2, 2, 2)), "matrix")])
def test_bootstrap_refuses_shapes_that_are_not_a_matrix(bad, message):
    with pytest.raises(ValueError, match=message):
        aggregate.stratified_bootstrap_ci(bad, reps=10)


def test_nan_goes_to_the_statistic():
    x = np.array([[1.0], [2.0], [np.nan], [4.0]])
    assert math.isnan(aggregate.stratified_bootstrap_ci(x, reps=50).point)
    nan_median = aggregate.stratified_bootstrap_ci(x, lambda s: np.nanmedian(s, axis=(-2, -1)), reps=50)
    assert nan_median.point == 2.0


def loop_profile(x, taus):
    values = [float(v) for v in np.ravel(x)]
    return [sum(v > tau for v in values) / len(values) for tau in taus]


@settings(max_examples=40, deadline=None)
@given(st.one_of(matrices(), matrices(elements=TIED)), st.lists(FINITE, min_size=1, max_size=8))
def test_profile_matches_a_direct_count_and_falls_with_tau(x, taus):
    taus = sorted(taus + [float(np.median(x))])  # a threshold among the scores, so ties with tau are tested
    profile = performance_profile(x, taus, reps=100, seed=0)
    np.testing.assert_allclose(profile.fraction, loop_profile(x, taus))
    assert np.all(np.diff(profile.fraction) <= 0)
    assert np.all(np.diff(profile.low) <= 1e-12) and np.all(np.diff(profile.high) <= 1e-12)
    assert np.all(profile.low <= profile.fraction + 1e-12) and np.all(profile.fraction <= profile.high + 1e-12)


def test_profile_counts_strictly_above():
    profile = performance_profile([[0.0, 1.0], [1.0, 2.0]], [0.0, 1.0, 2.0], reps=10)
    np.testing.assert_allclose(profile.fraction, [0.75, 0.25, 0.0])


def test_profile_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        performance_profile([[1.0], [np.nan]], [0.5])


def test_normalize_maps_low_to_zero_and_high_to_one_per_task():
    scores = np.array([[22.0, -500.0], [475.0, -100.0], [248.5, np.nan]])
    normed = normalize(scores, low=[22.0, -500.0], high=[475.0, -100.0])
    np.testing.assert_allclose(normed, [[0.0, 0.0], [1.0, 1.0], [0.5, np.nan]])
    with pytest.raises(ValueError, match="empty"):
        normalize(scores, low=[-200.0, 0.0], high=[-200.0, 1.0])


def test_summarize_drops_nan_seeds_and_is_json_ready():
    summary = aggregate.summarize([1.0, 2.0, np.nan, 4.0], reps=500)
    assert summary["n"] == 3 and summary["n_nan"] == 1
    assert summary["iqm"] == pytest.approx(7 / 3) and summary["mean"] == pytest.approx(7 / 3)
    assert summary["std"] == pytest.approx(np.std([1.0, 2.0, 4.0]))
    assert (summary["min"], summary["max"]) == (1.0, 4.0)
    low, high = summary["ci"]
    assert 1.0 <= low <= summary["iqm"] <= high <= 4.0
    json.dumps(summary, allow_nan=False)
    empty = aggregate.summarize([np.nan, np.nan])
    assert empty["iqm"] is None and empty["ci"] is None and (empty["n"], empty["n_nan"]) == (0, 2)
    json.dumps(empty, allow_nan=False)
