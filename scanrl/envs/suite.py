"""What every optional suite's adapter shares (scanrl/envs/brax.py, craftax.py, xminigrid.py, playground.py): a
suite's env behind the gymnax 1.x `Environment` API, and the module interface `envs.make` dispatches on.

A suite's adapter subclasses `SuiteEnv` and gives two functions of the suite's own state:

    _reset(key) -> (obs, inner)
    _step(key, inner, action) -> (obs, inner, reward, terminated)

`terminated` is the task's own end only (a death, a goal reached); the time limit is gymnax's: `step` truncates at
`max_steps_in_episode`, auto-resets after either end, and puts the true last observation in
`info["final_observation"]`. The suite's own auto-reset and time limit are never used, since they lose one or the
other.

An adapter whose reset costs much more than a step (Craftax builds a whole world) sets `reset_ratio` above 1:
`envs.VecEnv` then steps its envs with `auto_reset` off and builds only `num_envs // reset_ratio` new episodes a
step, shared out to the envs that ended (Craftax's baselines call these optimistic resets).

An adapter module defines `SUITE` (its name), `INSTALL_HINT`, `owns(env_id)` (the ids it answers, installed or
not), `is_installed()`, `list_ids()` and `make(env_id, **kwargs)`, and imports its suite only inside `make`.
"""

import contextlib
import importlib.util
import io
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment


@struct.dataclass
class SuiteState(environment.EnvState):
    inner: Any  # the suite's own state


@struct.dataclass
class SuiteParams(environment.EnvParams):
    max_steps_in_episode: int = 1000
    auto_reset: bool = struct.field(pytree_node=False, default=True)  # off: `step` leaves the reset to VecEnv


class SuiteEnv(environment.Environment):
    """A suite's env in gymnax's API; see the module docstring. `obs_space` and `act_space` are gymnax spaces (or a
    subclass overrides `observation_space` and `action_space`)."""

    reset_ratio: int = 1  # envs per new episode built each step in a VecEnv (1: every env builds its own)

    def __init__(self, name: str, max_steps_in_episode: int, obs_space=None, act_space=None):
        self._name = name
        self._params = SuiteParams(max_steps_in_episode=int(max_steps_in_episode))
        self._obs_space, self._act_space = obs_space, act_space

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> SuiteParams:
        return self._params

    def observation_space(self, params):
        return self._obs_space

    def action_space(self, params):
        return self._act_space

    @property
    def num_actions(self) -> int:
        space = self.action_space(self._params)
        return int(space.n) if hasattr(space, "n") else int(space.shape[0])

    def step(self, key, state, action, params=None):
        """gymnax's step; with `params.auto_reset` off, without the reset: the state and observation are those the
        step reached, and `info` still says which end came (VecEnv then resets the envs that ended)."""
        params = self.default_params if params is None else params
        if params.auto_reset:
            return super().step(key, state, action, params)
        key_step, _ = jax.random.split(key)  # gymnax's split: the same step as with auto_reset on
        obs, state, reward, terminated, info = self.step_env(key_step, state, action, params)
        truncated = self.is_truncated(state, params)
        info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs}
        return obs, state, reward, terminated, truncated, info

    def reset_env(self, key, params):
        obs, inner = self._reset(key)
        return obs, SuiteState(time=jnp.int32(0), inner=inner)

    def step_env(self, key, state, action, params):
        obs, inner, reward, terminated = self._step(key, state.inner, action)
        state = SuiteState(time=state.time + 1, inner=inner)
        return obs, state, jnp.asarray(reward, jnp.float32), jnp.asarray(terminated, bool), {}

    def _reset(self, key):
        raise NotImplementedError

    def _step(self, key, inner, action):
        raise NotImplementedError


def installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def not_installed(env_id: str, suite: str, hint: str) -> ValueError:
    return ValueError(f"{env_id!r} needs {suite}, which is not installed: {hint}")


def import_mujoco_suite(import_fn):
    """`import_fn()`, which imports a MuJoCo suite (Brax, Playground), quietly: MJX's note that its optional GPU
    backend (Warp) is missing is dropped from stdout (anything else printed is kept), import-time warnings are off,
    and MuJoCo's C library warnings then go through Python's warnings instead of ./MUJOCO_LOG.TXT (a run writes
    nothing outside its run directory). -> what `import_fn` returns."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = import_fn()
    for line in printed.getvalue().splitlines():
        if not line.startswith(("Failed to import warp", "Failed to import mujoco_warp")):
            print(line)
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)
    return result


class MujocoWarning(UserWarning):
    """A warning of MuJoCo's C library (a model or simulation problem), shown through Python's warnings."""


def _mujoco_warning(message):
    warnings.warn(f"MuJoCo: {message}", MujocoWarning, stacklevel=2)
