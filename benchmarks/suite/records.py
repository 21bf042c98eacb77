"""A finished entry's record, benchmarks/results/records/<suite>/<entry>.json: its run's config, summary, the runner's
notes and its binned learning curve, all the report needs in a few KB, committed so that an entry finished on one
machine stands everywhere. A record that cannot be read, is not of a record's shape or was made for other settings
is refused in one line (SuiteError), never skipped."""

import csv
import json
import math
import os

import numpy as np

from scanrl.harness.files import open_regular, replaced
from scanrl.harness.migrations import config_now

from .entries import SCRIPT_ALGO, Entry, SuiteError
from .repository import portable, shown

MACHINE_FILE = "learning_suite.json"  # what the runner adds to a finished run directory: machine and wall time
CURVE_POINTS = 100  # learning curves are binned to at most this many points


def flag_settings(flags, config: dict) -> dict:
    """An entry's flags as {config field: value as written}, for the fields `config` has: "--a-b V" or "--a-b=V" ->
    a_b: "V", "--a-b V W" -> a_b: ["V", "W"], "--a-b" -> a_b: True, "--no-a-b" -> a_b: False."""
    settings, i = {}, 0
    while i < len(flags):
        name, equals, value = flags[i].removeprefix("--").partition("=")
        name, values = name.replace("-", "_"), [value] if equals else []
        i += 1
        while i < len(flags) and not flags[i].startswith("--"):
            values.append(flags[i])
            i += 1
        if values:
            settings[name] = values if isinstance(config.get(name), list) else values[0]
        elif name.startswith("no_") and name not in config:
            settings[name[3:]] = False
        else:
            settings[name] = True
    return {k: v for k, v in settings.items() if k in config}


def same_setting(saved, written) -> bool:
    """Whether a config.json value is the value a flag wrote (5e-4 and 0.0005 are the same)."""
    if isinstance(saved, list) and isinstance(written, list):
        return len(saved) == len(written) and all(map(same_setting, saved, written))
    if isinstance(saved, bool) or isinstance(written, bool):
        return saved == written
    try:
        return float(saved) == float(written)
    except (TypeError, ValueError):
        return str(saved) == str(written)


def check_config(e: Entry, config: dict, where):
    """SuiteError if a run's config.json (of a run directory or a record at `where`) has other settings than the
    entry's."""
    wanted = {"algo": SCRIPT_ALGO[e.algo], "env": e.env, "total_timesteps": e.total_timesteps,
              "num_seeds": e.num_seeds, "seed": e.seed}
    differ = [f"{k} {config.get(k)!r} (suite: {v!r})" for k, v in wanted.items() if config.get(k) != v]
    differ += [f"--{k.replace('_', '-')} {config[k]!r} (suite: {v!r})"
               for k, v in flag_settings(e.flags, config).items() if not same_setting(config[k], v)]
    if differ:
        raise SuiteError(f"{shown(where)} was made with {', '.join(differ)}: delete it, or use another "
                         f"{'--records' if where.endswith('.json') else '--out-dir'}")


def load_json(path):
    """The JSON value in the file at `path`; OSError or ValueError saying why not (a FIFO or a device is not waited on
    or read without end: `open_regular`; nesting too deep for the parser is a ValueError)."""
    with open_regular(path) as f:
        try:
            return json.load(f)
        except RecursionError:
            raise ValueError("nested too deeply") from None


def problem_text(error) -> str:
    """An OSError or ValueError as a message shows it, in one line."""
    text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return " ".join(text.split())


def read_json(run_dir, name, fields=None) -> dict:
    """A JSON object of a run directory; {} where there is none; SuiteError (one line naming it) if it cannot be read,
    holds no object or (`fields`: a function -> what is wrong with the object, or None) is not of its shape."""
    path = os.path.join(run_dir, name)
    if not os.path.lexists(path):
        return {}
    try:
        value = load_json(path)
    except (OSError, ValueError) as error:
        value, problem = None, problem_text(error)
    else:
        problem = f"it holds {_kind(value)}, not an object" if not isinstance(value, dict) else \
            fields and fields(value)
    if problem:
        raise SuiteError(f"{shown(path)} cannot be read ({problem}): delete {shown(run_dir)} to run it again")
    return value


def read_summary(run_dir) -> dict:
    """A run directory's summary.json, checked as a record's "summary" is; {} where there is none."""
    return read_json(run_dir, "summary.json", lambda value: fields_problem("summary", value, SUMMARY_FIELDS))


def read_notes(run_dir) -> dict:
    """The runner's notes of a run (MACHINE_FILE), checked as a record's "run" is; {} where there are none."""
    return read_json(run_dir, MACHINE_FILE, notes_problem)


# What a record says of where its numbers come from (MACHINE_FILE's, as the runner writes them): a record is never
# written without them. "commit" is null outside a git checkout.
PROVENANCE = ("commit", "command", "machine")


