"""pqn.py: Q(lambda) targets against the mixture of n-step returns, the epsilon schedule over the runner's env-step
counter, the CLI and its outputs, and (slow) learning on CartPole-v1 and Acrobot-v1."""

import csv

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pqn
from tests.conftest import FAST_COMPILE_OPTIONS, read_run


def q_lambda_reference(reward, terminated, done, next_value, gamma, lam):
    """Q(lambda) returns the long way, per env and step: the lambda-weighted mixture of the n-step returns
    G^(n) = r_t + ... + gamma^(n-1) r_(t+n-1) + gamma^n (1 - terminated) max_a Q(s_(t+n)), for n up to the end of
    the episode or of the rollout, whichever comes first; the longest takes the remaining weight lambda^(N-1)."""
    steps, num_envs = len(reward), len(reward[0])
    targets = [[0.0] * num_envs for _ in range(steps)]
    for e in range(num_envs):
        for t in range(steps):
            last = t
            while last < steps - 1 and not done[last][e]:
                last += 1
            longest = last - t + 1
            for n in range(1, longest + 1):
                g = sum(gamma**k * reward[t + k][e] for k in range(n))
                g += gamma**n * (1.0 - terminated[t + n - 1][e]) * next_value[t + n - 1][e]
                weight = lam**(n - 1) if n == longest else (1 - lam) * lam**(n - 1)
                targets[t][e] += weight * g
    return targets


@settings(max_examples=60, deadline=None)
@given(data=st.data(), steps=st.integers(1, 7), num_envs=st.integers(1, 3), gamma=st.floats(0.0, 1.0),
       lam=st.floats(0.0, 1.0))
def test_q_lambda_targets_match_the_mixture_of_n_step_returns(data, steps, num_envs, gamma, lam):
    values = st.floats(-5.0, 5.0, width=32)
    reward = data.draw(st.lists(st.lists(values, min_size=num_envs, max_size=num_envs), min_size=steps,
                                max_size=steps))
    next_value = data.draw(st.lists(st.lists(values, min_size=num_envs, max_size=num_envs), min_size=steps,
                                    max_size=steps))
    # Each step of each env: the episode goes on, terminates, or is truncated (ends, and bootstraps).
    ends = data.draw(st.lists(st.lists(st.sampled_from(["on", "terminated", "truncated"]), min_size=num_envs,
                                       max_size=num_envs), min_size=steps, max_size=steps))
    terminated = [[float(x == "terminated") for x in row] for row in ends]
    done = [[float(x != "on") for x in row] for row in ends]
    expected = q_lambda_reference(reward, terminated, done, next_value, gamma, lam)
    got = pqn.q_lambda_targets(*(jnp.asarray(x, jnp.float32) for x in (reward, terminated, done, next_value)),
                              jnp.float32(gamma), jnp.float32(lam))
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-4)


def test_epsilon_decays_with_the_env_steps_counted_in_the_runner():
    # 8 iterations of 8 x 32 = 256 env steps; epsilon decays over the first 1024 steps, the first 4 iterations.
    config = pqn.Config(total_timesteps=2048, num_envs=8, num_steps=32, num_minibatches=4, update_epochs=2,
                        exploration_fraction=0.5, hidden_sizes=(16,))
    key = jax.random.PRNGKey(0)
    runner, metrics = jax.jit(pqn.make_train(config)).lower(key).compile(FAST_COMPILE_OPTIONS)(key)
    assert set(metrics) == {"episodes", "episode_return", "episode_length", "epsilon", "loss/td", "q_value"}
    assert metrics["epsilon"].shape == (8,)
    np.testing.assert_allclose(metrics["epsilon"], [1.0, 0.7625, 0.525, 0.2875] + [0.05] * 4, rtol=1e-6)
    assert int(runner.env_steps) == 2048 and int(runner.train_state.step) == 8 * 2 * 4
    assert np.all(np.isfinite(metrics["loss/td"]))


@pytest.mark.slow  # a whole run of the command line: 29 s on 2 cores
def test_cli_pqn_options_run(run_script, tmp_path):
    result = run_script(
        "pqn.py", "--env", "CartPole-v1", "--num-seeds", "2", "--total-timesteps",
        "2048", "--num-envs", "8", "--num-steps", "32", "--num-minibatches", "4", "--update-epochs", "2",
        "--q-lambda", "0.9", "--loss", "huber", "--no-anneal-lr", "--hidden-sizes", "32", "32", timeout=300,
    )
    assert result.returncode == 0, result.stderr
    run_dir, summary = read_run(tmp_path / "runs")
    assert summary["algo"] == "pqn" and summary["env_steps"] == 2048 and len(summary["eval_return"]) == 2
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert len(rows) == 2 * 8 and all(np.isfinite(float(r["loss/td"])) for r in rows)
    assert float(rows[0]["epsilon"]) == 1.0 and float(rows[-1]["epsilon"]) == pytest.approx(0.05)


@pytest.mark.slow
def test_pqn_learns_cartpole(run_script, tmp_path):
    """CleanRL's PQN reports 495 +- 7 on CartPole-v1 in 500k steps (Acrobot-v1: the learning suite). The IQM
    over seeds, as the results report it: one CartPole seed of 4 (seed 2) collapses to about 230 on some CPUs (the
    float rounding of another instruction set), an open question of the learning results (issue 30)."""
    result = run_script("pqn.py", "--env", "CartPole-v1", "--num-seeds", "4", timeout=600, optimized=True)
    assert result.returncode == 0, result.stderr
    _, summary = read_run(tmp_path / "runs")
    assert summary["eval_return_iqm"]["iqm"] >= 475.0, summary["eval_return"]
