"""scanrl/tools/compare.py: several runs' learning curves on one plot, each run's metrics.csv read as a run writes it
(streamed, a cut last row dropped with a note, anything else one line)."""

import csv

import numpy as np
import pytest
from cases import NAN

from scanrl.harness import aggregate
from scanrl.tools import compare


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
    """`python -m scanrl.tools.compare A B SWEEP` draws each run (and each point of a sweep's directory) on one plot,
    and prints each curve's final IQM over seeds: the IQM of the seeds' latest returns, inside its interval."""
    rng = np.random.default_rng(0)
    mine = rng.normal(100, 10, size=(8, 20))
    mine[:, 0] = NAN  # no episode ended in the first iteration: carried forward from the second
    write_metrics(tmp_path / "runs" / "mine", mine)
    write_metrics(tmp_path / "runs" / "ppo", rng.normal(50, 10, size=(5, 10)), steps_per_iteration=200)
    for point in ("p0_lr=0.1", "p1_lr=0.2"):
        write_metrics(tmp_path / "runs" / "sweep" / point, rng.normal(0, 1, size=(3, 4)))
    out = tmp_path / "both.png"
    assert compare.main([str(tmp_path / "runs" / d) for d in ("mine", "ppo", "sweep")] + ["--out", str(out)]) == 0
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
        compare.main([str(tmp_path / "empty")])
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
    steps, values, note = compare.read_metrics(write_rows(tmp_path / "whole" / "metrics.csv", WHOLE))
    np.testing.assert_array_equal(steps, [100, 200, 300])
    np.testing.assert_array_equal(values, np.array([[NAN, 100, 120], [200, 241, 263]], np.float32))
    assert values.dtype == np.float32 and note is None
    for cut, dropped in ((len("63.0\r\n"), "its last row, cut (line 7) and iteration 3's rows of 1 of its 2 seeds"),
                         (1, "its last row, cut (line 7) and iteration 3's rows of 1 of its 2 seeds"),
                         (len("263.0\r\n"), "its last row, cut (line 7) and iteration 3's rows of 1 of its 2 seeds"),
                         (len("1,3,300,263.0\r\n"), "iteration 3's rows of 1 of its 2 seeds")):
        path = write_rows(tmp_path / f"cut_{cut}" / "metrics.csv", WHOLE[:-cut])
        steps, values, note = compare.read_metrics(path)
        np.testing.assert_array_equal(steps, [100, 200])
        np.testing.assert_array_equal(values, np.array([[NAN, 100], [200, 241]], np.float32))
        assert note == (f"note: {path}: read up to iteration 2; dropped {dropped} (a run writing it, or killed as it "
                        "wrote, leaves it so)"), (cut, note)
    assert compare.main([str(tmp_path / "cut_6"), "--out", str(tmp_path / "cut.png")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"note: {tmp_path / 'cut_6' / 'metrics.csv'}: read up to iteration 2")
    assert out[1] == f"{tmp_path / 'cut_6'}: final episode_return IQM 170.50 [100.00, 241.00] over 2 seeds"


def test_a_metrics_csv_that_is_not_a_runs_is_one_line(tmp_path, capsys):
    """A missing column, a cell that is not a number (or an integer past int64: an OverflowError's traceback), rows out
    of the run's order (seeds, or iterations: drawn without a word), bytes that are not text, a blank line (an
    IndexError's traceback) or line ends that are not a run's: one line naming the file, exit 2 (before: a traceback,
    a cell read as another number, or a misleading line)."""
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
        "blank": (WHOLE.replace("0,2,", "\r\n0,2,"), ", line 4: a blank line, which a run never writes"),
        "past_int64": (WHOLE.replace("1,2,200", "99999999999999999999,2,200"),
                       ", line 5: seed '99999999999999999999' is not an integer (64 bits)"),
        "out_of_order": (WHOLE.replace(",1,100,", ",1,300,"), ", line 4: env_steps 200 after 300: rows out of their "
                                                              "iterations' order"),
        "cr_alone": (WHOLE.replace("\r\n", "\r"), ": its lines end in \\r alone or \\r\\r\\n, not as a run writes them "
                                                 "(\\r\\n or \\n)"),
        "cr_twice": (WHOLE.replace("241.0\r\n", "241.0\r\r\n"), ", line 5: a carriage return inside it, which a run "
                                                                 "never writes"),
    }
    for name, (text, message) in cases.items():
        path = write_rows(tmp_path / name / "metrics.csv", text)
        with pytest.raises(SystemExit) as exited:
            compare.main([str(tmp_path / name), "--out", str(tmp_path / "no.png")])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and len(err.strip().splitlines()) == 1, (name, err)
        assert err.startswith(f"error: {path}{message}"), (name, err)
    assert not (tmp_path / "no.png").exists()


def test_a_long_run_is_drawn_at_a_bounded_number_of_steps_ending_at_its_last(tmp_path, monkeypatch):
    """A curve of plot_runs is drawn at MAX_POINTS steps at most, whatever the run's length, its last among them."""
    monkeypatch.setattr(compare, "MAX_POINTS", 5)
    returns = np.random.default_rng(0).normal(100, 10, size=(3, 50))
    write_metrics(tmp_path / "long", returns)
    steps, point, low, high, seeds = compare.iqm_curve(*compare.read_curves(str(tmp_path / "long"))[0][1:])
    np.testing.assert_array_equal(steps, [100, 1300, 2500, 3800, 5000])  # iterations 1, 13, 25, 38, 50
    assert seeds == 3 and point[-1] == pytest.approx(aggregate.iqm(returns[:, -1]), rel=1e-6)
    assert np.all(low <= point) and np.all(point <= high)


def test_a_byte_order_mark_is_read_and_an_infinity_is_drawn_as_no_value_with_a_note(tmp_path, capsys):
    """A metrics.csv saved by a spreadsheet (a UTF-8 byte-order mark) was refused as having no seed column; an
    infinite return printed `IQM inf [x, nan]`. The mark is read as none, and an infinity is drawn as no value (as
    an iteration where no episode ended), with a note naming its line."""
    path = write_rows(tmp_path / "marked" / "metrics.csv", "\ufeff" + WHOLE.replace("241.0", "inf"))
    steps, values, note = compare.read_metrics(path)
    np.testing.assert_array_equal(values, np.array([[NAN, 100, 120], [200, NAN, 263]], np.float32))
    assert note == (f"note: {path}: episode_return is infinite in 1 row(s), the first at line 5; drawn as no value "
                    "there")
    assert compare.main([str(tmp_path / "marked"), "--out", str(tmp_path / "marked.png")]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (f"{tmp_path / 'marked'}: final episode_return IQM 191.50 "
                                                       "[120.00, 263.00] over 2 seeds")
