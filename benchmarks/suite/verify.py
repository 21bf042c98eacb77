"""`--verify ENTRY`: train one entry again from its record's command (on fewer seeds if asked), in a scratch run
directory, and say in one line whether the new eval-return IQM falls inside the record's 95% interval, with the time
it took beside the record's. Nothing committed is written.

A record is committed JSON, and CI runs --verify: its command is never run as it is written. It is read as the
entry's own script and that script's flags (its `class Config` fields, read from its source with `ast`, and the shared
harness.Flags'), each value the record's config holds; anything else (another program, `-c`, an unknown flag, a shell
metacharacter, a flag that does not train in the verification's run directory) is refused in one line naming the
record, before anything runs."""

import ast
import dataclasses
import datetime
import json
import os
import re
import shlex
import sys
import time

import numpy as np

from scanrl.harness import aggregate
from scanrl.harness.flags import Flags
from scanrl.harness.migrations import RENAMED_FIELDS

from . import repository
from .entries import SCRIPT_ALGO, Entry, SuiteError, SuiteStopped
from .records import read_record, record_path, same_setting
from .report import fmt, seeds_cell
from .repository import shown
from .runner import command, run_passing_signals

REPLACED = ("num_seeds", "out_dir", "run_name")  # what a verification sets in the record's command
REQUIRED = ("env", "total_timesteps", "seed", *REPLACED)  # what every command the runner records names
# Flags that would do other than train one new run in the verification's run directory (resume another, evaluate,
# join other processes, log to the network, write a folder of the record's choosing): never taken from a record.
REFUSED = ("resume", "eval", "eval_sampled", "seed_index", "gif", "track", "wandb_project", "wandb_entity",
           "wandb_group", "compile_cache", "coordinator_address", "num_processes", "process_id", "distributed_timeout")
PLAIN = re.compile(r"[\w.,:=+@%/-]+")  # a word with no shell metacharacter, space or quote


def field_kind(annotation: str) -> str:
    """How tyro reads a field of this type (as its source writes it): "bool" (--x, --no-x, no value), "append" (one
    value, the flag repeated: --sweep), "values" (one or more: a tuple) or "value" (one)."""
    if annotation == "bool":
        return "bool"
    if "UseAppendAction" in annotation:
        return "append"
    return "values" if annotation.startswith(("tuple[", "list[")) else "value"


def script_fields(script) -> dict[str, str]:
    """{field: `field_kind`} of a script's Config: the fields of `class Config` in its source, read with `ast`
    (nothing of the script is imported or run), and harness.Flags'."""
    fields = {f.name: field_kind(f.type.__name__ if isinstance(f.type, type) else str(f.type))
              for f in dataclasses.fields(Flags)}
    with open(os.path.join(repository.ROOT, script)) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Config":
            fields.update({item.target.id: field_kind(ast.unparse(item.annotation)) for item in node.body
                           if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)})
    return fields


def parse_flags(words, fields: dict) -> list[tuple[str, list[str] | bool]]:
    """A script's flags as [(field, values, or a boolean's value)], in order; ValueError saying what is wrong with
    one (not a flag, not the script's, given twice, a value missing or one too many)."""
    parsed, i = [], 0
    while i < len(words):
        name, equals, value = words[i].partition("=")
        if not name.startswith("--"):
            raise ValueError(f"{words[i]!r} is not a flag")
        field, values = name[2:].replace("-", "_"), [value] if equals else []
        i += 1
        while i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
        negated = field.startswith("no_") and fields.get(field[3:]) == "bool"
        if field not in fields and not negated:
            raise ValueError(f"{name} is not a flag of the script")
        if negated or fields[field] == "bool":
            if values:
                raise ValueError(f"{name} takes no value, got {' '.join(values)}")
            field, values = (field[3:], False) if negated else (field, True)
        elif not values:
            raise ValueError(f"{name} has no value")
        elif len(values) > 1 and fields[field] != "values":
            raise ValueError(f"{name} takes one value, got {shlex.join(values)}")
        if field in (f for f, _ in parsed) and fields[field] != "append":
            raise ValueError(f"--{field.replace('_', '-')} is given twice")
        parsed.append((field, values))
    return parsed


