"""scanrl/harness/plots.py: learning curves carry each seed's return forward from its latest finished
episodes (no gaps, never empty), count the seeds they cover, and a sweep's points share one plot; and
benchmarks/seed_curves.py, every seed's curve of a run."""

import csv
import importlib.util
import json

import numpy as np
import pytest
from cases import NAN, sparse_metrics
from conftest import ROOT

from scanrl.harness import plots


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions make, kept open instead of saved."""
    made = []

    def keep(fig, path):
        made.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    yield made
    for fig in made:
        plots.pyplot().close(fig)


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_carry_forward_holds_each_rows_last_value():
    got = plots.carry_forward(np.array([[NAN, 1.0, NAN, NAN, 3.0], [2.0, NAN, NAN, 4.0, NAN]]))
    np.testing.assert_array_equal(got, [[NAN, 1.0, 1.0, 1.0, 3.0], [2.0, 2.0, 2.0, 4.0, 4.0]])


def test_curve_has_no_gap_once_every_seed_finished_an_episode(figures):
    metrics = sparse_metrics()
    start, mean, half, low, high = plots.mean_band(plots.carried_returns(metrics))
    assert start == 3  # seed 2's first episode ends in row 3
    assert not np.isnan(mean).any() and not np.isnan(half).any() and np.all(low <= mean) and np.all(mean <= high)
    np.testing.assert_allclose(mean[0], np.mean([10.0, 20.0, 30.0]))
    np.testing.assert_allclose(half[0], 4.302653 * 10.0 / np.sqrt(3), rtol=1e-6)  # Student's t(0.975, 2 dof): 4.302653
    plots.plot_learning_curve("unused.png", metrics, "t")
    (ax,) = figures[0].axes  # episode length is constant: no second panel
    (mean_line,) = [line for line in ax.get_lines() if line.get_label() == "mean over 3 seeds"]
    assert np.isfinite(mean_line.get_ydata()).all() and len(mean_line.get_ydata()) == 37
    assert "95% interval of the mean" in legend_texts(ax) and "min to max over seeds" in legend_texts(ax)


def test_legend_counts_only_seeds_with_a_finished_episode(figures):
    metrics = sparse_metrics(num_seeds=3)
    metrics["episode_return"][1] = NAN
    plots.plot_learning_curve("unused.png", metrics, "t")
    assert "mean over 2 seeds of 3 (the others finished no episode)" in legend_texts(figures[0].axes[0])


def test_one_seed_is_one_seed(figures):
    plots.plot_learning_curve("unused.png", sparse_metrics(num_seeds=1), "t")
    assert legend_texts(figures[0].axes[0]) == ["1 seed"]


def test_a_run_without_episodes_says_so(figures):
    metrics = sparse_metrics()
    metrics["episode_return"][:] = NAN
    plots.plot_learning_curve("unused.png", metrics, "t")
    (text,) = figures[0].axes[0].texts
    assert text.get_text().startswith("no episode ended in 4,000 env steps")


def test_episode_length_panel_where_the_return_is_flat(figures):
    metrics = sparse_metrics()
    metrics["episode_return"] = np.where(np.isnan(metrics["episode_return"]), NAN, 1.0)  # a goal env
    metrics["episode_length"] = np.where(np.isnan(metrics["episode_return"]), NAN,
                                         np.linspace(200, 18, metrics["episode_return"].shape[1]))
    plots.plot_learning_curve("unused.png", metrics, "t")
    assert [ax.get_ylabel() for ax in figures[0].axes] == ["episode return", "episode length"]


def test_learning_curve_png_is_written(tmp_path):
    path = plots.plot_learning_curve(str(tmp_path / "learning_curve.png"), sparse_metrics(), "t")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "learning_curve.png.tmp").exists()


def test_sweep_plot_names_every_point_on_shared_axes(figures):
    curves = [plots.carried_returns(sparse_metrics()), None]
    steps = sparse_metrics()["env_steps"][0]
    plots.plot_sweep("unused.png", steps, curves, ["lr=0.001", "lr=0.0003"], "t", 3)
    (ax,) = figures[0].axes
    assert legend_texts(ax) == ["lr=0.001: mean over 3 seeds", "lr=0.0003: no episode ended"]
    low, high = plots.shared_ylim([c for c in curves if c is not None])
    assert low < 10.0 and high > 390.0


def fake_run(path, seed0, curves, evals):
    """A run directory as the harness writes it: metrics.csv rows per seed, summary.json, config.json."""
    path.mkdir()
    with open(path / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", "env_steps", "episode_return"])
        for i, curve in enumerate(curves):
            for row, value in enumerate(curve, 1):
                writer.writerow([seed0 + i, row, row * 100, value])
    (path / "summary.json").write_text(json.dumps({"eval_return": evals}))
    (path / "config.json").write_text(json.dumps({"env": "CartPole-v1", "seed": seed0}))


def test_seed_curves_draws_every_seed_and_names_the_worst(tmp_path, run_script):
    """benchmarks/seed_curves.py: the seeds of metrics.csv (from --seed 5) matched to summary.json's agents in
    order, the lowest-evaluated named, NaN rows skipped; bad input is one line and exit 2."""
    spec = importlib.util.spec_from_file_location("seed_curves", ROOT / "benchmarks" / "seed_curves.py")
    seed_curves = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed_curves)
    fake_run(tmp_path / "a", 5, [[1, "nan", 3], [4, 5, 6]], [30.0, 60.0])
    _, curves, evals = seed_curves.read_run(tmp_path / "a", "episode_return")
    assert curves == {5: ([100, 300], [1.0, 3.0]), 6: ([100, 200, 300], [4.0, 5.0, 6.0])}
    assert evals == {5: 30.0, 6: 60.0}
    fake_run(tmp_path / "b", 0, [[1, 2], [3, 4]], [1.0, 2.0])
    out = tmp_path / "seeds.png"
    result = run_script("benchmarks/seed_curves.py", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out),
                        add_out_dir=False)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 10_000
    for args, message in (((str(tmp_path / "a"), "--titles", "x", "y"), "--titles has 2 titles for 1 run"),
                          ((str(tmp_path / "missing"),), "missing")):
        result = run_script("benchmarks/seed_curves.py", *args, "--out", str(out), add_out_dir=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
