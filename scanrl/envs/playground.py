"""MuJoCo Playground (Zakka et al. 2025; Brax's successor) behind the gymnax 1.x interface:
`envs.make("playground/CartpoleBalance")`.

Playground is optional (`pip install -r requirements-playground.txt`). Its DeepMind Control Suite tasks ship their
models and work offline; continuous actions in [-1, 1], for ppo.py, ppo_rnn.py, td3.py and reinforce.py. Its
locomotion and manipulation tasks load robots from mujoco_menagerie, which Playground clones from GitHub on first
use: without that clone they are refused with one line (run once with network access, or clone it there yourself).

Physics runs on MJX's JAX implementation (`impl="jax"`, which runs on a CPU); Playground's default, Warp, needs an
NVIDIA GPU. The Control Suite tasks never end on their own (Playground ends an episode only if the simulation
turns NaN, which is `terminated` here); their 1,000-step limit (`episode_length / action_repeat` env steps) is
`truncated`. Keyword arguments override the task's config (`action_repeat=4`, `impl="warp"`).
"""

import difflib
import importlib
import warnings

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from scanrl.envs.suite import SuiteEnv, import_mujoco_suite, installed, not_installed

SUITE = "MuJoCo Playground"
INSTALL_HINT = "pip install -r requirements-playground.txt"
PREFIX = "playground/"


def owns(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def is_installed() -> bool:
    return installed("mujoco_playground")


def _registry():
    return import_mujoco_suite(lambda: importlib.import_module("mujoco_playground").registry)


def list_ids() -> list[str]:
    registry = _registry()
    return [PREFIX + name for name in registry.ALL_ENVS]


class PlaygroundEnv(SuiteEnv):
    """One Playground task; its state is Playground's `State` (MJX data, observation, reward, done, metrics)."""

    def __init__(self, env_id, inner, action_repeat: int, episode_length: int):
        self.inner, self.action_repeat = inner, action_repeat
        obs = jax.eval_shape(inner.reset, jax.random.PRNGKey(0)).obs
        shape = (obs["state"] if isinstance(obs, dict) else obs).shape
        super().__init__(env_id, episode_length // action_repeat,
                         spaces.Box(-jnp.inf, jnp.inf, shape, jnp.float32),
                         spaces.Box(-1.0, 1.0, (inner.action_size,), jnp.float32))

    @staticmethod
    def _obs(state):
        return state.obs["state"] if isinstance(state.obs, dict) else state.obs

    def _reset(self, key):
        state = self.inner.reset(key)
        return self._obs(state), state

    def _step(self, key, state, action):
        # Playground's physics is deterministic: the key is not needed. Repeats add their rewards, as Brax's
        # training wrapper does (a scan: one traced physics step however many repeats).
        def repeat(carry, _):
            state, reward = carry
            state = self.inner.step(state, action)
            return (state, reward + state.reward), None

        (state, reward), _ = jax.lax.scan(repeat, (state, jnp.float32(0.0)), None, length=self.action_repeat)
        return self._obs(state), state, reward, state.done > 0.5


def make(env_id: str, **kwargs):
    name = env_id.removeprefix(PREFIX)
    if not is_installed():
        raise not_installed(env_id, SUITE, INSTALL_HINT)
    registry = _registry()
    if name not in registry.ALL_ENVS:
        close = difflib.get_close_matches(name, registry.ALL_ENVS, n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(PREFIX + c for c in close)}?" if close else "see envs.list_envs()"
        raise ValueError(f"unknown env {env_id!r}: {hint}")
    from mujoco_playground._src import mjx_env

    if name not in registry.dm_control_suite.ALL_ENVS and not mjx_env.MENAGERIE_PATH.exists():
        raise ValueError(f"{env_id!r} needs mujoco_menagerie's robot models, which MuJoCo Playground clones from "
                         f"GitHub on first use into {mjx_env.MENAGERIE_PATH}; run it once with network access, or "
                         "clone https://github.com/google-deepmind/mujoco_menagerie there")
    config = registry.get_default_config(name)
    overrides = {"impl": "jax", **kwargs}
    unknown = sorted(set(overrides) - set(config.keys()))
    if unknown:
        raise ValueError(f"{env_id}: {', '.join(unknown)} is not in the task's config ({', '.join(config.keys())})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        inner = registry.load(name, config_overrides=overrides)
    repeat = int(overrides.get("action_repeat", config.get("action_repeat", 1)))
    env = PlaygroundEnv(env_id, inner, repeat, int(overrides.get("episode_length", config.episode_length)))
    return env, env.default_params
