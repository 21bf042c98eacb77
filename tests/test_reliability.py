"""The harness against hostile cases (issue 29), at the level of its functions: a run directory's owner, files
written without following planted links, --resume's config against its checkpoint, the memory check's limits, the
compile cache's entries. The runs these need are in tests/test_harness.py."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT

from scanrl.harness import ConfigError
from scanrl.harness.files import LOCK_NAME, RunLock

HOLD_LOCK = ("import sys, time; sys.path.insert(0, sys.argv[2]); from scanrl.harness.files import RunLock; "
             "RunLock(sys.argv[1], '--resume'); print('locked', flush=True); time.sleep(600)")


def test_a_run_directory_has_one_owner_and_a_dead_one_holds_it_no_more(tmp_path):
    """A second owner (another process, or this one) is refused naming the first's pid; the lock of a process
    killed with -9 is gone with it; a released lock leaves no file behind. Only a run directory is locked: in any
    other, its .lock is left alone; a FIFO planted at the name is refused, never waited on."""
    (tmp_path / LOCK_NAME).write_text("not ours")
    with pytest.raises(ConfigError, match=r"^--resume: .* is not a run directory \(it has no config.json\)$"):
        RunLock(str(tmp_path), "--resume")
    assert (tmp_path / LOCK_NAME).read_text() == "not ours"
    (tmp_path / LOCK_NAME).unlink()
    (tmp_path / "config.json").write_text("{}")
    os.mkfifo(tmp_path / LOCK_NAME)
    with pytest.raises(ConfigError, match=r"cannot lock .* \(not a regular file\)"):
        RunLock(str(tmp_path), "--resume")
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
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()
    RunLock(str(tmp_path), "--resume").release()


def test_the_harness_writes_no_file_through_a_planted_link(tmp_path):
    """Links planted at the names the run directory's writers use (the files themselves and the temporaries they
    used to write) point outside it: every writer replaces the link, never the file it points to, and an append
    to a metrics.csv turned into a link is refused; a folder replaced by a link is never written or moved into."""
    import numpy as np

    from scanrl.envs.gridworld import GridWorld, write_q_values
    from scanrl.harness.files import folder
    from scanrl.harness.metrics import MetricsCsv
    from scanrl.harness.plots import plot_learning_curve
    from scanrl.harness.rundir import write_json

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
    point = run_dir / "lr=0.1"
    with pytest.raises(OSError, match="a link"):
        MetricsCsv(str(point / "metrics.csv"), list(metrics), [0], metrics, make_dir=True)
    for write in (lambda: write_json(str(point / "summary.json"), {}),
                  lambda: plot_learning_curve(str(point / "learning_curve.png"), metrics, "title"),
                  lambda: write_q_values(str(point), GridWorld(), {"q_table": np.zeros((1, 96, 4)),
                                                                   "greedy_path_length": [-1]}, "title")):
        with pytest.raises(OSError, match="a link"):
            write()
    assert not any(outside.iterdir())


def test_summary_json_is_valid_json_with_nan_as_null(tmp_path):
    import json

    import numpy as np

    from scanrl.harness.rundir import write_json

    write_json(str(tmp_path / "summary.json"), {"a": float("nan"), "b": [np.float32("inf"), 1.5], "c": {"d": np.nan}})
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


@pytest.mark.parametrize("layout", ["v2", "v1", "v2 unlimited", "v1 unlimited", "none"])
def test_the_memory_check_reads_cgroup_v1_and_v2_limits(layout, tmp_path):
    from scanrl.harness.memory import cgroup_memory_left

    files = {"v2": {"memory.max": "8000\n", "memory.current": "3000\n"},
             "v1": {"memory/memory.limit_in_bytes": "8000\n", "memory/memory.usage_in_bytes": "3000\n"},
             "v2 unlimited": {"memory.max": "max\n", "memory.current": "3000\n"},
             "v1 unlimited": {"memory/memory.limit_in_bytes": "9223372036854771712\n",
                              "memory/memory.usage_in_bytes": "3000\n"},
             "none": {}}[layout]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_memory_left(str(tmp_path)) == (5000 if layout in ("v1", "v2") else None)


@pytest.mark.parametrize("num_seeds, message", [
    (2**31, "agents (--num-seeds x sweep points): 2,147,483,648 is more than the 2,147,483,647"),
    (10**8, "the run needs about "),
])
def test_too_many_agents_are_refused_before_anything_is_made_per_agent(num_seeds, message, tmp_path, capsys,
                                                                      monkeypatch):
    """The agent count is checked before the agents' keys exist: 2**31 seeds used to take 10 GB and two minutes
    with no output, 10**8 seeds 9.4 GB before the memory check refused them."""
    import ppo
    from scanrl.harness import agents

    made = []
    monkeypatch.setattr(agents, "seed_keys", lambda config: made.append(config) or pytest.fail("keys were made"))
    with pytest.raises(SystemExit) as exited:
        ppo.main(ppo.Config(num_seeds=num_seeds, out_dir=str(tmp_path / "runs")))
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not made and not (tmp_path / "runs").exists()


def test_the_compile_cache_runs_only_entries_it_wrote_and_opens_only_regular_files(tmp_path, capsys):
    """An entry is tied to the program that wrote it (this format, jax and jaxlib) and to its key and content: one
    another program wrote under the same key is not found, a damaged or foreign one is dropped with one note (it
    used to fail every later run), and a FIFO or a link at an entry's name is dropped without being opened (a FIFO
    hung the run)."""
    import threading

    from scanrl.harness.compile_cache import FileCache

    cache = FileCache(tmp_path)
    cache.put("jit_f-1", b"executable")
    assert cache.get("jit_f-1") == b"executable"
    other = FileCache(tmp_path)
    other.program = "another-program"
    assert other.get("jit_f-1") is None  # another program's entries are its own
    other.put("jit_f-2", b"theirs")
    assert cache.get("jit_f-2") is None

    (entry,) = [p for p in tmp_path.iterdir() if p.name.startswith("jit_f-1-")]
    entry.write_bytes(entry.read_bytes()[:-1] + b"X")  # damaged
    assert cache.get("jit_f-1") is None and not entry.exists()
    entry.write_bytes(b"a foreign executable")
    assert cache.get("jit_f-1") is None and not entry.exists()
    victim = tmp_path.parent / "victim"
    victim.write_bytes(b"precious")
    entry.symlink_to(victim)
    assert cache.get("jit_f-1") is None and not entry.is_symlink() and victim.read_bytes() == b"precious"
    os.mkfifo(entry)
    got = []
    reader = threading.Thread(target=lambda: got.append(cache.get("jit_f-1")), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # let the thread go before failing
        with open(entry, "wb"):
            pass
        pytest.fail("a FIFO at an entry's name was opened and waited on")
    assert got == [None] and not entry.exists()
    notes = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: compile cache: dropped "), notes
    cache.put("jit_f-1", b"compiled again")
    assert cache.get("jit_f-1") == b"compiled again"


def test_the_compile_cache_is_used_only_in_a_folder_no_one_else_can_write(tmp_path, capsys, monkeypatch):
    """The digest finds damage, not forgery: anyone who can write the folder can compute it. So, as ssh does with
    its keys, a cache folder others can write is refused (one note, the run goes on without it), and one scanrl
    makes is this user's alone whatever the umask."""
    from scanrl.harness import compile_cache

    monkeypatch.setattr(compile_cache, "install_cache_store", lambda store: None)
    monkeypatch.setattr(compile_cache.jax.config, "update", lambda *args: None)
    old = os.umask(0o002)
    try:
        made = compile_cache.start(str(tmp_path / "mine"))
    finally:
        os.umask(old)
    assert made is not None and (os.stat(made).st_mode & 0o777) == 0o700 == (os.stat(os.path.dirname(made)).st_mode
                                                                               & 0o777)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert compile_cache.start(str(shared)) is None
    (note,) = capsys.readouterr().err.strip().splitlines()
    assert note.startswith("note: compile cache off: ") and "is writable by others (mode drwxrwxrwx)" in note, note
    assert not any(shared.iterdir())  # nothing made in a folder it refuses


def test_a_sweep_says_which_flags_its_values_override():
    import ppo
    from scanrl.harness.sweeps import sweep_overrides, sweep_points

    config = ppo.Config(learning_rate=1e-3, sweep=("lr=1e-3,3e-4",))
    assert sweep_overrides(ppo.ALGORITHM, config, sweep_points(ppo.ALGORITHM, config)) == [
        "note: --sweep learning_rate=0.001,0.0003 overrides --learning-rate 0.001: each point trains with its own "
        "value"]
    config = ppo.Config(sweep=("lr=1e-3,3e-4",))
    assert sweep_overrides(ppo.ALGORITHM, config, sweep_points(ppo.ALGORITHM, config)) == []
