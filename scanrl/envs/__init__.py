"""Environments for scanrl: gymnax ids and our own JAX envs behind one `make`, plus shared wrappers.

    env, env_params = envs.make("CartPole-v1")
    env, env_params = envs.make_vec("Pendulum-v1", num_envs=8, normalize_obs=True)

Every env speaks the gymnax 1.x API (see `envs.wrappers`). Beside this module: `wrappers` (the stack `make_vec`
builds), `evaluation` (playing a policy), `custom` (a user's own env), `render` (--gif), and one adapter module per
optional suite (`suite` is their base).
"""
# ruff: noqa: E402 - seaborn's stand-in (below) goes in before gymnax is imported

import difflib
import importlib
import sys
import types
from collections.abc import Callable


class _ImportedOnFirstUse(types.ModuleType):
    """Stands in for a module until one of its attributes is used, then imports it."""

    def __getattr__(self, attr):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


# gymnax imports seaborn (and with it scipy.stats and pandas) at the top of Pong's module, only to draw Pong: 1.8 s of
# every run's start. gymnax's modules get a stand-in that imports it if they ever draw; anyone else, the real one.
_seaborn = None if "seaborn" in sys.modules else sys.modules.setdefault("seaborn", _ImportedOnFirstUse("seaborn"))
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from scanrl.envs.custom import REGISTERED, checked, first_line, import_reference, imported, user_env_failure
from scanrl.envs.evaluation import (
    Evaluation,
    RecurrentPolicy,
    as_recurrent,
    evaluate,
    evaluation_start,
    evaluation_steps,
    normalized_policy,
)
from scanrl.envs.gridworld import make_gridworld
from scanrl.envs.wrappers import (
    ClipAction,
    EpisodeStatistics,
    FlattenObservation,
    MaskObservation,
    NormalizeObservation,
    NormalizeReward,
    RunningMeanStd,
    VecEnv,
    Wrapper,
    normalize_observation,
    observation_normalizer,
    observation_stats,
)

if _seaborn is not None and sys.modules.get("seaborn") is _seaborn:
    del sys.modules["seaborn"]

__all__ = [
    "ClipAction",
    "EpisodeStatistics",
    "Evaluation",
    "FlattenObservation",
    "MaskObservation",
    "NormalizeObservation",
    "NormalizeReward",
    "RecurrentPolicy",
    "RunningMeanStd",
    "VecEnv",
    "Wrapper",
    "as_recurrent",
    "evaluate",
    "evaluation_start",
    "evaluation_steps",
    "import_reference",
    "is_discrete",
    "list_envs",
    "make",
    "make_vec",
    "normalize_observation",
    "normalized_policy",
    "observation_normalizer",
    "num_states",
    "observation_stats",
    "register",
    "state_index",
    "user_env_failure",
]

# Partially observable versions of gymnax envs (POPGym's "stateless" tasks): id -> (gymnax id, the observation
# entries kept). CartPole-v1-masked sees the cart's position and the pole's angle, not their velocities;
# Pendulum-v1-masked sees cos and sin of the angle, not the angular velocity.
MASKED = {
    "CartPole-v1-masked": ("CartPole-v1", (0, 2)),
    "Pendulum-v1-masked": ("Pendulum-v1", (0, 1)),
}


def _masked(env_id):
    def make_masked(**kwargs):
        base_id, keep = MASKED[env_id]
        env, env_params = gymnax.make(base_id, **kwargs)
        return MaskObservation(env, keep), env_params

    return make_masked


# Our own envs: id -> factory(**kwargs) returning (env, env_params).
_OUR_ENVS = {
    "GridWorld-v0": make_gridworld,
    **{env_id: _masked(env_id) for env_id in MASKED},
}


# The optional suites, one adapter module each in envs/ (see envs/suite.py); each imports its suite only in its make.
SUITES = ("gymnasium_mujoco", "brax", "craftax", "xminigrid", "playground")


def _suites():
    return [importlib.import_module(f"scanrl.envs.{name}") for name in SUITES]


def register(env_id: str, factory: Callable) -> None:
    """Makes `env_id` an id every script's `--env` (and `make`) accepts, in this process: `factory(**kwargs)` returns
    a gymnax 1.x env, or `(env, env_params)`; a gymnax `Environment` subclass serves as its own factory. Register in
    the module your command line names (`--env mypkg.envs:MyEnv-v0` imports mypkg.envs, then finds the id)."""
    if not isinstance(env_id, str) or not env_id or env_id in gymnax.registered_envs or env_id in _OUR_ENVS \
            or import_reference(env_id) is not None or any(suite.owns(env_id) for suite in _suites()):
        raise ValueError(f"cannot register {env_id!r}: it is empty, or gymnax, scanrl or a suite has that id, or it "
                         "has the module:name form; choose another id")
    if not callable(factory):
        raise ValueError(f"register({env_id!r}, ...): the factory must be callable (an env class or a function)")
    REGISTERED[env_id] = factory


