"""Gymnasium's MuJoCo tasks on MJX (scanrl/envs/gymnasium_mujoco.py) held to Gymnasium's own envs, C MuJoCo in
float64, the oracle: one step from the same state gives Gymnasium's observation, reward and ending; the resets are
drawn as Gymnasium draws them; a random policy's episodes score as Gymnasium's do. The tolerances are the ones
docs/envs.md states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE_OPTIONS

from scanrl import envs
from scanrl.envs import gymnasium_mujoco
from scanrl.envs.gymnasium_mujoco import Physics

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco", reason="pip install -r requirements-mujoco.txt")

TASKS = list(gymnasium_mujoco.TASKS)
# float32 MJX against float64 C MuJoCo, one env step from the same state (the largest seen over these tests' steps,
# HalfCheetah's, was 7.7e-4 in the observation and 1e-5 in the reward): a wrong term, index or clip is far larger.
OBS_ATOL, REWARD_ATOL = 2e-3, 1e-4


NUM_ENVS, HORIZON = 32, 100  # the batch every task's compiled step takes; random-policy steps per env


@pytest.fixture(scope="module", params=TASKS)
def task(request):
    """(task, env, params, step): `step(keys, states, actions)` is gymnax's step (time limit and auto-reset
    included) of NUM_ENVS envs, compiled once per task for every test here (an MJX step takes 5-30 s to compile), at
    XLA's backend level 1: at level 0 Hopper's step compiled 4 s faster and ran 5x slower (0.27 s a step)."""
    env, params = envs.make(f"mujoco/{request.param}")
    keys = jax.random.split(jax.random.PRNGKey(0), NUM_ENVS)
    _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    actions = jnp.zeros((NUM_ENVS, *env.action_space(params).shape))
    step = jax.jit(jax.vmap(lambda key, state, action: env.step(key, state, action, params)))
    return request.param, env, params, step.lower(keys, states, actions).compile({"xla_backend_optimization_level": 1})


def gymnasium_steps(name, num_steps, seed=0):
    """Random-action steps of Gymnasium's env, reset where an episode ends: each step's state before it (qpos, qvel,
    the solver's warm start), its action, and what Gymnasium returned."""
    env = gym.make(name)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    data = env.unwrapped.data
    before, actions, outcomes = [], [], []
    for _ in range(num_steps):
        before.append((data.qpos.copy(), data.qvel.copy(), data.qacc_warmstart.copy()))
        actions.append(env.action_space.sample())
        obs, reward, terminated, truncated, _ = env.step(actions[-1])
        outcomes.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            env.reset()
    env.close()
    states = Physics(*(jnp.asarray(np.stack(x), jnp.float32) for x in zip(*before, strict=True)))
    return states, jnp.asarray(np.stack(actions), jnp.float32), [np.array(x) for x in zip(*outcomes, strict=True)]


@pytest.mark.slow  # each task's step compiles in 5-30 s (the fixture)
def test_one_step_from_gymnasiums_state_gives_gymnasiums_outcome(task):
    """From the states of random-action episodes, terminations included; and the time limit a truncation, at
    Gymnasium's step count."""
    name, env, params, step = task
    assert params.max_steps_in_episode == gym.spec(name).max_episode_steps
    states, actions, (obs, reward, terminated, _) = gymnasium_steps(name, 6 * NUM_ENVS)
    keys = jax.random.split(jax.random.PRNGKey(0), NUM_ENVS)
    _, template = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    for start in range(0, len(actions), NUM_ENVS):
        batch = slice(start, start + NUM_ENVS)
        # the first two envs at the last two steps before the time limit: the second is truncated
        time = jnp.zeros(NUM_ENVS, jnp.int32).at[:2].set(params.max_steps_in_episode - jnp.arange(2, 0, -1))
        state = template.replace(inner=jax.tree.map(lambda x: x[batch], states), time=time)  # noqa: B023
        _, _, ours_reward, ours_terminated, ours_truncated, info = step(keys, state, actions[batch])
        np.testing.assert_allclose(info["final_observation"], obs[batch], rtol=0, atol=OBS_ATOL)
        np.testing.assert_allclose(ours_reward, reward[batch], rtol=0, atol=REWARD_ATOL)
        np.testing.assert_array_equal(ours_terminated, terminated[batch])
        np.testing.assert_array_equal(ours_truncated, np.arange(NUM_ENVS) == 1)
    if name in ("Hopper-v5", "Walker2d-v5", "InvertedPendulum-v5"):
        assert terminated.sum() >= 3  # the healthy-state terminations were among the steps compared


def distance(a, b):
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical distributions."""
    points = np.concatenate([a, b])
    return np.abs(np.searchsorted(np.sort(a), points, "right") / len(a)
                  - np.searchsorted(np.sort(b), points, "right") / len(b)).max()


@pytest.mark.slow  # each task's step compiles in 5-30 s (the fixture)
def test_resets_are_drawn_as_gymnasiums(task):
    """Every coordinate of the first observation is distributed as Gymnasium's (a two-sample Kolmogorov-Smirnov
    test at 2,000 resets each, at the 0.1% level)."""
    name, env, params, _ = task
    n = 2000
    keys = jax.random.split(jax.random.PRNGKey(1), n)
    ours = np.asarray(jax.jit(jax.vmap(lambda key: env.reset(key, params)[0])).lower(keys)
                      .compile(FAST_COMPILE_OPTIONS)(keys))
    theirs_env = gym.make(name)
    theirs = np.stack([theirs_env.reset(seed=seed)[0] for seed in range(n)])
    assert ours.shape == theirs.shape
    for coordinate in range(ours.shape[1]):
        assert distance(ours[:, coordinate], theirs[:, coordinate]) < 1.95 * np.sqrt(2 / n), coordinate


def ours_random_policy(env, params, step):
    """NUM_ENVS envs under uniformly random actions for HORIZON steps, reset where an episode ends: each env's
    reward summed over the steps, and its number of episode ends."""
    space = env.action_space(params)
    key = jax.random.PRNGKey(2)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, NUM_ENVS), params)
    rewards, ends = np.zeros(NUM_ENVS), np.zeros(NUM_ENVS)
    for t in range(HORIZON):
        keys = jax.random.split(jax.random.fold_in(key, t), NUM_ENVS)
        actions = jax.vmap(space.sample)(keys)
        _, state, reward, terminated, truncated, _ = step(keys, state, actions)
        rewards += np.asarray(reward)
        ends += np.asarray(terminated | truncated)
    return rewards, ends


def gymnasium_random_policy(name):
    env = gym.make(name)
    env.action_space.seed(2)
    rewards, ends = np.zeros(NUM_ENVS), np.zeros(NUM_ENVS)
    for i in range(NUM_ENVS):
        env.reset(seed=1000 + i)
        for _ in range(HORIZON):
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            rewards[i] += reward
            if terminated or truncated:
                ends[i] += 1
                env.reset()
    return rewards, ends


@pytest.mark.slow  # each task's step compiles in 5-30 s (the fixture)
def test_a_random_policy_scores_as_on_gymnasium(task):
    """The reward a random policy collects in HORIZON steps, and how many episodes it ends, have Gymnasium's means
    (within 4 standard errors of the difference of the two means)."""
    name, env, params, step = task
    for ours, theirs in zip(ours_random_policy(env, params, step), gymnasium_random_policy(name), strict=True):
        error = np.sqrt((ours.var() + theirs.var()) / NUM_ENVS) + 1e-6
        assert abs(ours.mean() - theirs.mean()) <= 4 * error, (ours.mean(), theirs.mean(), error)


def test_ids_mjx_cannot_run_as_gymnasium_does_are_one_line():
    with pytest.raises(ValueError, match=r"^'mujoco/Humanoid-v5' is not offered: its XML asks for MuJoCo's PGS "
                                         r"solver, which MJX does not have; the tasks on MJX: mujoco/HalfCheetah-v5"):
        envs.make("mujoco/Humanoid-v5")
    with pytest.raises(ValueError, match="'mujoco/Ant-v5' is not offered: MJX's contacts"):
        envs.make("mujoco/Ant-v5")
    with pytest.raises(ValueError, match="did you mean mujoco/HalfCheetah-v5"):
        envs.make("mujoco/HalfCheetah-v4")
    with pytest.raises(ValueError, match="takes no options"):
        envs.make("mujoco/Hopper-v5", frame_skip=2)
