"""scanrl/envs/: make, the wrappers (episode statistics across auto-resets, termination vs truncation, flattening,
action clipping, running normalisation) and evaluate."""

import subprocess
import sys
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ROOT
from flax import struct
from gymnax.environments import environment, spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from scanrl import blocks, envs
from scanrl.envs.suite import SuiteEnv


@struct.dataclass
class CounterState(environment.EnvState):
    count: jax.Array
    last_action: jax.Array


@struct.dataclass
class CounterParams(environment.EnvParams):
    max_steps_in_episode: int = 100
    episode_end: int = 3


class Counter(environment.Environment):
    """A scripted env: reward t+1 at step t of an episode, terminates after `episode_end` steps, observes
    [count, last action], continuous action in [-1, 1]."""

    @property
    def default_params(self):
        return CounterParams()

    def step_env(self, key, state, action, params):
        count = state.count + 1
        state = CounterState(time=state.time + 1, count=count, last_action=jnp.sum(action))
        obs = jnp.array([count, state.last_action], jnp.float32)
        return obs, state, count.astype(jnp.float32), count >= params.episode_end, {}

    def reset_env(self, key, params):
        state = CounterState(time=0, count=jnp.int32(0), last_action=jnp.float32(0.0))
        return jnp.zeros(2, jnp.float32), state

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)


def rollout(env, params, actions, key=None):
    key = jax.random.PRNGKey(0) if key is None else key
    obs, state = env.reset(key, params)
    out = []
    for action in actions:
        key, step_key = jax.random.split(key)
        obs, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
        out.append((obs, reward, terminated, truncated, info))
    return out


def test_unknown_env_names_close_ids():
    with pytest.raises(ValueError, match="CartPole-v1"):
        envs.make("CartPole-v2")
    assert "CartPole-v1" in envs.list_envs()


def test_episode_statistics_across_auto_reset():
    env = envs.EpisodeStatistics(Counter())
    steps = rollout(env, CounterParams(), [jnp.zeros(1)] * 7)
    done = [bool(s[4]["episode_done"]) for s in steps]
    assert done == [False, False, True, False, False, True, False]
    for t in (2, 5):
        info = steps[t][4]
        assert float(info["episode_return"]) == 1 + 2 + 3
        assert int(info["episode_length"]) == 3
        # After the auto-reset the observation is the new episode's first, the old one's last is kept.
        np.testing.assert_array_equal(steps[t][0], [0.0, 0.0])
        np.testing.assert_array_equal(info["final_observation"], [3.0, 0.0])
    # The running return restarts from zero after the reset.
    assert float(steps[6][4]["episode_return"]) == 1.0


def test_truncation_is_not_termination():
    env = envs.EpisodeStatistics(Counter())
    params = CounterParams(max_steps_in_episode=2, episode_end=10)
    steps = rollout(env, params, [jnp.zeros(1)] * 2)
    _, _, terminated, truncated, info = steps[1]
    assert bool(truncated) and not bool(terminated) and bool(info["episode_done"])
    env, params = envs.make_vec("CartPole-v1", 3)
    _, state = env.reset(jax.random.PRNGKey(0), params.replace(max_steps_in_episode=4))
    for _ in range(4):
        _, state, _, terminated, truncated, info = env.step(
            jax.random.PRNGKey(1), state, jnp.zeros(3, jnp.int32), params.replace(max_steps_in_episode=4)
        )
    assert truncated.all() and not terminated.any() and info["episode_done"].all()


def test_flatten_minatar_observations():
    env, params = envs.make_vec("Breakout-MinAtar", 2)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    assert obs.shape == (2, 400) and obs.dtype == jnp.bool_ and env.observation_space(params).dtype == jnp.bool_
    _, _, _, _, _, info = env.step(jax.random.PRNGKey(1), state, jnp.zeros(2, jnp.int32), params)
    assert info["final_observation"].shape == (2, 400) and info["final_observation"].dtype == jnp.bool_


