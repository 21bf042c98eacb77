"""benchmarks/learning.py: the suites are runnable, the report's numbers come from the run directories, and the CLI
runs a tiny suite through the scripts, reruns nothing that finished, resumes what stopped and refuses bad names."""

import dataclasses
import glob
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
import scipy.stats
import tyro

from benchmarks import learning
from benchmarks.suite import plots, repository, runner, verify
from benchmarks.suite.entries import (
    SCORE_RANGES,
    SCRIPT_ALGO,
    Entry,
    Reference,
    SuiteError,
    check_entries,
    entry,
    select,
)
from benchmarks.suite.records import MACHINE_FILE, read_curve, read_record, write_record
from benchmarks.suite.report import fmt, iqm_cell, read_result, report_path, table_rows, write_report
from benchmarks.suite.runner import SUITE_PACKAGES, check_run_dir, command, envs_missing, provenance, run_entries
from benchmarks.suite.suites import FEWER_SEEDS, SUITES
from scanrl import harness
from scanrl.harness import aggregate

SCRIPT = "benchmarks/learning.py"
PNG = b"\x89PNG\r\n\x1a\n"


def fake_run(out_dir, e: Entry, eval_return, final_return, metrics):
    """A finished run directory as the scripts write it: config.json, metrics.csv and summary.json. `metrics`: rows
    (seed, iteration, env_steps, episodes, episode_return)."""
    run_dir = out_dir / e.name
    run_dir.mkdir(parents=True)
    config = {"algo": SCRIPT_ALGO[e.algo], "env": e.env, "total_timesteps": e.total_timesteps,
              "num_seeds": e.num_seeds, "seed": e.seed}
    (run_dir / "config.json").write_text(json.dumps(config))
    lines = ["seed,iteration,env_steps,episodes,episode_return,nonfinite"]
    lines += [f"{s},{i},{steps},{n},{ret},False" for s, i, steps, n, ret in metrics]
    (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
    summary = {"algo": config["algo"], "env": e.env, "num_seeds": e.num_seeds, "seeds": list(range(e.num_seeds)),
               "total_timesteps": e.total_timesteps, "env_steps": e.total_timesteps, "compile_s": 1.5,
               "train_s": 12.0, "final_return": final_return, "eval_return": eval_return}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def runner_notes(e: Entry, **changes):
    """The runner's notes of a run it finished (MACHINE_FILE): the machine and where the numbers come from."""
    return {"machine": {"cpu": "a CPU", "cores": 2, "backend": "cpu", "devices": ["cpu"], "jax": "0", "python": "3"},
            "commit": "0" * 40, "dirty": False, "versions": {"jax": "0"},
            "command": (f"python {e.script} --env {e.env} --total-timesteps {e.total_timesteps} --num-seeds "
                        f"{e.num_seeds} --seed {e.seed} --out-dir runs/learning/fake --run-name {e.name}"),
            "seeds": list(range(e.seed, e.seed + e.num_seeds)), "wall_s": 20.0, **changes}


def curve_rows(num_seeds, iterations=6):
    """Every seed ends one episode per iteration, with return seed + iteration."""
    return [(s, i + 1, 100 * (i + 1), 1, float(s + i)) for i in range(iterations) for s in range(num_seeds)]


def table_row(text, name):
    """The entry's row of the first table in `text` that has one (the results come before where each comes from)."""
    row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in row.strip("|").split("|")]


def loop_iqm(values):
    values = sorted(values)
    cut = int(0.25 * len(values))
    kept = values[cut:len(values) - cut]
    return sum(kept) / len(kept)


@pytest.fixture
def fabricated(tmp_path):
    """Three finished entries (ppo on CartPole and Breakout, dqn on Breakout) and one never run."""
    out_dir = tmp_path / "runs"
    entries = (
        entry("ppo-cart", "ppo", "ppo.py", "CartPole-v1", 1000, 5,
              reference=Reference(490.04, "490.04 ± 6.12", "CleanRL docs")),
        entry("ppo-breakout", "ppo", "ppo.py", "Breakout-MinAtar", 1000, 4),
        entry("dqn-breakout", "dqn", "dqn_tabular_q.py", "Breakout-MinAtar", 1000, 4, ("--agent", "dqn")),
        entry("pqn-cart", "pqn", "pqn.py", "CartPole-v1", 1000, 4, ()),
    )
    fake_run(out_dir, entries[0], [100.0, 200.0, None, 300.0, 400.0], [90.0, 190.0, 280.0, 300.0, 500.0],
             curve_rows(5))
    fake_run(out_dir, entries[1], [2.0, 4.0, 6.0, 8.0], [1.0, 2.0, 3.0, 4.0], curve_rows(4))
    fake_run(out_dir, entries[2], [10.0, 10.0, 10.0, 10.0], [9.0, 9.0, 9.0, 9.0], curve_rows(4))
    return out_dir, entries


def test_report_numbers_come_from_the_run_directories(fabricated, tmp_path):
    out_dir, entries = fabricated
    resumed = out_dir / "dqn-breakout" / "summary.json"  # its train s counts only the invocation after iteration 3
    resumed.write_text(json.dumps({**json.loads(resumed.read_text()), "resumed_after_iteration": 3}))
    results = tmp_path / "results" / "learning_fake.md"
    written = write_report("fake", entries, str(out_dir), str(results))
    text = results.read_text()
    assert table_row(text, "dqn-breakout")[8] == "12 (resumed after iteration 3)"

    cart = table_row(text, "ppo-cart")
    # eval: seeds 100, 200, 300, 400 (one NaN dropped): IQM cuts one each end -> 250; std ddof 0
    assert cart[4].startswith("250 [") and cart[4].endswith("(1 NaN dropped)")
    low, high = (float(v) for v in cart[4].split("[")[1].split("]")[0].split(","))
    assert 100 <= low <= 250 <= high <= 400
    assert cart[5].startswith(f"{loop_iqm([90.0, 190.0, 280.0, 300.0, 500.0]):.4g} [")  # final: 256.7
    assert cart[6] == f"250 ± {np.std([100, 200, 300, 400]):.4g}" and cart[7] == "100"
    assert cart[2:4] == ["5 (0-4)", "1,000"] and cart[8:12] == ["12", "1.5", "490.04 ± 6.12", "CleanRL docs"]
    assert "Not in the table (no summary.json or record yet): pqn-cart" in text

    # Breakout has no published high: the best eval IQM on it (dqn's 10) is 1, the random policy's score 0.
    breakout_low = SCORE_RANGES["Breakout-MinAtar"][0]
    assert f"| Breakout-MinAtar | {breakout_low:.4g} | 10 | best eval IQM in this report |" in text
    cart_low, cart_high, _ = SCORE_RANGES["CartPole-v1"]
    normed = [(v - cart_low) / (cart_high - cart_low) for v in (100, 200, 300, 400)]
    normed += [(v - breakout_low) / (10 - breakout_low) for v in (2, 4, 6, 8)]
    (ppo_row,) = [line for line in text.splitlines() if line.startswith("| ppo | CartPole-v1, Breakout-MinAtar |")]
    assert f"| 4 | {loop_iqm(normed):.3f} [" in ppo_row
    (dqn_row,) = [line for line in text.splitlines() if line.startswith("| dqn |")]
    assert "| 1.000 [1.000, 1.000] |" in dqn_row

    names = sorted(os.path.basename(p) for p in written[1:])
    assert names == ["learning_fake_dqn_curves.png", "learning_fake_dqn_profile.png",
                     "learning_fake_ppo_curves.png", "learning_fake_ppo_profile.png"]
    for path in written[1:]:
        assert open(path, "rb").read(8) == PNG


