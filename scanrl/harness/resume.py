"""--resume, before anything compiles: a run's config.json read back as the script's Config fields (--eval reads it so
too), held to the config its newest checkpoint was trained with (--resume takes the run's own config with this command
line's logging flags; --eval refuses an edited one), and the checkpoints its metrics.csv rows need; then, once the run
directory is owned (`record.RunRecord`), training goes on from its newest readable checkpoint (`restored_run`)."""

import contextlib
import csv
import dataclasses
import json
import os
import shlex
import types
import typing

from scanrl.harness import migrations
from scanrl.harness.checkpoints import Checkpoints
from scanrl.harness.files import foreign_folder, open_regular
from scanrl.harness.flags import LOGGING_FLAGS, ConfigError, escaped, flag


def read_run_config(algorithm, run_dir, which, command_env=None, held=False) -> dict:
    """The config.json of one of this script's run directories, as Config fields; ConfigError otherwise. `which`:
    the flag that named the directory; `command_env`: the --env of this command line, which must name a run's own
    env (`--env module:name`) too: a run directory's config.json never makes scanrl import code; `held` (--eval):
    also ConfigError where it disagrees with the config its newest checkpoint was trained with (`trained_fields`)."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isdir(run_dir):
        raise ConfigError(f"{which}: no run directory {run_dir}")
    try:
        with open(path) as f:
            saved = json.load(f)
        if not isinstance(name := saved.pop("algo"), str):
            raise TypeError
        name = shown(name)
    except (OSError, ValueError, KeyError, AttributeError, TypeError, RecursionError):  # Recursion: nested deep
        raise ConfigError(f"{which}: {path} is missing or unreadable; is {run_dir} a run directory of "
                          f"{algorithm.script}?") from None
    if name != algorithm.name:
        raise ConfigError(f"{which}: {run_dir} is a run of {name} ({name}.py), not of {algorithm.name} "
                          f"({algorithm.script}); {migrations.RETIRED.get(name, f'use {name}.py')}")
    saved = migrations.config_now(name, saved, lambda line: print(f"{which}: {path} {line}"))
    if unknown := sorted(set(saved) - {f.name for f in dataclasses.fields(algorithm.config)}):
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
        command = shlex.join(["python", algorithm.script, which, run_dir, "--env", env_id])
        raise ConfigError(f"{which}: {run_dir} trained on {env_id}, which imports {reference[0]}; scanrl imports "
                          f"code only when your own command line names it: {command}")
    if held:
        trained_fields(algorithm, which, run_dir, saved, trained_config(run_dir))
    return {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}  # JSON has no tuples


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
        each = args[:1] * len(value) if args[1:] == (Ellipsis,) else args
        return len(value) == len(each) and all(map(of_type, value, each))
    if hint in (bool, str):
        return isinstance(value, hint)
    if hint in (int, float):  # a bool is an int to Python, not to JSON; an int is a float's value
        return isinstance(value, int if hint is int else int | float) and not isinstance(value, bool)
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
    """A JSON value as the command line writes it ([64, 64] -> "64 64"), `escaped` for a one-line message."""
    return escaped(" ".join(map(str, value)) if isinstance(value, list) else value)


def as_json(values) -> dict:
    """`values` as config.json holds them (tuples as lists), to compare with it."""
    return json.loads(json.dumps(values))


def trained_fields(algorithm, which, run_dir, saved, trained, passed=None) -> dict:
    """The fields that shape the results, as the newest checkpoint was trained with (`trained`: (that checkpoint, its
    config), or None); ConfigError naming the first where config.json (`saved`) says otherwise, unless `passed` (the
    values --resume's command line names) holds the checkpoint's value. --resume also refuses a field it lacks."""
    if trained is None:
        return {}
    where, held = trained
    saved, held, passed = as_json(saved), as_json(migrations.config_now(algorithm.name, held)), passed or {}
    held = {f.name: held[f.name] for f in dataclasses.fields(algorithm.config)
            if f.name not in LOGGING_FLAGS and f.name in held}
    for k, value in held.items():
        agrees = saved[k] == value if k in saved else which == "--eval"  # --eval runs a missing field's default
        if agrees or k in passed and passed[k] == value:
            continue
        said = f"says {flag(k)} {shown(saved[k])}" if k in saved else f"has no {k}"
        was = f"{flag(k)} {shown(value)}"
        passing = f", or pass {was} to resume the run as it was trained" if which == "--resume" else ""
        raise ConfigError(f"{which}: {os.path.join(run_dir, 'config.json')} {said}, but its newest checkpoint "
                          f"({where}) was trained with {was}; put that value back in config.json{passing}")
    return held


def resumed_config(algorithm, config, named=(), trained=None):
    """--resume: the run's own config (config.json, held to `trained`, see `trained_fields`), with the logging flags
    given on this command line (`named`: the fields it names, see `given_fields`; else those that differ from their
    defaults); any other flag that differs from the run's would change its results, and is refused."""
    saved = read_run_config(algorithm, config.resume, "--resume", config.env)
    given, defaults, saved = (as_json(c) for c in (
        dataclasses.asdict(config), dataclasses.asdict(algorithm.config(env=config.env)), saved))
    chosen = {k for k in given if k in named or given[k] != defaults[k]}  # the flags this command line sets
    passed = {k: v for k, v in given.items() if k in named}
    run = {**saved, **trained_fields(algorithm, "--resume", config.resume, saved, trained, passed)}
    results = [f.name for f in dataclasses.fields(algorithm.config) if f.name not in LOGGING_FLAGS]
    if missing := [k for k in results if k not in run and k not in named]:
        raise ConfigError(f"--resume: {os.path.join(config.resume, 'config.json')} has no {', '.join(missing)} "
                          "(edited or damaged) and the run has no checkpoint that records it; put the run's value "
                          f"back, or pass {flag(missing[0])}")
    if changed := [k for k in run if k not in LOGGING_FLAGS and k in chosen and given[k] != run[k]]:
        flags = ", ".join(f"{flag(k)} {shown(given[k])} (run: {shown(run[k])})" for k in changed)
        raise ConfigError(f"--resume: {flags} would change the run's results; drop it to resume, or start a new run")
    overrides = {k: getattr(config, k) for k in LOGGING_FLAGS if k in chosen}
    overrides |= {k: getattr(config, k) for k in results if k not in run}  # named on the command line
    run = {k: tuple(v) if isinstance(v, list) else v for k, v in run.items()}
    return algorithm.config(**{**run, **overrides, "resume": config.resume, "eval": None})


def resumed(algorithm, config, named=()):
    """--resume DIR: the run's own config (`resumed_config`), checked to have the checkpoints its metrics.csv rows need,
    DIR reached through a link as it is (its files' folder is none)."""
    import jax

    config = resumed_config(algorithm, config, named, trained_config(config.resume))
    require_checkpoints_for_progress(config.resume, algorithm.script)
    path = os.path.realpath(config.resume)
    if path != os.path.abspath(config.resume) and jax.process_index() == 0:  # only where the user named a link
        print(f"--resume {config.resume} leads through a link to {path}: resuming {path}")
    return dataclasses.replace(config, resume=path)


def require_checkpoint_folder(run_dir, which) -> str:
    """<run_dir>/checkpoints, or ConfigError if something else stands at its name: not a folder (a file, a FIFO), or
    for --resume, which writes there, a link (a run never writes through one) or a folder another user could write
    in (`files.foreign_folder`). `which`: --resume or --eval."""
    folder = os.path.join(run_dir, "checkpoints")
    what = "is a link" if os.path.islink(folder) and which == "--resume" else "is not a folder" \
        if os.path.lexists(folder) and not os.path.isdir(folder) else None
    if what := what or which == "--resume" and os.path.isdir(folder) and foreign_folder(folder):
        raise ConfigError(f"{which}: {folder} {what}; move it away (and put back the run's checkpoints/ if you "
                          f"have them), then {which} it again")
    return folder


def require_checkpoints_for_progress(run_dir, script):
    """--resume: ConfigError where metrics.csv (the run's or a point's) records iterations but checkpoints/ holds none:
    starting again would replace them. A run killed before its first checkpoint has no rows either: it starts again."""
    folder = require_checkpoint_folder(run_dir, "--resume")
    if os.path.isdir(folder) and any(n.isdigit() and not os.path.islink(os.path.join(folder, n)) for n in
                                     os.listdir(folder)):  # a link there is moved aside (another run's checkpoint)
        return
    done = 0
    for point in ["", *(d for d in os.listdir(run_dir) if "=" in d)]:
        with contextlib.suppress(OSError, UnicodeDecodeError, csv.Error):
            with open_regular(os.path.join(run_dir, point, "metrics.csv"), newline="") as f:  # a FIFO: no rows
                for row in csv.reader(f):  # row by row: the rows before a damaged one still count
                    if len(row) > 1 and row[1].isdigit():
                        done = max(done, int(row[1]))
    if done:
        missing = "holds no checkpoint" if os.path.isdir(folder) else "is missing"
        raise ConfigError(f"--resume: {folder} {missing}, but metrics.csv records {done} iterations: starting again "
                          f"would discard them; put back its checkpoints, or train a new run (python {script} "
                          "without --resume)")


def trained_config(run_dir):
    """-> (the newest checkpoint with a readable record, its config as JSON); None where none has one."""
    if not os.path.isdir(os.path.join(run_dir, "checkpoints")):
        return None
    with contextlib.suppress(Exception), Checkpoints(run_dir) as checkpoints:
        for step in sorted(checkpoints.manager.all_steps(), reverse=True):
            with contextlib.suppress(Exception):
                return os.path.join(checkpoints.folder, str(step)), dict(checkpoints.meta(step)["config"])
    return None


def restored_run(job, checkpoints, path) -> tuple | None:
    """--resume: (runner, metrics so far, iterations done) from the newest readable checkpoint; (None, None, done) for
    a finished run, which is left alone; None where the run has no checkpoint yet (it starts again)."""
    restored = checkpoints.restore("--resume", job.algorithm.name, job.config, job.abstract_runner, True)
    if restored is None:
        if job.lead:
            print("no checkpoint yet (the run stopped before its first chunk ended): starting it again")
        return None
    runner, history, done = restored
    finished = done == job.num_iterations and os.path.exists(os.path.join(path, "summary.json"))
    if job.lead:
        print(f"{path} is finished ({done} of {done} iterations, summary.json written): nothing to resume"
              if finished else f"resuming after iteration {done} of {job.num_iterations}")
    return (None, None, done) if finished else (runner, history, done)
