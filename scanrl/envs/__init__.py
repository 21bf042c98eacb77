"""Environments for scanrl: gymnax ids and our own JAX envs behind one `make`, plus shared wrappers.

    env, env_params = envs.make("CartPole-v1")
    env, env_params = envs.make_vec("Pendulum-v1", num_envs=8, normalize_obs=True)

Every env speaks the gymnax 1.x API (see `envs.wrappers`).
"""
# ruff: noqa: E402 - seaborn's stand-in (below) goes in before gymnax is imported

import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


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
    "FlattenObservation",
    "MaskObservation",
    "NormalizeObservation",
    "NormalizeReward",
    "RecurrentPolicy",
    "RunningMeanStd",
    "VecEnv",
    "Wrapper",
    "evaluate",
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


# Envs registered by the user (`register`): id -> factory(**kwargs).
_REGISTERED: dict[str, Callable] = {}

# The optional suites, one adapter module each in envs/ (see envs/suite.py); each imports its suite only in its make.
SUITES = ("brax", "craftax", "xminigrid", "playground")


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
    _REGISTERED[env_id] = factory


def list_envs() -> list[str]:
    """Every id `make` accepts: gymnax's, ours, the registered ones, and each installed suite's."""
    suite_ids = [i for suite in _suites() if suite.is_installed() for i in _listed(suite)]
    return sorted(gymnax.registered_envs) + sorted(_OUR_ENVS) + sorted(_REGISTERED) + suite_ids