def test_read_curve_averages_the_episodes_of_each_stretch(tmp_path):
    rows = [(0, 1, 100, 1, 10.0), (1, 1, 100, 0, "nan"), (0, 2, 200, 3, 20.0), (1, 2, 200, 0, "nan"),
            (0, 3, 300, 0, "nan"), (1, 3, 300, 1, 5.0), (0, 4, 400, 2, 40.0), (1, 4, 400, 1, 15.0)]
    e = entry("curve", "ppo", "ppo.py", "CartPole-v1", 400, 2)
    run_dir = fake_run(tmp_path, e, [1.0, 1.0], [1.0, 1.0], rows)
    steps, returns = read_curve(str(run_dir), points=2)
    np.testing.assert_array_equal(steps, [200, 400])
    # seed 0: (10 * 1 + 20 * 3) / 4, then 40; seed 1: no episode in the first stretch, then (5 + 15) / 2
    np.testing.assert_allclose(returns, [[17.5, 40.0], [np.nan, 10.0]])


def test_curve_band_is_the_iqm_over_seeds_at_each_point(tmp_path):
    e = entry("band", "ppo", "ppo.py", "CartPole-v1", 600, 5)
    run_dir = fake_run(tmp_path, e, [1.0] * 5, [1.0] * 5, curve_rows(5))
    _, returns = read_curve(str(run_dir))
    band = aggregate.stratified_bootstrap_ci(returns, lambda s: aggregate.iqm(s, axis=-2), reps=200)
    np.testing.assert_allclose(band.point, scipy.stats.trim_mean(returns, 0.25, axis=0))


def test_select_takes_comma_lists_and_repeats_in_suite_order():
    quick = SUITES["quick"]
    chosen = select(quick, ("td3-Pendulum-v1,ppo-CartPole-v1", " dqn-CartPole-v1"))
    assert [e.name for e in chosen] == ["ppo-CartPole-v1", "dqn-CartPole-v1", "td3-Pendulum-v1"]
    assert select(quick, ()) == quick
    with pytest.raises(SuiteError, match="unknown entry nope, ppo-cartpole; the suite has: ppo-CartPole"):
        select(quick, ("nope,ppo-cartpole",))


@pytest.mark.parametrize("suite", [pytest.param(s, marks=pytest.mark.slow) if s in ("offpolicy", "halfcheetah") else s
                                   for s in sorted(SUITES)])
def test_suite_entries_are_runnable_as_written(suite):
    """Every entry's flags pass its script's own checks (harness.check writes nothing), its label is the learner
    the script resolves to, and its normalisation range and reference are filled in."""
    entries = SUITES[suite]
    check_entries(entries)
    checked = set()
    for e in entries:
        if envs_missing(e.env):
            continue
        # Playground's Cartpole tasks share their observation and action shapes: harness.check (1-2.5 s each, it
        # builds the env) runs once per script, flags and budget over them, which keeps CI inside its time.
        family = "playground/Cartpole" if e.env.startswith("playground/Cartpole") else e.env
        key = (e.script, e.flags, family, e.total_timesteps, e.num_seeds)
        module = importlib.import_module(e.script.removesuffix(".py"))
        if key not in checked:
            checked.add(key)
            config = tyro.cli(module.Config, args=["--env", e.env, "--total-timesteps", str(e.total_timesteps),
                                                   "--num-seeds", str(e.num_seeds), *e.flags])
            harness.check(module.ALGORITHM, config)
        assert module.ALGORITHM.name == SCRIPT_ALGO[e.algo], e.name
        assert e.env in SCORE_RANGES and e.low is not None, e.name
        assert e.high is None or e.high > e.low, e.name
        assert e.reference.value is None or e.reference.source, e.name
        fewer = FEWER_SEEDS.get(e.name, (10,))[0] if suite == "full" else 5
        assert e.num_seeds >= fewer, e.name
    if suite == "quick":
        assert not any(e.gpu_only or e.env.startswith("brax/") for e in entries)


def write_suite(path, *entries):
    items = [{**dataclasses.asdict(e), "flags": list(e.flags)} for e in entries]
    path.write_text(json.dumps({"name": "tiny", "entries": items}))
    return str(path)