@pytest.mark.parametrize("game", ["Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"])
def test_minatar_frames_hold_only_zeros_and_ones_so_bool_loses_nothing(game):
    """gymnax gives MinAtar's frames as float32; make_vec keeps them as bool, which is exact only for 0 and 1."""
    import gymnax

    env, params = gymnax.make(f"{game}-MinAtar")

    def step(carry, key):
        state, obs = carry
        key_action, key_step = jax.random.split(key)
        action = jax.random.randint(key_action, (), 0, env.num_actions)
        obs, state, *_ = env.step(key_step, state, action, params)
        return (state, obs), obs

    def rollout(key):
        obs, state = env.reset(key, params)
        return jax.lax.scan(step, (state, obs), jax.random.split(key, 500))[1]

    frames = jax.jit(jax.vmap(rollout))(jax.random.split(jax.random.PRNGKey(0), 8))
    assert frames.dtype == jnp.float32 and bool(jnp.all((frames == 0) | (frames == 1))) and frames.any()


def test_clip_action_to_bounds():
    env = envs.ClipAction(Counter())
    steps = rollout(env, CounterParams(), [jnp.array([5.0]), jnp.array([-3.0]), jnp.array([0.25])])
    assert [float(s[0][1]) for s in steps[:2]] == [1.0, -1.0]
    assert float(steps[2][4]["final_observation"][1]) == 0.25


