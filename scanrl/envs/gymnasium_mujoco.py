"""Gymnasium's MuJoCo tasks, version 5, on MJX: `envs.make("mujoco/HalfCheetah-v5")`.

These are the MDPs of the published MuJoCo tables (SpinningUp, SB3, CleanRL, the TD3 and SAC papers), in JAX. The
model is the XML inside the installed gymnasium, loaded as it ships, and every rule of Gymnasium's v5 env is kept at
its defaults: the observation (which qpos and qvel; Hopper's and Walker2d's velocities clipped), every reward term,
the healthy-state termination, the reset noise, the frame skip, and the 1,000-step time limit, a truncation (gymnax's
`max_steps_in_episode`), never a termination. MJX steps in float32 where Gymnasium's C MuJoCo steps in float64:
tests/test_gymnasium_mujoco.py holds one step of ours to Gymnasium's from the same state, our resets to Gymnasium's,
and a random policy's returns to Gymnasium's (the tolerances are in docs/envs.md).

Ant-v5 is refused (MJX's contacts of its legs differ from MuJoCo's), and so are Humanoid-v5 and HumanoidStandup-v5
(their XML asks for MuJoCo's PGS solver, which MJX does not have). Needs MuJoCo and MJX
(`pip install -r requirements-mujoco.txt`); gymnasium, whose XMLs these are, comes with gymnax.

An env carries MuJoCo's state between steps, not MJX's whole `Data`: positions, velocities and the solver's warm start
(the accelerations `mj_step` starts its solver from; zero after a reset, as Gymnasium's reset leaves it). A reset
costs a few random numbers and the scan carries a few dozen floats per env.
"""

import difflib
import importlib
import importlib.util
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces

from scanrl.envs.suite import MujocoWarning, SuiteEnv, import_mujoco_suite, installed, not_installed

SUITE = "MuJoCo (MJX)"
INSTALL_HINT = "pip install -r requirements-mujoco.txt"
PREFIX = "mujoco/"


@struct.dataclass
class Physics:
    """MuJoCo's state between two env steps: what `mj_step` reads that a step changes."""

    qpos: jax.Array
    qvel: jax.Array
    qacc_warmstart: jax.Array


class Step(NamedTuple):
    """What a task's reward reads: the physics before and after the step, the action, and the step's duration."""

    before: Physics
    after: Physics
    action: jax.Array
    dt: float


def _sum_squares(x):
    return jnp.sum(jnp.square(x))


def _forward_velocity(step):
    return (step.after.qpos[0] - step.before.qpos[0]) / step.dt


def _inside(x, bounds):  # Gymnasium's `low < x < high`
    return (bounds[0] < x) & (x < bounds[1])


# Each task's rules, as its gymnasium/envs/mujoco/<task>_v5.py has them at its defaults: observation(physics) and
# outcome(step) -> (reward, terminated).

def half_cheetah(step):
    return _forward_velocity(step) - 0.1 * _sum_squares(step.action), jnp.bool_(False)


def hopper(step):
    qpos, state = step.after.qpos, jnp.concatenate([step.after.qpos, step.after.qvel])[2:]
    healthy = jnp.all(_inside(state, (-100.0, 100.0))) & _inside(qpos[1], (0.7, jnp.inf)) \
        & _inside(qpos[2], (-0.2, 0.2))
    return _forward_velocity(step) + healthy - 1e-3 * _sum_squares(step.action), ~healthy


def walker2d(step):
    qpos = step.after.qpos
    healthy = _inside(qpos[1], (0.8, 2.0)) & _inside(qpos[2], (-1.0, 1.0))
    return _forward_velocity(step) + healthy - 1e-3 * _sum_squares(step.action), ~healthy


def swimmer(step):
    return _forward_velocity(step) - 1e-4 * _sum_squares(step.action), jnp.bool_(False)


def inverted_pendulum(step):
    observation = jnp.concatenate([step.after.qpos, step.after.qvel])
    terminated = ~jnp.all(jnp.isfinite(observation)) | (jnp.abs(observation[1]) > 0.2)
    return (~terminated).astype(jnp.float32), terminated


def _positions_and_velocities(skip_qpos, clip_qvel=None):
    def observation(physics):
        qvel = physics.qvel if clip_qvel is None else jnp.clip(physics.qvel, -clip_qvel, clip_qvel)
        return jnp.concatenate([physics.qpos[skip_qpos:], qvel]).astype(jnp.float32)

    return observation


@dataclass(frozen=True)
class Task:
    """One of Gymnasium's v5 tasks at its defaults."""

    xml: str
    frame_skip: int
    observation: Callable
    outcome: Callable
    reset_noise: float
    """qpos is drawn uniformly within +-reset_noise of the model's qpos0, qvel likewise or (`normal_qvel`)
    as reset_noise times a standard normal"""
    normal_qvel: bool = False
    max_steps: int = 1000


