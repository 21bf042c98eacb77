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

from scanrl.harness import aggregate, plots


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
        plots._pyplot().close(fig)


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


def write_metrics(run_dir, returns, steps_per_iteration=100):
    """A metrics.csv as a run writes it, from `returns` (seeds, iterations)."""
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", "env_steps", "episode_return", "nonfinite"])
        for u in range(returns.shape[1]):
            for seed, row in enumerate(returns):
                writer.writerow([seed, u + 1, (u + 1) * steps_per_iteration, row[u], 0])


def test_several_runs_plot_together_with_their_iqm_over_seeds(tmp_path, capsys):
    """`python -m scanrl.harness.plots A B SWEEP` draws each run (and each point of a sweep's directory) on one plot,
    and prints each curve's final IQM over seeds: the IQM of the seeds' latest returns, inside its interval."""
    rng = np.random.default_rng(0)
    mine = rng.normal(100, 10, size=(8, 20))
    mine[:, 0] = NAN  # no episode ended in the first iteration: carried forward from the second
    write_metrics(tmp_path / "runs" / "mine", mine)
    write_metrics(tmp_path / "runs" / "ppo", rng.normal(50, 10, size=(5, 10)), steps_per_iteration=200)
    for point in ("p0_lr=0.1", "p1_lr=0.2"):
        write_metrics(tmp_path / "runs" / "sweep" / point, rng.normal(0, 1, size=(3, 4)))
    out = tmp_path / "both.png"
    assert plots.main([str(tmp_path / "runs" / d) for d in ("mine", "ppo", "sweep")] + ["--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert out.stat().st_size > 0 and printed[-1] == f"written to {out}"
    assert [line.split(":")[0].rsplit("/", 1)[-1] for line in printed[:-1]] == ["mine", "ppo", "p0_lr=0.1",
                                                                                 "p1_lr=0.2"]
    expected = aggregate.iqm(mine[:, -1])
    point, low, high = (float(x) for x in printed[0].split("IQM ")[1].replace("[", "").replace(",", "")
                        .replace("]", "").split()[:3])
    assert point == pytest.approx(expected, abs=0.005) and low <= point <= high
    assert printed[0].endswith("over 8 seeds")


def test_plotting_a_directory_without_metrics_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exited:
        plots.main([str(tmp_path / "empty")])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path / 'empty'} holds no metrics.csv: name a run "
                                               "directory (runs/<run name>)")


def write_rows(path, text):
    """metrics.csv at `path` (its folder made) holding `text`, a run's columns up to episode_return, the last."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


WHOLE = ("seed,iteration,env_steps,episode_return\r\n0,1,100,nan\r\n1,1,100,200.0\r\n0,2,200,100.0\r\n"
         "1,2,200,241.0\r\n0,3,300,120.0\r\n1,3,300,263.0\r\n")


def test_a_cut_last_row_is_dropped_with_a_note(tmp_path, capsys):
    """A run appends its rows as chunks end, and a kill can cut the last: a last line without its newline or without
    every column is no row (`26` of `263.0` was read as 26), and an iteration without every seed's row is dropped
    too; one note says so, and the final IQM is that of the last whole iteration."""
    steps, values, note = plots.read_metrics(write_rows(tmp_path / "whole" / "metrics.csv", WHOLE))
    np.testing.assert_array_equal(steps, [100, 200, 300])
    np.testing.assert_array_equal(values, np.array([[NAN, 100, 120], [200, 241, 263]], np.float32))
    assert values.dtype == np.float32 and note is None
    for cut, dropped in ((len("63.0\r\n"), "its last row, cut (line 7) and iteration 3's rows of 1 of its 2 seeds"),
                         (1, "its last row, cut (line 7) and iteration 3's rows of 1 of its 2 seeds"),
                         (len("263.0\r\n"), "its last row, cut (line 7) and iteration 3's rows of 1 of its 2 seeds"),
                         (len("1,3,300,263.0\r\n"), "iteration 3's rows of 1 of its 2 seeds")):
        path = write_rows(tmp_path / f"cut_{cut}" / "metrics.csv", WHOLE[:-cut])
        steps, values, note = plots.read_metrics(path)
        np.testing.assert_array_equal(steps, [100, 200])
        np.testing.assert_array_equal(values, np.array([[NAN, 100], [200, 241]], np.float32))
        assert note == (f"note: {path}: read up to iteration 2; dropped {dropped} (a run writing it, or killed as it "
                        "wrote, leaves it so)"), (cut, note)
    assert plots.main([str(tmp_path / "cut_6"), "--out", str(tmp_path / "cut.png")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"note: {tmp_path / 'cut_6' / 'metrics.csv'}: read up to iteration 2")
    assert out[1] == f"{tmp_path / 'cut_6'}: final episode_return IQM 170.50 [100.00, 241.00] over 2 seeds"


def test_a_metrics_csv_that_is_not_a_runs_is_one_line(tmp_path, capsys):
    """A missing column, a cell that is not a number, rows out of the run's order or bytes that are not text: one
    line naming the file, exit 2 (before: a traceback, or a cell read as another number)."""
    cases = {
        "no_seed": (WHOLE.replace("seed,", "agent,", 1), " has no seed column (its columns: agent, iteration, "
                                                            "env_steps, episode_return)"),
        "no_env_steps": (WHOLE.replace("env_steps", "steps"), " has no env_steps column"),
        "text": (WHOLE.replace("241.0", "2x1.0"), ", line 5: episode_return '2x1.0' is not a number"),
        "cells": (WHOLE.replace("1,2,200,241.0", "1,2,200"), ", line 5: 3 cells, where the header names 4"),
        "seed_major": ("".join(sorted(WHOLE.splitlines(True), key=lambda line: (line[0] != "s", line[0]))),
                       ", line 5: seed 1 where seed 0's row was due"),
        "twice": (WHOLE.replace("1,1,100,200.0\r\n", "1,1,100,200.0\r\n" * 2),
                  ", line 4: seed 1's second row in the first iteration"),
        "bytes": (np.random.default_rng(0).bytes(4096), " is not a metrics.csv a run wrote: 'utf-8' codec can't "
                                                        "decode byte"),
        "empty": ("", " has no rows yet"),
    }
    for name, (text, message) in cases.items():
        path = write_rows(tmp_path / name / "metrics.csv", text)
        with pytest.raises(SystemExit) as exited:
            plots.main([str(tmp_path / name), "--out", str(tmp_path / "no.png")])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and len(err.strip().splitlines()) == 1, (name, err)
        assert err.startswith(f"error: {path}{message}"), (name, err)
    assert not (tmp_path / "no.png").exists()


def test_a_long_run_is_drawn_at_a_bounded_number_of_steps_ending_at_its_last(tmp_path, monkeypatch):
    """A curve of plot_runs is drawn at MAX_POINTS steps at most, whatever the run's length, its last among them."""
    monkeypatch.setattr(plots, "MAX_POINTS", 5)
    returns = np.random.default_rng(0).normal(100, 10, size=(3, 50))
    write_metrics(tmp_path / "long", returns)
    steps, point, low, high, seeds = plots.iqm_curve(*plots.read_curves(str(tmp_path / "long"))[0][1:])
    np.testing.assert_array_equal(steps, [100, 1300, 2500, 3800, 5000])  # iterations 1, 13, 25, 38, 50
    assert seeds == 3 and point[-1] == pytest.approx(aggregate.iqm(returns[:, -1]), rel=1e-6)
    assert np.all(low <= point) and np.all(point <= high)