def test_cli_unknown_only_name_exits_2_with_one_line(run_script):
    result = run_script(SCRIPT, "--only", "ppo-CartPole-v1,nope", add_out_dir=False, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --only: unknown entry nope; the suite has: " + ", ".join(e.name for e in SUITES["quick"])]


def test_cli_refuses_a_run_directory_made_for_other_settings(run_script, tmp_path):
    e = entry("ppo-cart", "ppo", "ppo.py", "CartPole-v1", 2048, 2)
    suite = write_suite(tmp_path / "suite.json", e)
    fake_run(tmp_path / "runs", dataclasses.replace(e, total_timesteps=999), [1.0, 1.0], [1.0, 1.0], curve_rows(2))
    (tmp_path / "runs" / e.name / "summary.json").unlink()  # unfinished: the runner would resume it
    result = run_script(SCRIPT, "--suite-file", suite, "--out-dir", str(tmp_path / "runs"), "--results",
                        str(tmp_path / "learning.md"), timeout=120)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "total_timesteps 999 (suite: 2048)" in result.stderr and "running" not in result.stdout
    assert not (tmp_path / "learning.md").exists()


def test_a_run_directory_made_with_other_flag_values_is_refused(tmp_path):
    """A resumed run keeps the flags it was started with, so a suite whose entry's flags changed since must not
    resume it: each flag is compared with config.json (5e-4 is 0.0005, --no-x is x false, lists element-wise)."""
    e = entry("ppo-breakout", "ppo", "ppo.py", "Breakout-MinAtar", 1000, 2,
              ("--learning-rate=5e-4", "--no-anneal-lr", "--activation", "relu", "--sweep", "a=1", "b=2"))
    run_dir = fake_run(tmp_path, e, [1.0, 1.0], [1.0, 1.0], curve_rows(2))
    config = json.loads((run_dir / "config.json").read_text())
    same = {"learning_rate": 0.0005, "anneal_lr": False, "activation": "relu", "sweep": ["a=1", "b=2"]}
    (run_dir / "config.json").write_text(json.dumps({**config, **same}))
    check_run_dir(e, str(run_dir))
    for field, value, shown in (("activation", "tanh", "--activation 'tanh' (suite: 'relu')"),
                                ("anneal_lr", True, "--anneal-lr True (suite: False)"),
                                ("learning_rate", 0.001, "--learning-rate 0.001 (suite: '5e-4')"),
                                ("sweep", ["a=1"], "--sweep ['a=1'] (suite: ['a=1', 'b=2'])")):
        (run_dir / "config.json").write_text(json.dumps({**config, **same, field: value}))
        with pytest.raises(SuiteError, match="was made with " + re.escape(shown)):
            check_run_dir(e, str(run_dir))


def test_cli_report_only_runs_nothing(run_script, fabricated, tmp_path):
    out_dir, entries = fabricated
    suite = write_suite(tmp_path / "suite.json", *entries)
    result = run_script(SCRIPT, "--suite-file", suite, "--out-dir", str(out_dir), "--results",
                        str(tmp_path / "report" / "learning.md"), "--report-only", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "running" not in result.stdout and not (out_dir / "pqn-cart").exists()
    assert "| ppo-cart |" in (tmp_path / "report" / "learning.md").read_text()
    assert (tmp_path / "report" / "learning_ppo_curves.png").read_bytes()[:8] == PNG


@pytest.mark.slow
def test_cli_runs_a_tiny_suite_then_reruns_nothing_and_resumes_what_stopped(run_script, tmp_path):
    entries = (
        entry("ppo-cart", "ppo", "ppo.py", "CartPole-v1", 2048, 2, ("--num-envs", "4", "--num-steps", "64"),
              Reference(490.04, "490.04 ± 6.12", "CleanRL docs"), sampled_episodes=5),
        entry("tabular-grid", "tabular_q", "dqn_tabular_q.py", "GridWorld-v0", 20_000, 2,
              ("--agent", "tabular")),
    )
    suite = write_suite(tmp_path / "suite.json", *entries)
    out_dir, report = tmp_path / "runs", tmp_path / "results" / "learning_tiny.md"
    records = tmp_path / "records"
    args = ("--suite-file", suite, "--out-dir", str(out_dir), "--results", str(report), "--records", str(records))

    first = run_script(SCRIPT, *args, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count(": running: python ") == 2
    text = report.read_text()
    for e in entries:
        summary = json.loads((out_dir / e.name / "summary.json").read_text())
        assert summary["num_seeds"] == 2 and summary["env_steps"] == e.total_timesteps
        expected = aggregate.summarize([np.nan if v is None else v for v in summary["eval_return"]])
        assert table_row(text, e.name)[4].startswith(f"{fmt(expected['iqm'])} [")
        assert json.loads((out_dir / e.name / MACHINE_FILE).read_text())["machine"]["cores"] >= 1
        assert json.loads((records / f"{e.name}.json").read_text())["summary"] == summary
    # ppo-cart asks for its sampled policies' returns too: --eval-sampled's per-seed means, in the table.
    sampled = json.loads((out_dir / "ppo-cart" / MACHINE_FILE).read_text())["sampled_eval"]
    assert sampled["episodes"] == 5 and len(sampled["per_seed"]) == 2 and all(m > 0 for m in sampled["per_seed"])
    assert table_row(text, "ppo-cart")[6] == f"{iqm_cell(np.array(sampled['per_seed']))} (5)"
    assert table_row(text, "tabular-grid")[6] == "-"
    for name in ("ppo_curves", "ppo_profile", "tabular_q_curves", "tabular_q_profile"):
        assert (report.parent / f"learning_tiny_{name}.png").read_bytes()[:8] == PNG

    stamps = {p: p.stat().st_mtime_ns for p in out_dir.rglob("*") if p.is_file()}
    second = run_script(SCRIPT, *args, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("not rerun") == 2 and "running" not in second.stdout
    assert {p: p.stat().st_mtime_ns for p in out_dir.rglob("*") if p.is_file()} == stamps
    # Another machine: no run directories, only the committed records. Nothing runs; the report is the same.
    elsewhere = run_script(SCRIPT, *args[:2], "--out-dir", str(tmp_path / "clone"), *args[4:], timeout=300)
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    assert elsewhere.stdout.count("not rerun") == 2 and "running" not in elsewhere.stdout
    for e in entries:
        assert table_row(report.read_text(), e.name) == table_row(text, e.name)

    (out_dir / "tabular-grid" / "summary.json").unlink()  # as a run stopped before its summary leaves it
    (records / "tabular-grid.json").unlink()
    third = run_script(SCRIPT, *args, timeout=300)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "tabular-grid: resuming: python dqn_tabular_q.py --resume" in third.stdout
    assert "ppo-cart: finished before" in third.stdout
    assert (out_dir / "tabular-grid" / "summary.json").exists()
    assert (out_dir / "ppo-cart" / "summary.json").stat().st_mtime_ns == stamps[out_dir / "ppo-cart" / "summary.json"]


def test_an_algorithms_second_recipe_or_budget_on_one_env_is_a_row_of_its_own():
    """The per-algorithm table pools an algorithm's envs, never two entries on one env as if two envs: td3 at 100k
    and 200k on HalfCheetah were one row of "6 seeds x 2 envs" (IQM 0.833) before, two rows now."""
    results = [types.SimpleNamespace(entry=types.SimpleNamespace(name=name, env=env)) for name, env in (
        ("td3-a", "Pendulum-v1"), ("td3-a-parallel", "Pendulum-v1"), ("td3-b", "Acrobot-v1"),
        ("td3-b-parallel", "Acrobot-v1"), ("td3-c", "CartPole-v1"))]
    assert [[r.entry.name for r in row] for row in table_rows(results)] == [
        ["td3-a", "td3-b", "td3-c"], ["td3-a-parallel", "td3-b-parallel"]]
    assert len(table_rows(results[::2])) == 1  # one entry per env: one row, as every suite but two has


def test_a_record_stands_for_its_run_directory(fabricated, tmp_path, capsys):
    """Run directories stay on the machine that made them; a record (config, summary, wall time, binned curve) is
    committed. With the run directories gone the report from the records is the same table, and the runner runs
    nothing that has a record."""
    out_dir, entries = fabricated
    records = tmp_path / "records"
    (out_dir / "ppo-cart" / MACHINE_FILE).write_text(json.dumps(runner_notes(entries[0])))
    for e in entries[:3]:
        write_record(e, str(out_dir / e.name), str(records))
    assert sorted(os.listdir(records)) == ["dqn-breakout.json", "ppo-breakout.json", "ppo-cart.json"]
    from_runs = tmp_path / "a" / "learning_fake.md"
    write_report("fake", entries, str(out_dir), str(from_runs))
    before = {e.name: read_result(e, str(out_dir)) for e in entries[:3]}

    gone = tmp_path / "elsewhere"  # a clean clone: no run directories
    from_records = tmp_path / "b" / "learning_fake.md"
    write_report("fake", entries, str(gone), str(from_records), records=str(records))
    text = from_records.read_text()
    assert "the records in" in text and "(ppo-cart, ppo-breakout, dqn-breakout)" in text
    for e in entries[:3]:
        assert table_row(text, e.name) == table_row(from_runs.read_text(), e.name)
        after = read_result(e, str(gone), str(records))
        assert after.extra == before[e.name].extra
        np.testing.assert_array_equal(after.curve[0], before[e.name].curve[0])
        np.testing.assert_array_equal(after.curve[1], before[e.name].curve[1])  # NaN where no episode ended
    assert text.split("## Per algorithm")[1] == from_runs.read_text().split("## Per algorithm")[1]
    assert report_path("fake", entries[:3], str(gone), str(records)).endswith("learning_fake.md")
    assert read_result(entries[3], str(gone), str(records)) is None

    # An entry with a record is finished: nothing runs (no script, no JAX probe), and nothing is rewritten.
    stamps = {p: p.stat().st_mtime_ns for p in records.iterdir()}
    assert run_entries(entries[:3], str(gone), str(records)) == []
    assert capsys.readouterr().out.count("not rerun") == 3 and stamps == {p: p.stat().st_mtime_ns for p in
                                                                           records.iterdir()}
    # A finished run directory without a record (its record deleted) is recorded, not rerun.
    (records / "ppo-cart.json").unlink()
    assert run_entries(entries[:1], str(out_dir), str(records)) == []
    assert "ppo-cart: recorded in" in capsys.readouterr().out and (records / "ppo-cart.json").exists()
    # A record made for other settings is refused before anything runs, as a run directory is.
    changed = dataclasses.replace(entries[1], total_timesteps=2000)
    with pytest.raises(SuiteError, match=r"ppo-breakout.json was made with total_timesteps 1000 \(suite: "
                       r"2000\): delete it, or use another --records"):
        run_entries((changed,), str(gone), str(records))
    (records / "dqn-breakout.json").write_text("{")
    with pytest.raises(SuiteError, match="dqn-breakout.json cannot be read"):
        read_result(entries[2], str(gone), str(records))


def test_a_partial_report_never_replaces_the_committed_table(fabricated, tmp_path, capsys):
    """--only (or any entry unfinished) writes the report beside the run directories; the committed
    benchmarks/results/learning_<suite>.md is the default only once every entry has finished."""
    out_dir, entries = fabricated
    committed = os.path.join(repository.ROOT, "benchmarks", "results", "learning_fake.md")
    assert report_path("fake", entries, str(out_dir)) == str(out_dir / "learning_fake.md")
    assert "3 of 4 entries have finished" in capsys.readouterr().out
    assert report_path("fake", entries[:3], str(out_dir)) == committed


def test_cli_only_leaves_the_committed_report_alone(run_script, fabricated, tmp_path):
    out_dir, entries = fabricated
    suite = write_suite(tmp_path / "suite.json", *entries)
    committed = os.path.join(repository.ROOT, "benchmarks", "results", "learning_tiny.md")
    assert not os.path.exists(committed)
    result = run_script(SCRIPT, "--suite-file", suite, "--out-dir", str(out_dir), "--only", "ppo-cart",
                        "--report-only", timeout=300)
    assert result.returncode == 0, result.stderr
    assert not os.path.exists(committed)
    assert "| ppo-cart |" in (out_dir / "learning_tiny.md").read_text()


POSITIVE = "must be a positive integer up to 2,147,483,647, got"


@pytest.mark.parametrize("flags, message", [
    (dict(random_scores=True, random_episodes=-5), f"error: --random-episodes {POSITIVE} -5"),
    (dict(random_scores=True, random_episodes=0), f"error: --random-episodes {POSITIVE} 0"),
    (dict(random_scores=True, random_episodes=2**63), f"error: --random-episodes {POSITIVE} {2**63}"),
    (dict(out_dir="a-file/runs"), "error: --out-dir a-file/runs: {tmp}/a-file is a file, not a directory; choose "
                                  "another --out-dir"),
    (dict(records="a-file", record=True), "error: --records a-file: {tmp}/a-file is a file, not a directory; "
                                          "choose another --records"),
    (dict(results="."), "error: --results . is a folder: name the report's file (the PNGs go beside it)"),
    (dict(out_dir=""), 'error: --out-dir "": a path must be given, with no control character'),
    (dict(out_dir="runs\nx"), 'error: --out-dir "runs\\nx": a path must be given, with no control character'),
    (dict(verify="ppo-CartPole-v1", verify_seeds=0), f"error: --verify-seeds {POSITIVE} 0"),
    (dict(verify="ppo-CartPole-v1", verify_seeds=-3), f"error: --verify-seeds {POSITIVE} -3"),
    (dict(verify="ppo-CartPole-v1", verify_seeds=10**30), f"error: --verify-seeds {POSITIVE} {10**30}"),
    (dict(verify_seeds=2), "error: --verify-seeds is the seed count of --verify ENTRY: give --verify too"),
    (dict(verify=""), "error: --verify : name one entry of the suite"),  # it trained every entry's record
    (dict(verify="ppo-CartPole-v1,dqn-CartPole-v1"), "error: --verify ppo-CartPole-v1,dqn-CartPole-v1: name one "
                                                     "entry of the suite"),
    (dict(suite="x\ny"), 'error: --suite "x\\ny": unknown; the suites are full, quick, minatar, memory, '
                         "offpolicy, halfcheetah, mujoco (or --suite-file)"),
    (dict(only=("a\x1b[31m",)), 'error: --only: unknown entry "a\\u001b[31m"; the suite has: '),
    (dict(suite_file="/dev/zero"), "error: --suite-file /dev/zero: not a regular file"),
])
def test_bad_arguments_exit_2_with_one_line_before_anything_runs(flags, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    no_script_runs(monkeypatch)
    assert learning.main(learning.Args(**flags)) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(message.format(tmp=tmp_path)) and not captured.out, line
    assert sorted(os.listdir(tmp_path)) == ["a-file"]


@pytest.mark.parametrize("change, wrong", [
    (dict(name="a\nb"), 'entry name "a\\nb" must be one directory name'),
    (dict(script="../../evil.py"), 'entry ppo-cart: script "../../evil.py" is not ppo.py, the script of algo ppo'),
    (dict(total_timesteps="1000"), "entry 'ppo-cart': total_timesteps is \"1000\", not int"),
    (dict(sampled_episodes=True), "entry 'ppo-cart': sampled_episodes is true, not int"),
    (dict(flags="--lr"), "entry 'ppo-cart': flags is not a list"),
    (dict(flags=["--out-dir", "elsewhere"]), "entry ppo-cart: its flags give --out-dir, which the runner sets from "
                                             "the entry (--env, --total-timesteps, --num-seeds, --seed, and the run "
                                             "in <--out-dir>/ppo-cart) or which would not train that one run: drop it"),
    (dict(flags=["--num-envs", "8", "--run_name=x"]), "entry ppo-cart: its flags give --run_name, which the runner"),
    (dict(flags=["--sweep", "learning_rate=1e-3,3e-4"]), "entry ppo-cart: its flags give --sweep, which the runner"),
    (dict(flags=["--resume", "runs/x"]), "entry ppo-cart: its flags give --resume, which the runner"),
    ("suite named ../..", 'suite name "../.." must be one directory name'),
    ("a FIFO", "not a regular file"),
    ("nested too deeply", "nested too deeply"),
])
def test_a_suite_file_that_is_not_a_suite_exits_2_with_one_line(change, wrong, fabricated, tmp_path, capsys,
                                                                  monkeypatch):
    """A suite file is read as data: a field of another type, a script other than the algo's (a suite file would run
    any program), a name that is no one directory name (a suite's name made its out dir: "../.." wrote beside the
    repository), flags that place the run elsewhere or make it no one new run (`--out-dir X` trained it in X), a FIFO
    or nesting no parser takes are one line, before anything runs or is written."""
    out_dir, entries = fabricated
    path = tmp_path / "suite.json"
    write_suite(path, entries[0])
    if change == "a FIFO":
        path.unlink()
        os.mkfifo(path)
    elif change == "nested too deeply":
        path.write_text("[" * 100_000)
    else:
        suite = json.loads(path.read_text())
        suite.update(name="../..") if isinstance(change, str) else suite["entries"][0].update(change)
        path.write_text(json.dumps(suite))
    no_script_runs(monkeypatch)
    monkeypatch.chdir(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    args = learning.Args(suite_file=str(path), report_only=change == "suite named ../..")
    assert learning.main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and wrong in line, line
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before and not (tmp_path.parent / "runs").exists()


def of_the_wrong_shape(name, text) -> str:
    """A file the runner reads back, `text` as written, given a value of another shape."""
    if name == "metrics.csv":
        return text.replace("episodes", "episode")
    if name == "record":
        return json.dumps({**json.loads(text), "curve": {"env_steps": [], "episode_return": []}})
    return json.dumps({"summary.json": {"eval_return": "high"}, "config.json": [],
                       MACHINE_FILE: {"sampled_eval": [], "machine": {"gpus": [{"driver": 5}]}}}[name])


@pytest.mark.parametrize("name", ["summary.json", MACHINE_FILE, "metrics.csv", "config.json", "record"])
@pytest.mark.parametrize("damage", ["a FIFO", "a link to /dev/zero", "nested too deeply", "of the wrong shape"])
def test_a_file_the_runner_reads_back_that_is_not_its_own_exits_2_with_one_line(name, damage, fabricated, tmp_path,
                                                                                  capsys, monkeypatch):
    """Every file the runner and the report read back (a run directory's summary.json, the runner's notes,
    metrics.csv and config.json, an entry's record): a FIFO (it waited forever), a device (read without end), JSON
    nested too deeply for the parser, a value of another shape (each was a traceback) is one line naming the file,
    and nothing is run or written."""
    out_dir, entries = fabricated
    run_dir, records = out_dir / entries[0].name, tmp_path / "records"
    (run_dir / MACHINE_FILE).write_text(json.dumps(runner_notes(entries[0])))
    if name == "record":
        write_record(entries[0], str(run_dir), str(records))
        shutil.rmtree(run_dir)
    path = records / "ppo-cart.json" if name == "record" else run_dir / name
    text = path.read_text()
    path.unlink()
    if damage == "a FIFO":
        os.mkfifo(path)
    elif damage == "a link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text("[" * 100_000 if damage == "nested too deeply" else of_the_wrong_shape(name, text))
    suite = write_suite(tmp_path / "tiny.json", entries[0])
    no_script_runs(monkeypatch)
    before = sorted(tmp_path.rglob("*"))
    args = learning.Args(suite_file=suite, out_dir=str(out_dir), records=str(records),
                         results=str(tmp_path / "learning.md"))
    assert learning.main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {path} cannot be read ("), line
    assert sorted(tmp_path.rglob("*")) == before


def test_the_runner_knows_the_optional_suites_as_envs_does():
    """learning.py's own table of suites (it must not import envs, which starts JAX) matches envs' adapters."""
    from scanrl import envs

    modules = {name: importlib.import_module(f"scanrl.envs.{name}") for name in envs.SUITES}
    covered = set()
    for prefix, (_, suite) in SUITE_PACKAGES.items():
        (owner,) = [name for name, module in modules.items() if module.owns(prefix + "x")]
        assert modules[owner].INSTALL_HINT == f"pip install -r requirements-{suite}.txt"
        covered.add(owner)
    assert covered == set(envs.SUITES)


def test_committed_files_are_written_only_when_asked_and_name_no_machine_path(fabricated, tmp_path, monkeypatch):
    """benchmarks/results/ (records and report) is written by a full run or with --record only: a partial record
    would stand for its entry on every machine. --only and a scratch --out-dir write their report beside the run
    directories and no record. What is committed names paths relative to the repository, never a machine's own."""
    out_dir, entries = fabricated
    for path in glob.glob(os.path.join(repository.ROOT, "benchmarks", "results", "records", "*", "*.json")):
        text = open(path).read()  # the committed records: no absolute path, and readable as they are
        assert '"/' not in text, path
        suite, name = path.split(os.sep)[-2:]
        (e,) = [e for e in SUITES[suite] if f"{e.name}.json" == name]
        assert read_record(e, os.path.dirname(path))["config"]["out_dir"] == f"runs/learning/{suite}"

    repo = tmp_path / "repo"  # the runner's repository here: the real benchmarks/results/ is never touched
    monkeypatch.setattr(repository, "ROOT", str(repo))
    monkeypatch.setattr(plots, "CURVE_REPS", 50)
    runs = repo / "runs" / "learning" / "tiny"
    shutil.copytree(out_dir, runs)
    for e in entries[:3]:  # as the scripts write config.json: absolute paths
        config = json.loads((runs / e.name / "config.json").read_text())
        config.update(out_dir=str(runs), resume=str(runs / e.name), gif=None)
        (runs / e.name / "config.json").write_text(json.dumps(config))
        (runs / e.name / MACHINE_FILE).write_text(json.dumps(runner_notes(e)))
    suite = write_suite(tmp_path / "tiny.json", *entries[:3])
    results = repo / "benchmarks" / "results"

    assert learning.main(learning.Args(suite_file=suite, only=("ppo-cart",))) == 0
    assert not results.exists() and "| ppo-cart |" in (runs / "learning_tiny.md").read_text()
    assert learning.main(learning.Args(suite_file=suite, out_dir=str(out_dir))) == 0  # every entry finished
    assert not results.exists() and "| dqn-breakout |" in (out_dir / "learning_tiny.md").read_text()

    assert learning.main(learning.Args(suite_file=suite, only=("ppo-cart",), record=True)) == 0
    assert os.listdir(results / "records" / "tiny") == ["ppo-cart.json"]
    assert learning.main(learning.Args(suite_file=suite)) == 0  # a full run records every entry
    assert sorted(os.listdir(results / "records" / "tiny")) == ["dqn-breakout.json", "ppo-breakout.json",
                                                                "ppo-cart.json"]
    record = json.loads((results / "records" / "tiny" / "ppo-cart.json").read_text())
    assert record["config"]["out_dir"] == "runs/learning/tiny"
    assert record["config"]["resume"] == "runs/learning/tiny/ppo-cart"
    assert "from the run directories in `runs/learning/tiny`" in (results / "learning_tiny.md").read_text()
    # --record with run directories outside the repository: the committed report does not name their folder
    assert learning.main(learning.Args(suite_file=suite, out_dir=str(out_dir), record=True, report_only=True)) == 0
    for path in results.rglob("*"):
        if path.is_file():
            assert str(tmp_path).encode() not in path.read_bytes(), path


def test_the_runner_writes_no_file_through_a_planted_link(tmp_path, monkeypatch):
    """Every file the runner writes (learning_suite.json, a record, the report and its PNGs) goes through
    harness.files.replaced: a link planted at its name, or at the temporary name it once wrote through, is never
    followed, and the file it points to is left alone."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    e = entry("ppo-cart", "ppo", "ppo.py", "CartPole-v1", 1000, 2, sampled_episodes=3)
    out_dir, records, report = tmp_path / "runs", tmp_path / "records", tmp_path / "report" / "learning_tiny.md"
    run_dir = fake_run(out_dir, e, [1.0, 2.0], [1.0, 2.0], curve_rows(2))
    summary = (run_dir / "summary.json").read_text()
    (run_dir / "summary.json").unlink()  # a run yet to finish: the runner runs it, then writes learning_suite.json
    records.mkdir()
    report.parent.mkdir()
    machine_file = run_dir / MACHINE_FILE
    written = [machine_file, records / "ppo-cart.json", report, report.parent / "learning_tiny_ppo_curves.png",
               report.parent / "learning_tiny_ppo_profile.png"]
    for link in [machine_file, run_dir / f"{MACHINE_FILE}.tmp", records / "ppo-cart.json.tmp", *written[2:]]:
        link.symlink_to(victim)

    class Script:  # the script's run: it finishes and exits 0
        def __init__(self, cmd, **kwargs):
            (run_dir / "summary.json").write_text(summary)

        def wait(self, timeout=None):
            return 0

    def evaluated(cmd, **kwargs):  # the script's --eval --eval-sampled
        return subprocess.CompletedProcess(cmd, 0, "seed 0 (index 0): mean 1.5\nseed 1 (index 1): mean 2.5\n", "")

    monkeypatch.setattr(runner, "subprocess", types.SimpleNamespace(Popen=Script, run=evaluated,
                                                                    TimeoutExpired=subprocess.TimeoutExpired))
    monkeypatch.setattr(runner, "machine", lambda: {"cpu": "a CPU", "cores": 2, "backend": "cpu",
                                                      "devices": ["cpu"], "jax": "0", "python": "3"})
    monkeypatch.setattr(plots, "CURVE_REPS", 50)
    assert run_entries((e,), str(out_dir), str(records)) == []
    write_report("tiny", (e,), str(out_dir), str(report), records=str(records))
    assert victim.read_text() == "keep me\n"
    for path in written:
        assert path.is_file() and not path.is_symlink(), path
    assert json.loads(machine_file.read_text())["sampled_eval"] == {"episodes": 3, "per_seed": [1.5, 2.5]}
    run = json.loads((records / "ppo-cart.json").read_text())["run"]
    assert run["machine"]["cpu"] == "a CPU"
    # The runner writes where the numbers come from with every run it finishes (test_a_record_says_where_...).
    assert run["seeds"] == [0, 1] and set(run) >= {"commit", "dirty", "versions"}
    assert run["command"] == ("python ppo.py --env CartPole-v1 --total-timesteps 1000 --num-seeds 2 --seed 0 "
                              "--out-dir '<outside the repository>' --run-name ppo-cart")


@pytest.mark.parametrize("mangle, wrong", [
    (lambda text: text[:len(text) // 2], "line 1 column"),
    (lambda text: "[" + text + "]", "it holds a list, not an object"),
    (lambda text: json.dumps({**json.loads(text), "config": []}), '"config" is a list, not an object'),
    (lambda text: json.dumps({"cfg": {}, "sum": {}}), 'it has no "config"'),
    (lambda text: json.dumps({**json.loads(text), "summary": {"num_seeds": 5}}), '"summary" has no "eval_return"'),
    (lambda text: json.dumps({**json.loads(text), "summary": {**json.loads(text)["summary"], "eval_return": "high"}}),
     '"summary.eval_return" is a string, not a list of float32 numbers'),
    (lambda text: json.dumps({**json.loads(text), "run": {"machine": {"cores": 2}}}), '"run.machine" has no "cpu"'),
    (lambda text: json.dumps({**json.loads(text), "run": {"commit": 1234}}), '"run.commit" is a number, not a string'),
    (lambda text: json.dumps({**json.loads(text), "curve": {"env_steps": [1, 2], "episode_return": [[1.0]]}}),
     '"curve.episode_return" is not a list of rows of 2 numbers'),
])
def test_a_record_of_the_wrong_shape_exits_2_with_one_line(fabricated, tmp_path, capsys, mangle, wrong):
    """A hand-edited, truncated or foreign record is refused with one line naming it and what is wrong (it stands
    for a finished run: skipping it would rerun the entry, or leave it out of the table, without a word)."""
    out_dir, entries = fabricated
    records = tmp_path / "records"
    write_record(entries[0], str(out_dir / entries[0].name), str(records))
    path = records / "ppo-cart.json"
    path.write_text(mangle(path.read_text()))
    suite = write_suite(tmp_path / "tiny.json", entries[0])
    for report_only in (False, True):
        args = learning.Args(suite_file=suite, out_dir=str(tmp_path / "gone"), records=str(records),
                             results=str(tmp_path / "learning.md"), report_only=report_only)
        assert learning.main(args) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {path} cannot be read (") and wrong in line, line
        assert line.endswith("): delete it to run ppo-cart again")
    assert not (tmp_path / "learning.md").exists()


def test_a_record_says_where_its_numbers_come_from(fabricated, tmp_path):
    """The runner takes the commit (and whether the tracked files differed from it), the script's command as a user
    types it (no folder of one machine), the library versions and the seeds as the run starts; the report shows them
    per row with a link to the record, and "not recorded" for a record made before these were kept."""
    out_dir, entries = fabricated
    e = entries[0]
    origin = provenance(command(e, str(repository.ROOT) + "/runs/learning/fake", str(tmp_path / "none")))
    assert re.fullmatch(r"[0-9a-f]{40}", origin["commit"]) and isinstance(origin["dirty"], bool)
    assert origin["command"] == ("python ppo.py --env CartPole-v1 --total-timesteps 1000 --num-seeds 5 --seed 0 "
                                 "--out-dir runs/learning/fake --run-name ppo-cart")
    assert origin["versions"]["jax"] == importlib.metadata.version("jax")
    outside = provenance(command(e, str(tmp_path), str(tmp_path / "none")))["command"]
    assert "--out-dir '<outside the repository>'" in outside and str(tmp_path) not in outside

    records = tmp_path / "records"
    machine = {"cpu": "a CPU", "cores": 2, "backend": "gpu", "devices": ["H100"], "jax": "0", "python": "3",
               "gpus": [{"name": "H100", "driver": "550.1"}]}
    (out_dir / e.name / MACHINE_FILE).write_text(json.dumps({"machine": machine, **origin, "dirty": True,
                                                             "seeds": [0, 1, 2, 3, 4], "wall_s": 3.0}))
    write_record(e, str(out_dir / e.name), str(records))
    write_record(entries[1], str(out_dir / entries[1].name), str(records))  # an old record: no provenance
    report = tmp_path / "report" / "learning_fake.md"
    write_report("fake", entries, str(tmp_path / "gone"), str(report), records=str(records))
    text = report.read_text()
    assert text.count("the bootstrap resamples seeds, the unit of replication") == 1
    new, old = table_row(text.split("## Where each row")[1], e.name), \
        table_row(text.split("## Where each row")[1], entries[1].name)
    assert new[1] == f"[ppo-cart.json]({os.path.relpath(records, report.parent)}/ppo-cart.json)"
    assert new[2] == f"`{origin['commit'][:12]}` (dirty)" and new[3] == f"`{origin['command']}`"
    assert new[4] == "a CPU (2 cores), 1 x H100 (driver 550.1), jax 0 (gpu)" and "jax " in new[5]
    assert old[2:6] == ["not recorded"] * 4
    assert table_row(text, entries[1].name)[2] == "4 (0-3)"


@pytest.mark.slow
def test_verify_retrains_a_committed_entry(tmp_path, capfd):
    """The cheapest committed entry (tabular Q on GridWorld) trained again from its record's command, through the
    script's command line, on 2 seeds: one line, inside the record's interval, and no committed file touched."""
    results = os.path.join(repository.ROOT, "benchmarks", "results")
    stamps = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(results, "**"), recursive=True)}
    args = learning.Args(suite="quick", verify="tabular-GridWorld-v0", verify_seeds=2, out_dir=str(tmp_path / "runs"))
    assert learning.main(args) == 0
    out = capfd.readouterr().out
    assert "verify tabular-GridWorld-v0: the record's command, 2 seeds: python dqn_tabular_q.py --env " \
           "GridWorld-v0" in out
    (line,) = [line for line in out.splitlines() if line.startswith("verify tabular-GridWorld-v0: PASS")]
    assert "eval IQM 1 over seeds 0, 1 is inside the record's 95% interval [1, 1]" in line
    assert "against the record's" in line and "seeds 0-9" in line
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "config.json").read_text())["num_seeds"] == 2
    assert stamps == {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(results, "**"), recursive=True)}


def test_verify_without_a_record_exits_2_with_one_line(tmp_path, capsys):
    args = learning.Args(suite="quick", verify="ppo-CartPole-v1", records=str(tmp_path), out_dir=str(tmp_path))
    assert learning.main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --verify ppo-CartPole-v1: no record at ") and "nothing to check against" in line


def no_script_runs(monkeypatch):
    """Fails the test if the runner or a verification starts any process (a script, the JAX probe)."""
    def refused(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(runner, "subprocess", types.SimpleNamespace(Popen=refused, run=refused))
    monkeypatch.setattr(verify, "run_passing_signals", refused)


def test_a_link_at_an_entrys_run_directory_is_refused(fabricated, tmp_path, monkeypatch, capsys):
    """A script's --resume follows a link by design: the suite never resumes (or records) a run through a link it
    did not make, where it would train in the folder it points to. One line naming it, nothing run or written."""
    out_dir, entries = fabricated
    elsewhere = tmp_path / "elsewhere"  # a stopped run of the same settings, outside the suite's folder
    shutil.move(out_dir / "ppo-cart", elsewhere)
    (elsewhere / "summary.json").unlink()
    before = sorted(os.listdir(elsewhere))
    (out_dir / "ppo-cart").symlink_to(elsewhere)
    no_script_runs(monkeypatch)
    suite = write_suite(tmp_path / "tiny.json", entries[0])
    args = learning.Args(suite_file=suite, out_dir=str(out_dir), results=str(tmp_path / "learning.md"))
    assert learning.main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"error: {out_dir}/ppo-cart is a link (to {elsewhere}), not a run directory the suite made: it "
                    "never resumes or records a run through a link; remove the link (what it points to is left "
                    "alone), or choose another --out-dir")
    assert sorted(os.listdir(elsewhere)) == before and not (tmp_path / "learning.md").exists()


def test_a_finished_run_without_the_runners_notes_is_not_recorded(fabricated, tmp_path, capsys):
    """A run that finished with no runner waiting for it (the runner stopped first) has no commit, command or machine:
    it is never recorded without them (one line; the entry fails), and no record is written."""
    out_dir, entries = fabricated
    records = tmp_path / "records"
    assert run_entries(entries[:1], str(out_dir), str(records)) == ["ppo-cart"]
    assert capsys.readouterr().out.splitlines()[-1] == (
        f'[1/1] ppo-cart: not recorded: {out_dir}/ppo-cart/{MACHINE_FILE} has no "commit" or "command" or "machine" '
        f"(the runner writes them as it runs the entry); delete {out_dir}/ppo-cart to run ppo-cart again")
    assert not records.exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_the_runner_is_passed_on_to_its_script(signum, tmp_path, monkeypatch, capfd):
    """SIGINT or SIGTERM sent to the runner alone reaches the script it runs, once (the script runs in a process
    group of its own: a Ctrl-C at the terminal reaches it through the runner only); SIGHUP (the terminal closed: it
    killed the runner alone, and the script trained on as an orphan) reaches it as SIGTERM, on which the scripts stop
    with a checkpoint. The runner waits for it to stop, then exits 1 with one line, and writes nothing of the run."""
    script = tmp_path / "script.py"  # stops on the signal, as the scripts do where a chunk ends, and says how to go on
    script.write_text(
        "import os, signal, sys, time\n"
        "run_dir = os.path.join(sys.argv[sys.argv.index('--out-dir') + 1], sys.argv[-1])\n"
        "def stop(signum, frame):\n"
        "    with open(os.path.join(run_dir, 'stopped'), 'a') as f:\n"
        "        f.write(signal.Signals(signum).name + '\\n')\n"
        "    print(f'{signal.Signals(signum).name}: stopped; continue with --resume', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "os.makedirs(run_dir)\n"
        "with open(os.path.join(run_dir, 'started'), 'w') as f:\n"
        "    f.write(str(os.getpgid(0)))\n"
        "time.sleep(60)\n")
    e = entry("ppo-cart", "ppo", "ppo.py", "CartPole-v1", 1000, 2)
    out_dir, results = tmp_path / "runs", tmp_path / "learning.md"
    monkeypatch.setattr(runner, "machine", lambda: {"cpu": "a CPU", "cores": 2, "backend": "cpu", "jax": "0"})
    monkeypatch.setattr(runner, "command", lambda e, out_dir, run_dir, fresh=False: [  # a suite runs only its
        sys.executable, str(script), "--out-dir", out_dir, e.name])                    # scripts

    def signal_the_runner():
        started = out_dir / e.name / "started"
        for _ in range(600):
            if started.exists() and started.read_text():
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signum)  # to this process alone: the runner

    threading.Thread(target=signal_the_runner, daemon=True).start()
    args = learning.Args(suite_file=write_suite(tmp_path / "tiny.json", e), out_dir=str(out_dir), results=str(results))
    assert learning.main(args) == 1
    captured = capfd.readouterr()
    name = signum.name
    assert f"[1/1] ppo-cart: {name} passed on to the script: it stops where its chunk ends" in captured.out
    assert captured.err.strip().splitlines()[-1] == (
        f"error: {name}: ppo-cart stopped (exit 1) with the checkpoints it wrote; run the same command again to "
        "resume it (finished entries are kept); the report was not rewritten")
    assert (out_dir / e.name / "stopped").read_text() == ("SIGTERM" if signum == signal.SIGHUP else name) + "\n"
    assert int((out_dir / e.name / "started").read_text()) != os.getpgid(0)
    assert not (out_dir / e.name / MACHINE_FILE).exists() and not results.exists()


STOPS_ON_SIGTERM = (  # a script that says it started, then waits; on SIGTERM it notes it and exits 143
    "import os, signal, sys, time\n"
    "def stop(signum, frame):\n"
    "    open(sys.argv[1] + '.stopped', 'w').write(signal.Signals(signum).name)\n"
    "    sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "time.sleep(60)\n")


def test_a_script_stops_when_its_runner_dies(tmp_path):
    """SIGKILL to the runner (nothing can pass that one on) left its script training as an orphan, and the next run
    of the suite refused to record it: the script gets SIGTERM when its runner dies, however it dies, and stops (the
    scripts stop with a checkpoint there, which the next run resumes)."""
    if sys.platform != "linux":
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    script, started = tmp_path / "script.py", tmp_path / "started"
    script.write_text(STOPS_ON_SIGTERM)
    cmd = [sys.executable, str(script), str(started)]
    runs = f"from benchmarks.suite.runner import run_passing_signals; run_passing_signals({cmd!r}, 'x')"
    runner_process = subprocess.Popen([sys.executable, "-c", runs], cwd=repository.ROOT)
    try:
        for _ in range(600):
            if started.exists() and started.read_text():
                break
            time.sleep(0.05)
        pid = int(started.read_text())
    finally:
        runner_process.kill()
        runner_process.wait()
    for _ in range(200):
        if (tmp_path / "started.stopped").exists():
            break
        time.sleep(0.05)
    assert (tmp_path / "started.stopped").read_text() == "SIGTERM"
    for _ in range(200):  # gone, not training on
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the script outlived its runner")


@pytest.mark.parametrize("code, advice", [
    (2, "failed (exit 2); the script refused the entry (the line above), as it would again: fix the entry"),
    (0, "failed (exit 0); it wrote no {run_dir}/summary.json: fix the entry"),
    (1, "failed (exit 1); run this script again to resume it")])
def test_a_failed_entry_is_advised_to_run_again_only_where_a_rerun_resumes_it(code, advice, tmp_path, monkeypatch,
                                                                             capsys):
    """The runner advised "run this script again to resume it" after the script refused the entry (exit 2), which a
    rerun repeats, and after a run that exited 0 without its summary: it says so where it cannot help."""
    script = tmp_path / "script.py"
    script.write_text(f"import sys; sys.exit({code})\n")
    e = entry("ppo-cart", "ppo", "ppo.py", "CartPole-v1", 1000, 2)
    monkeypatch.setattr(runner, "machine", lambda: {"cpu": "a CPU", "cores": 2, "backend": "cpu", "jax": "0"})
    monkeypatch.setattr(runner, "command", lambda e, out_dir, run_dir, fresh=False: [sys.executable, str(script)])
    assert run_entries((e,), str(tmp_path / "runs")) == ["ppo-cart"]
    assert capsys.readouterr().out.splitlines()[-1] == "[1/1] ppo-cart: " + advice.format(
        run_dir=tmp_path / "runs" / "ppo-cart")


def verify_case(fabricated, tmp_path, command=None, **changes):
    """A suite file and a records folder holding ppo-cart's record, made with `command` (else runner_notes'), its
    run's notes changed by `changes` ({"summary": {...}} changes its summary); -> (suite file, records, record)."""
    out_dir, entries = fabricated
    e, run_dir, records = entries[0], out_dir / entries[0].name, tmp_path / "records"
    config = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**config, "num_envs": 8, "anneal_lr": False,
                                                     "learning_rate": 0.0005, "out_dir": "runs/learning/fake",
                                                     "sweep": []}))
    notes = runner_notes(e)
    notes["command"] = notes["command"] if command is None else command
    (run_dir / MACHINE_FILE).write_text(json.dumps(notes))
    write_record(e, str(run_dir), str(records))  # then changed: a run's files of the wrong shape are not recorded
    record = json.loads((records / "ppo-cart.json").read_text())
    record["summary"].update(changes.pop("summary", {}))
    record["config"].update(changes.pop("config", {}))
    record["run"].update(changes)
    (records / "ppo-cart.json").write_text(json.dumps(record))
    return write_suite(tmp_path / "tiny.json", e), records, records / "ppo-cart.json"


# ppo-cart's command as the runner records it (runner_notes')
PPO_CART = ("python ppo.py --env CartPole-v1 --total-timesteps 1000 --num-seeds 5 --seed 0 --out-dir "
            "runs/learning/fake --run-name ppo-cart")


def test_verify_runs_the_entrys_own_script_with_the_records_flags(fabricated, tmp_path, monkeypatch, capsys):
    """The record's command is read, never run as written: the entry's script, run by this Python, with its flags
    (--no-x booleans, --x=v), --num-seeds, --out-dir and --run-name set where the command had them."""
    flags = " --num-envs 8 --no-anneal-lr --learning-rate=5e-4"
    suite, records, _ = verify_case(fabricated, tmp_path, PPO_CART + flags)
    ran = []

    def trained(cmd, head):
        ran.append(cmd)
        run_dir = tmp_path / "verify" / cmd[cmd.index("--run-name") + 1]
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(json.dumps({"eval_return": [250.0, 260.0], "seeds": [0, 1]}))
        return 0, None

    monkeypatch.setattr(verify, "run_passing_signals", trained)
    args = learning.Args(suite_file=suite, verify="ppo-cart", verify_seeds=2, records=str(records),
                         out_dir=str(tmp_path / "verify"))
    assert learning.main(args) == 0
    ((python, *words),) = ran
    run_name = words[words.index("--run-name") + 1]
    assert python == sys.executable and run_name.startswith("ppo-cart-")
    assert words == ["ppo.py", "--env", "CartPole-v1", "--total-timesteps", "1000", "--num-seeds", "2", "--seed", "0",
                     "--out-dir", str(tmp_path / "verify"), "--run-name", run_name, "--num-envs", "8",
                     "--no-anneal-lr", "--learning-rate", "5e-4"]
    assert "verify ppo-cart: PASS: eval IQM 255 over seeds 0, 1 is inside" in capsys.readouterr().out


REFUSED_COMMANDS = [
    ('python -c "import os; os.system(\'touch pwned\')"', "it does not run ppo.py but python -c;"),
    ("python dqn_tabular_q.py" + PPO_CART.removeprefix("python ppo.py"), "it does not run ppo.py but python dqn_"),
    ("bash ppo.py" + PPO_CART.removeprefix("python ppo.py"), "it does not run ppo.py but bash ppo.py;"),
    (PPO_CART.replace("--env", "-c x --env"), "'-c' is not a flag"),
    (PPO_CART + " -c x", "--run-name takes one value, got ppo-cart -c x"),
    (PPO_CART + " --bogus 1", "--bogus is not a flag of the script"),
    (PPO_CART + " --num-envs", "--num-envs has no value"),
    (PPO_CART + " --no-anneal-lr yes", "--no-anneal-lr takes no value, got yes"),
    (PPO_CART + " --seed 1", "--seed is given twice"),
    (PPO_CART.replace("CartPole-v1", "'CartPole-v1;touch pwned'"), "it gives --env 'CartPole-v1;touch pwned': a "
                                                                    "space, quote or shell metacharacter"),
    (PPO_CART.replace("CartPole-v1", "evil.py:env"), "it gives --env evil.py:env, its config 'CartPole-v1': the "
                                                     "command did not make this record"),
    (PPO_CART + " --gamma 0.5", "it gives --gamma 0.5, a setting its config does not hold"),
    (PPO_CART + " --resume runs/learning/fake/ppo-cart", "it gives --resume, which a verification never takes"),
    (PPO_CART + " --track", "it gives --track, which a verification never takes"),
    (PPO_CART + " --num-envs '8", "No closing quotation"),
    (PPO_CART.replace(" --run-name ppo-cart", ""), "it has no --run-name, which every command the runner records"),
]


@pytest.mark.parametrize("command, wrong", REFUSED_COMMANDS)
def test_verify_refuses_a_command_other_than_the_entrys_script(fabricated, tmp_path, monkeypatch, capsys, command,
                                                                 wrong):
    """Records are committed JSON and CI runs --verify: another program, `-c`, an unknown flag, a value the record's
    config does not hold, a shell metacharacter or a flag that would not train a new run is refused before anything
    runs, in one line naming the record."""
    suite, records, path = verify_case(fabricated, tmp_path, command)
    no_script_runs(monkeypatch)
    args = learning.Args(suite_file=suite, verify="ppo-cart", records=str(records), out_dir=str(tmp_path / "v"))
    assert learning.main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {path}: its command is refused, nothing was run (") and wrong in line, line
    assert line.endswith("): delete the record, or fix its command") and not (tmp_path / "v").exists()


@pytest.mark.parametrize("changes, wrong", [
    (dict(summary={"eval_return": [None] * 5}), "no seed has an eval return, so the record has no interval to check "
                                                "against: delete it to run ppo-cart again"),
    (dict(wall_s="20 s"), 'cannot be read ("run.wall_s" is a string, not a number)'),
    (dict(wall_s=float("inf")), 'cannot be read ("run.wall_s" is Infinity, not a number)'),
    (dict(summary={"eval_return": [1.0, float("nan"), 2.0, 3.0, 4.0]}),
     'cannot be read ("summary.eval_return" holds NaN, not only float32 numbers (or null))'),
    (dict(summary={"num_seeds": 0}), 'cannot be read ("summary.num_seeds" is a number, not a positive integer'),
    (dict(summary={"num_seeds": 10**30}), 'cannot be read ("summary.num_seeds" is a number, not a positive integer '
                                          '(up to 2**31 - 1))'),
    (dict(summary={"eval_return": [1.0, 1e308, 2.0, 3.0, 4.0]}),
     'cannot be read ("summary.eval_return" holds a number, not only float32 numbers (or null))'),
    (dict(config={"sweep": ["learning_rate=1e-3,5e-4"]}),
     "its run is a sweep (--sweep learning_rate=1e-3,5e-4), whose summary ranks points: --verify checks one run's "
     "eval return; nothing was run"),
    (dict(machine={"cpu": "a CPU", "cores": "two", "jax": "0"}),
     'cannot be read ("run.machine.cores" is a string, not a positive integer)'),
])
def test_verify_checks_every_record_field_before_training(fabricated, tmp_path, monkeypatch, capsys, changes, wrong):
    """A damaged record (no finite eval return, hence no interval; a string or non-finite number; a count of 0 or
    past what a script takes; a return past float32's, which overflowed the IQM) is refused in one line naming it
    before anything trains, not with a traceback after training the entry again; so is a sweep's record (its points
    trained, then a KeyError: a sweep's summary holds no eval return of one run)."""
    suite, records, path = verify_case(fabricated, tmp_path, **changes)
    no_script_runs(monkeypatch)
    args = learning.Args(suite_file=suite, verify="ppo-cart", records=str(records), out_dir=str(tmp_path / "v"))
    assert learning.main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {path}") and wrong in line, line
    assert not (tmp_path / "v").exists()


def test_a_records_text_stays_in_its_cell_of_the_committed_report():
    """A record's text with a line break or '|' wrote lines of its own into the committed markdown report."""
    from benchmarks.suite.report import provenance_cells

    cells = provenance_cells({"commit": "abc\n# injected", "command": "python ppo.py | tee",
                              "machine": {"cpu": "a\nCPU", "cores": 2, "jax": "0"}, "versions": {"jax\n": "0"}})
    assert not any("\n" in cell for cell in cells) and cells[1] == "`python ppo.py \\| tee`"


@pytest.mark.slow  # three runs of the study, about 4 s each in the warm Python
def test_the_replay_study_refuses_what_is_not_a_finished_run_on_a_mujoco_task_in_one_line(finished_runs, tmp_path):
    """benchmarks/studies/replay_on_gymnasium.py (issue 87: 7-32-line tracebacks): a missing run dir, another
    script's run, a run on an env Gymnasium's MuJoCo has no task for: one line, exit 2, nothing written."""
    from conftest import ROOT, run_warm

    study = ROOT / "benchmarks" / "studies" / "replay_on_gymnasium.py"
    run = finished_runs["ppo"]
    for script, run_dir, message in (
            ("td3.py", tmp_path / "nothing", "error: run_dir: no run directory"),
            ("td3.py", run, "is a run of ppo (ppo.py), not of td3 (td3.py); use ppo.py"),
            ("ppo.py", run, "the run trained on CartPole-v1, which is not one of Gymnasium's MuJoCo tasks")):
        done = run_warm([sys.executable, study, ROOT / script, run_dir, "--out", tmp_path / "out"], tmp_path,
                        dict(os.environ), 300)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line, line
    assert not (tmp_path / "out").exists()
