"""scanrl/harness/checkpoints.py: --resume goes on past damaged checkpoints (set aside, with a
warning) from an intact one, and never discards recorded iterations whose checkpoints are gone."""

import json
import os
import shutil
import stat

import pytest
from cases import checkpoint_steps, copy_run, damage_checkpoint, exit_code_and_error, read_csv


def test_resume_falls_back_past_a_damaged_newest_checkpoint(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    damage_checkpoint(run_dir, 4)
    ppo.main(ppo.Config(resume=str(run_dir)))
    out = capsys.readouterr().out
    assert f"warning: checkpoint {run_dir / 'checkpoints' / '4'} cannot be read" in out
    assert "resuming after iteration 3 of 4" in out
    assert (run_dir / "damaged_checkpoints" / "4").is_dir() and checkpoint_steps(run_dir)[-1] == 4
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")


@pytest.mark.parametrize("loss", ["deleted", "emptied", "a file"])
def test_resume_never_discards_recorded_iterations_when_the_checkpoints_are_gone(loss, finished_runs, tmp_path,
                                                                                   capsys):
    """A run whose metrics.csv records iterations but whose checkpoints/ is gone is refused, not started again (it
    used to be, replacing metrics.csv); nothing in the directory changes."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints")
    if loss != "deleted":
        (run_dir / "checkpoints").mkdir() if loss == "emptied" else (run_dir / "checkpoints").write_text("")
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1, err
    if loss == "a file":
        assert err[0].startswith(f"error: --resume: {run_dir / 'checkpoints'} is not a folder; move it away")
    else:
        assert err[0] == (f"error: --resume: {run_dir / 'checkpoints'} "
                          f"{'is missing' if loss == 'deleted' else 'holds no checkpoint'}, but metrics.csv records 4 "
                          "iterations: starting again would discard them; put back its checkpoints, or train a new "
                          "run (python ppo.py without --resume)")
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("damage", ["truncated array file", "arrays unlike their checksums"])
def test_resume_sets_damaged_checkpoint_data_aside_and_goes_on_from_an_intact_one(damage, finished_runs, tmp_path,
                                                                                   capsys):
    """Damage inside the newest checkpoint's arrays: a file cut short (orbax raised a bare Exception: a traceback)
    or arrays that read but are not what was written (flipped bytes, restored silently): the checkpoint is set
    aside with a warning and the run goes on from the one before, to the uninterrupted run's metrics."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    newest = run_dir / "checkpoints" / "4"
    if damage == "truncated array file":
        data = max((p for p in (newest / "runner").rglob("*") if p.is_file() and p.parent.name == "d"),
                   key=lambda p: p.stat().st_size)
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    else:  # the arrays as written, their recorded checksum not: as if the arrays had changed after the write
        meta = json.loads((newest / "meta" / "metadata").read_text())
        meta["checksums"]["runner"][0] ^= 1
        (newest / "meta" / "metadata").write_text(json.dumps(meta))
    ppo.main(ppo.Config(resume=str(run_dir)))
    out = capsys.readouterr().out
    assert f"warning: checkpoint {newest} cannot be read (" in out and "resuming after iteration 3 of 4" in out
    assert (run_dir / "damaged_checkpoints" / "4").is_dir()
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")


def test_a_state_with_none_and_zero_size_leaves_comes_back_as_it_was_saved(tmp_path):
    """orbax writes neither a zero-size array (a MuJoCo model's unused field) nor a None the state holds itself
    (Craftax's env state has one): the restore puts the first back as zeros and leaves the second None."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import ppo
    from scanrl.harness.checkpoints import Checkpoints

    state = {"w": jnp.arange(3.0), "unused": jnp.zeros((0, 2)), "absent": None}
    config = ppo.Config()
    with Checkpoints(str(tmp_path), keep=1) as checkpoints:
        checkpoints.save(1, state, {"return": np.zeros(2)}, "ppo", config)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
    with Checkpoints(str(tmp_path)) as checkpoints:
        runner, history, step = checkpoints.restore("--resume", "ppo", config, abstract, True)
    assert step == 1 and runner["absent"] is None and runner["unused"].shape == (0, 2)
    assert np.array_equal(runner["w"], state["w"]) and np.array_equal(history["return"], np.zeros(2))


@pytest.mark.parametrize("planted", ["a FIFO for its record", "a FIFO for orbax's step metadata",
                                     "a link to data outside", "a damaged manifest", "a copy under another step"])
def test_a_checkpoint_orbax_did_not_write_is_passed_over_without_waiting_or_a_traceback(planted, finished_runs,
                                                                                         tmp_path, capsys):
    """A FIFO in a checkpoint (orbax waited on it forever: for its step metadata as the folder was opened), a link
    (followed out of the run), a damaged manifest (tracebacks of orbax's abandoned reads after the warning) and a
    checkpoint copied under another step (it resumed "after iteration 5 of 4", then a traceback) are one warning, and
    --eval goes on from the checkpoint before."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    newest = run_dir / "checkpoints" / "4"
    planted_at = {"a FIFO for its record": newest / "meta" / "metadata",
                  "a FIFO for orbax's step metadata": newest / "_CHECKPOINT_METADATA",
                  "a link to data outside": next((newest / "runner" / "d").iterdir()),
                  "a damaged manifest": newest / "runner" / "manifest.ocdbt"}.get(planted)
    if planted == "a copy under another step":
        shutil.copytree(newest, run_dir / "checkpoints" / "5")
        newest, expected = run_dir / "checkpoints" / "5", 4
    else:
        expected = 3
        planted_at.unlink()
        if planted.startswith("a FIFO"):
            os.mkfifo(planted_at)
        elif planted == "a link to data outside":
            planted_at.symlink_to(finished_runs["ppo"] / planted_at.relative_to(run_dir))
        else:
            planted_at.write_bytes(b"\xff" * 64)
    ppo.main(ppo.Config(eval=str(run_dir), eval_episodes=1))
    captured = capsys.readouterr()
    assert f"warning: checkpoint {newest} cannot be read (" in captured.out
    assert f"checkpoint after {expected} iterations" in captured.out
    assert "Traceback" not in captured.err + captured.out and "Exception ignored" not in captured.err


@pytest.mark.parametrize("planted", ["a FIFO", "a link"])
def test_resume_moves_aside_a_file_or_link_at_a_checkpoints_name(planted, finished_runs, tmp_path, capsys):
    """A FIFO named as a step in checkpoints/ (orbax lists only folders): the save of that step removed it first, and
    waited on it forever; a link there, to another run's checkpoint, was called damaged. --resume sets either aside
    with a warning that says what it is, and goes on from the run's own newest checkpoint."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints" / "4")
    if planted == "a FIFO":
        os.mkfifo(run_dir / "checkpoints" / "4")
    else:
        (run_dir / "checkpoints" / "4").symlink_to(finished_runs["ppo"] / "checkpoints" / "4")
    ppo.main(ppo.Config(resume=str(run_dir)))
    out = capsys.readouterr().out
    assert f"warning: {run_dir / 'checkpoints' / '4'} is not a folder of its own (a file, a link), so not a " \
           "checkpoint of this run: it is moved aside" in out
    kind = stat.S_ISFIFO if planted == "a FIFO" else stat.S_ISLNK
    assert kind(os.lstat(run_dir / "damaged_checkpoints" / "4").st_mode) and "resuming after iteration 3" in out
    assert checkpoint_steps(run_dir)[-1] == 4 and (run_dir / "summary.json").exists()


def test_a_checkpoint_record_of_another_algo_is_named_in_one_line(finished_runs, tmp_path, capsys):
    """Its algo is shown escaped: a line break in it split the error line in two."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    meta = run_dir / "checkpoints" / "4" / "meta" / "metadata"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "algo": "sac\nwarning: forged"}))
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(run_dir)))
    assert code == 2 and err == [f"error: --eval: checkpoint {run_dir / 'checkpoints' / '4'} is of "
                                 '"sac\\nwarning: forged" on CartPole-v1, but the run is ppo on CartPole-v1; it does '
                                 "not belong to this run directory"]
