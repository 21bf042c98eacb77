"""Environments for scanrl: gymnax ids and our own JAX envs behind one `make`, plus shared wrappers.

    env, env_params = envs.make("CartPole-v1")
    env, env_params = envs.make_vec("Pendulum-v1", num_envs=8, normalize_obs=True)

Every env speaks the gymnax 1.x API (see `envs.wrappers`).
"""

import difflib

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from envs.gridworld import make_gridworld
from envs.wrappers import (
    ClipAction,
    EpisodeStatistics,
    FlattenObservation,
    NormalizeObservation,
    NormalizeReward,
    RunningMeanStd,
    VecEnv,
    Wrapper,
    normalize_observation,
    observation_stats,
)

__all__ = [
    "ClipAction",
    "EpisodeStatistics",
    "FlattenObservation",
    "NormalizeObservation",
    "NormalizeReward",
    "RunningMeanStd",
    "VecEnv",
    "Wrapper",
    "evaluate",
    "is_discrete",
    "list_envs",
    "make",
    "make_vec",
    "normalize_observation",
    "num_states",
    "observation_stats",
    "state_index",
]

# Our own envs: id -> factory(**kwargs) returning (env, env_params).
_OUR_ENVS = {
    "GridWorld-v0": make_gridworld,
}


def list_envs() -> list[str]:
    """Every id `make` accepts (Brax ids only when brax is installed)."""
    from envs import brax as brax_envs  # our adapter; it imports brax itself only in its make

    brax_ids = brax_envs.list_ids() if brax_envs.is_installed() else []
    return sorted(gymnax.registered_envs) + sorted(_OUR_ENVS) + brax_ids


def make(env_id: str, **kwargs):
    """Returns `(env, env_params)` for a gymnax id or one of ours; ValueError naming close ids if unknown."""
    if env_id in _OUR_ENVS:
        return _OUR_ENVS[env_id](**kwargs)
    if env_id.startswith("brax/"):
        from envs import brax as brax_envs  # lazy: gymnax users never import brax

        return brax_envs.make(env_id, **kwargs)
    if env_id in gymnax.registered_envs:
        return gymnax.make(env_id, **kwargs)
    close = difflib.get_close_matches(env_id, list_envs(), n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else "see envs.list_envs()"
    raise ValueError(f"unknown env {env_id!r}: {hint}")


def is_discrete(env, env_params) -> bool:
    """True for a Discrete action space, False for a Box; anything else is not supported here."""
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        return True
    if isinstance(space, spaces.Box):
        return False
    raise ValueError(f"unsupported action space {type(space).__name__}")


def _unwrapped(env):
    while isinstance(env, Wrapper):
        env = env._env
    return env


def num_states(env, env_params) -> int | None:
    """Number of states of a finite-state env (one a table can index), or None: GridWorld-v0 and any env
    whose observation space is Discrete, such as FrozenLake-misc. Works through our wrappers."""
    base = _unwrapped(env)
    if hasattr(base, "num_states"):
        return base.num_states
    space = base.observation_space(env_params)
    return space.n if isinstance(space, spaces.Discrete) else None


def state_index(env, env_params, obs):
    """Table index (int32) of one observation of a finite-state env, also after `FlattenObservation`
    (which turns a Discrete observation into a length-1 float vector); vmap it for a batch."""
    base = _unwrapped(env)
    if hasattr(base, "state_index"):
        return base.state_index(obs).astype(jnp.int32)
    return jnp.reshape(obs, ()).astype(jnp.int32)


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    normalize_obs: bool = False,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    **kwargs,
):
    """The stack every script trains on: episode statistics on the raw rewards, flat float observations,
    clipped continuous actions, `num_envs` copies, then optional running normalisation.
    """
    env, env_params = make(env_id, **kwargs)
    env = EpisodeStatistics(env)
    if len(env.observation_space(env_params).shape) != 1:
        env = FlattenObservation(env)
    if not is_discrete(env, env_params):
        env = ClipAction(env)
    env = VecEnv(env, num_envs)
    if normalize_obs:
        env = NormalizeObservation(env)
    if normalize_reward:
        env = NormalizeReward(env, gamma=gamma)
    return env, env_params


def evaluate(env, env_params, act, key, num_steps: int):
    """Plays one episode in each env of a `make_vec` env with the policy `act(obs) -> action`.

    Returns the return of each env's first episode, shape `(num_envs,)`; `num_steps` should cover the
    longest episode (the env's time limit). Evaluate on an env without normalisation wrappers and let
    `act` normalise with training's frozen statistics (`normalize_observation`).
    """
    key_reset, key = jax.random.split(key)
    obs, state = env.reset(key_reset, env_params)
    num_envs = obs.shape[0]

    def _eval_step(carry, step_key):
        obs, state, finished, returns = carry
        obs, state, _, _, _, info = env.step(step_key, state, act(obs), env_params)
        first_end = jnp.logical_and(info["episode_done"], jnp.logical_not(finished))
        returns = jnp.where(first_end, info["episode_return"], returns)
        return (obs, state, jnp.logical_or(finished, info["episode_done"]), returns), None

    carry = (obs, state, jnp.zeros(num_envs, bool), jnp.full(num_envs, jnp.nan, jnp.float32))
    (_, _, _, returns), _ = jax.lax.scan(_eval_step, carry, jax.random.split(key, num_steps))
    return returns


# Envs gymnax's visualizer can draw (gymnax.visualize.Visualizer), by the name gymnax gives them.
_DRAWABLE = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Catch-bsuite",
             "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
             "Pong-misc", "PointRobot-misc", "MetaMaze-misc", "FourRooms-misc")


def can_draw(env_id: str) -> bool:
    """True if `record_episode` can animate this env."""
    return env_id in _DRAWABLE


def record_episode(env_id: str, act, key, path: str):
    """Plays one episode of `env_id` (through the `make_vec` stack, one env) with `act(obs batch) -> actions`, as
    `evaluate` does, and writes it to `path` as an animated gif drawn by gymnax's visualizer (one frame per step,
    from the first observation to the last before the episode ends). Returns `(return, length)`."""
    import matplotlib

    matplotlib.use("Agg")
    from gymnax.visualize import Visualizer

    if not can_draw(env_id):
        raise ValueError(f"gymnax cannot draw {env_id}; it draws {', '.join(_DRAWABLE)}")
    env, env_params = make_vec(env_id, 1)

    @jax.jit
    def play(key):
        key_reset, key = jax.random.split(key)
        obs, state = env.reset(key_reset, env_params)

        def _step(carry, step_key):
            obs, state = carry
            next_obs, next_state, reward, _, _, info = env.step(step_key, state, act(obs), env_params)
            # The base env's state before this step, one frame; EpisodeStatistics holds it, VecEnv batches it.
            return (next_obs, next_state), (state.env_state, reward[0], info["episode_done"][0])

        _, trajectory = jax.lax.scan(_step, (obs, state), jax.random.split(key, env_params.max_steps_in_episode))
        return trajectory

    frames, rewards, dones = jax.device_get(play(key))
    length = int(np.argmax(dones)) + 1 if dones.any() else len(dones)
    states = [jax.tree.map(lambda x, t=t: x[t, 0], frames) for t in range(length)]
    Visualizer(_unwrapped(env), env_params, states, np.cumsum(rewards[:length])).animate(path)
    return float(rewards[:length].sum()), length