def list_envs() -> list[str]:
    """Every id `make` accepts: gymnax's, ours, the registered ones, and each installed suite's."""
    suite_ids = [i for suite in _suites() if suite.is_installed() for i in _listed(suite)]
    return sorted(gymnax.registered_envs) + sorted(_OUR_ENVS) + sorted(REGISTERED) + suite_ids


def make(env_id: str, **kwargs):
    """Returns `(env, env_params)` for a gymnax id, one of ours, a registered one, a suite's, or `module:name` (your
    own env, imported: see `import_reference`); ValueError with one line (close ids, an install hint) otherwise."""
    if env_id in _OUR_ENVS:
        return _OUR_ENVS[env_id](**kwargs)
    if env_id in REGISTERED:
        return checked(env_id, REGISTERED[env_id], kwargs)
    for suite in _suites():
        if suite.owns(env_id):
            try:
                return suite.make(env_id, **kwargs)
            except ValueError:
                raise
            except Exception as error:  # installed, but broken (a version clash, a missing library): one line
                raise ValueError(f"{env_id!r}: {suite.SUITE} is installed but fails ({first_line(error)}); "
                                 f"reinstall it: {suite.INSTALL_HINT}") from None
    if env_id in gymnax.registered_envs:
        return gymnax.make(env_id, **kwargs)
    reference = import_reference(env_id)
    if reference is not None:
        return imported(env_id, *reference, kwargs)
    close = difflib.get_close_matches(env_id, list_envs(), n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else "see envs.list_envs(), or name your own env as module:name"
    raise ValueError(f"unknown env {env_id!r}: {hint}")


def _listed(suite) -> list[str]:
    """An installed suite's ids; none from a suite that fails to import (making one of its envs says why)."""
    try:
        return suite.list_ids()
    except Exception:  # noqa: BLE001
        return []



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
    """The stack every script trains on: episode statistics on the raw rewards, flat observations,
    clipped continuous actions, `num_envs` copies, then optional running normalisation.
    """
    env, env_params = make(env_id, **kwargs)
    env = EpisodeStatistics(env)
    if len(env.observation_space(env_params).shape) != 1:  # MinAtar's channels hold only 0 and 1
        env = FlattenObservation(env, jnp.bool_ if env_id.endswith("-MinAtar") else jnp.float32)
    if not is_discrete(env, env_params):
        env = ClipAction(env)
    env = VecEnv(env, num_envs)
    if normalize_obs:
        env = NormalizeObservation(env)
    if normalize_reward:
        env = NormalizeReward(env, gamma=gamma)
    return env, env_params


# Envs gymnax's visualizer can draw (gymnax.visualize.Visualizer), by the name gymnax gives them.
_DRAWABLE = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Catch-bsuite",
             "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
             "Pong-misc", "PointRobot-misc", "MetaMaze-misc", "FourRooms-misc")


def can_draw(env_id: str) -> bool:
    """True if `record_episode` can animate this env."""
    return MASKED.get(env_id, (env_id,))[0] in _DRAWABLE


def record_episode(env_id: str, policy, key, path: str):
    """Plays one episode of `env_id` (through the `make_vec` stack, one env) with `policy` (`act(obs batch) ->
    actions` or a `RecurrentPolicy`), as `evaluate` does, and writes it to `path` as an animated gif drawn by
    gymnax's visualizer (one frame per step, from the first observation to the last before the episode ends).
    Returns `(return, length)`."""
    from scanrl.envs.render import write_gif  # sets SDL's dummy drivers before anything imports pygame

    if not can_draw(env_id):
        raise ValueError(f"gymnax cannot draw {env_id}; it draws {', '.join(_DRAWABLE)}")
    env, env_params = make_vec(env_id, 1)
    policy = as_recurrent(policy)

    @jax.jit
    def play(key):
        key_reset, key = jax.random.split(key)
        obs, state = env.reset(key_reset, env_params)

        def _step(carry, step_key):
            obs, start, memory, state = carry
            memory, action = policy.step(memory, obs, start)
            next_obs, next_state, reward, _, _, info = env.step(step_key, state, action, env_params)
            # The base env's state before this step, one frame; EpisodeStatistics holds it, VecEnv batches it.
            return ((next_obs, info["episode_done"], memory, next_state),
                    (state.env_state, reward[0], info["episode_done"][0]))

        carry = (obs, jnp.ones(1, bool), policy.initial_carry(1), state)
        _, trajectory = jax.lax.scan(_step, carry, jax.random.split(key, env_params.max_steps_in_episode))
        return trajectory

    frames, rewards, dones = jax.device_get(play(key))
    length = int(np.argmax(dones)) + 1 if dones.any() else len(dones)
    states = [jax.tree.map(lambda x, t=t: x[t, 0], frames) for t in range(length)]
    write_gif(_unwrapped(env), env_params, states, np.cumsum(rewards[:length]), path)
    return float(rewards[:length].sum()), length
