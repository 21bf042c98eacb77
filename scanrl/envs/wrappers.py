"""Wrappers over the gymnax Environment API (gymnax 1.x).

Every wrapper keeps gymnax's interface:

    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

`terminated` (a true end: the pole fell) and `truncated` (the time limit ran out) stay separate all the
way through, so an algorithm can bootstrap from the value of the last state on truncation. After an
auto-reset, `obs` is the first observation of the new episode; the last observation of the episode that
ended is `info["final_observation"]`, and every wrapper that transforms observations transforms it too.

Single-env wrappers (`EpisodeStatistics`, `FlattenObservation`, `ClipAction`) act on one env; `VecEnv`
steps a batch of them with `jax.vmap`; the normalisation wrappers sit on top of a `VecEnv`, so one set of
running statistics serves the whole batch. Their statistics live in the env state: vmapping a train
function over seeds gives each seed its own.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces


class Wrapper:
    """Passes everything it does not override through to the wrapped env."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, key, params):
        return self._env.reset(key, params)

    def step(self, key, state, action, params):
        return self._env.step(key, state, action, params)


@struct.dataclass
class EpisodeStatisticsState:
    env_state: Any
    episode_return: jax.Array
    episode_length: jax.Array


class EpisodeStatistics(Wrapper):
    """Adds the return and length of the episode that ended at this step to `info`.

    `info["episode_done"]` flags the steps where an episode ended (terminated or truncated);
    `info["episode_return"]` and `info["episode_length"]` are meaningful only where it is true.
    Wrap the raw env with this first, so the statistics count the env's own rewards.
    """

    def reset(self, key, params):
        obs, env_state = self._env.reset(key, params)
        return obs, EpisodeStatisticsState(env_state, jnp.float32(0.0), jnp.int32(0))

    def step(self, key, state, action, params):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        done = jnp.logical_or(terminated, truncated)
        episode_return = state.episode_return + reward.astype(jnp.float32)
        episode_length = state.episode_length + 1
        info = {
            **info,
            "episode_done": done,
            "episode_return": episode_return,
            "episode_length": episode_length,
        }
        state = EpisodeStatisticsState(
            env_state,
            jnp.where(done, 0.0, episode_return),
            jnp.where(done, 0, episode_length),
        )
        return obs, state, reward, terminated, truncated, info


