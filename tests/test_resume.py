"""scanrl/harness/resume.py: a run's config.json, read back for --resume and --eval and held to its
checkpoint's config: a missing, foreign, damaged or edited one is one error line; --resume takes the logging flags the
command line names."""

import json
import os
import shutil

import pytest
from cases import checkpoint_steps, copy_run, damage_checkpoint, exit_code_and_error

from scanrl import harness


def test_bad_resume_and_eval_exit_2_and_change_nothing(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"algo": "td3"}))
    gone = tmp_path / "gone"  # a run of a script that is now a cell of ppo_rnn.py
    gone.mkdir()
    (gone / "config.json").write_text(json.dumps({"algo": "ppo_trxl"}))
    cases = [
        (dict(resume=str(tmp_path / "nowhere")), "--resume: no run directory"),
        (dict(eval=str(tmp_path / "nowhere")), "--eval: no run directory"),
        (dict(resume=str(foreign)), "is a run of td3 (td3.py), not of ppo (ppo.py); use td3.py"),
        (dict(eval=str(gone)), "ppo_trxl.py became ppo_rnn.py --cell gtrxl, which cannot read its runs (its "
                               "parameters are named otherwise): use the last ppo_trxl.py (git show "
                               "b042acc:ppo_trxl.py"),
        (dict(eval=str(tmp_path)), "is missing or unreadable; is"),
        (dict(resume=str(run_dir), seed=7), "--seed 7 (run: 0) would change the run's results"),
        (dict(eval=str(run_dir), seed_index=2), "--seed-index 2 is out of range: the run has 2 agents"),
    ]
    for overrides, message in cases:
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(**overrides))
        assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], (overrides, err)

    other_env = tmp_path / "other-env"  # a checkpoint of another env in this run's directory
    shutil.copytree(run_dir, other_env)
    saved = json.loads((other_env / "config.json").read_text())
    (other_env / "config.json").write_text(json.dumps({**saved, "env": "Acrobot-v1"}))
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(other_env)))
    assert code == 2 and len(err) == 1 and "config.json says --env Acrobot-v1, but its newest checkpoint" in err[0] \
        and "was trained with --env CartPole-v1" in err[0], err

    for step in checkpoint_steps(run_dir):
        damage_checkpoint(run_dir, step)
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1 and "cannot be read" in err[0] and "damaged" in err[0], err
    assert "no older checkpoint can be read either" in err[0]
    shutil.rmtree(run_dir / "checkpoints")
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(run_dir)))
    assert code == 2 and len(err) == 1 and "has no checkpoint in checkpoints/ yet" in err[0], err
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert {p: b for p, b in before.items() if "checkpoints" not in p.parts} == after


def test_resume_holds_config_json_to_the_config_its_checkpoint_was_trained_with(finished_runs, tmp_path, capsys):
    """A config.json that lost a field or had its seed changed used to change the resumed run silently (a longer
    run, another seed's labels on the seed-0 agents): it is refused naming the field, unless the command line names
    the field with the checkpoint's value."""
    import ppo
    from scanrl.harness.resume import resumed_config, trained_config

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    saved = json.loads((run_dir / "config.json").read_text())
    newest = run_dir / "checkpoints" / "4"
    edits = {"total_timesteps": ({k: v for k, v in saved.items() if k != "total_timesteps"},
                                 f"has no total_timesteps, but its newest checkpoint ({newest}) was trained with "
                                 f"--total-timesteps {saved['total_timesteps']}; put that value back in config.json, "
                                 f"or pass --total-timesteps {saved['total_timesteps']} to resume the run as it was "
                                 "trained"),
             "seed": ({**saved, "seed": 5}, f"says --seed 5, but its newest checkpoint ({newest}) was trained with "
                                            "--seed 0; ")}
    for field, (edited, message) in edits.items():
        (run_dir / "config.json").write_text(json.dumps(edited))
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
        assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --resume: {run_dir / 'config.json'} "
                                                                 f"{message}"), err
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
        # The command line naming the checkpoint's value settles it; another value would change the results.
        value, flag_name = saved[field], "--" + field.replace("_", "-")
        resumed = resumed_config(ppo.ALGORITHM, ppo.Config(resume=str(run_dir), **{field: value}), {"resume", field},
                                 trained_config(str(run_dir)))
        assert (resumed.seed, resumed.total_timesteps) == (0, saved["total_timesteps"])
        with pytest.raises(harness.ConfigError, match=f"was trained with {flag_name}"):
            resumed_config(ppo.ALGORITHM, ppo.Config(resume=str(run_dir), **{field: value + 1}), {"resume", field},
                           trained_config(str(run_dir)))


@pytest.mark.parametrize("field, value", [("num_seeds", 1.5), ("num_seeds", "two"), ("learning_rate", None),
                                          ("env", "NoSuchEnv-v0"), ("num_seeds", 3), ("hidden_size", 32),
                                          ("activation", "tanh\nrelu"), ("algo", "ppo\n")])
