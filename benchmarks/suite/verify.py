"""`--verify ENTRY`: train one entry again from its record's command (on fewer seeds if asked), in a scratch run
directory, and say in one line whether the new eval-return IQM falls inside the record's 95% interval, with the time
it took beside the record's. Nothing committed is written."""

import datetime
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np

from scanrl.harness import aggregate

from . import repository
from .entries import Entry, SuiteError
from .records import read_record, record_path
from .report import fmt, seeds_cell
from .repository import shown
from .runner import command

REPLACED = ("--num-seeds", "--out-dir", "--run-name")  # what a verification sets in the record's command


def with_flags(words, values: dict) -> list[str]:
    """A command line with each flag of `values` given that value (replaced where it is, appended where not)."""
    words = list(words)
    for flag, value in values.items():
        if flag in words:
            words[words.index(flag) + 1] = value
        else:
            words += [flag, value]
    return words


def verify_command(e: Entry, record, out_dir, run_name, seeds) -> tuple[list[str], str]:
    """-> (the command a verification runs, where it comes from): the record's command where it has one, else (a
    record made before commands were kept) the entry's, with --num-seeds, --out-dir and --run-name set."""
    recorded = record["run"].get("command")
    if recorded:
        words, origin = shlex.split(recorded)[1:], "the record's command"
    else:
        words, origin = command(e, out_dir, "", fresh=True)[1:], "the suite's command (the record names none)"
    values = {"--num-seeds": str(seeds), "--out-dir": out_dir, "--run-name": run_name}
    return [sys.executable, *with_flags(words, values)], origin


def verify(e: Entry, records, out_dir, seeds=None) -> int:
    """Trains `e` again from its record in `records` into a new run directory under `out_dir`, then prints the one
    line; -> 0 if the new IQM is inside the record's interval, 1 if not (or the run failed). SuiteError where the
    entry has no record."""
    record = read_record(e, records)
    if record is None:
        raise SuiteError(f"--verify {e.name}: no record at {shown(record_path(records, e) or 'none')}: nothing to "
                         "check against (a record is written by a full run or with --record)")
    seeds = seeds or record["summary"]["num_seeds"]
    if seeds < 1:
        raise SuiteError(f"--verify-seeds must be a positive integer, got {seeds}")
    run_name = f"{e.name}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    cmd, origin = verify_command(e, record, os.path.abspath(out_dir), run_name, seeds)
    print(f"verify {e.name}: {origin}, {seeds} seeds: python {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    code = subprocess.run(cmd, cwd=repository.ROOT).returncode
    wall_s = time.perf_counter() - start
    summary_path = os.path.join(out_dir, run_name, "summary.json")
    if code != 0 or not os.path.exists(summary_path):
        print(f"verify {e.name}: FAILED, the run exited {code} without a summary ({shown(out_dir)})", flush=True)
        return 1
    with open(summary_path) as f:
        summary = json.load(f)
    new = aggregate.summarize([np.nan if v is None else v for v in summary["eval_return"]])
    old = aggregate.summarize([np.nan if v is None else v for v in record["summary"]["eval_return"]])
    low, high = old["ci"]
    inside = bool(low <= new["iqm"] <= high)
    recorded_wall = record["run"].get("wall_s")
    recorded_wall = "not recorded" if recorded_wall is None else f"{recorded_wall:.1f} s"
    print(f"verify {e.name}: {'PASS' if inside else 'FAIL'}: eval IQM {fmt(new['iqm'])} over seeds "
          f"{seeds_cell(summary)} is {'inside' if inside else 'outside'} the record's 95% interval "
          f"[{fmt(low)}, {fmt(high)}] (IQM {fmt(old['iqm'])}, seeds {seeds_cell(record['summary'])}); "
          f"{wall_s:.1f} s here (compile {fmt(summary.get('compile_s'), 2)} s, train "
          f"{fmt(summary.get('train_s'), 3)} s) against the record's {recorded_wall} (compile "
          f"{fmt(record['summary'].get('compile_s'), 2)} s, train {fmt(record['summary'].get('train_s'), 3)} s, "
          f"{record['summary']['num_seeds']} seeds)", flush=True)
    return 0 if inside else 1
