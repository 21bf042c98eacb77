"""A run's saved config: config.json read back as the script's Config fields (a run of another script, a value of
the wrong type or another version's field is one line), and held to the config its newest checkpoint was trained
with: --resume takes the run's own config with this command line's logging flags; --eval refuses an edited one."""

import dataclasses
import json
import os
import types
import typing

from scanrl.harness.checkpoints import trained_config
from scanrl.harness.flags import LOGGING_FLAGS, ConfigError, flag

# Names an older scanrl gave to runs of dqn_tabular_q.py, whose checkpoints this version cannot read.
OLDER_NAMES = {"dqn": "PQN moved to pqn.py", "tabular_q": "PQN moved to pqn.py"}


def read_run_config(algorithm, run_dir, which, command_env=None) -> dict:
    """The config.json of one of this script's run directories, as Config fields; ConfigError otherwise. `which`:
    the flag that named the directory; `command_env`: the --env of this command line.

    A run on the user's own env (`--env module:name`) is resumed or evaluated only when this command line names that
    env too: a run directory's config.json never makes scanrl import code."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isdir(run_dir):
        raise ConfigError(f"{which}: no run directory {run_dir}")
    try:
        with open(path) as f:
            saved = json.load(f)
        name = saved.pop("algo")
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        raise ConfigError(f"{which}: {path} is missing or unreadable; is {run_dir} a run directory of "
                          f"{algorithm.script}?") from None
    if name != algorithm.name:
        use = f"use {name}.py"
        if name in OLDER_NAMES:
            use = (f"{name} was dqn_tabular_q.py's name for its runs before {OLDER_NAMES[name]}, and this version "
                   "cannot read them; train it again")
        raise ConfigError(f"{which}: {run_dir} is a run of {name} ({name}.py), not of {algorithm.name} "
                          f"({algorithm.script}); {use}")
    # JSON has no tuples: tuple fields (hidden_sizes, sweep) come back as lists.
    fields = {f.name for f in dataclasses.fields(algorithm.config)}
    unknown = sorted(set(saved) - fields)
    if unknown:
        raise ConfigError(f"{which}: {path} has fields {algorithm.script} does not know ({', '.join(unknown)}): it "
                          f"was written by another version of {algorithm.name}; use that version")
    hints = typing.get_type_hints(algorithm.config)
    for key, value in saved.items():
        if not of_type(value, hints.get(key)):
            raise ConfigError(f"{which}: {path} holds {key} = {json.dumps(value)}, not a value {flag(key)} takes "
                              f"({shown_type(hints[key])}); it was edited or damaged: put back the run's value")
    from scanrl import envs  # here, not at the top: importing gymnax makes a JAX backend

    env_id = saved.get("env")
    reference = envs.import_reference(env_id) if isinstance(env_id, str) else None
    if reference is not None and command_env != env_id:
        raise ConfigError(f"{which}: {run_dir} trained on {env_id}, which imports {reference[0]}; scanrl imports "
                          f"code only when your own command line names it: add --env {env_id}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}


def of_type(value, hint) -> bool:
    """Whether a value read from JSON fits a Config field's type (int, float, bool, str, Literal, tuple[T, ...],
    unions with None); a type not listed here lets anything through."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(of_type(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(of_type(v, args[0]) for v in value)
        return len(value) == len(args) and all(of_type(v, a) for v, a in zip(value, args, strict=True))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True


def shown_type(hint) -> str:
    """A field's type as a message names it: "int", "float or null", "one of 'mse', 'huber'"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else shown_type(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin is tuple:
        return f"a list of {shown_type(args[0])}"
    return getattr(hint, "__name__", str(hint))


def shown(value) -> str:
    """A JSON value as the command line writes it: [64, 64] -> "64 64"."""
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def given_fields(algorithm, argv) -> set[str]:
    """The config fields a command line names (`--out-dir x`, `--out-dir=x`, `--no-track`), given as well as
    defaulted: --resume takes a logging flag given at its default (`--no-track`) over the run's value."""
    fields, given = {f.name for f in dataclasses.fields(algorithm.config)}, set()
    for arg in argv:
        if arg.startswith("--"):
            name = arg[2:].split("=")[0].replace("-", "_")
            name = name[3:] if name.startswith("no_") and name[3:] in fields else name
            given |= {name} & fields
    return given


