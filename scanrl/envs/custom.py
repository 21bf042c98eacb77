"""A user's own env: `--env module:name` (a module on sys.path or in the working directory, or a Python file) and the
ids `envs.register` adds, each checked against the gymnax 1.x API the scripts use before anything is compiled, and
the one line a run prints when such an env fails inside the training program."""

import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback

import gymnax
import jax
import numpy as np

# Envs registered by the user (`envs.register`): id -> factory(**kwargs).
REGISTERED: dict = {}


def first_line(error) -> str:
    """`error` in one line: its type and its message's first line (200 characters at most)."""
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
    return (f"--env {env_id}: the env raised {first_line(error)}, at {seen}, while the training program was made "
            "(it runs batched, under jax.vmap and jax.lax.scan); fix the env there")


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


def imported(env_id, module_name, name, kwargs):
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
        raise ValueError(f"importing {module_name} for {env_id!r} failed: {first_line(error)}") from None
    if name in REGISTERED:
        return checked(env_id, REGISTERED[name], kwargs)
    if not hasattr(module, name):
        raise ValueError(f"{env_id!r}: {module_name} has no attribute {name!r} and registers no env of that id")
    return checked(env_id, getattr(module, name), kwargs)


def checked(env_id, made, kwargs):
    """`(env, env_params)` from a user's env, class or factory, checked against the gymnax 1.x API the scripts use
    (reset, a six-value step with info["final_observation"], the spaces, a time limit): ValueError naming what is
    missing, instead of a traceback from inside a compiled program."""
    if isinstance(made, gymnax.environments.environment.Environment):
        made = (made, made.default_params)
    elif callable(made):
        try:
            made = made(**kwargs)
        except (Exception, SystemExit) as error:  # `--env sys:exit` called exit: that is no env either
            raise ValueError(f"{env_id!r}: making the env failed: {first_line(error)}") from None
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
        raise ValueError(f"{env_id!r}: reset or step failed: {first_line(error)}") from None
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
