"""The Brax adapter (scanrl/envs/brax.py): episode semantics on a stand-in physics, the id syntax, the missing-brax
error, and a short td3.py run on brax/inverted_pendulum (skipped when brax is not installed)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import read_run
from flax import struct

from scanrl import envs
from scanrl.envs import brax as brax_envs


@struct.dataclass
class FakeState:
    obs: jax.Array
    reward: jax.Array
    done: jax.Array


class FakeBraxEnv:
    """The slice of a Brax env the adapter uses: x moves by the action each step; 'done' (a fall) when
    x > 3; every reset starts at x = 10 * uniform(key), so resets are told apart from steps."""

    action_size = 1

    class sys:  # noqa: N801 - mirrors brax's env.sys.actuator.ctrl_range
        class actuator:  # noqa: N801
            ctrl_range = jnp.array([[-1.0, 1.0]])

    def reset(self, key):
        return FakeState(jnp.full(2, 10.0) * jax.random.uniform(key) - 20.0, jnp.float32(0), jnp.float32(0))

    def step(self, state, action):
        obs = state.obs + action[0]
        return FakeState(obs, obs[0], (obs[0] > 3.0).astype(jnp.float32))


def rollout(max_steps, actions):
    env = envs.VecEnv(envs.EpisodeStatistics(brax_envs.BraxEnv(FakeBraxEnv(), "fake")), 1)
    params = brax_envs.EnvParams(max_steps_in_episode=max_steps)
    obs, state = env.reset(jax.random.PRNGKey(0), params)

    def _step(carry, inputs):
        obs, state = carry
        key, action = inputs
        next_obs, state, reward, terminated, truncated, info = env.step(key, state, action[None, None], params)
        out = (obs, next_obs, terminated, truncated, info["final_observation"], info["episode_done"])
        return (next_obs, state), out

    keys = jax.random.split(jax.random.PRNGKey(1), len(actions))
    _, out = jax.lax.scan(_step, (obs, state), (keys, jnp.asarray(actions, jnp.float32)))
    return [np.asarray(x)[:, 0] for x in out]


def test_time_limit_truncates_and_keeps_final_observation():
    obs, next_obs, terminated, truncated, final, done = rollout(4, np.zeros(10))
    np.testing.assert_array_equal(truncated, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0])
    assert not terminated.any()
    np.testing.assert_array_equal(final[3], obs[3])  # zero action: the last obs of the episode stays put
    assert not np.allclose(next_obs[3], final[3])  # the auto-reset obs is a fresh random start
    assert not np.allclose(next_obs[3], next_obs[7])  # and not one cached initial state


def test_brax_done_is_termination_not_truncation():
    _, next_obs, terminated, truncated, final, done = rollout(100, [1.0] * 40)  # x from < -10 past 3: a fall
    first = int(np.argmax(terminated))
    assert terminated[first] and not truncated.any() and done[first]
    assert final[first, 0] > 3.0 and next_obs[first, 0] < 0  # final obs kept, env reset


def test_id_syntax_and_errors(monkeypatch):
    with pytest.raises(ValueError, match="did you mean brax/halfcheetah"):
        envs.make("brax/halfcheeta")
    with pytest.raises(ValueError, match="unknown Brax backend 'warp'"):
        envs.make("brax/halfcheetah:warp")
    with pytest.raises(ValueError, match="names backend 'mjx' but backend='spring'"):
        envs.make("brax/halfcheetah:mjx", backend="spring")
    monkeypatch.setattr(brax_envs, "is_installed", lambda: False)
    with pytest.raises(ValueError, match=r"needs Brax, which is not installed: pip install -r requirements-brax.txt"):
        envs.make("brax/halfcheetah")
    assert not any(e.startswith("brax/") for e in envs.list_envs())


def test_halfcheetah_spaces():
    pytest.importorskip("brax", reason="brax is not installed: pip install -r requirements-brax.txt")
    assert "brax/halfcheetah" in envs.list_envs()
    env, params = envs.make("brax/halfcheetah")
    assert env.name == "brax/halfcheetah:spring" and params.max_steps_in_episode == 1000
    assert env.observation_space(params).shape == (17,)
    space = env.action_space(params)
    assert space.shape == (6,) and np.all(space.low == -1) and np.all(space.high == 1)
    assert not envs.is_discrete(env, params)
    assert envs.make("brax/halfcheetah", backend="positional")[0].name == "brax/halfcheetah:positional"


@pytest.mark.slow
def test_td3_smoke_on_brax_physics(run_script, tmp_path):
    pytest.importorskip("brax", reason="brax is not installed: pip install -r requirements-brax.txt")
    # Compiling Brax physics dominates this test: the smallest model (inverted_pendulum compiles in 13 s here,
    # halfcheetah in 21 s), compiled at XLA's lowest backend optimisation level, as every test's (conftest.py).
    result = run_script("td3.py", "--env", "brax/inverted_pendulum", "--total-timesteps", "64", "--num-envs", "2",
                        "--learning-starts", "32", "--log-every", "32", "--updates-per-step", "1",
                        "--batch-size", "16", "--hidden-size", "16", "--eval-episodes", "1")
    assert result.returncode == 0, result.stderr
    run_dir, summary = read_run(tmp_path / "runs")
    assert run_dir.name.startswith("brax-inverted_pendulum__td3__")
    assert summary["env"] == "brax/inverted_pendulum" and summary["env_steps"] == 64 and summary["updates"] == 34
    assert np.isfinite(summary["eval_return"][0])  # one episode of the deterministic actor
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()  # MuJoCo's warnings go through Python's, not into the cwd