def make(env_id: str, **kwargs):
    """Returns `(env, env_params)` for a gymnax id, one of ours, a registered one, a suite's, or `module:name` (your
    own env, imported: see `import_reference`); ValueError with one line (close ids, an install hint) otherwise."""
    if env_id in _OUR_ENVS:
        return _OUR_ENVS[env_id](**kwargs)
    if env_id in _REGISTERED:
        return _checked(env_id, _REGISTERED[env_id], kwargs)
    for suite in _suites():
        if suite.owns(env_id):
            try:
                return suite.make(env_id, **kwargs)
            except ValueError:
                raise
            except Exception as error:  # installed, but broken (a version clash, a missing library): one line
                raise ValueError(f"{env_id!r}: {suite.SUITE} is installed but fails ({_first_line(error)}); "
                                 f"reinstall it: {suite.INSTALL_HINT}") from None
    if env_id in gymnax.registered_envs:
        return gymnax.make(env_id, **kwargs)
    reference = import_reference(env_id)
    if reference is not None:
        return _imported(env_id, *reference, kwargs)
    close = difflib.get_close_matches(env_id, list_envs(), n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else "see envs.list_envs(), or name your own env as module:name"
    raise ValueError(f"unknown env {env_id!r}: {hint}")


def _first_line(error) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"


def user_env_failure(env_id: str, error: BaseException) -> str | None:
    """One line for `error` if the user's own env (`--env module:name`) raised it, while the training program was
    traced or compiled: the env's file and line, and the error; None for any other error (a script's own is its
    traceback to read)."""
    reference = import_reference(env_id)
    if reference is None:
        return None
    module, _ = reference
    if module.endswith(".py"):
        path = os.path.abspath(module)
    else:
        path = getattr(sys.modules.get(module), "__file__", None)
    if path is None:
        return None
    seen, chained = None, error
    while chained is not None and seen is None:
        for frame, line in traceback.walk_tb(chained.__traceback__):
            if os.path.abspath(frame.f_code.co_filename) == path:
                seen = f"{path}:{line}"
        chained = chained.__cause__ or chained.__context__
    if seen is None:
        return None
    return (f"--env {env_id}: the env raised {_first_line(error)}, at {seen}, while the training program was made "
            "(it runs batched, under jax.vmap and jax.lax.scan); fix the env there")


def _listed(suite) -> list[str]:
    """An installed suite's ids; none from a suite that fails to import (making one of its envs says why)."""
    try:
        return suite.list_ids()
    except Exception:  # noqa: BLE001
        return []


def import_reference(env_id: str) -> tuple[str, str] | None:
    """`(module, name)` if `env_id` names code to import, `module:name`: a dotted module (`mypkg.envs:MyEnv`,
    found on sys.path or in the working directory) or a Python file (`my_env.py:MyEnv`); None for any other id.
    `name` is an attribute of the module (an env class, an env, or a factory) or an id it registers."""
    module, sep, name = env_id.partition(":")
    if not sep or not name:
        return None
    if module.endswith(".py") or re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
        return module, name
    return None


def _imported(env_id, module_name, name, kwargs):
    """The env `module_name:name` names: imports the module (a file, or a module on sys.path or in the working
    directory), then takes its attribute `name`, or the id `name` it registered."""
    try:
        if module_name.endswith(".py"):
            path = os.path.abspath(module_name)
            if not os.path.isfile(path):
                raise ValueError(f"{env_id!r}: no file {path}")
            spec = importlib.util.spec_from_file_location(f"scanrl_user_env_{abs(hash(path))}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:  # as `python -m` does: the working directory's modules can be named
                sys.path.append(os.getcwd())
            module = importlib.import_module(module_name)
    except ValueError:
        raise
    except (Exception, SystemExit) as error:  # the user's code: any error (an exit too) is theirs to see, in one line
        raise ValueError(f"importing {module_name} for {env_id!r} failed: {_first_line(error)}") from None
    if name in _REGISTERED:
        return _checked(env_id, _REGISTERED[name], kwargs)
    if not hasattr(module, name):
        raise ValueError(f"{env_id!r}: {module_name} has no attribute {name!r} and registers no env of that id")
    return _checked(env_id, getattr(module, name), kwargs)


def _checked(env_id, made, kwargs):
    """`(env, env_params)` from a user's env, class or factory, checked against the gymnax 1.x API the scripts use
    (reset, a six-value step with info["final_observation"], the spaces, a time limit): ValueError naming what is
    missing, instead of a traceback from inside a compiled program."""
    if isinstance(made, gymnax.environments.environment.Environment):
        made = (made, made.default_params)
    elif callable(made):
        try:
            made = made(**kwargs)
        except (Exception, SystemExit) as error:  # `--env sys:exit` called exit: that is no env either
            raise ValueError(f"{env_id!r}: making the env failed: {_first_line(error)}") from None
    env, env_params = made if isinstance(made, tuple) else (made, getattr(made, "default_params", None))
    missing = [a for a in ("reset", "step", "action_space", "observation_space") if not hasattr(env, a)]
    if missing or env_params is None:
        raise ValueError(f"{env_id!r}: not a gymnax env (no {', '.join(missing) or 'default_params'}); give a "
                         "gymnax.environments.environment.Environment subclass, an instance, or a factory of one")
    if not isinstance(getattr(env_params, "max_steps_in_episode", None), int | np.integer):
        raise ValueError(f"{env_id!r}: its params have no integer max_steps_in_episode (the time limit every "
                         "episode needs, for evaluation); subclass gymnax's EnvParams")
    try:
        key = jax.random.PRNGKey(0)
        obs, state = jax.eval_shape(env.reset, key, env_params)
        action = jax.eval_shape(lambda k: env.action_space(env_params).sample(k), key)
        out = jax.eval_shape(env.step, key, state, action, env_params)
    except (Exception, SystemExit) as error:
        raise ValueError(f"{env_id!r}: reset or step failed: {_first_line(error)}") from None
    if not (isinstance(out, tuple) and len(out) == 6 and isinstance(out[5], dict)
            and "final_observation" in out[5]):
        raise ValueError(f"{env_id!r}: step must return gymnax 1.x's (obs, state, reward, terminated, "
                         "truncated, info) with info['final_observation']; subclass gymnax's Environment and write "
                         "step_env (gymnax 0.0.x's five values are not enough)")
    wrong = [f"a {name} of shape {list(value.shape)} (a scalar, one env's)" for name, value in
             (("reward", out[2]), ("terminated", out[3]), ("truncated", out[4])) if value.shape != ()]
    if out[0].shape != obs.shape:
        wrong.insert(0, f"an observation of shape {list(out[0].shape)} (reset's: {list(obs.shape)})")
    if wrong:
        raise ValueError(f"{env_id!r}: step returns {' and '.join(wrong)}; the scripts batch envs with jax.vmap: "
                         f"fix{_where(env)}")
    return env, env_params


def _where(env) -> str:
    """ step_env at file:line": where an env's step is written, for a message; " its step" where it is not found."""
    method = getattr(type(env), "step_env", None) or getattr(type(env), "step", None)
    try:
        return f" {method.__name__} at {inspect.getsourcefile(method)}:{inspect.getsourcelines(method)[1]}"
    except (TypeError, OSError):
        return " its step"


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


@dataclass(frozen=True)
class RecurrentPolicy:
    """A policy with memory, for `evaluate` and `record_episode` (and as an algorithm's `policy` for the harness):
    `initial_carry(num_envs)` is the memory before anything was seen, and `step(carry, obs, start) -> (carry,
    action)` acts on a batch of observations, `start` flagging the envs whose episode begins with this observation
    (the memory resets there). A feed-forward policy is a plain function `act(obs) -> action`."""

    initial_carry: Callable[[int], Any]
    step: Callable[[Any, Any, Any], tuple[Any, Any]]

    def __call__(self, obs):
        raise TypeError("this policy has memory: step it with RecurrentPolicy.step(carry, obs, start) from its "
                        "initial_carry (as envs.evaluate does), not as act(obs)")


def as_recurrent(policy) -> RecurrentPolicy:
    """`policy` as a `RecurrentPolicy`: itself, or a feed-forward `act(obs)` with an empty memory."""
    if isinstance(policy, RecurrentPolicy):
        return policy
    return RecurrentPolicy(lambda num_envs: (), lambda carry, obs, start: (carry, policy(obs)))


def normalized_policy(policy, runner) -> RecurrentPolicy:
    """`policy` (`act(obs)` or a `RecurrentPolicy`) fed observations as training saw them: standardised with the
    frozen statistics of the `NormalizeObservation` state in `runner` (an agent's state), unchanged where it holds
    none. The harness evaluates an algorithm's policy so, on an env without normalisation wrappers."""
    normalize, policy = observation_normalizer(runner), as_recurrent(policy)
    return RecurrentPolicy(policy.initial_carry, lambda carry, obs, start: policy.step(carry, normalize(obs), start))


def evaluate(env, env_params, policy, key, num_steps: int):
    """Plays one episode in each env of a `make_vec` env with `policy`: `act(obs) -> action`, or a
    `RecurrentPolicy`, whose memory starts from its initial carry and resets where an episode starts.

    Returns the return of each env's first episode, shape `(num_envs,)`; `num_steps` should cover the
    longest episode (the env's time limit). It stops once every env's first episode has ended (an env with a
    time limit of 1e9 steps ends when its episodes do). Evaluate on an env without normalisation wrappers, the
    policy normalising with training's frozen statistics (`normalized_policy`). The same in pieces, for a
    host that reports progress or stops between them: `evaluation_start`, then `evaluation_steps` until it ends.
    """
    carry = evaluation_start(env, env_params, policy, key)
    return evaluation_steps(env, env_params, policy, key, carry, num_steps).returns


class Evaluation(NamedTuple):
    """`evaluate`'s state between steps: the step count, each env's observation, where an episode starts, the
    policy's memory, the env states, whose first episode has ended, and its return (NaN until it ends)."""

    t: jax.Array
    obs: jax.Array
    start: jax.Array
    memory: Any
    state: Any
    finished: jax.Array
    returns: jax.Array


def evaluation_start(env, env_params, policy, key) -> Evaluation:
    """`evaluate`'s state before its first step: every env reset."""
    policy = as_recurrent(policy)
    key_reset, _ = jax.random.split(key)
    obs, state = env.reset(key_reset, env_params)
    num_envs = obs.shape[0]
    return Evaluation(jnp.int32(0), obs, jnp.ones(num_envs, bool), policy.initial_carry(num_envs), state,
                      jnp.zeros(num_envs, bool), jnp.full(num_envs, jnp.nan, jnp.float32))


def evaluation_steps(env, env_params, policy, key, carry: Evaluation, until) -> Evaluation:
    """`evaluate`'s steps from `carry` until step `until` (a traced int32 may set it) or every env's first episode
    has ended: pieces run one after another play the same episodes as one call."""
    policy = as_recurrent(policy)
    _, key = jax.random.split(key)

    def _eval_step(carry):
        memory, action = policy.step(carry.memory, carry.obs, carry.start)
        # fold_in(key, t) is split(key, num_steps)[t], without making num_steps keys up front
        obs, state, _, _, _, info = env.step(jax.random.fold_in(key, carry.t), carry.state, action, env_params)
        first_end = jnp.logical_and(info["episode_done"], jnp.logical_not(carry.finished))
        return Evaluation(carry.t + 1, obs, info["episode_done"], memory, state,
                          jnp.logical_or(carry.finished, info["episode_done"]),
                          jnp.where(first_end, info["episode_return"], carry.returns))

    return jax.lax.while_loop(lambda c: (c.t < until) & ~c.finished.all(), _eval_step, carry)


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