def lacking_provenance(notes: dict) -> str | None:
    """The PROVENANCE keys that the runner's notes of a run lack, as a message names them; None if none."""
    lacking = [key for key in PROVENANCE if key not in notes or (key != "commit" and not notes[key])]
    return " or ".join(f'"{key}"' for key in lacking) or None


def read_curve(run_dir, points=CURVE_POINTS):
    """metrics.csv binned into at most `points` stretches of iterations: -> (env steps at each stretch's end,
    (seeds, points) mean return of the episodes that ended in it, NaN where none did). SuiteError, one line naming
    it, for a metrics.csv that cannot be read or is not of the scripts' shape."""
    path = os.path.join(run_dir, "metrics.csv")
    try:
        with open_regular(path, newline="") as f:
            rows = [(int(r["seed"]), int(r["iteration"]), float(r["env_steps"]), float(r["episodes"]),
                     float(r["episode_return"])) for r in csv.DictReader(f)]
        if not rows:
            raise ValueError("it has no rows")
        iterations = max(r[1] for r in rows)  # counted from 1
        if min(r[1] for r in rows) < 1 or iterations > len(rows):  # no row for most iterations: a forged count
            raise ValueError(f"its iterations run from {min(r[1] for r in rows)} to {iterations} in {len(rows)} rows")
    except (OSError, ValueError, TypeError, KeyError, csv.Error) as error:
        problem = f"no column {error}" if isinstance(error, KeyError) else problem_text(error)
        raise SuiteError(f"{shown(path)} cannot be read ({problem}): delete {shown(run_dir)} to run it again") \
            from None
    seeds = sorted({r[0] for r in rows})
    returns = np.full((len(seeds), iterations), np.nan)
    episodes = np.zeros((len(seeds), iterations))
    steps = np.zeros(iterations)
    where = {s: i for i, s in enumerate(seeds)}
    for seed, iteration, env_steps, count, episode_return in rows:
        i, u = where[seed], iteration - 1
        returns[i, u], episodes[i, u], steps[u] = episode_return, count, env_steps
    edges = np.linspace(0, iterations, min(points, iterations) + 1).astype(int)
    total = np.add.reduceat(np.nan_to_num(returns) * episodes, edges[:-1], axis=1)
    count = np.add.reduceat(episodes, edges[:-1], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        binned = np.where(count > 0, total / count, np.nan)
    return steps[edges[1:] - 1], binned


def record_path(records, e: Entry) -> str | None:
    return None if records is None else os.path.join(records, f"{e.name}.json")


def write_record(e: Entry, run_dir, records) -> str:
    """A finished run's record: config.json, summary.json, the runner's MACHINE_FILE and the binned curve of
    metrics.csv, in one JSON file (NaN as null, paths relative to the repository: `portable`), written whole or not
    at all; -> its path."""
    steps, returns = read_curve(run_dir)
    record = {"config": portable(read_json(run_dir, "config.json")),
              "summary": portable(read_summary(run_dir)),
              "run": portable(read_notes(run_dir)),
              "curve": {"env_steps": steps.tolist(),
                        "episode_return": [[None if np.isnan(v) else v for v in row] for row in returns.tolist()]}}
    path = record_path(records, e)
    os.makedirs(records, exist_ok=True)
    with replaced(path) as f:
        json.dump(record, f, separators=(",", ":"))
    return path


def _kind(value) -> str:
    """A JSON value's kind, as a message names it (NaN and Infinity by name: JSON readers let them through)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


FLOAT32_MAX = 3.4028234663852886e38  # a return the scripts record (float32) lies within it; 1e308 overflowed the IQM


def _number(value, null=False, bound=math.inf) -> bool:
    """A finite number (or, with `null`, None) of at most `bound` in size: NaN and Infinity are no number a record can
    hold."""
    if null and value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and \
        abs(value) <= bound


def _numbers(value, null=False, bound=math.inf) -> bool:
    return isinstance(value, list) and all(_number(v, null, bound) for v in value)


def _count(value) -> bool:
    """A positive integer that a script's count flags take (at most 2**31 - 1: --num-seeds 10**30 is refused)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**31 - 1


def _integers(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is(kind):
    return lambda value: isinstance(value, kind)


# A record's fields that the runner, the report and --verify read, as (key, required, kind, check): a required key must
# be there (null only where its check allows); another may be absent or null (a record made before it was kept).
SUMMARY_FIELDS = (("eval_return", True, "a list of float32 numbers (or null)",
                   lambda v: _numbers(v, null=True, bound=FLOAT32_MAX)),
                  ("final_return", True, "a list of float32 numbers (or null)",
                   lambda v: _numbers(v, null=True, bound=FLOAT32_MAX)),
                  ("num_seeds", True, "a positive integer (up to 2**31 - 1)", _count),
                  ("env_steps", True, "a number", _number),
                  ("train_s", True, "a number (or null)", lambda v: _number(v, null=True)),
                  ("compile_s", True, "a number (or null)", lambda v: _number(v, null=True)),
                  ("seeds", False, "a list of integers", _integers),
                  ("resumed_after_iteration", False, "a number", _number))
MACHINE_FIELDS = (("cpu", True, "a string", _is(str)), ("cores", True, "a positive integer", _count),
                  ("jax", True, "a string", _is(str)), ("backend", False, "a string", _is(str)),
                  ("devices", False, "a list of strings", _strings), ("python", False, "a string", _is(str)),
                  ("gpus", False, "a list of objects of strings", lambda v: isinstance(v, list) and all(
                      isinstance(g, dict) and all(isinstance(x, str) for x in g.values()) for g in v)))
RUN_FIELDS = (("machine", False, "an object", _is(dict)), ("commit", False, "a string", _is(str)),
              ("dirty", False, "a boolean", _is(bool)), ("command", False, "a string", _is(str)),
              ("versions", False, "an object of strings",
               lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
              ("seeds", False, "a list of integers", _integers), ("wall_s", False, "a number", _number),
              ("resumed", False, "a boolean", _is(bool)), ("finished", False, "a string", _is(str)))


def fields_problem(where, value: dict, fields) -> str | None:
    """What is wrong with the `fields` of the object at `where` (a record's "summary", ...); None if nothing."""
    for key, required, kind, ok in fields:
        if key not in value or (value[key] is None and not required):
            if required:
                return f'"{where}" has no "{key}"'
            continue
        if not ok(value[key]):
            if isinstance(value[key], list) and kind.startswith("a list of "):
                bad = next((v for v in value[key] if not ok([v])), value[key])
                return f'"{where}.{key}" holds {_kind(bad)}, not only {kind.removeprefix("a list of ")}'
            return f'"{where}.{key}" is {_kind(value[key])}, not {kind}'
    return None


def notes_problem(run: dict) -> str | None:
    """What is wrong with the runner's notes of a run (a record's "run", MACHINE_FILE), in a few words; None if
    nothing."""
    problem = fields_problem("run", run, RUN_FIELDS) or \
        run.get("machine") and fields_problem("run.machine", run["machine"], MACHINE_FIELDS)
    if problem:
        return problem
    sampled = run.get("sampled_eval")
    if sampled is not None and not (isinstance(sampled, dict) and _count(sampled.get("episodes"))
                                    and _numbers(sampled.get("per_seed"))):
        return '"run.sampled_eval" is not {"episodes": a positive integer, "per_seed": a list of numbers}'
    return None


def record_problem(record) -> str | None:
    """What keeps a parsed record from being read (each field the runner, the report and --verify use, its kind and
    that its numbers are finite), in a few words; None if nothing does. Keys beyond these are let be."""
    if not isinstance(record, dict):
        return f"it holds {_kind(record)}, not an object"
    for key in ("config", "summary", "run", "curve"):
        if key not in record:
            return f'it has no "{key}"'
        if not isinstance(record[key], dict):
            return f'"{key}" is {_kind(record[key])}, not an object'
    summary, run, curve = record["summary"], record["run"], record["curve"]
    problem = (summary and fields_problem("summary", summary, SUMMARY_FIELDS)  # {}: a run that never finished
               or notes_problem(run))
    if problem:
        return problem
    steps, rows = curve.get("env_steps"), curve.get("episode_return")
    if not (_numbers(steps) and steps):
        return '"curve.env_steps" is not a list of numbers, one at least'
    if not (isinstance(rows, list) and rows and all(_numbers(row, null=True) and len(row) == len(steps)
                                                    for row in rows)):
        return f'"curve.episode_return" is not a list of rows of {len(steps)} numbers (or null), one per seed'
    return None


def read_record(e: Entry, records) -> dict | None:
    """An entry's record, or None where there is none; SuiteError (one line naming the file and what is wrong) if
    it cannot be read, is not of a record's shape (`record_problem`) or was made for other settings. A record stands
    for a finished run, so a broken one is refused rather than skipped: skipping would rerun the entry, or leave it
    out of the report, without a word."""
    path = record_path(records, e)
    if path is None or not os.path.lexists(path):
        return None
    try:
        record = load_json(path)
    except (OSError, ValueError) as error:
        problem = problem_text(error)
    else:
        problem = record_problem(record)
    if problem:
        raise SuiteError(f"{shown(path)} cannot be read ({problem}): delete it to run {e.name} again")
    record["config"] = config_now(SCRIPT_ALGO[e.algo], record["config"])  # an older commit's field names, as now
    check_config(e, record["config"], path)
    return record if record["summary"] else None
