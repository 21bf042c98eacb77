"""dqn_tabular_q.py: the averaged tabular update, the env-step counter that epsilon, the warm-up
and the gradient steps read, the resolved Config, q_values.png and the greedy path length, the CLI and its outputs,
and (slow) learning on GridWorld-v0 and CartPole-v1 (Acrobot-v1 and MountainCar-v0: the quick suite)."""

import csv
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import check_program

import dqn_tabular_q as dq
from scanrl import harness
from tests.conftest import FAST_COMPILE_OPTIONS, read_run


def test_q_learning_update_averages_envs_on_the_same_pair():
    q = jnp.zeros((3, 2)).at[1, 0].set(0.5)
    states, actions = jnp.array([1, 1, 1, 2]), jnp.array([0, 0, 0, 1])
    q = dq.q_learning_update(q, states, actions, jnp.array([1.0, 1.0, 0.0, 1.0]), 0.1)
    # (1, 0): mean TD error of (0.5, 0.5, -0.5); (2, 1): one env, the textbook update
    np.testing.assert_allclose(q, [[0.0, 0.0], [0.5 + 0.1 * 0.5 / 3, 0.0], [0.0, 0.1]], rtol=1e-6)


def tiny(**overrides):
    config = dq.Config(**overrides)
    dq.validate(config)
    return config


def test_tabular_counts_env_steps_for_epsilon_and_fills_its_table():
    # FrozenLake's goal is near, so the table fills within the budget. 10 iterations of 500 env steps; epsilon,
    # read from the runner's counter, reaches 0 after 2,500 steps.
    config = tiny(env="FrozenLake-misc", total_timesteps=5_000, num_steps=500, start_e=1.0, end_e=0.0,
                  exploration_fraction=0.5)
    runner, metrics = jax.jit(dq.make_train(config))(jax.random.PRNGKey(1))
    assert np.abs(runner.q_table).sum() > 0
    assert set(metrics) == {"episodes", "episode_return", "episode_length", "epsilon"}
    assert int(runner.env_steps) == 5_000
    np.testing.assert_allclose(metrics["epsilon"], [1.0, 0.8, 0.6, 0.4, 0.2] + [0.0] * 5, atol=1e-6)


def test_dqn_counts_env_steps_for_epsilon_the_warm_up_and_the_gradient_steps():
    # 20 iterations of 4 envs x 25 steps; 2 gradient steps per vector step (train-frequency 2) from env step 1000,
    # the last vector step of iteration 9: 251 vector steps learn.
    config = tiny(env="CartPole-v1", total_timesteps=2_000, num_envs=4, num_steps=25, train_frequency=2,
                  learning_starts=1_000, buffer_size=1_000, batch_size=32, hidden_sizes=(16,), start_e=1.0,
                  end_e=0.0, exploration_fraction=0.5)
    key = jax.random.PRNGKey(0)
    runner, metrics = jax.jit(dq.make_train(config)).lower(key).compile(FAST_COMPILE_OPTIONS)(key)
    assert set(metrics) == {"episodes", "episode_return", "episode_length", "epsilon", "loss/td", "q_value"}
    assert metrics["epsilon"].shape == (20,)
    assert int(runner.env_steps) == 2_000 and int(runner.train_state.step) == 251 * 2
    np.testing.assert_allclose(metrics["epsilon"], np.maximum(0.0, 1.0 - np.arange(20) * 100 / 1_000), atol=1e-6)
    assert np.isnan(metrics["loss/td"][:9]).all() and np.isfinite(metrics["loss/td"][9:]).all()


def test_rmsprop_is_the_papers_centered_rmsprop():
    # PyTorch's RMSprop(lr, alpha=0.95, eps=0.01, centered=True), written out: the mean square and the mean of the
    # gradients decay at 0.95, and the step divides by their centered root plus 0.01 (outside the root).
    config = dq.Config(env="CartPole-v1", optimizer="rmsprop", learning_rate=0.5)
    tx = dq.dqn_optimizer(config)
    params = {"w": jnp.zeros(3)}
    state = tx.init(params)
    square, mean = np.zeros(3), np.zeros(3)
    for grad in ([1.0, -0.01, 2.0], [0.5, 0.02, -1.0]):
        updates, state = tx.update({"w": jnp.array(grad)}, state, params)
        square, mean = 0.95 * square + 0.05 * np.square(grad), 0.95 * mean + 0.05 * np.array(grad)
        expected = -0.5 * np.array(grad) / (np.sqrt(square - mean**2) + 0.01)
        np.testing.assert_allclose(updates["w"], expected, rtol=1e-5)


def test_config_is_resolved_as_it_is_made_without_making_an_env(monkeypatch):
    from scanrl import envs

    def no_env(*args, **kwargs):
        raise AssertionError("a Config made an env")

    monkeypatch.setattr(envs, "make", no_env)
    monkeypatch.setattr(envs, "make_vec", no_env)
    assert dq.Config(env="GridWorld-v0").agent == "tabular"
    assert dq.Config(env="FrozenLake-misc").agent == "tabular"
    assert dq.Config(env="my_envs:Chain").agent == "dqn"  # your own finite-state env: --agent tabular
    assert dq.Config(env="my_envs:Chain", agent="tabular").agent == "tabular"
    config = dq.Config(env="CartPole-v1")
    assert (config.agent, config.learning_rate, config.gamma, config.num_envs) == ("dqn", 2.5e-4, 0.99, 10)
    config = dq.Config(env="GridWorld-v0", learning_rate=0.5)
    assert (config.learning_rate, config.gamma, config.start_e, config.num_envs) == (0.5, 0.9, 0.1, 1)
    # Idempotent: a resolved config (as config.json records it) is made again unchanged, and replace changes only
    # what it names.
    assert dq.Config(**dataclasses.asdict(config)) == config
    assert dataclasses.replace(config, gamma=0.5) == dq.Config(env="GridWorld-v0", learning_rate=0.5, gamma=0.5)


