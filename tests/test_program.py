"""scanrl/harness/program.py: one agent's program: the scan in pieces equals one scan, one piece length divides the
run, the evaluation in pieces equals one call, a count too large for int32 is one line, make_train_parts is called
once per run, and metrics.csv's columns are the metrics dict's keys in the script's order."""


import dataclasses

import jax
import numpy as np
import pytest
from cases import exit_code_and_error, read_csv, tiny_config

from scanrl import harness
from scanrl.harness.program import piece_length, seed_keys

# The tests compile with XLA:CPU's older emitter (conftest.py), which rounds a scan cut in pieces differently from one
# scan; a user's run compiles with the fusion emitters, under which the pieces equal the whole: these two tests
# compile as a run does.
AS_A_RUN = {"xla_cpu_use_fusion_emitters": True}

# The harness runs a run's pieces at one scan length; this guards what make_train and a fork's own loop rely on,
# for an on-policy script and an off-policy one with counters in its runner (the contract resumes every script).
@pytest.mark.slow
@pytest.mark.parametrize("case", ["ppo", "td3"])
def test_scans_of_update_in_pieces_equal_one_scan(case, tmp_path):
    """The 4 iterations of `update` scanned in pieces of 2, 1 and 1 (three compiled scan lengths, as the command
    line's pieces and chunks cut a run) give the numbers of one scan over all of them, bit for bit. (`make_train`
    under one jit agrees to float rounding: test_sweeps.py compares it with a sweep's agents.)"""
    module, config = tiny_config(case, tmp_path)
    keys = seed_keys(config)
    init, update = module.make_train_parts(config)
    init = jax.jit(jax.vmap(init), compiler_options=AS_A_RUN)

    def scan(length):
        return jax.jit(jax.vmap(lambda runner: jax.lax.scan(lambda r, _: update(r), runner, None, length)),
                       compiler_options=AS_A_RUN)

    assert module.ALGORITHM.num_iterations(config) == 4
    whole_runner, whole = scan(4)(init(keys))
    runner, parts = init(keys), []
    for length in (2, 1, 1):
        runner, metrics = scan(length)(runner)
        parts.append(metrics)
    for key in whole:
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts], axis=1), whole[key], err_msg=key)
    for got, expected in zip(jax.tree.leaves(runner), jax.tree.leaves(whole_runner), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_one_piece_length_divides_the_run():
    """Every piece of the compiled scan has one static length: the largest divisor of the run's iterations within
    --log-every and a chunk, so one program runs every piece (a prime count falls back to pieces of one)."""
    import ppo

    assert ppo.ALGORITHM.num_iterations(ppo.Config()) == 976 and piece_length(976, ppo.Config()) == 16  # 976 = 16 x 61
    assert piece_length(976, ppo.Config(num_chunks=100)) == 8  # at most 9 iterations a chunk
    assert piece_length(97, ppo.Config()) == 1
    assert piece_length(10, ppo.Config(log_every=1000)) == 10
    assert harness.check(ppo.ALGORITHM, ppo.Config())[0].num_chunks is None  # checkpoints by time


def test_a_count_too_large_for_int32_is_one_line_naming_the_flags_and_leaves_nothing(tmp_path, capsys):
    """--update-epochs 1e9 makes PPO's update count 3.9e12: tracing it was a 51-line OverflowError; it is one line
    naming the flags set away from their defaults, before anything is written."""
    module, config = tiny_config("ppo", tmp_path / "runs", update_epochs=10**9)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and err == [
        "error: ppo.py: a count of 16,000,000,000 in the compiled program is more than the 2,147,483,647 (2**31 - "
        "1) it holds; lower the flags that multiply into it (--total-timesteps 2048, --update-epochs 1000000000)"]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_an_evaluation_in_pieces_plays_the_episodes_of_one_call():
    """The final evaluation runs in pieces of EVAL_PIECE env steps (the host stops it or shows its progress between
    them): pieces of 7 steps give the returns of one while loop over the whole time limit, bit for bit."""
    import ppo
    from scanrl.harness.program import make_evaluate

    config = ppo.Config(env="CartPole-v1", eval_episodes=5)
    runner = jax.jit(ppo.make_train_parts(config)[0], compiler_options=AS_A_RUN)(jax.random.PRNGKey(0))
    evaluation, key = make_evaluate(ppo.ALGORITHM, config), jax.random.PRNGKey(3)
    whole = jax.jit(evaluation.returns, compiler_options=AS_A_RUN)(key, runner)
    carry, steps = evaluation.start(key, runner), jax.jit(evaluation.steps, compiler_options=AS_A_RUN)
    for until in range(7, evaluation.max_steps + 7, 7):
        carry = steps(key, runner, carry, until)
    assert int(carry.t) < evaluation.max_steps and bool(carry.finished.all())  # it ended early, as one call does
    np.testing.assert_array_equal(np.asarray(carry.returns), np.asarray(whole))


@pytest.mark.slow
def test_a_run_makes_its_parts_once_and_writes_its_metrics_in_the_order_of_its_dict(tmp_path):
    """make_train_parts is called once per run (the memory check reads the plan's shapes of init), and metrics.csv's
    columns are the keys of the metrics dict in the order `update` writes them (jax's dicts come back sorted): a
    fork's new metric needs no second list."""
    import functools

    import reinforce

    original, calls = reinforce.make_train_parts, []

    @functools.wraps(original)  # the same module: the run is reinforce's
    def counted(config):
        calls.append(config)
        return original(config)

    algorithm = dataclasses.replace(reinforce.ALGORITHM, make_train_parts=counted)
    _, config = tiny_config("reinforce", tmp_path / "runs", run_name="run")
    harness.main(algorithm, config)
    assert len(calls) == 1
    header = read_csv(tmp_path / "runs" / "run" / "metrics.csv")[0]
    assert header == ["seed", "iteration", "env_steps", "episodes", "episode_return", "episode_length", "loss/actor",
                      "loss/critic", "entropy", "approx_kl", "nonfinite"]
