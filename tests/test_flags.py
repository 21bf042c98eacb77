"""scanrl/harness/flags.py: the flags every script shares, checked before anything is written: a bad
value is one error line naming its flag, exit 2 (every numeric flag of every script drawn at random, and every one
past int32 or float32)."""

import dataclasses
import importlib
import math
import os
import re

import pytest
from cases import SCRIPTS, exit_code_and_error
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanrl import harness
from scanrl.harness import flags


def test_shared_flags_are_checked_before_anything_is_written(tmp_path):
    import ppo

    config = ppo.Config(out_dir=str(tmp_path / "runs"))
    bad = [
        (dict(env="CartPol-v1"), "--env: unknown env 'CartPol-v1': did you mean CartPole-v1"),
        (dict(env="brax/halfcheetah:"), "--env: brax/halfcheetah: ends in ':' with nothing after it; name a backend"),
        (dict(num_seeds=-2), "--num-seeds must be a positive integer, got -2"),
        (dict(total_timesteps=0), "--total-timesteps must be a positive integer"),
        (dict(eval_episodes=0), "--eval-episodes must be a positive integer"),
        (dict(num_chunks=0), "--num-chunks must be a positive integer"),
        (dict(num_chunks=977), "--num-chunks 977 is more than the 976 iterations of this run"),
        (dict(seed=-1), "--seed -1 with --num-seeds 1: the seeds must lie in 0 to 4294967295"),
        (dict(seed=2**32 - 1, num_seeds=2), "the seeds must lie in 0 to 4294967295"),
        (dict(num_devices=0), "--num-devices must be a positive integer"),
        (dict(num_processes=2), "a multi-process run needs --coordinator-address"),
        (dict(num_processes=2, coordinator_address="localhost:1", process_id=2), "--process-id 2 must lie in 0 to"),
        (dict(learning_rate=float("nan")), "--learning-rate must be a finite number, got nan"),
        (dict(ent_coef=float("-inf")), "--ent-coef must be a finite number, got -inf"),
        (dict(learning_rate=1e40), "--learning-rate must be a finite number, got 1e+40, which is infinite in float32"),
        (dict(sweep=("lr=3e-4,nan",)), "--sweep learning_rate=nan: --learning-rate must be a finite number"),
        (dict(sweep=("gamma=inf",)), "--sweep gamma=inf: --gamma must be a finite number"),
        *[(dict(run_name=name), f"--run-name {name!r} must be one directory name")
          for name in ("../x", "/tmp/x", "a/b", ".", "..", "")],
        (dict(out_dir=str(tmp_path / "a_file" / "runs")), "a_file is a file, not a directory"),
        (dict(run_name="a\nb"), "--run-name 'a\\nb' holds a control character"),
        (dict(out_dir=str(tmp_path / "x\ty")), "--out-dir '" + str(tmp_path) + "/x\\ty' holds a control character"),
        (dict(run_name="r" * 256), "--run-name is 256 bytes long; a directory name takes at most 255"),  # not --out-dir
    ]
    (tmp_path / "a_file").write_text("")
    for overrides, message in bad:
        with pytest.raises(harness.ConfigError) as error:
            harness.check(ppo.ALGORITHM, dataclasses.replace(config, **overrides))
        assert message in str(error.value) and "\n" not in str(error.value), overrides
    assert harness.check(ppo.ALGORITHM, dataclasses.replace(config, seed=2**32 - 2, num_seeds=2))
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_out_dir_exits_2_before_anything_is_written(tmp_path, capsys):
    import ppo

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(out_dir=str(locked / "runs")))
        assert code == 2 and err == [f"error: --out-dir {locked / 'runs'}: {locked} is not writable by this user; "
                                     "choose another --out-dir"]
    finally:
        locked.chmod(0o755)


def test_bad_gif_paths_exit_2(tmp_path, capsys):
    import ppo

    run_dir = tmp_path / "no_run"  # the --gif checks come before the run directory is read
    for gif, words in ((str(tmp_path), "is a directory; give a file path"),
                       (str(tmp_path / "missing" / "a.gif"), "the folder"),
                       (str(tmp_path / "episode.png"), "the file name must end in .gif")):  # was PIL's, after drawing
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(run_dir), gif=gif))
        assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --gif {gif}") and words in err[0], err


# Values a hostile or careless user types: non-finite, negative, zero, tiny, huge, and some ordinary ones.
FLOATS = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1e-300, 1e300, 0.5, 1.0, 2.0]),
                   st.floats(allow_nan=True, allow_infinity=True))


INTS = st.one_of(st.sampled_from([0, -1, 1, 2, 3, 2**31, 2**32, 2**63 - 1, -(2**63)]),
                 st.integers(min_value=-(2**70), max_value=2**70))


