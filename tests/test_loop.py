"""scanrl/harness/loop.py: a new or resumed run, chunk by chunk: uneven chunks, --profile, and
--resume (of a finished run, of one killed before its first checkpoint or by kill -9 at three moments, of a sweep,
with metrics.csv damaged) ending with the metrics of the uninterrupted run."""

import dataclasses
import gzip
import json
import os
import shutil
import signal
import sys

import numpy as np
import pytest
from cases import checkpoint_steps, copy_run, read_csv, tiny_config
from conftest import ROOT, run_warm

from scanrl.harness.sweeps import point_label

# Every case's --resume equals its uninterrupted run, and its --eval reproduces its summary: tests/test_forking.py
# runs the contract check (scanrl/tools/contract.py) on each.


@pytest.mark.parametrize("damage", ["deleted", "cut mid-row", "header only", "garbage"])
def test_resume_rebuilds_metrics_csv_from_the_checkpoint(damage, finished_runs, tmp_path):
    """The checkpoint holds the metrics so far: whatever a kill or a user left of metrics.csv, --resume writes the
    uninterrupted run's file (the csv used to be trusted: rows were lost, or a half row kept)."""
    import ppo

    whole = finished_runs["ppo"]
    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    for step in checkpoint_steps(run_dir)[2:]:
        shutil.rmtree(run_dir / "checkpoints" / str(step))
    (run_dir / "summary.json").unlink()
    path = run_dir / "metrics.csv"
    text = path.read_text()
    if damage == "deleted":
        path.unlink()
    elif damage == "cut mid-row":
        path.write_text(text[: text.index("\n", len(text) // 2) - 5])
    elif damage == "header only":
        path.write_text(text.splitlines()[0] + "\n")
    else:
        path.write_text("seed,iteration\n1,2,3\nnot,a,row\n")
    ppo.main(dataclasses.replace(ppo.Config(), resume=str(run_dir)))
    assert path.read_bytes() == (whole / "metrics.csv").read_bytes()


def test_uneven_chunks_write_a_checkpoint_each_and_the_same_metrics(finished_runs, tmp_path):
    """--num-chunks 3 on 4 iterations: checkpoints after 2, 3 and 4, and metrics.csv as with 4 chunks."""
    module, config = tiny_config("tabular_q", tmp_path, num_chunks=3, run_name="three", keep_checkpoints=3)
    module.main(config)
    assert checkpoint_steps(tmp_path / "three") == [2, 3, 4]
    assert read_csv(tmp_path / "three" / "metrics.csv") == read_csv(finished_runs["tabular_q"] / "metrics.csv")


def test_resume_of_a_finished_run_says_so_and_changes_nothing(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    ppo.main(ppo.Config(resume=str(run_dir)))
    assert "is finished (4 of 4 iterations, summary.json written): nothing to resume" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_again(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    shutil.rmtree(run_dir / "checkpoints")
    for name in ("summary.json", "metrics.csv", "learning_curve.png"):
        (run_dir / name).unlink()
    ppo.main(ppo.Config(resume=str(run_dir)))
    assert "no checkpoint yet" in capsys.readouterr().out
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")
    assert json.loads((run_dir / "summary.json").read_text())["resumed_after_iteration"] is None


@pytest.mark.slow
def test_profile_writes_a_trace_of_the_training_run(tmp_path, capsys):
    """--profile traces one piece of the scan (a trace of a whole chunk took 7.5 GB for 2 CartPole seeds), as a
    chunk of its own; the rest of the run trains as it would."""
    import ppo

    ppo.main(ppo.Config(total_timesteps=4096, log_every=2, profile=True, run_name="profiled",
                        out_dir=str(tmp_path / "runs")))
    assert checkpoint_steps(tmp_path / "runs" / "profiled") == [2, 8]
    assert len(read_csv(tmp_path / "runs" / "profiled" / "metrics.csv")) == 1 + 8
    traces = list((tmp_path / "runs" / "profiled" / "profile").rglob("*.trace.json.gz"))
    assert len(traces) == 1
    events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
    # The compiled training program ran under the profiler: XLA's executor shows up in the trace.
    assert any("ThunkExecutor" in str(event.get("name", "")) for event in events)
    assert "profiler trace of iterations 1 to 2 in" in capsys.readouterr().out


@pytest.mark.slow
def test_sweep_resumes_from_its_checkpoint(tmp_path):
    """A sweep run cut after its first chunk resumes to the metrics of the uninterrupted run, point by point."""
    module, config = tiny_config("ppo", tmp_path, num_seeds=2, num_chunks=2, run_name="whole",
                                 sweep=("lr=1e-3,3e-4",))
    module.main(config)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    shutil.copytree(whole, cut)
    steps = sorted(int(p.name) for p in (cut / "checkpoints").iterdir() if p.name.isdigit())
    shutil.rmtree(cut / "checkpoints" / str(steps[-1]))
    (cut / "summary.json").unlink()
    module.main(module.Config(resume=str(cut)))
    for value in (1e-3, 3e-4):
        label = point_label({"learning_rate": value})
        assert read_csv(cut / label / "metrics.csv") == read_csv(whole / label / "metrics.csv")
    assert json.loads((cut / "summary.json").read_text())["ranking"] == json.loads(
        (whole / "summary.json").read_text())["ranking"]


# ---------------------------------------------------------------------------------------------------------------
# kill -9, then --resume


# ppo: 16 iterations in 4 chunks of 4; on one device, which the resume in this process has whatever ran before
FLAGS = ["--total-timesteps", str(16 * 512), "--num-seeds", "2", "--num-chunks", "4", "--log-every", "1",
         "--eval-episodes", "3", "--num-devices", "1"]


# Runs ppo.py as `python ppo.py FLAGS` would, with one harness function wrapped to kill the process (SIGKILL, no
# clean-up of any kind) at the moment under test.
KILLER = """
import os, runpy, signal, sys
sys.path.insert(0, {root!r})
sys.argv = ["ppo.py", *{flags!r}]
import jax.stages
import scanrl.harness.checkpoints, scanrl.harness.metrics
from scanrl import harness

def die():
    os.kill(os.getpid(), signal.SIGKILL)

moment = {moment!r}
if moment == "compile":  # as XLA starts compiling the training chunk; the run directory is claimed
    jax.stages.Lowered.compile = lambda self, *args, **kwargs: die()
elif moment == "mid-chunk":  # in the last chunk (iterations 13-16), after iteration 14's progress line
    emit = harness.metrics.Progress._emit
    def _emit(self, iteration, *args):
        logs = emit(self, iteration, *args)
        if iteration == 13:
            die()
        return logs
    harness.metrics.Progress._emit = _emit
else:  # "first-checkpoint-write": as orbax writes the run's first checkpoint in its background thread
    save = harness.checkpoints.Checkpoints.save
    def _save(self, step, *args, **kwargs):
        save(self, step, *args, **kwargs)
        if step == 4:
            die()
    harness.checkpoints.Checkpoints.save = _save
runpy.run_path(os.path.join({root!r}, "ppo.py"), run_name="__main__")
"""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("whole")
    env = {**os.environ, "WANDB_MODE": "offline"}
    result = run_warm([sys.executable, str(ROOT / "ppo.py"), *FLAGS, "--out-dir", str(out_dir), "--run-name", "whole"],
                      out_dir, env, 600)
    assert result.returncode == 0, result.stderr
    return (out_dir / "whole" / "metrics.csv").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("moment, resumed_after", [
    ("compile", ("no checkpoint yet",)),
    # Killed in the last chunk (iterations 13-16): the checkpoint after iteration 8 is complete (the loop waits for a
    # chunk's checkpoint before it starts the next one's), the one after 12 may still have been in writing.
    ("mid-chunk", ("resuming after iteration 8 of 16", "resuming after iteration 12 of 16")),
    # Killed while the first checkpoint is written: its chunk's rows wait for it, so the run starts again.
    ("first-checkpoint-write", ("no checkpoint yet", "resuming after iteration 4 of 16")),
])
def test_kill_9_then_resume_gives_the_uninterrupted_metrics(moment, resumed_after, uninterrupted, tmp_path, capsys):
    import ppo

    run_dir = tmp_path / "runs" / "killed"
    env = {**os.environ, "WANDB_MODE": "offline"}
    flags = [*FLAGS, "--out-dir", str(tmp_path / "runs"), "--run-name", "killed"]
    killed = run_warm([sys.executable, "-c", KILLER.format(root=str(ROOT), flags=flags, moment=moment)], tmp_path,
                      env, 600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (run_dir / "config.json").exists() and not (run_dir / "summary.json").exists()
    ppo.main(ppo.Config(resume=str(run_dir)))
    out = capsys.readouterr().out
    assert any(line in out for line in resumed_after), out
    assert (run_dir / "metrics.csv").read_text() == uninterrupted
    assert np.isfinite(json.loads((run_dir / "summary.json").read_text())["eval_return"]).all()
