"""ppo.py: GAE, reproducibility across seeds and batches, the CLI as a user runs it, and learning."""

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import read_run
from hypothesis import given, settings
from hypothesis import strategies as st

import ppo


def gae_by_definition(rewards, values, next_values, terminated, truncated, gamma, lam):
    """A_t = sum_l (gamma lam)^l delta_{t+l}, summed forward until the episode ends (no recursion)."""
    num_steps, num_envs = rewards.shape
    advantages = np.zeros_like(rewards)
    for n in range(num_envs):
        for t in range(num_steps):
            total, weight = 0.0, 1.0
            for k in range(t, num_steps):
                bootstrap = 0.0 if terminated[k, n] else gamma * next_values[k, n]
                total += weight * (rewards[k, n] + bootstrap - values[k, n])
                if terminated[k, n] or truncated[k, n]:
                    break
                weight *= gamma * lam
            advantages[t, n] = total
    return advantages


@settings(max_examples=40, deadline=None)
@given(
    num_steps=st.integers(1, 12),
    num_envs=st.integers(1, 3),
    gamma=st.floats(0.5, 1.0),
    lam=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_gae_matches_reference(num_steps, num_envs, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    shape = (num_steps, num_envs)
    rewards, values, next_values = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    terminated = rng.random(shape) < 0.2
    truncated = (rng.random(shape) < 0.2) & ~terminated
    advantages, targets = ppo.calculate_gae(
        jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(next_values),
        jnp.asarray(terminated, jnp.float32), jnp.asarray(terminated | truncated, jnp.float32), gamma, lam,
    )
    expected = gae_by_definition(rewards, values, next_values, terminated, truncated, gamma, lam)
    np.testing.assert_allclose(advantages, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(targets, expected + values, rtol=1e-4, atol=1e-4)


def test_gae_bootstraps_on_truncation_not_on_termination():
    one = jnp.ones((1, 1))
    truncated, _ = ppo.calculate_gae(one, 0 * one, 10 * one, 0 * one, one, 0.9, 0.95)
    terminated, _ = ppo.calculate_gae(one, 0 * one, 10 * one, one, one, 0.9, 0.95)
    assert float(truncated[0, 0]) == pytest.approx(1 + 0.9 * 10)
    assert float(terminated[0, 0]) == pytest.approx(1.0)


SMALL = dict(total_timesteps=512 * 6, log_every=2)


def run_seeds(config, seeds):
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    return jax.jit(jax.vmap(ppo.make_train(config)))(keys)


def test_same_seed_gives_identical_metrics():
    config = ppo.Config(**SMALL)
    _, first = run_seeds(config, [3, 4])
    _, second = run_seeds(config, [3, 4])
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_agent_of_batch_matches_its_seed_alone():
    config = ppo.Config(**SMALL)
    _, batch = run_seeds(config, [0, 1, 2, 3])
    _, alone = run_seeds(config, [2])
    # Same episodes; losses equal up to float rounding (batched and unbatched matmuls sum differently).
    np.testing.assert_array_equal(batch["episode_return"][2], alone["episode_return"][0])
    for key in ("loss/actor", "loss/critic", "entropy"):
        np.testing.assert_allclose(batch[key][2], alone[key][0], rtol=1e-4, atol=1e-6, err_msg=key)


def test_runs_on_minatar():
    # MinAtar observations are 10x10xC grids: make_vec flattens them for the MLPs.
    config = ppo.Config(env="Breakout-MinAtar", total_timesteps=512, num_envs=4, num_steps=64, log_every=1)
    _, metrics = run_seeds(config, [0, 1])
    assert metrics["env_steps"].shape == (2, 2)
    for key in ("loss/actor", "loss/critic", "entropy"):
        assert np.all(np.isfinite(metrics[key])), key


def test_different_seeds_differ():
    runner, metrics = run_seeds(ppo.Config(total_timesteps=512, log_every=1), [0, 1, 2, 3])
    kernels = np.asarray(runner.train_state.params["actor"]["params"]["Dense_0"]["kernel"])
    for i in range(4):
        for j in range(i):
            assert not np.allclose(kernels[i], kernels[j])
    assert len(set(np.asarray(metrics["loss/critic"][:, 0]).tolist())) == 4


def test_logging_does_not_change_results():
    config = ppo.Config(**SMALL)
    calls = []
    keys = jnp.stack([jax.random.PRNGKey(s) for s in (0, 1)])
    _, logged = jax.jit(jax.vmap(ppo.make_train(config, log_fn=lambda *a: calls.append(a))))(keys)
    _, silent = jax.jit(jax.vmap(ppo.make_train(config)))(keys)
    jax.effects_barrier()
    for key in logged:
        np.testing.assert_array_equal(logged[key], silent[key], err_msg=key)
    assert len(calls) == 2 * 3  # 2 agents x updates 2, 4, 6


def test_help_lists_flags(run_script):
    result = run_script("ppo.py", "--help", add_out_dir=False)
    assert result.returncode == 0
    for flag in ("--env", "--seed", "--num-seeds", "--total-timesteps", "--track", "--wandb-project",
                 "--wandb-entity", "--wandb-group", "--out-dir", "--run-name", "--log-every"):
        assert flag in result.stdout
    assert "independent agents trained in parallel" in result.stdout


def test_small_run_writes_every_output(run_script, tmp_path):
    result = run_script("ppo.py", "--num-seeds", "2", "--total-timesteps", "2048", "--log-every", "1",
                        "--run-name", "small")
    assert result.returncode == 0, result.stderr
    assert "compiled in" in result.stdout and "update      4" in result.stdout
    run_dir, summary = read_run(tmp_path / "runs")
    assert run_dir.name == "small"
    assert json.loads((run_dir / "config.json").read_text())["num_seeds"] == 2
    for key in ("algo", "env", "num_seeds", "total_timesteps", "compile_s", "train_s", "sps"):
        assert key in summary
    assert summary["algo"] == "ppo" and summary["env_steps"] == 2048
    assert len(summary["final_return"]) == 2 and len(summary["eval_return"]) == 2
    assert all(r is not None and r > 0 for r in summary["eval_return"])
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 4 and {r["seed"] for r in rows} == {"0", "1"}
    assert (run_dir / "learning_curve.png").stat().st_size > 1000


def test_continuous_small_run(run_script, tmp_path):
    result = run_script("ppo.py", "--env", "Pendulum-v1", "--total-timesteps", "1024")
    assert result.returncode == 0, result.stderr
    _, summary = read_run(tmp_path / "runs")
    assert summary["eval_return"][0] < 0  # Pendulum's rewards are costs


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "CartPol-v1"], "--env: unknown env 'CartPol-v1': did you mean CartPole-v1"),
        (["--activation", "gelu"], "--activation 'gelu' is unknown"),
        (["--num-envs", "0"], "--num-envs must be a positive integer"),
        (["--num-seeds", "-2"], "--num-seeds must be a positive integer"),
        (["--num-minibatches", "3"], "--num-minibatches 3 does not divide the batch"),
        (["--total-timesteps", "100"], "--total-timesteps 100 is smaller than one batch"),
        (["--learning-rate", "0"], "--learning-rate must be positive"),
    ],
)
def test_bad_input_exits_2_with_one_line(run_script, tmp_path, args, message):
    result = run_script("ppo.py", *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not (tmp_path / "runs").exists()


def test_track_writes_offline_wandb_run(run_script, tmp_path):
    result = run_script("ppo.py", "--track", "--total-timesteps", "1024", "--log-every", "1")
    assert result.returncode == 0, result.stderr
    run_dir, _ = read_run(tmp_path / "runs")
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and any(offline[0].glob("*.wandb"))


def test_wandb_failure_does_not_stop_training(run_script, tmp_path):
    result = run_script("ppo.py", "--track", "--total-timesteps", "1024", env_overrides={"WANDB_MODE": "not-a-mode"})
    assert result.returncode == 0, result.stderr
    assert "warning: wandb could not start" in result.stderr
    read_run(tmp_path / "runs")


@pytest.mark.slow
def test_cartpole_learns(run_script, tmp_path):
    # CleanRL reports 490 +- 6 for PPO on CartPole-v1 at 500k steps.
    result = run_script("ppo.py", "--env", "CartPole-v1", "--num-seeds", "4", "--total-timesteps", "500000")
    assert result.returncode == 0, result.stderr
    _, summary = read_run(tmp_path / "runs")
    assert np.mean(summary["eval_return"]) >= 450, summary


PENDULUM = ["--env", "Pendulum-v1", "--num-envs", "16", "--num-steps", "128", "--num-minibatches", "32",
            "--update-epochs", "10", "--learning-rate", "1e-3", "--ent-coef", "0", "--gae-lambda", "0.95"]


@pytest.mark.slow
def test_pendulum_learns_above_random(run_script, tmp_path):
    # A uniformly random policy scores about -1200 on Pendulum-v1.
    result = run_script("ppo.py", *PENDULUM, "--num-seeds", "2", "--total-timesteps", "300000")
    assert result.returncode == 0, result.stderr
    _, summary = read_run(tmp_path / "runs")
    assert np.mean(summary["eval_return"]) >= -500, summary