class FlattenObservation(Wrapper):
    """Flattens observations to vectors of `dtype`: float32, or bool where the env's values are 0 or 1 (MinAtar's
    10x10xC frames become 100*C bool features, a quarter of float32's bytes in a replay buffer; a network's first
    layer makes them float)."""

    def __init__(self, env, dtype=jnp.float32):
        super().__init__(env)
        self.dtype = dtype

    def _flat(self, obs):
        return jnp.reshape(obs, (-1,)).astype(self.dtype)

    def observation_space(self, params):
        space = self._env.observation_space(params)
        size = 1
        for dim in space.shape:
            size *= dim
        return spaces.Box(0.0, 1.0, (size,), self.dtype)

    def reset(self, key, params):
        obs, state = self._env.reset(key, params)
        return self._flat(obs), state

    def step(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {**info, "final_observation": self._flat(info["final_observation"])}
        return self._flat(obs), state, reward, terminated, truncated, info


class MaskObservation(Wrapper):
    """Keeps only the observation entries at `keep` (POPGym's "stateless" tasks: CartPole without its velocities
    must infer them from what it saw before, so only a policy with memory can balance the pole)."""

    def __init__(self, env, keep: tuple[int, ...]):
        super().__init__(env)
        self.keep = np.asarray(keep)

    def observation_space(self, params):
        space = self._env.observation_space(params)
        return spaces.Box(jnp.asarray(space.low)[self.keep], jnp.asarray(space.high)[self.keep],
                          (len(self.keep),), space.dtype)

    def reset(self, key, params):
        obs, state = self._env.reset(key, params)
        return obs[self.keep], state

    def step(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {**info, "final_observation": info["final_observation"][self.keep]}
        return obs[self.keep], state, reward, terminated, truncated, info


class ClipAction(Wrapper):
    """Clips continuous actions to the action space's bounds before the env sees them."""

    def step(self, key, state, action, params):
        space = self._env.action_space(params)
        action = jnp.clip(action, space.low, space.high)
        return self._env.step(key, state, action, params)


class VecEnv(Wrapper):
    """Steps `num_envs` copies of a single env in lock step (one vmap).

    An env whose `reset_ratio` is above 1 (an adapter's, scanrl/envs/suite.py: Craftax) gets optimistic resets: its envs
    step without resetting, `num_envs // reset_ratio` new episodes (at least one) are built, and the envs that ended
    take them in turn. Envs that end on the same step start different episodes unless more end than were built.
    """

    def __init__(self, env, num_envs: int):
        super().__init__(env)
        self.num_envs = num_envs
        self.num_resets = max(1, num_envs // getattr(env, "reset_ratio", 1))  # num_envs: each env resets itself

    def reset(self, key, params):
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self._env.reset, in_axes=(0, None))(keys, params)

    def step(self, key, state, action, params):
        """`key` is one key, split here into one per env, or `num_envs` keys stacked (shape `(num_envs, 2)`),
        split in bulk beforehand: a script can split a whole rollout's keys before its scan."""
        keys = key if key.ndim == 2 else jax.random.split(key, self.num_envs)
        if self.num_resets == self.num_envs or not hasattr(params, "auto_reset"):
            return jax.vmap(self._env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)
        obs, state, reward, terminated, truncated, info = jax.vmap(self._env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, params.replace(auto_reset=False))
        done = jnp.logical_or(terminated, truncated)
        # the first envs' reset keys, which their own steps leave unused (SuiteEnv.step splits as gymnax does)
        reset_keys = jax.vmap(lambda k: jax.random.split(k)[1])(keys[: self.num_resets])
        new_obs, new_state = jax.vmap(self._env.reset, in_axes=(0, None))(reset_keys, params)
        take = (jnp.cumsum(done) - 1) % self.num_resets  # the i-th env to end takes new episode i mod num_resets

        def fresh(new, old):
            return jnp.where(done.reshape(-1, *(1,) * (old.ndim - 1)), new[take], old)

        inner = jax.tree.map(fresh, _innermost(new_state), _innermost(state))
        return fresh(new_obs, obs), _with_innermost(state, inner), reward, terminated, truncated, info


def _innermost(state):
    """The env's own state inside the wrappers' states (each wrapper's holds the one below as `env_state`)."""
    return _innermost(state.env_state) if hasattr(state, "env_state") else state


def _with_innermost(state, inner):
    if hasattr(state, "env_state"):
        return state.replace(env_state=_with_innermost(state.env_state, inner))
    return inner


@struct.dataclass
class RunningMeanStd:
    """Mean and variance of everything seen so far (parallel Welford update, Chan et al. 1979)."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def create(cls, shape):
        return cls(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.float32(1e-4))

    def update(self, batch):
        batch_mean = batch.mean(axis=0)
        batch_var = batch.var(axis=0)
        batch_count = batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        return RunningMeanStd(mean, m2 / total, total)


@struct.dataclass
class NormalizeObservationState:
    env_state: Any
    obs_stats: RunningMeanStd


def normalize_observation(stats: RunningMeanStd, obs, clip: float = 10.0):
    """Standardises `obs` with `stats`, clipped to +-clip (also how a trained policy is evaluated)."""
    return jnp.clip((obs - stats.mean) / jnp.sqrt(stats.var + 1e-8), -clip, clip)


class NormalizeObservation(Wrapper):
    """Standardises a `VecEnv`'s observations with running statistics shared by its envs."""

    def reset(self, key, params):
        obs, env_state = self._env.reset(key, params)
        stats = RunningMeanStd.create(obs.shape[1:]).update(obs)
        return normalize_observation(stats, obs), NormalizeObservationState(env_state, stats)

    def step(self, key, state, action, params):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        stats = state.obs_stats.update(obs)
        info = {**info, "final_observation": normalize_observation(stats, info["final_observation"])}
        state = NormalizeObservationState(env_state, stats)
        return normalize_observation(stats, obs), state, reward, terminated, truncated, info


@struct.dataclass
class NormalizeRewardState:
    env_state: Any
    return_stats: RunningMeanStd
    discounted_return: jax.Array


class NormalizeReward(Wrapper):
    """Scales a `VecEnv`'s rewards by the running std of the discounted return (as gym's NormalizeReward).

    Only the reward the learner sees changes; `EpisodeStatistics` underneath still counts raw rewards.
    """

    def __init__(self, env, gamma: float, clip: float = 10.0):
        super().__init__(env)
        self.gamma = gamma
        self.clip = clip

    def reset(self, key, params):
        obs, env_state = self._env.reset(key, params)
        num_envs = obs.shape[0]
        state = NormalizeRewardState(env_state, RunningMeanStd.create(()), jnp.zeros(num_envs))
        return obs, state

    def step(self, key, state, action, params):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        discounted_return = state.discounted_return * self.gamma + reward
        stats = state.return_stats.update(discounted_return)
        done = jnp.logical_or(terminated, truncated)
        scaled = jnp.clip(reward / jnp.sqrt(stats.var + 1e-8), -self.clip, self.clip)
        state = NormalizeRewardState(env_state, stats, jnp.where(done, 0.0, discounted_return))
        return obs, state, scaled, terminated, truncated, info


def observation_stats(tree):
    """The running observation statistics of the `NormalizeObservation` state held anywhere in `tree` (an env state,
    possibly re-wrapped, or an agent's whole state), or None."""
    found = [x for x in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, NormalizeObservationState))
             if isinstance(x, NormalizeObservationState)]
    return found[0].obs_stats if found else None


def observation_normalizer(tree):
    """`obs -> obs`: what the `NormalizeObservation` state held in `tree` does to observations, with its statistics
    frozen (how a trained policy sees them); the identity where `tree` holds none."""
    stats = observation_stats(tree)
    return (lambda obs: obs) if stats is None else (lambda obs: normalize_observation(stats, obs))
