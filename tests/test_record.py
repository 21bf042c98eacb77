"""scanrl/harness/record.py: the run's record and its directory: of the runs that claim one at once exactly one gets
it, default names of runs started in the same second differ, its JSON files hold no NaN, it writes only in the
directory it claimed."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from cases import CASES, cli_flags, read_csv
from conftest import ROOT


def record_of(config, name="ppo"):
    """The record of a run of `config` alone (no compiled job): its directory claimed or taken over, and owned."""
    from scanrl.harness.agents import OneProcess
    from scanrl.harness.record import RunRecord

    job = types.SimpleNamespace(config=config, points=[{}], lead=True, algorithm=types.SimpleNamespace(name=name),
                                processes=OneProcess())
    return RunRecord(job)


def test_of_many_claims_on_one_run_directory_exactly_one_wins(tmp_path):
    """Creating the directory and its config.json is one exclusive step: threads that start together never share a
    run directory (the old check-then-create let two runs write one metrics.csv)."""
    import threading

    from scanrl.harness.files import claim_run_directory

    start, results = threading.Barrier(16), []

    def claim(i):
        start.wait()
        results.append((i, claim_run_directory(str(tmp_path / "runs" / "one"), {"claimant": i})))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, error in results if not error]
    assert len(winners) == 1
    assert all("exists and is not empty" in error for _, error in results if error)
    assert json.loads((tmp_path / "runs" / "one" / "config.json").read_text()) == {"claimant": winners[0]}


def test_an_empty_folder_another_user_made_or_others_can_write_in_is_not_claimed(tmp_path):
    """An empty folder planted at <out-dir>/<run-name> by another user, or one others can write in, is refused: its
    owner could swap checkpoints/ for a link while the run compiles. The run's own folder is made 0o755, whatever
    the umask, and its own empty one (0o700) is taken."""
    from scanrl.harness.files import claim_run_directory

    runs = tmp_path / "runs"
    runs.mkdir()
    shared = runs / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert claim_run_directory(str(shared), {}) == (
        f"run directory {shared} is writable by others (mode 0o777; chmod go-w it if it is yours); a new run takes "
        "only an empty folder of its own; choose another --run-name")
    if os.geteuid() == 0:  # only root can give a folder away
        foreign = runs / "foreign"
        foreign.mkdir(mode=0o755)
        os.chown(foreign, 65534, 65534)
        assert claim_run_directory(str(foreign), {}).startswith(
            f"run directory {foreign} is owned by uid 65534, not this user (uid 0); a new run takes only")
    assert not any(os.listdir(runs / name) for name in os.listdir(runs))  # nothing written in either
    own = runs / "own"
    own.mkdir(mode=0o700)
    assert claim_run_directory(str(own), {"a": 1}) == ""
    old = os.umask(0)
    try:
        assert claim_run_directory(str(runs / "made"), {"a": 1}) == ""
    finally:
        os.umask(old)
    assert (runs / "made").stat().st_mode & 0o777 == 0o755


@pytest.mark.slow
def test_two_runs_started_at_once_with_one_run_name_one_trains_the_other_exits_2(tmp_path):
    _, tiny, _ = CASES["ppo"]
    flags = cli_flags({**tiny, "num_seeds": 1, "run_name": "same", "out_dir": str(tmp_path / "runs")})
    processes = [subprocess.Popen([sys.executable, str(ROOT / "ppo.py"), *flags], cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    codes = sorted(p.returncode for p in processes)
    assert codes == [0, 2], outputs
    (err,) = [e for p, (_, e) in zip(processes, outputs, strict=True) if p.returncode == 2]
    assert err.strip().splitlines() == [f"error: run directory {tmp_path / 'runs' / 'same'} exists and is not empty; "
                                        "choose another --run-name, or --resume it"]
    assert len(read_csv(tmp_path / "runs" / "same" / "metrics.csv")) == 1 + 4  # header, 4 iterations of 1 seed


def test_default_run_names_of_runs_started_in_the_same_second_differ(tmp_path, monkeypatch):
    import time
    import types

    import ppo

    # One second for both runs (the run directory module's clock only): each claims its own directory.
    from scanrl.harness import record

    monkeypatch.setattr(record, "time", types.SimpleNamespace(time=lambda: 1_800_000_000.0,
                                                                      perf_counter=time.perf_counter))
    config = ppo.Config(**{**CASES["ppo"][1], "num_seeds": 1, "out_dir": str(tmp_path)})
    for _ in range(2):
        record_of(config).release()
    names = os.listdir(tmp_path)
    assert len(names) == 2 and all(n.startswith("CartPole-v1__ppo__0__1800000000_") for n in names)
    assert all((tmp_path / n / "config.json").exists() for n in names)


def test_summary_json_is_valid_json_with_nan_as_null(tmp_path):
    import json

    import numpy as np

    from scanrl.harness.record import write_json

    write_json(str(tmp_path / "summary.json"), {"a": float("nan"), "b": [np.float32("inf"), 1.5], "c": {"d": np.nan}})
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


def test_a_link_at_the_run_name_is_refused_and_nothing_is_written_through_it(tmp_path, capsys):
    """A link planted at <out-dir>/<run-name> (a shared out dir, a predictable name) led the whole run elsewhere:
    the run exits 2 naming it, and nothing is written where it leads."""
    from cases import exit_code_and_error, tiny_config

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "planted").symlink_to(tmp_path / "elsewhere")
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="planted")
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and err == [f"error: run directory {tmp_path / 'runs' / 'planted'} is a link, and a run never "
                                 "writes through one; choose another --run-name"]
    assert not any((tmp_path / "elsewhere").iterdir())


def test_resume_through_a_link_the_user_names_says_where_it_leads(finished_runs, tmp_path, capsys):
    """A `runs/latest`-style link named on --resume is followed, and the run says which directory it resumes."""
    from cases import copy_run

    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (tmp_path / "latest").symlink_to(run_dir)
    ppo.main(ppo.Config(resume=str(tmp_path / "latest")))
    out = capsys.readouterr().out
    assert f"--resume {tmp_path / 'latest'} leads through a link to {run_dir}: resuming {run_dir}" in out
    assert f"{run_dir} is finished" in out


def test_a_run_directory_others_could_move_is_refused_before_anything_is_written(tmp_path):
    """In a folder every user can write in without the sticky bit (0o777), another user could rename the run
    directory and put a link in its place, and the run wrote on through it (checkpoints, metrics rows) into their
    folder. Such a folder anywhere above the run directory, named or reached through a link, is refused by a new run
    and by --resume, before anything is written; with the sticky bit (1777, as /tmp) the kernel refuses them the
    rename, and the run is claimed."""
    from scanrl.harness import ConfigError
    from scanrl.harness.files import claim_run_directory

    shared, own = tmp_path / "shared", tmp_path / "own"
    shared.mkdir()
    own.mkdir()
    shared.chmod(0o777)
    (shared / "link").symlink_to(own)
    (own / "link").symlink_to(shared)
    refusal = (" lies in {}, which every user can write in, without the sticky bit (mode 0o777): another user could "
               f"move it away and put a link in its place; chmod +t {shared} (as /tmp is), or use a folder of your own")
    for path in (shared / "runs" / "a", shared / "link" / "a", own / "link" / "a"):
        assert claim_run_directory(str(path), {}) == f"run directory {path}" + refusal.format(shared)
    assert os.listdir(shared) == ["link"] and os.listdir(own) == ["link"]  # nothing made, in either
    run_dir = own / "run"
    assert claim_run_directory(str(run_dir), {"algo": "ppo"}) == ""
    os.rename(run_dir, shared / "run")  # a run made elsewhere, moved there: not resumed there either
    config = types.SimpleNamespace(resume=str(shared / "run"))
    with pytest.raises(ConfigError, match=r"^--resume: the run directory .* lies in .*without the sticky bit"):
        record_of(config)
    shared.chmod(0o1777)
    assert claim_run_directory(str(shared / "runs" / "b"), {}) == ""
    record_of(config).release()


def test_the_folders_a_run_makes_are_no_one_elses_to_write_whatever_the_umask(tmp_path, monkeypatch):
    """Under umask 000 the folders made on the way to the run directory were 0777 and its files 0666: a run built
    the shared folder others could swap it in. A run makes every folder 0755 and file 0644 at most."""
    import ppo

    config = ppo.Config(**{**CASES["ppo"][1], "num_seeds": 1, "out_dir": str(tmp_path / "a" / "b"), "run_name": "r"})
    old = os.umask(0)
    try:
        run_dir = record_of(config)
        with open(os.path.join(run_dir.path, "written"), "w"):  # as orbax and every writer of a run open files
            pass
        run_dir.release()
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path): p.stat().st_mode & 0o777 for p in (tmp_path / "a").rglob("*")}
    assert modes == {Path("a/b"): 0o755, Path("a/b/r"): 0o755, Path("a/b/r/config.json"): 0o644,
                     Path("a/b/r/written"): 0o644}


def test_a_run_directory_moved_or_replaced_while_it_trains_stops_the_run_and_nothing_goes_where_it_leads(
        finished_runs, tmp_path, capsys, monkeypatch):
    """Whoever can still rename it (the user, a group member, the owner of a folder above), a run directory moved
    away and replaced by a link between two chunks' writes led the rows and checkpoints into the link's folder. The
    run checks before each chunk's writes that its directory is the one it claimed (its lock file, by that one
    name): it stops in one line (exit 1), nothing written where the link leads, and once the directory is back,
    --resume finishes it to the uninterrupted run's metrics."""
    from cases import exit_code_and_error, tiny_config

    from scanrl.harness.checkpoints import Checkpoints

    module, config = tiny_config("tabular_q", tmp_path / "runs", run_name="r")
    run_dir, moved, elsewhere = tmp_path / "runs" / "r", tmp_path / "moved", tmp_path / "elsewhere"
    (elsewhere / "checkpoints").mkdir(parents=True)
    (elsewhere / "metrics.csv").write_text("")
    save = Checkpoints.save

    def save_then_swap(self, *args):
        save(self, *args)
        if not moved.exists():  # after the first chunk's checkpoint, as another user would wait for it
            self.wait()
            os.rename(run_dir, moved)
            run_dir.symlink_to(elsewhere)

    monkeypatch.setattr(Checkpoints, "save", save_then_swap)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 1 and err == [
        f"error: cannot write {run_dir}: it is no longer the run directory this run claimed (it was moved, or "
        "replaced by a link or another folder); training stopped, the checkpoints written so far are kept; put it "
        f"back, then continue with: python dqn_tabular_q.py --resume {run_dir}"]
    assert (elsewhere / "metrics.csv").read_text() == "" and not any((elsewhere / "checkpoints").iterdir())
    monkeypatch.undo()
    run_dir.unlink()
    os.rename(moved, run_dir)
    module.main(module.Config(resume=str(run_dir)))
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["tabular_q"] / "metrics.csv")