def flag_words(field, value) -> list[str]:
    """A parsed flag as a command line gives it: ["--x", values...], ["--x"] or ["--no-x"] for a boolean."""
    if isinstance(value, bool):
        return [f"--{'' if value else 'no-'}{field.replace('_', '-')}"]
    return [f"--{field.replace('_', '-')}", *value]


def check_flags(parsed, config: dict):
    """ValueError unless every flag is one a verification may take from a record (not REFUSED), its values are plain
    words (PLAIN), each value is the record's config's (the command made the record) and REQUIRED are all there."""
    given = {}
    for field, value in parsed:  # an appended flag's values together, as config.json holds them
        if field in REFUSED:
            raise ValueError(f"it gives {flag_words(field, value)[0]}, which a verification never takes from a "
                             "record (it would not train one new run in its own folder)")
        bad = next((v for v in ([] if isinstance(value, bool) else value) if not PLAIN.fullmatch(v)), None)
        if bad is not None and field not in REPLACED:
            raise ValueError(f"it gives {flag_words(field, value)[0]} {shlex.quote(bad)}: a space, quote or shell "
                             "metacharacter, which no command the runner records holds")
        given[field] = value if isinstance(value, bool) else given.get(field, []) + value
    for field, value in given.items():
        written = value if isinstance(value, bool) or isinstance(config.get(field), list) else \
            value[0] if len(value) == 1 else value
        if field not in REPLACED and (field not in config or not same_setting(config[field], written)):
            held = f"its config {config[field]!r}" if field in config else "a setting its config does not hold"
            raise ValueError(f"it gives {' '.join(flag_words(field, value))}, {held}: the command did not make this "
                             "record")
    missing = [f"--{f.replace('_', '-')}" for f in REQUIRED if f not in given]
    if missing:
        raise ValueError(f"it has no {', '.join(missing)}, which every command the runner records names")


def renamed_flags(words, name, config) -> list[str]:
    """An older commit's command with the flags script `name` renamed since under their names now, each with its
    value in the record's config (read as now: `migrations.config_now`)."""
    renamed = {f"--{old.replace('_', '-')}": new for old, (new, _) in RENAMED_FIELDS.get(name, {}).items()}
    out = list(words)
    for i, word in enumerate(words[:-1]):
        if word in renamed:
            out[i:i + 2] = [f"--{renamed[word].replace('_', '-')}", str(config[renamed[word]])]
    return out


def recorded_command(e: Entry, record, path, values: dict) -> list[str]:
    """The record's command as a verification runs it: the entry's script, run by this Python, with the command's
    flags (checked: `parse_flags`, `check_flags`), those of `values` (REPLACED) set. SuiteError, one line naming the
    record, for a command that is not of that shape: nothing of it runs."""
    try:
        words = renamed_flags(shlex.split(record["run"]["command"]), SCRIPT_ALGO[e.algo], record["config"])
        if len(words) < 2 or words[0] != "python" or os.path.normpath(words[1]) != os.path.normpath(e.script):
            raise ValueError(f"it does not run {e.script} but {shlex.join(words[:2]) or 'nothing'}; --verify runs "
                             "only the entry's own script")
        parsed = parse_flags(words[2:], script_fields(e.script))
        check_flags(parsed, record["config"])
    except (OSError, SyntaxError, ValueError) as error:
        raise SuiteError(f"{shown(path)}: its command is refused, nothing was run ({error}): delete the record, or "
                         "fix its command") from None
    cmd = [sys.executable, e.script]
    for field, value in parsed:
        cmd += flag_words(field, [values[field]] if field in values else value)
    return cmd


