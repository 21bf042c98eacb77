"""scanrl/harness/files.py: a run directory's one owner (its lock), and files written never through a
planted link."""

import os
import signal
import subprocess
import sys

import pytest
from cases import copy_run, exit_code_and_error
from conftest import ROOT

from scanrl.harness import ConfigError
from scanrl.harness.files import LOCK_NAME, RunLock, open_regular

HOLD_LOCK = ("import sys, time; sys.path.insert(0, sys.argv[2]); from scanrl.harness.files import RunLock; "
             "RunLock(sys.argv[1], '--resume'); print('locked', flush=True); time.sleep(600)")


def test_a_run_directory_has_one_owner_and_a_dead_one_holds_it_no_more(tmp_path):
    """A second owner (another process, or this one) is refused naming the first's pid; the lock of a process
    killed with -9 is gone with it; a released lock leaves no file behind. Only a run directory is locked: in any
    other, its .lock is left alone; a FIFO or a hard link planted at the name is refused, never waited on or
    written."""
    (tmp_path / LOCK_NAME).write_text("not ours")
    with pytest.raises(ConfigError, match=r"^--resume: .* is not a run directory \(it has no config.json\)$"):
        RunLock(str(tmp_path), "--resume")
    assert (tmp_path / LOCK_NAME).read_text() == "not ours"
    (tmp_path / LOCK_NAME).unlink()
    (tmp_path / "config.json").write_text("{}")
    os.mkfifo(tmp_path / LOCK_NAME)
    with pytest.raises(ConfigError, match=r"cannot lock .* \(not a file of its own\)"):
        RunLock(str(tmp_path), "--resume")
    (tmp_path / LOCK_NAME).unlink()
    (tmp_path / "precious").write_text("a file of the user's")  # a hard link at the name: its pid would overwrite it
    os.link(tmp_path / "precious", tmp_path / LOCK_NAME)
    with pytest.raises(ConfigError, match=r"cannot lock .* \(not a file of its own\)"):
        RunLock(str(tmp_path), "--resume")
    assert (tmp_path / "precious").read_text() == "a file of the user's"
    (tmp_path / LOCK_NAME).unlink()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path), str(ROOT)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=rf"^--resume: another process \(pid {holder.pid}\) is training in "):
            RunLock(str(tmp_path), "--resume")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = RunLock(str(tmp_path), "--resume")
    assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
    with pytest.raises(ConfigError, match=rf"pid {os.getpid()}"):
        RunLock(str(tmp_path), "--resume")
    (tmp_path / LOCK_NAME).write_text("1\nwarning: forged\x1b[31m")  # the owner's file, written by anyone: only a
    with pytest.raises(ConfigError, match=r"^[^\n]*\(pid unknown\) is training[^\n]*$"):  # pid is shown
        RunLock(str(tmp_path), "--resume")
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()
    RunLock(str(tmp_path), "--resume").release()


def test_resume_of_a_run_another_process_owns_exits_2_and_changes_nothing(finished_runs, tmp_path, capsys):
    """A --resume of a run directory another process holds (a run training in it) exits 2 naming that process's pid
    (two trainers used to write one metrics.csv). That a training run holds its directory is tested with the stop
    of a single-chunk run (test_stops.py)."""
    import ppo
    from scanrl.harness.files import RunLock

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with RunLock(str(run_dir), "--resume"):
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and err == [f"error: --resume: another process (pid {os.getpid()}) is training in {run_dir}; "
                                 "wait for it to end or stop it, then --resume it"], err
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_the_harness_writes_no_file_through_a_planted_link(tmp_path):
    """Links planted at the names the run directory's writers use (the files themselves and the temporaries they
    used to write) point outside it: every writer replaces the link, never the file it points to, and an append
    to a metrics.csv turned into a link is refused; a folder replaced by a link is never written or moved into."""
    import numpy as np

    from scanrl.envs.gridworld import GridWorld, plot_q_values
    from scanrl.harness.files import folder, save_figure
    from scanrl.harness.metrics import MetricsCsv
    from scanrl.harness.plots import plot_learning_curve
    from scanrl.harness.record import write_json

    victim = tmp_path / "victim"
    victim.write_text("precious")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    names = ("metrics.csv", "summary.json", "learning_curve.png")
    for name in names:
        for planted in (name, f"{name}.tmp"):
            (run_dir / planted).symlink_to(victim)
    metrics = {"env_steps": np.array([[8, 16]]), "episodes": np.array([[1, 1]]),
               "episode_return": np.array([[1.0, 2.0]])}
    csv_file = MetricsCsv(str(run_dir / "metrics.csv"), list(metrics), [0], metrics)
    write_json(str(run_dir / "summary.json"), {"return": 1.0})
    plot_learning_curve(str(run_dir / "learning_curve.png"), metrics, "title")
    assert victim.read_text() == "precious"
    for name in names:
        assert (run_dir / name).is_file() and not (run_dir / name).is_symlink(), name
    assert (run_dir / "metrics.csv").read_text().splitlines() == [
        "seed,iteration,env_steps,episodes,episode_return", "0,1,8,1,1.0", "0,2,16,1,2.0"]
    (run_dir / "metrics.csv").unlink()
    (run_dir / "metrics.csv").symlink_to(victim)
    with pytest.raises(OSError):
        csv_file.append(2, metrics)
    assert victim.read_text() == "precious"
    # Folders replaced by links to a folder outside: a sweep point's (metrics.csv, summary.json, plots, GridWorld's
    # q_values.png) and damaged_checkpoints/ (where a damaged checkpoint is moved): nothing goes through them.
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("lr=0.1", "damaged_checkpoints"):
        (run_dir / name).symlink_to(outside, target_is_directory=True)
        with pytest.raises(OSError, match="a link"):
            folder(str(run_dir / name))
    # checkpoints/ is made by the run itself before orbax writes in it (orbax would follow a link)
    from scanrl.harness.checkpoints import Checkpoints

    (run_dir / "checkpoints").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match="a link"):
        Checkpoints(str(run_dir), keep=2)
    point = run_dir / "lr=0.1"
    with pytest.raises(OSError, match="a link"):
        MetricsCsv(str(point / "metrics.csv"), list(metrics), [0], metrics, make_dir=True)
    for write in (lambda: write_json(str(point / "summary.json"), {}),
                  lambda: plot_learning_curve(str(point / "learning_curve.png"), metrics, "title"),
                  lambda: save_figure(plot_q_values(GridWorld(), np.zeros((1, 96, 4)), "title"),
                                      str(point / "q_values.png"))):
        with pytest.raises(OSError, match="a link"):
            write()
    assert not any(outside.iterdir())


def test_a_file_read_back_is_opened_only_if_it_is_a_regular_file(tmp_path):
    """A FIFO planted where a file is read back is not waited on, a device (a link to /dev/zero) not read without
    end, a folder not opened: OSError at once."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "folder").mkdir()
    for name in ("fifo", "zero", "folder"):
        with pytest.raises(OSError, match="not a regular file"):
            open_regular(tmp_path / name)
    (tmp_path / "file").write_text("text")
    with open_regular(tmp_path / "file") as f:
        assert f.read() == "text"