def test_a_foreign_or_damaged_config_json_is_one_error_line(field, value, finished_runs, tmp_path, capsys):
    """--eval and --resume of a run whose config.json holds values of the wrong type, an unknown env, or sizes other
    than its checkpoint was trained with: one line naming config.json and the field, exit 2 (they were tracebacks)."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    saved = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**saved, field: value}))
    for flag in ("eval", "resume"):
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(**{flag: str(run_dir)}))
        assert code == 2 and len(err) == 1 and err[0].startswith("error: "), (flag, err)
        assert field in err[0] or field.replace("_", "-") in err[0] or field == "algo", (flag, err)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"algo": "ppo", "env": ' + "[" * 100_000 + "]" * 100_000 + "}"],
                         ids=["list", "field"])
def test_a_config_json_nested_too_deeply_is_one_error_line(text, finished_runs, tmp_path, capsys):
    """A config.json nested 100,000 levels deep (the JSON parser's RecursionError) was a 30-line traceback on --eval
    and --resume: one line naming it, exit 2, nothing changed."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "config.json").write_text(text)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    for flag in ("eval", "resume"):
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(**{flag: str(run_dir)}))
        assert code == 2 and err == [f"error: --{flag}: {run_dir / 'config.json'} is missing or unreadable; is "
                                     f"{run_dir} a run directory of ppo.py?"], (flag, err)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_resume_takes_logging_flags_given_at_their_defaults(finished_runs, tmp_path):
    """A run directory saved with --track (someone else's, say) resumes with --no-track: a flag the command line
    names wins, although it equals the default."""
    import ppo
    from scanrl.harness.flags import given_fields
    from scanrl.harness.resume import resumed_config

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    saved = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**saved, "track": True, "wandb_entity": "someone"}))
    argv = ["--resume", str(run_dir), "--no-track", "--wandb-entity=mine", "--eval-episodes", "10"]
    assert given_fields(ppo.ALGORITHM, argv) == {"resume", "track", "wandb_entity", "eval_episodes"}
    config = ppo.Config(resume=str(run_dir), track=False, wandb_entity="mine")
    resumed = resumed_config(ppo.ALGORITHM, config, given_fields(ppo.ALGORITHM, argv))
    assert (resumed.track, resumed.wandb_entity, resumed.eval_episodes) == (False, "mine", 10)
    assert resumed_config(ppo.ALGORITHM, config).track  # without the command line: only what differs from defaults


@pytest.mark.slow
def test_a_run_an_earlier_version_wrote_resumes_to_the_numbers_that_version_records(tmp_path, capsys):
    """tests/data/run_1bc5f3b: a tiny ppo.py run written by the version of 1bc5f3b (before the harness was laid out
    along a run's path), cut after the first of its two chunks. This version resumes it to the rows and returns
    that version's uninterrupted run wrote (tests/data/run_1bc5f3b.*), column by column: the loss columns come in
    another order since. Floats within 1e-5 (relative): the programs are compiled again, here at the tests' XLA
    optimisation level (conftest.py), perhaps for another CPU; so the final evaluation's 500-step episodes, where a
    last-bit difference can flip an action, are not compared (that --eval reproduces a run's own: the contract)."""
    import csv

    import numpy as np
    from conftest import ROOT

    import ppo

    data = ROOT / "tests" / "data"
    run_dir = shutil.copytree(data / "run_1bc5f3b", tmp_path / "run_1bc5f3b")
    ppo.main(ppo.Config(resume=str(run_dir)))
    assert "resuming after iteration 2 of 4" in capsys.readouterr().out
    with open(run_dir / "metrics.csv") as got, open(data / "run_1bc5f3b.uninterrupted.csv") as expected:
        got, expected = list(csv.DictReader(got)), list(csv.DictReader(expected))
    assert len(got) == len(expected) == 8 and got[0].keys() == expected[0].keys()
    assert list(got[0]) == list(expected[0])  # the run's own column order, not this version's (it was rewritten)
    for row, want in zip(got, expected, strict=True):
        exact = ("seed", "iteration", "env_steps", "episodes", "nonfinite")
        assert [row[k] for k in exact] == [want[k] for k in exact]
        assert np.allclose([float(row[k]) for k in row if k not in exact],
                           [float(want[k]) for k in row if k not in exact], rtol=1e-5, atol=1e-7), (row, want)
    summary, recorded = (json.loads(p.read_text()) for p in (run_dir / "summary.json",
                                                             data / "run_1bc5f3b.summary.json"))
    assert np.allclose(summary["final_return"], recorded["final_return"], rtol=1e-5)