def test_sweeping_a_field_of_the_other_learner_is_refused():
    with pytest.raises(harness.ConfigError) as error:
        check_program(dq.ALGORITHM, dq.Config(sweep=("tau=0.5,1",)))  # tabular: no target network
    assert "--sweep tau: the value of config.tau changes nothing" in str(error.value)


def test_write_outputs_draws_the_q_values_and_measures_greedy_paths_on_gridworld(tmp_path):
    config = dq.Config(num_seeds=2)
    runners = jax.vmap(dq.make_train_parts(config)[0])(jax.random.split(jax.random.PRNGKey(0), 2))
    # Agent 0 goes left along the bottom row, then up column 0: the 18-step shortest path. Agent 1's zero table
    # picks the first of its tied actions, right, into the wall at the start: it never arrives.
    left, up = 2, 3
    q_path = np.zeros((96, 4), np.float32)
    q_path[np.arange(96), np.where(np.arange(96) % 12 > 0, left, up)] = 1.0
    runners = jax.tree.map(np.asarray, runners._replace(q_table=jnp.stack([q_path, jnp.zeros((96, 4))])))
    fields, figures = dq.write_outputs(config, runners)
    assert fields == {"greedy_path_length": [18, None]}
    assert list(figures) == ["q_values.png"] and figures["q_values.png"].axes
    assert dq.write_outputs(dq.Config(env="FrozenLake-misc"), None) == ({}, {})
    assert dq.write_outputs(dq.Config(env="CartPole-v1"), None) == ({}, {})


@pytest.mark.slow
def test_tabular_gridworld_writes_run(tmp_path):
    dq.main(dq.Config(num_seeds=3, total_timesteps=20_000, log_every=5, out_dir=str(tmp_path / "runs")))
    run_dir, summary = read_run(tmp_path / "runs")
    for name in ("config.json", "metrics.csv", "learning_curve.png", "q_values.png", "summary.json"):
        assert (run_dir / name).is_file(), name
    assert summary["algo"] == "dqn_tabular_q" and summary["seeds"] == [0, 1, 2]
    assert summary["env_steps"] == 20_000
    assert summary["sps"] == pytest.approx(20_000 * 3 / summary["train_s"])
    assert len(summary["final_return"]) == len(summary["eval_return"]) == len(summary["greedy_path_length"]) == 3
    assert all(n is None or n >= 18 for n in summary["greedy_path_length"])
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert len(rows) == 3 * 20 and {"episode_length", "epsilon"} <= set(rows[0])


@pytest.mark.slow
def test_cli_dqn_options_run(run_script, tmp_path):
    result = run_script(
        "dqn_tabular_q.py", "--env", "CartPole-v1", "--num-seeds", "2", "--total-timesteps", "3000",
        "--learning-starts", "1000", "--num-envs", "4", "--train-frequency", "2", "--num-steps", "25",
        "--double-dqn", "--loss", "huber", "--tau", "0.5", "--target-network-frequency", "100",
        "--hidden-sizes", "32", "32", timeout=300,
    )
    assert result.returncode == 0, result.stderr
    run_dir, summary = read_run(tmp_path / "runs")
    assert summary["algo"] == "dqn_tabular_q" and summary["env_steps"] == 3000 and "greedy_path_length" not in summary
    assert all(r is not None and r > 0 for r in summary["eval_return"])
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    losses = [float(r["loss/td"]) for r in rows]
    assert np.isnan(losses[0]) and np.isfinite(losses[-1])  # learning starts after the warm-up


@pytest.mark.slow
def test_30_tabular_agents_find_the_18_step_path_on_gridworld(run_script, tmp_path):
    result = run_script("dqn_tabular_q.py", "--env", "GridWorld-v0", "--num-seeds", "30",
                        "--total-timesteps", "1000000", timeout=600, optimized=True)  # 30 x 1M: compiled to run
    assert result.returncode == 0, result.stderr
    _, summary = read_run(tmp_path / "runs")
    assert summary["greedy_path_length"] == [18] * 30
    assert summary["eval_return"] == [1.0] * 30


@pytest.mark.slow
def test_dqn_learns_cartpole(run_script, tmp_path):
    """4 seeds x 250k steps: mean eval return >= 400 (480.9 here, per seed 500, 449.8, 473.6, 500: 2026-11-29; CleanRL's
    DQN on CartPole: 488.7 at 500k)."""
    result = run_script("dqn_tabular_q.py", "--env", "CartPole-v1", "--num-seeds", "4",
                        "--total-timesteps", "250000", timeout=900, optimized=True)
    assert result.returncode == 0, result.stderr
    _, summary = read_run(tmp_path / "runs")
    assert np.mean(summary["eval_return"]) >= 400, summary["eval_return"]
