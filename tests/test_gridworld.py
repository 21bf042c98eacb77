"""GridWorld-v0 dynamics (moves, border clipping, goal, auto-reset, time limit, options) and the finite-state
helpers of scanrl/envs/ (`num_states`, `state_index`), also on gymnax's FrozenLake-misc."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scanrl import envs
from scanrl.envs.gridworld import EnvState, GridWorld

RIGHT, DOWN, LEFT, UP = range(4)


def at(row, col, time=0):
    return EnvState(time=jnp.int32(time), row=jnp.int32(row), col=jnp.int32(col))


def step(env, params, state, action):
    return env.step(jax.random.PRNGKey(0), state, jnp.int32(action), params)


def test_default_layout():
    env, params = envs.make("GridWorld-v0")
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    assert obs.tolist() == [7, 11]
    assert (env.rows, env.cols, env.goal) == (8, 12, (0, 0))
    assert params.max_steps_in_episode == 200
    assert env.action_space(params).n == 4
    assert envs.num_states(env, params) == 96
    assert int(envs.state_index(env, params, obs)) == 95


@pytest.mark.parametrize(
    "cell, action, expected",
    [
        ((7, 11), RIGHT, (7, 11)),  # bottom-right corner: right and down are walls
        ((7, 11), DOWN, (7, 11)),
        ((7, 11), LEFT, (7, 10)),
        ((7, 11), UP, (6, 11)),
        ((0, 5), UP, (0, 5)),
        ((3, 0), LEFT, (3, 0)),
        ((3, 4), RIGHT, (3, 5)),
        ((3, 4), DOWN, (4, 4)),
    ],
)
def test_moves_are_clipped_at_the_borders(cell, action, expected):
    env, params = envs.make("GridWorld-v0")
    obs, state, reward, terminated, truncated, _ = step(env, params, at(*cell), action)
    assert tuple(obs.tolist()) == expected
    assert (float(reward), bool(terminated), bool(truncated)) == (0.0, False, False)
    assert int(state.time) == 1


def test_goal_gives_reward_one_terminates_and_resets_to_start():
    env, params = envs.make("GridWorld-v0")
    obs, state, reward, terminated, truncated, info = step(env, params, at(0, 1, time=17), LEFT)
    assert float(reward) == 1.0 and bool(terminated) and not bool(truncated)
    assert info["final_observation"].tolist() == [0, 0]
    assert obs.tolist() == [7, 11]
    assert (int(state.row), int(state.col), int(state.time)) == (7, 11, 0)


def test_truncation_at_the_time_limit_through_make_vec():
    env, params = envs.make_vec("GridWorld-v0", 2, max_steps_in_episode=5)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    for t in range(5):
        obs, state, reward, terminated, truncated, info = env.step(
            jax.random.PRNGKey(t), state, jnp.array([RIGHT, DOWN]), params  # into the walls: never moves
        )
        assert bool(truncated.any()) == (t == 4)
    assert truncated.tolist() == [True, True] and terminated.tolist() == [False, False]
    assert info["episode_done"].all() and info["episode_length"].tolist() == [5, 5]
    assert info["episode_return"].tolist() == [0.0, 0.0]
    assert obs.tolist() == [[7, 11], [7, 11]]


def test_shortest_path_takes_18_steps():
    env, params = envs.make("GridWorld-v0")
    _, state = env.reset(jax.random.PRNGKey(0), params)
    rewards = []
    for action in [LEFT] * 11 + [UP] * 7:
        _, state, reward, terminated, _, _ = step(env, params, state, action)
        rewards.append(float(reward))
    assert rewards == [0.0] * 17 + [1.0] and bool(terminated)


def test_size_start_goal_options():
    env, params = envs.make("GridWorld-v0", rows=3, cols=4, start=(0, 0), goal=(2, 3))
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    assert obs.tolist() == [0, 0] and envs.num_states(env, params) == 12
    for action in [RIGHT, RIGHT, RIGHT, DOWN]:
        _, state, reward, terminated, _, _ = step(env, params, state, action)
        assert not bool(terminated)
    _, _, reward, terminated, _, _ = step(env, params, state, DOWN)
    assert float(reward) == 1.0 and bool(terminated)


def test_random_start_covers_every_cell_but_the_goal():
    env, params = envs.make("GridWorld-v0", rows=3, cols=3, goal=(1, 1), start=(0, 0), random_start=True)
    obs, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(0), 2000), params)
    cells = np.asarray(obs[:, 0] * 3 + obs[:, 1])
    counts = np.bincount(cells, minlength=9)
    assert counts[4] == 0 and (counts[[0, 1, 2, 3, 5, 6, 7, 8]] > 150).all()
    # the auto-reset after the goal draws a start too
    obs, _, _, terminated, _, _ = jax.vmap(env.step, in_axes=(0, None, None, None))(
        jax.random.split(jax.random.PRNGKey(1), 500), at(0, 1), jnp.int32(DOWN), params
    )
    assert terminated.all() and len(np.unique(np.asarray(obs[:, 0] * 3 + obs[:, 1]))) == 8


@pytest.mark.parametrize(
    "kwargs",
    [dict(start=(8, 0)), dict(goal=(0, 12)), dict(start=(0, 0), goal=(0, 0)), dict(rows=1, cols=1, start=(0, 0))],
)
def test_bad_options_raise(kwargs):
    with pytest.raises(ValueError):
        GridWorld(**kwargs)


def test_finite_state_helpers_cover_frozen_lake_and_reject_continuous_obs():
    env, params = envs.make_vec("FrozenLake-misc", 3)
    assert envs.num_states(env, params) == 16
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    assert obs.shape == (3, 1)  # FlattenObservation made the Discrete observation a length-1 vector
    index = jax.vmap(lambda o: envs.state_index(env, params, o))(obs)
    assert index.dtype == jnp.int32 and index.tolist() == [0, 0, 0]
    env, params = envs.make_vec("CartPole-v1", 2)
    assert envs.num_states(env, params) is None