def test_normalize_observation_matches_numpy_statistics():
    raw_env = envs.VecEnv(envs.EpisodeStatistics(Counter()), 2)
    env = envs.NormalizeObservation(raw_env)
    params = CounterParams(episode_end=4)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    raw_obs, raw_state = raw_env.reset(jax.random.PRNGKey(0), params)
    seen = [np.asarray(raw_obs)]
    for t in range(6):
        action = jnp.array([[0.1 * t], [-0.2 * t]])
        obs, state, *_ = env.step(jax.random.PRNGKey(t), state, action, params)
        raw_obs, raw_state, *_ = raw_env.step(jax.random.PRNGKey(t), raw_state, action, params)
        seen.append(np.asarray(raw_obs))
    seen = np.concatenate(seen)
    stats = envs.observation_stats(state)
    # The running statistics start from a tiny prior count (1e-4), so they match to that precision.
    np.testing.assert_allclose(stats.mean, seen.mean(0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(stats.var, seen.var(0), rtol=1e-3, atol=1e-4)
    expected = np.clip((seen[-2:] - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(obs, expected, rtol=1e-3, atol=1e-3)

    # What the harness evaluates: a policy fed the observations as training saw them, from the statistics held
    # anywhere in an agent's state (here a runner of two fields), frozen; a feed-forward and a recurrent one alike.
    runner = {"env_state": state, "rng": jax.random.PRNGKey(0)}
    raw = jnp.asarray(seen[-2:])
    normalized = envs.normalize_observation(stats, raw)
    act = envs.normalized_policy(lambda o: o, runner)
    np.testing.assert_array_equal(act.step(act.initial_carry(2), raw, jnp.ones(2, bool))[1], normalized)
    memory = envs.RecurrentPolicy(lambda n: jnp.zeros(n), lambda c, o, s: (c + 1, o))
    carry, seen_obs = envs.normalized_policy(memory, runner).step(jnp.zeros(2), raw, jnp.ones(2, bool))
    np.testing.assert_array_equal(seen_obs, normalized)
    np.testing.assert_array_equal(carry, [1, 1])
    unwrapped = envs.normalized_policy(lambda o: o, {"env_state": raw_state})  # no statistics: unchanged
    np.testing.assert_array_equal(unwrapped.step((), raw, jnp.ones(2, bool))[1], raw)


def test_normalize_reward_keeps_raw_episode_statistics():
    env = envs.NormalizeReward(envs.VecEnv(envs.EpisodeStatistics(Counter()), 1), gamma=0.9)
    params = CounterParams()
    _, state = env.reset(jax.random.PRNGKey(0), params)
    scaled, returns, g = [], [], []
    discounted = 0.0
    for t in range(3):
        _, state, reward, _, _, info = env.step(jax.random.PRNGKey(t), state, jnp.zeros((1, 1)), params)
        scaled.append(float(reward[0]))
        returns.append(float(info["episode_return"][0]))
        discounted = 0.9 * discounted + (t + 1)
        g.append(discounted)
    assert returns == [1.0, 3.0, 6.0]
    # Each reward is divided by the std of the discounted returns seen so far (with the 1e-4 prior).
    assert scaled[-1] == pytest.approx(3.0 / np.std(g), rel=1e-2)
    assert float(state.discounted_return[0]) == 0.0  # reset at the episode end


def test_evaluate_returns_first_episode_per_env():
    vec = envs.VecEnv(envs.EpisodeStatistics(Counter()), 3)
    returns = envs.evaluate(vec, CounterParams(), lambda obs: jnp.zeros((3, 1)), jax.random.PRNGKey(0), 8)
    np.testing.assert_array_equal(returns, [6.0, 6.0, 6.0])
    # An episode that never ends within num_steps has no return: NaN, not a made-up number.
    returns = envs.evaluate(vec, CounterParams(episode_end=50), lambda obs: jnp.zeros((3, 1)),
                            jax.random.PRNGKey(0), 8)
    assert np.isnan(returns).all()
    # It stops once every first episode has ended: a time limit of 2**31 - 1 steps (a user env's "no limit") was
    # played out to the end, silently, after episodes of 3 steps.
    returns = envs.evaluate(vec, CounterParams(), lambda obs: jnp.zeros((3, 1)), jax.random.PRNGKey(0), 2**31 - 1)
    np.testing.assert_array_equal(returns, [6.0, 6.0, 6.0])


@pytest.mark.slow
@settings(max_examples=12, deadline=None)  # each example's shapes compile anew: about 1 s each
@given(
    num_steps=st.integers(1, 40),
    num_envs=st.integers(1, 5),
    time_limit=st.integers(1, 12),
    terminate_p=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**16),
)
def test_next_obs_values_match_a_pass_over_every_next_obs(num_steps, num_envs, time_limit, terminate_p, seed):
    """Episodes under a time limit (truncated at `time_limit` steps) with random terminations: the values of the
    next observations from `values` shifted and the truncations' final observations alone equal a critic pass over
    every step's next observation, wherever GAE uses them (all but terminations)."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=3).astype(np.float32)
    value_fn = lambda x: x @ weights  # noqa: E731
    obs = np.zeros((num_steps + 1, num_envs, 3), np.float32)  # obs[t] acted on at t; obs[num_steps] the last
    next_obs = np.zeros((num_steps, num_envs, 3), np.float32)
    terminated = np.zeros((num_steps, num_envs), np.float32)
    done = np.zeros((num_steps, num_envs), np.float32)
    age = rng.integers(0, time_limit, num_envs)  # steps into their episodes when the rollout starts
    obs[0] = rng.normal(size=(num_envs, 3))
    for t in range(num_steps):
        age += 1
        next_obs[t] = rng.normal(size=(num_envs, 3))
        terminated[t] = rng.random(num_envs) < terminate_p
        done[t] = terminated[t] + (1 - terminated[t]) * (age >= time_limit)
        obs[t + 1] = np.where(done[t][:, None], rng.normal(size=(num_envs, 3)), next_obs[t])  # a reset
        age = np.where(done[t] > 0, 0, age)
    got = blocks.next_obs_values(value_fn, value_fn(jnp.asarray(obs[:-1])), done, terminated, next_obs,
                                 jnp.asarray(obs[-1]), SimpleNamespace(max_steps_in_episode=time_limit))
    used = terminated == 0
    np.testing.assert_allclose(np.asarray(got)[used], value_fn(next_obs)[used], rtol=1e-6, atol=1e-6)


class Countdown(SuiteEnv):
    """A suite-style env whose episodes are told apart: a reset draws a length (1-4 steps, or the time limit of 6
    when it draws 7) and an id; it observes [steps left, id, time] and terminates when no steps are left."""

    reset_ratio = 4

    def __init__(self):
        super().__init__("Countdown", 6, spaces.Box(-1.0, 10.0, (3,), jnp.float32), spaces.Discrete(2))

    def _reset(self, key):
        key_length, key_id = jax.random.split(key)
        length = jnp.where(jax.random.bernoulli(key_length, 0.2), 7, jax.random.randint(key_length, (), 1, 5))
        inner = (length.astype(jnp.float32), jax.random.uniform(key_id))
        return jnp.stack([*inner, 0.0]), inner

    def _step(self, key, inner, action):
        left, episode_id = inner[0] - 1, inner[1]
        return jnp.stack([left, episode_id, 0.0]), (left, episode_id), jnp.float32(1.0), left <= 0


def test_optimistic_resets_give_each_ended_env_a_new_episode_and_keep_the_others():
    """VecEnv with reset_ratio 4 over 8 envs builds 2 new episodes a step: every env either continues its episode
    (one step less, same id) or, having ended (by its own end or the time limit, with the true last observation in
    info), starts a new one at time 0 that no other env ended into on that step, with its statistics counted."""
    num_envs = 8
    env = envs.wrappers.VecEnv(envs.wrappers.EpisodeStatistics(Countdown()), num_envs)
    params = env.default_params
    assert env.num_resets == 2
    step = jax.jit(lambda key, state: env.step(key, state, jnp.zeros(num_envs, jnp.int32), params))
    obs, state = env.reset(jax.random.key(0), params)
    ended_together = 0
    for t in range(40):
        new_obs, state_after, reward, terminated, truncated, info = step(jax.random.fold_in(jax.random.key(1), t),
                                                                         state)
        done = np.asarray(terminated | truncated)
        final = np.asarray(info["final_observation"])
        np.testing.assert_allclose(final[:, :2], np.stack([obs[:, 0] - 1, obs[:, 1]], 1))
        assert np.all(np.asarray(terminated) == (final[:, 0] <= 0))
        time = np.asarray(state_after.env_state.time)
        at_limit = np.asarray(state.env_state.time) + 1 >= 6
        np.testing.assert_array_equal(np.asarray(truncated), ~np.asarray(terminated) & at_limit)
        np.testing.assert_allclose(np.asarray(new_obs)[~done], final[~done])
        assert np.all(time[done] == 0) and np.all(np.asarray(state_after.episode_length)[done] == 0)
        np.testing.assert_array_equal(np.asarray(info["episode_length"])[done],
                                      np.asarray(state.episode_length)[done] + 1)
        fresh_ids = np.asarray(new_obs)[done, 1]
        assert len(set(fresh_ids.tolist())) == min(done.sum(), env.num_resets) or done.sum() > env.num_resets
        assert np.all(np.isin(fresh_ids, final[:, 1], invert=True))
        ended_together += done.sum() >= 2
        obs, state = new_obs, state_after
    assert ended_together >= 5  # the sharing out was exercised


def test_an_env_whose_step_returns_a_batch_is_refused_naming_where_its_step_is(tmp_path, monkeypatch):
    """A user env whose reward is not a scalar (float32[4, 3] reached the compiled scan: 31 lines of traceback) is
    refused by --env's checks in one line naming step_env's file and line."""
    text = (ROOT / "docs" / "examples" / "corridor.py").read_text() + '''

class Wide(Corridor):
    def step_env(self, key, state, action, params):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        return obs, state, jnp.full((3,), reward), done, info
'''
    (tmp_path / "wide.py").write_text(text)
    where = max(i for i, line in enumerate(text.splitlines(), 1) if "def step_env" in line)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as error:
        envs.make("wide:Wide")
    line = str(error.value)
    assert line == (f"'wide:Wide': step returns a reward of shape [3] (a scalar, one env's); the scripts batch envs "
                    f"with jax.vmap: fix step_env at {tmp_path / 'wide.py'}:{where}"), line


def test_gymnax_draws_with_seaborn_that_no_run_imports():
    """gymnax imports seaborn (with scipy.stats and pandas, 1.8 s) only to draw Pong: a run never pays for it, and
    Pong's drawing still finds it, the real module, as does anyone who imports it."""
    code = (
        "import sys, scanrl.envs, gymnax.environments.misc.pong as pong\n"
        "assert not {'seaborn', 'scipy.stats', 'pandas'} & set(sys.modules), 'imported at start'\n"
        "assert len(pong.sns.color_palette('cubehelix', 3)) == 3\n"
        "import seaborn\n"
        "assert pong.sns.color_palette is seaborn.color_palette and type(seaborn).__name__ == 'module'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