TASKS = {
    "HalfCheetah-v5": Task("half_cheetah.xml", 5, _positions_and_velocities(1), half_cheetah, 0.1, normal_qvel=True),
    "Hopper-v5": Task("hopper.xml", 4, _positions_and_velocities(1, 10.0), hopper, 5e-3),
    "Walker2d-v5": Task("walker2d_v5.xml", 4, _positions_and_velocities(1, 10.0), walker2d, 5e-3),
    "Swimmer-v5": Task("swimmer.xml", 4, _positions_and_velocities(2), swimmer, 0.1),
    "InvertedPendulum-v5": Task("inverted_pendulum.xml", 2, _positions_and_velocities(0), inverted_pendulum, 0.01),
}
# What MJX cannot run as Gymnasium does, and what is not ported: one line at make time (docs/envs.md).
REFUSED = {
    "Humanoid-v5": "its XML asks for MuJoCo's PGS solver, which MJX does not have",
    "HumanoidStandup-v5": "its XML asks for MuJoCo's PGS solver, which MJX does not have",
    "Ant-v5": "MJX's contacts of its capsule legs with the floor differ from MuJoCo's (one step from the same state "
              "differs by up to 0.1 in qpos, the 99th percentile over random-action steps; its observation's "
              "contact forces by up to their whole clip range)",
    **dict.fromkeys(("InvertedDoublePendulum-v5", "Reacher-v5", "Pusher-v5"), "it is not ported yet"),
}


def owns(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def is_installed() -> bool:
    return installed("mujoco")


def list_ids() -> list[str]:
    return [PREFIX + name for name in TASKS]


class GymnasiumMujocoEnv(SuiteEnv):
    """One task as a gymnax `Environment` (scanrl/envs/suite.py: gymnax's `step` adds the auto-reset and the time
    limit)."""

    def __init__(self, env_id: str, task: Task, mj_model, mjx):
        self.task, self._mjx = task, mjx
        self._model = mjx.put_model(mj_model)
        self._data0 = mjx.make_data(mj_model)  # MuJoCo's data as mj_resetData leaves it
        self.dt = float(mj_model.opt.timestep) * task.frame_skip
        obs_shape = jax.eval_shape(task.observation, self._physics(self._data0)).shape
        low, high = jnp.asarray(mj_model.actuator_ctrlrange, jnp.float32).T
        super().__init__(env_id, task.max_steps, spaces.Box(-jnp.inf, jnp.inf, obs_shape, jnp.float32),
                         spaces.Box(low, high, (mj_model.nu,), jnp.float32))

    @staticmethod
    def _physics(data):
        return Physics(data.qpos, data.qvel, data.qacc_warmstart)

    def _reset(self, key):
        task, qpos0, nv = self.task, self._data0.qpos, self._data0.qvel.shape[0]
        key_qpos, key_qvel = jax.random.split(key)
        noise = task.reset_noise
        qpos = qpos0 + jax.random.uniform(key_qpos, qpos0.shape, minval=-noise, maxval=noise)
        if task.normal_qvel:
            qvel = noise * jax.random.normal(key_qvel, (nv,))
        else:
            qvel = jax.random.uniform(key_qvel, (nv,), minval=-noise, maxval=noise)
        physics = Physics(qpos, qvel, jnp.zeros(nv))  # mj_resetData's zero warm start: set_state's mj_forward keeps it
        return task.observation(physics), physics

    def _step(self, key, physics, action):
        # MuJoCo's physics is deterministic: the key is not needed.
        task, mjx = self.task, self._mjx
        data = self._data0.replace(qpos=physics.qpos, qvel=physics.qvel, qacc_warmstart=physics.qacc_warmstart,
                                   ctrl=action)
        data = jax.lax.fori_loop(0, task.frame_skip, lambda _, d: mjx.step(self._model, d), data)
        after = self._physics(data)
        reward, terminated = task.outcome(Step(physics, after, action, self.dt))
        return task.observation(after), after, reward, terminated


def xml_path(task: Task) -> str:
    """The task's XML inside the installed gymnasium (found without importing gymnasium's MuJoCo envs)."""
    gymnasium_dir = os.path.dirname(importlib.util.find_spec("gymnasium").origin)
    return os.path.join(gymnasium_dir, "envs", "mujoco", "assets", task.xml)


def make(env_id: str, **kwargs):
    """`(env, env_params)` for `mujoco/<Task>-v5`; Gymnasium's defaults only (no keyword arguments)."""
    name = env_id.removeprefix(PREFIX)
    if name in REFUSED:
        raise ValueError(f"{env_id!r} is not offered: {REFUSED[name]}; the tasks on MJX: {', '.join(list_ids())}")
    if name not in TASKS:
        close = difflib.get_close_matches(name, [*TASKS, *REFUSED], n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(PREFIX + c for c in close)}?" if close else f"tasks: {', '.join(list_ids())}"
        raise ValueError(f"unknown env {env_id!r}: {hint}")
    if kwargs:
        raise ValueError(f"{env_id}: takes no options ({', '.join(sorted(kwargs))}): it is Gymnasium's task at its "
                         "defaults")
    if not is_installed():
        raise not_installed(env_id, SUITE, INSTALL_HINT)
    mujoco, mjx = import_mujoco_suite(lambda: (importlib.import_module("mujoco"),
                                               importlib.import_module("mujoco.mjx")))
    task = TASKS[name]
    with warnings.catch_warnings():  # Gymnasium's half_cheetah.xml uses settotalmass, which MuJoCo 4 deprecates
        warnings.filterwarnings("ignore", "MuJoCo: compiler attribute 'settotalmass' is deprecated", MujocoWarning)
        mj_model = mujoco.MjModel.from_xml_path(xml_path(task))
    env = GymnasiumMujocoEnv(env_id, task, mj_model, mjx)
    return env, env.default_params