def resumed_config(algorithm, config, named=(), trained=None):
    """--resume: the run's own config, with the logging flags given on this command line (`named`: the fields it
    names, see `given_fields`; else those that differ from their defaults); any other flag that differs from the
    run's would change its results, and is refused.

    `trained`: (which checkpoint, its config), the config the newest checkpoint was trained with: it is the run's
    config. A config.json that disagrees with it on a field that changes results (edited, damaged, a field missing)
    is refused with one line naming the field, unless the command line names that field with the checkpoint's
    value. Without a checkpoint, config.json must hold every such field (or the command line name it)."""
    saved = read_run_config(algorithm, config.resume, "--resume", config.env)
    path = os.path.join(config.resume, "config.json")
    logging = LOGGING_FLAGS
    results = [f.name for f in dataclasses.fields(algorithm.config) if f.name not in logging]
    # Compared as JSON, the form config.json holds (tuples are lists there).
    given, defaults, as_saved = (json.loads(json.dumps(c)) for c in (
        dataclasses.asdict(config), dataclasses.asdict(algorithm.config(env=config.env)), saved))
    truth = dict(as_saved)
    if trained is not None:
        where, held = trained
        held = json.loads(json.dumps(held))
        for k in results:
            if k not in held or k in as_saved and as_saved[k] == held[k]:
                continue
            if not (k in named and given[k] == held[k]):
                said = f"says {flag(k)} {shown(as_saved[k])}" if k in as_saved else f"has no {k}"
                raise ConfigError(f"--resume: {path} {said}, but its newest checkpoint ({where}) was trained with "
                                  f"{flag(k)} {shown(held[k])}; put that value back in config.json, or pass "
                                  f"{flag(k)} {shown(held[k])} to resume the run as it was trained")
            truth[k] = held[k]
    missing = [k for k in results if k not in truth and k not in named]
    if missing:
        raise ConfigError(f"--resume: {path} has no {', '.join(missing)} (edited or damaged) and the run has no "
                          f"checkpoint that records it; put the run's value back, or pass {flag(missing[0])}")
    changed = [k for k in truth if k not in logging and k in given and (given[k] != defaults[k] or k in named)
               and given[k] != truth[k]]
    if changed:
        flags = ", ".join(f"{flag(k)} {shown(given[k])} (run: {shown(truth[k])})" for k in changed)
        raise ConfigError(f"--resume: {flags} would change the run's results; drop it to resume, or start a new run")
    overrides = {k: getattr(config, k) for k in logging if given[k] != defaults[k] or k in named}
    overrides |= {k: getattr(config, k) for k in results if k not in truth}  # named on the command line
    run = {k: tuple(v) if isinstance(v, list) else v for k, v in truth.items()}
    return algorithm.config(**{**run, **overrides, "resume": config.resume, "eval": None})


def check_trained_config(algorithm, run_dir, saved):
    """--eval: ConfigError naming the first field (one that shapes the results) where config.json disagrees with the
    config the newest checkpoint was trained with: an edited num_seeds or layer width would restore the wrong agents
    (or none) into the program."""
    trained = trained_config(run_dir)
    if trained is None:
        return
    where, held = trained
    as_saved, held = (json.loads(json.dumps(c)) for c in (saved, held))
    for field in dataclasses.fields(algorithm.config):
        k = field.name
        if k not in LOGGING_FLAGS and k in held and k in as_saved and as_saved[k] != held[k]:
            raise ConfigError(f"--eval: {os.path.join(run_dir, 'config.json')} says {flag(k)} {shown(as_saved[k])}, "
                              f"but its newest checkpoint ({where}) was trained with {flag(k)} {shown(held[k])}; put "
                              "that value back in config.json")