def numeric_fields(config_type):
    """The int and float fields of a Config (`int | None` ones too), by name -> 'int' or 'float'."""
    kinds = {}
    for field in dataclasses.fields(config_type):
        text = str(field.type)
        if text in ("<class 'int'>", "int", "int | None"):
            kinds[field.name] = "int"
        elif text in ("<class 'float'>", "float", "float | None"):
            kinds[field.name] = "float"
    return kinds


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_numeric_flag_is_valid_or_one_error_naming_a_flag(script, tmp_path):
    """For each numeric field of the script's Config, random values (finite, non-finite, negative, zero, huge) give
    either a config that checks out, or a ConfigError of one line naming a flag: never another exception."""
    module = importlib.import_module(script)
    kinds = numeric_fields(module.Config)
    assert {"seed", "num_seeds", "total_timesteps", "num_chunks"} <= set(kinds)  # the shared ones are found
    base = module.Config(out_dir=str(tmp_path / "runs"))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def check_one(data):
        name = data.draw(st.sampled_from(sorted(kinds)))
        value = data.draw(INTS if kinds[name] == "int" else FLOATS)
        config = dataclasses.replace(base, **{name: value})
        try:
            harness.check(module.ALGORITHM, config)
        except harness.ConfigError as error:
            message = str(error)
            assert "\n" not in message and re.search(r"--[a-z]", message), (name, value, message)

    check_one()
    assert not (tmp_path / "runs").exists()


# Every script at the repo root (a fork saved beside them is checked too).
ALL_SCRIPTS = sorted(p.stem for p in ROOT.glob("*.py") if "\nALGORITHM = harness.Algorithm(" in p.read_text())


def test_numbers_past_what_the_programs_hold_are_one_line_naming_the_flag(tmp_path):
    """Every int field of every script at int(1e30) and 2**63 (and past int64, a traceback of up to 3,000 lines from
    JAX or XLA after config.json was written) and every float field at NaN and inf: the shared check refuses it, in
    one line naming the flag and its largest usable value, before anything is written (what does fit in int32 but
    not in memory is the memory check's)."""
    assert len(ALL_SCRIPTS) >= 7
    for script in ALL_SCRIPTS:
        base = importlib.import_module(script).Config(out_dir=str(tmp_path / "runs"))
        ints = {name for name, kind in numeric_fields(type(base)).items() if kind == "int"}
        floats = set(numeric_fields(type(base))) - ints
        tuples = {name for name, value, _ in flags.field_values(base, int) if isinstance(value, tuple)}
        assert ints and floats, script
        bad = [(name, number, "at most 2,147,483,647 (2**31 - 1)") for name in ints for number in (int(1e30), 2**63)]
        bad += [(name, (1, number), "each as an int32, at most 2,147,483,647") for name in tuples
                for number in (int(1e30), 2**63)]
        bad += [(name, number, "must be a finite number") for name in floats for number in (math.nan, math.inf)]
        for name, value, words in bad:
            words = "the seeds must lie in 0 to 4294967295 (2**32 - 1)" if name == "seed" else words
            with pytest.raises(harness.ConfigError) as error:
                flags.check_flags(dataclasses.replace(base, **{name: value}))
            message = str(error.value)
            assert message.startswith(flags.flag(name)) and words in message and "\n" not in message, message
    config = importlib.import_module("ppo").Config(out_dir=str(tmp_path / "runs"))
    flags.check_flags(dataclasses.replace(config, total_timesteps=2**31 - 1, num_seeds=2**31 - 1))
    with pytest.raises(harness.ConfigError, match=re.escape("--num-steps -2147483648: the compiled programs hold it as "
                                                            "an int32, at least -2,147,483,647")):
        flags.check_flags(dataclasses.replace(config, num_steps=-(2**31)))
    assert not (tmp_path / "runs").exists()


def test_a_size_past_int64_exits_2_in_one_line_before_anything_is_written(run_script, tmp_path):
    """The probe's case end to end: --eval-episodes 1e30 written out in digits was a 29-line traceback, after the run
    directory (holding only config.json) was made. And a whole number of updates per phase past int32 (a float
    flag times the phase's env steps) is the script's own check, one line too."""
    huge = str(int(1e30))
    result = run_script("ppo.py", "--eval-episodes", huge)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: --eval-episodes {huge}: the compiled programs hold it as an int32, at most 2,147,483,647 "
        "(2**31 - 1)"], result.stderr
    assert not (tmp_path / "runs").exists()
    for script in ("td3", "sac", "crossq"):
        module = importlib.import_module(script)
        with pytest.raises(harness.ConfigError, match=r"--updates-per-step 1e\+30 .* at most 2,147,483,647"):
            harness.check(module.ALGORITHM, module.Config(updates_per_step=1e30))


def test_every_shared_flag_is_placed_as_logging_or_result_changing():
    """--resume and --eval let a logging flag differ from the run's and refuse any other shared flag that does: a new
    shared flag is either one or the other, decided when it is added, not by forgetting LOGGING_FLAGS."""
    import dataclasses

    from scanrl.harness.flags import LOGGING_FLAGS, Flags

    result_changing = {"env", "seed", "num_seeds", "total_timesteps", "log_every", "num_chunks", "sweep"}
    unplaced = {f.name for f in dataclasses.fields(Flags)} - result_changing - set(LOGGING_FLAGS)
    assert not unplaced, (f"{sorted(unplaced)}: add each to LOGGING_FLAGS (scanrl/harness/flags.py) if it changes only "
                          "what is logged or where, else to result_changing here")
    assert not result_changing & set(LOGGING_FLAGS)
