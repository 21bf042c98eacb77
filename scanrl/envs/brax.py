"""Brax's MuJoCo-style locomotion tasks behind the gymnax 1.x interface: `envs.make("brax/halfcheetah")`.

Brax is optional (`pip install -r requirements-brax.txt`); this module imports it only inside `make`, so
`envs.list_envs()` can name the tasks without paying for the import.

Episodes follow gymnax: a task's own failure (a hopper falling) is `terminated`; the 1000-step time limit
is `truncated`; after either, the env auto-resets to a fresh random initial state and the true last
observation is in `info["final_observation"]`. Brax's own `AutoResetWrapper` is not used: it overwrites
the last observation without keeping it and always resets to one cached initial state.

The physics backend is a keyword (`envs.make("brax/halfcheetah", backend="generalized")`) or a suffix on
the id (`--env brax/halfcheetah:generalized`, so any script's `--env` can pick it). The default, spring,
is the fastest on a CPU; generalized and mjx model contacts more faithfully and are the choice on a GPU.
"""

import difflib
import importlib
import warnings
from functools import cached_property

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from scanrl.envs.suite import SuiteEnv, SuiteParams, import_mujoco_suite, installed, not_installed

TASKS = (
    "ant", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_double_pendulum",
    "inverted_pendulum", "pusher", "reacher", "swimmer", "walker2d",
)
BACKENDS = ("spring", "positional", "generalized", "mjx")
DEFAULT_BACKEND = "spring"
SUITE = "Brax"
INSTALL_HINT = "pip install -r requirements-brax.txt"


def owns(env_id: str) -> bool:
    return env_id.startswith("brax/")


def is_installed() -> bool:
    return installed("brax")


def list_ids() -> list[str]:
    return [f"brax/{task}" for task in TASKS]


EnvParams = SuiteParams  # the time limit, 1,000 steps by default


class BraxEnv(SuiteEnv):
    """One Brax task as a gymnax `Environment` (scanrl/envs/suite.py): gymnax's `step` adds the auto-reset and time
    limit."""

    def __init__(self, brax_env, name: str, max_steps_in_episode: int = 1000):
        self.brax_env = brax_env
        super().__init__(name, max_steps_in_episode)

    def _reset(self, key):
        brax_state = self.brax_env.reset(key)
        return brax_state.obs, brax_state

    def _step(self, key, brax_state, action):
        # Brax physics is deterministic: the key is not needed.
        brax_state = self.brax_env.step(brax_state, action)
        return brax_state.obs, brax_state, brax_state.reward, brax_state.done > 0.5

    @cached_property
    def _obs_shape(self):
        # `brax_env.observation_size` runs an un-jitted reset (tens of seconds); tracing the shape takes ~1 s.
        return jax.eval_shape(self.brax_env.reset, jax.random.PRNGKey(0)).obs.shape

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, self._obs_shape, jnp.float32)

    def action_space(self, params):
        ctrl_range = self.brax_env.sys.actuator.ctrl_range
        return spaces.Box(ctrl_range[:, 0], ctrl_range[:, 1], (self.brax_env.action_size,), jnp.float32)


def make(env_id: str, backend: str | None = None, max_steps_in_episode: int = 1000, **kwargs):
    """`(env, env_params)` for `brax/<task>` or `brax/<task>:<backend>`; extra kwargs go to the Brax task."""
    task, _, id_backend = env_id.removeprefix("brax/").partition(":")
    if id_backend and backend and id_backend != backend:
        raise ValueError(f"{env_id!r} names backend {id_backend!r} but backend={backend!r} was passed")
    backend = backend or id_backend or DEFAULT_BACKEND
    if task not in TASKS:
        close = difflib.get_close_matches(task, TASKS, n=3, cutoff=0.4)
        hint = f"did you mean {', '.join('brax/' + t for t in close)}?" if close else f"Brax tasks: {', '.join(TASKS)}"
        raise ValueError(f"unknown env {env_id!r}: {hint}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown Brax backend {backend!r} in {env_id!r}; use one of {', '.join(BACKENDS)}")
    if not is_installed():
        raise not_installed(env_id, SUITE, INSTALL_HINT)
    brax_envs = import_mujoco_suite(lambda: importlib.import_module("brax.envs"))
    with warnings.catch_warnings():
        # "Brax ... not actively being maintained", and MuJoCo's deprecation warnings about Brax's model files
        warnings.simplefilter("ignore", UserWarning)
        brax_env = brax_envs.get_environment(task, backend=backend, **kwargs)
    env = BraxEnv(brax_env, f"brax/{task}:{backend}", max_steps_in_episode)
    return env, env.default_params