def verify_command(e: Entry, record, path, out_dir, run_name, seeds) -> tuple[list[str], str]:
    """-> (the command a verification runs, where it comes from): the record's command where it has one (checked:
    `recorded_command`), else (a record made before commands were kept) the entry's, with --num-seeds, --out-dir and
    --run-name set."""
    values = {"num_seeds": str(seeds), "out_dir": out_dir, "run_name": run_name}
    if record["run"].get("command"):
        return recorded_command(e, record, path, values), "the record's command"
    fresh = dataclasses.replace(e, num_seeds=seeds, name=run_name)
    return command(fresh, out_dir, "", fresh=True), "the suite's command (the record names none)"


def verify(e: Entry, records, out_dir, seeds=None) -> int:
    """Trains `e` again from its record in `records` into a new run directory under `out_dir`, then prints the one
    line; -> 0 if the new IQM is inside the record's interval, 1 if not (or the run failed). SuiteError, before
    anything runs, where the entry has no record or one that cannot be verified (a sweep's among them); SuiteStopped
    where SIGINT, SIGTERM or SIGHUP stopped the run (passed on to its script)."""
    record, path = read_record(e, records), record_path(records, e)
    if record is None:
        raise SuiteError(f"--verify {e.name}: no record at {shown(path or 'none')}: nothing to check against (a "
                         "record is written by a full run or with --record)")
    if record["config"].get("sweep"):  # its points trained, then its summary held no eval return: a KeyError
        raise SuiteError(f"{shown(path)}: its run is a sweep (--sweep {' '.join(map(str, record['config']['sweep']))}"
                         "), whose summary ranks points: --verify checks one run's eval return; nothing was run")
    old = aggregate.summarize([np.nan if v is None else v for v in record["summary"]["eval_return"]])
    if old["n"] == 0:
        raise SuiteError(f"{shown(path)}: no seed has an eval return, so the record has no interval to check "
                         f"against: delete it to run {e.name} again")
    seeds = record["summary"]["num_seeds"] if seeds is None else seeds
    run_name = f"{e.name}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    cmd, origin = verify_command(e, record, path, os.path.abspath(out_dir), run_name, seeds)
    head = f"verify {e.name}"
    print(f"{head}: {origin}, {seeds} seeds: python {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    code, stop = run_passing_signals(cmd, head)
    wall_s = time.perf_counter() - start
    if stop:
        raise SuiteStopped(f"{stop.name}: the verification of {e.name} stopped (exit {code}); nothing was checked: "
                           f"run --verify again (it trains a new run; {shown(out_dir)} may be deleted)")
    summary_path = os.path.join(out_dir, run_name, "summary.json")
    if code != 0 or not os.path.exists(summary_path):
        print(f"{head}: FAILED, the run exited {code} without a summary ({shown(out_dir)})", flush=True)
        return 1
    with open(summary_path) as f:
        summary = json.load(f)
    new = aggregate.summarize([np.nan if v is None else v for v in summary["eval_return"]])
    low, high = old["ci"]
    inside = new["n"] > 0 and bool(low <= new["iqm"] <= high)
    recorded_wall = record["run"].get("wall_s")
    recorded_wall = "not recorded" if recorded_wall is None else f"{recorded_wall:.1f} s"
    print(f"{head}: {'PASS' if inside else 'FAIL'}: eval IQM {fmt(new['iqm'])} over seeds "
          f"{seeds_cell(summary)} is {'inside' if inside else 'outside'} the record's 95% interval "
          f"[{fmt(low)}, {fmt(high)}] (IQM {fmt(old['iqm'])}, seeds {seeds_cell(record['summary'])}); "
          f"{wall_s:.1f} s here (compile {fmt(summary.get('compile_s'), 2)} s, train "
          f"{fmt(summary.get('train_s'), 3)} s) against the record's {recorded_wall} (compile "
          f"{fmt(record['summary'].get('compile_s'), 2)} s, train {fmt(record['summary'].get('train_s'), 3)} s, "
          f"{record['summary']['num_seeds']} seeds)", flush=True)
    return 0 if inside else 1