def test_a_run_written_before_a_field_existed_takes_the_only_value_it_had(tmp_path, capsys):
    """Runs of 1bc5f3b have no cell (ppo_rnn.py) or optimizer (dqn_tabular_q.py): they were refused as edited or
    damaged until given the value, which can only have been gru (adam). It is taken, and said."""
    import dataclasses

    import dqn_tabular_q
    import ppo_rnn
    from scanrl.harness.resume import read_run_config

    for module, field, value in ((ppo_rnn, "cell", "gru"), (dqn_tabular_q, "optimizer", "adam")):
        run_dir = tmp_path / module.__name__
        run_dir.mkdir()
        saved = {"algo": module.__name__, **dataclasses.asdict(module.Config())}
        del saved[field]
        (run_dir / "config.json").write_text(json.dumps(saved))
        assert read_run_config(module.ALGORITHM, str(run_dir), "--resume")[field] == value
        assert capsys.readouterr().out == (
            f"--resume: {run_dir / 'config.json'} has no {field}: it was written before {module.__name__}.py had "
            f"--{field}, so the run trained with --{field} {value}, the only value then\n")


def test_a_field_renamed_since_a_run_was_written_reads_as_the_run_trained(tmp_path, capsys):
    """ppo_rnn.py's --gru-size became --cell-size (issue 89), which now sizes the GTrXL too: it worked at
    --hidden-size before. A run written before resumes at the width it trained with, said in one line; a record's
    command names the flag as the script does now, with that width."""
    import dataclasses

    import ppo_rnn
    from benchmarks.suite.verify import renamed_flags
    from scanrl.harness.resume import read_run_config

    for cell, width in (("gru", 16), ("gtrxl", 32)):
        run_dir = tmp_path / cell
        run_dir.mkdir()
        saved = {"algo": "ppo_rnn", **dataclasses.asdict(ppo_rnn.Config(cell=cell, hidden_size=32))}
        del saved["cell_size"]
        saved["gru_size"] = 16
        (run_dir / "config.json").write_text(json.dumps(saved))
        config = read_run_config(ppo_rnn.ALGORITHM, str(run_dir), "--resume")
        assert config["cell_size"] == width and "gru_size" not in config
        assert capsys.readouterr().out == (f"--resume: {run_dir / 'config.json'} has gru_size, which ppo_rnn.py "
                                           f"calls --cell-size now: {width}\n")
        assert renamed_flags(["python", "ppo_rnn.py", "--gru-size", "16", "--seed", "0"], "ppo_rnn", config) == [
            "python", "ppo_rnn.py", "--cell-size", str(width), "--seed", "0"]


def test_a_fifo_or_link_where_a_run_reads_back_is_one_line_never_waited_on(tmp_path):
    """A FIFO at metrics.csv hung --resume (the check that no recorded progress is lost read it, and the rebuilt
    file's column order too); a link at checkpoints/ was followed by --resume, and a FIFO there told --eval to
    --resume."""
    from scanrl.harness.metrics import columns_kept
    from scanrl.harness.resume import require_checkpoint_folder, require_checkpoints_for_progress

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / "metrics.csv")
    require_checkpoints_for_progress(str(run_dir), "ppo.py")  # no rows to lose: it returns at once
    assert columns_kept(str(run_dir / "metrics.csv"), ("env_steps", "episodes")) == ("env_steps", "episodes")
    (tmp_path / "outside").mkdir()
    (run_dir / "checkpoints").symlink_to(tmp_path / "outside", target_is_directory=True)
    with pytest.raises(harness.ConfigError, match=r"^--resume: .*/checkpoints is a link; move it away"):
        require_checkpoints_for_progress(str(run_dir), "ppo.py")
    assert require_checkpoint_folder(str(run_dir), "--eval")  # read only: a link the user made is read through
    (run_dir / "checkpoints").unlink()
    os.mkfifo(run_dir / "checkpoints")
    with pytest.raises(harness.ConfigError, match=r"^--eval: .*/checkpoints is not a folder; move it away"):
        require_checkpoint_folder(str(run_dir), "--eval")


def test_resume_refuses_a_checkpoints_folder_others_can_write_in(tmp_path):
    """A checkpoints/ another user made, or one others can write in, inside one's own run directory was used by
    --resume: its owner could put links among the steps the run writes. Refused in one line, as a run directory of
    theirs is; --eval, which only reads, reads it."""
    from scanrl.harness.resume import require_checkpoint_folder

    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    with pytest.raises(harness.ConfigError, match=r"^--resume: .*/checkpoints is writable by others \(mode 0o777; "
                                                  r"chmod go-w it if it is yours\); move it away"):
        require_checkpoint_folder(str(tmp_path / "run"), "--resume")
    assert require_checkpoint_folder(str(tmp_path / "run"), "--eval") == str(folder)
    folder.chmod(0o755)
    if os.geteuid() == 0:  # only root can give a folder away
        os.chown(folder, 65534, 65534)
        with pytest.raises(harness.ConfigError, match=r"checkpoints is owned by uid 65534, not this user"):
            require_checkpoint_folder(str(tmp_path / "run"), "--resume")
