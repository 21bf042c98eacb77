"""The edges of a run, tested once on the harness: every numeric flag of every script drawn at random through the
validation pass, sizes that cannot fit, compile size against the number of agents, the default chunking, and
kill -9 at three moments of a run followed by --resume.

(test_harness.py holds the other harness tests; these live apart so pytest-xdist runs them beside it.)"""

import dataclasses
import importlib
import json
import math
import os
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanrl import harness
from scanrl.harness.agents import seed_keys
from scanrl.harness.job import piece_length

SCRIPTS = ("ppo", "reinforce", "td3", "dqn_tabular_q", "pqn")

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


def test_a_run_too_big_for_memory_exits_2_before_allocating_with_both_figures(tmp_path, capsys):
    """4 DQN agents with a replay buffer of 2**30 transitions (over 100 GB each): refused from the agents' shapes,
    before anything is allocated, with the memory needed and available and the flags to lower;
    the run directory it had claimed is removed."""
    import dqn_tabular_q

    config = dqn_tabular_q.Config(env="CartPole-v1", agent="dqn", buffer_size=2**30, num_seeds=4, run_name="big",
                                  out_dir=str(tmp_path / "runs"))
    with pytest.raises(SystemExit) as exited:
        dqn_tabular_q.main(config)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1, err
    found = re.fullmatch(r"error: the run needs about ([\d.]+) GB of memory \(([\d.]+) GB of it the state of its "
                         r"(?:4 )?agents\) and this host has ([\d.]+) GB available: lower --num-seeds, "
                         r".*--buffer-size.*",
                         err[0])
    assert found, err[0]
    need, state, free = map(float, found.groups())
    assert state >= 4 * 2**30 * 2 * 4 * 4 / 1e9  # at least the observations and next observations, float32
    assert need > state and free < need
    assert not (tmp_path / "runs" / "big").exists()


def test_an_allocation_that_still_fails_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    """Where the memory check cannot see a failure coming (here: it is told there are 10 PB), XLA's
    RESOURCE_EXHAUSTED becomes one line naming the flags to lower, exit 1, no traceback."""
    import ppo
    from scanrl.harness import memory

    monkeypatch.setattr(memory, "available_memory", lambda device: (10**16, "this host"))
    with pytest.raises(SystemExit) as exited:
        ppo.main(ppo.Config(hidden_size=1_000_000, out_dir=str(tmp_path / "runs")))
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 1 and len(err) == 1, err
    assert err[0].startswith("error: out of memory (RESOURCE_EXHAUSTED") and "lower --num-seeds" in err[0]
    assert "--hidden-size" in err[0]


def test_counts_past_int32_exit_2():
    import ppo

    for overrides, message in [
        (dict(total_timesteps=2**31), "--total-timesteps: 2,147,483,648 is more than the 2,147,483,647"),
    ]:
        with pytest.raises(harness.ConfigError, match=re.escape(message)):
            harness.check(ppo.ALGORITHM, ppo.Config(**overrides))


def program_size(module, config, num_agents):
    """Equations in the jaxpr of the vmapped training chunk (sub-jaxprs included) for `num_agents` agents."""
    init, update = module.make_train_parts(config)
    keys = seed_keys(dataclasses.replace(config, num_seeds=num_agents))
    runner = jax.eval_shape(jax.vmap(init), keys)
    jaxpr = jax.make_jaxpr(jax.vmap(update))(runner)

    def count(j):
        total = len(j.eqns)
        for eqn in j.eqns:
            for param in eqn.params.values():
                for sub in param if isinstance(param, (list, tuple)) else [param]:
                    inner = getattr(sub, "jaxpr", sub)
                    total += count(inner) if hasattr(inner, "eqns") else 0
        return total

    return count(jaxpr.jaxpr)


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_compiled_program_does_not_grow_with_the_agents(script):
    """The program for 64 agents is the program for 2: nothing in an iteration is unrolled per agent (a
    jax.debug.callback per agent once made 1,000 seeds take 45 s to compile)."""
    module = importlib.import_module(script)
    config = module.Config()
    assert program_size(module, config, 2) == program_size(module, config, 64)


def test_one_piece_length_divides_the_run():
    """Every piece of the compiled scan has one static length: the largest divisor of the run's iterations within
    --log-every and a chunk, so one program runs every piece (a prime count falls back to pieces of one)."""
    import ppo

    assert ppo.num_iterations(ppo.Config()) == 976 and piece_length(976, ppo.Config()) == 16  # 976 = 16 x 61
    assert piece_length(976, ppo.Config(num_chunks=100)) == 8  # at most 9 iterations a chunk
    assert piece_length(97, ppo.Config()) == 1
    assert piece_length(10, ppo.Config(log_every=1000)) == 10
    assert harness.check(ppo.ALGORITHM, ppo.Config())[0].num_chunks is None  # checkpoints by time


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
        emit(self, iteration, *args)
        if iteration == 13:
            die()
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
    result = subprocess.run([sys.executable, str(ROOT / "ppo.py"), *FLAGS, "--out-dir", str(out_dir), "--run-name",
                             "whole"], capture_output=True, text=True, timeout=600, env=env, cwd=out_dir)
    assert result.returncode == 0, result.stderr
    return (out_dir / "whole" / "metrics.csv").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("moment, resumed_after", [
    ("compile", ("no checkpoint yet",)),
    # Killed in the last chunk: the checkpoint after iteration 4 is complete (orbax finishes one checkpoint before
    # it starts the next), the one after 8 may still have been in writing.
    ("mid-chunk", ("resuming after iteration 4 of 16", "resuming after iteration 8 of 16")),
    # Killed while the first checkpoint is written: its chunk's rows wait for it, so the run starts again.
    ("first-checkpoint-write", ("no checkpoint yet", "resuming after iteration 4 of 16")),
])
def test_kill_9_then_resume_gives_the_uninterrupted_metrics(moment, resumed_after, uninterrupted, tmp_path, capsys):
    import ppo

    run_dir = tmp_path / "runs" / "killed"
    env = {**os.environ, "WANDB_MODE": "offline"}
    flags = [*FLAGS, "--out-dir", str(tmp_path / "runs"), "--run-name", "killed"]
    killed = subprocess.run([sys.executable, "-c", KILLER.format(root=str(ROOT), flags=flags, moment=moment)],
                            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (run_dir / "config.json").exists() and not (run_dir / "summary.json").exists()
    ppo.main(ppo.Config(resume=str(run_dir)))
    out = capsys.readouterr().out
    assert any(line in out for line in resumed_after), out
    assert (run_dir / "metrics.csv").read_text() == uninterrupted
    assert np.isfinite(json.loads((run_dir / "summary.json").read_text())["eval_return"]).all()
