"""Learning results across the gymnax suite, reported the way the field reports them (rliable: Agarwal et al. 2021):
per entry the interquartile mean (IQM) over seeds with a 95% stratified-bootstrap interval, next to the published
reference, learning curves and performance profiles per algorithm.

A suite is a list of entries (script, env, env-step budget, seeds, flags, published reference, normalisation range).
Each entry runs its script in a subprocess as a user would, and the run directories are the record:

    python ppo.py --env CartPole-v1 --total-timesteps 500000 --num-seeds 10 --seed 0 \\
        --out-dir runs/learning/quick --run-name ppo-CartPole-v1

    python benchmarks/learning.py --suite quick                       # under 20 min on our 2-core CPU
    python benchmarks/learning.py --suite full --only ppo-Breakout-MinAtar,dqn-Breakout-MinAtar --record
    python benchmarks/learning.py --suite quick --report-only         # rebuild table and plots from the runs
    python benchmarks/learning.py --suite quick --random-scores       # measure the random-policy scores
    python benchmarks/learning.py --suite quick --verify tabular-GridWorld-v0 --verify-seeds 3  # re-train a row

An entry whose run directory holds summary.json is not run again; one whose run stopped before its summary (Ctrl-C,
a kill) is continued with the script's `--resume`. A run directory made with another env, budget, seed count, seed or
value of one of the entry's flags is refused (exit 2): delete it or choose another --out-dir; so is a link at an
entry's run directory (a script's --resume would follow it and train in the folder it points to). Run directories go
to runs/learning/<suite>/ (git-ignored). Entries marked GPU-only are skipped, with a message, where JAX sees no GPU.
SIGINT (Ctrl-C), SIGTERM or SIGHUP (the terminal closing: as SIGTERM) to the runner is passed on to the script it runs
(in a process group of its own, so a Ctrl-C reaches it once), which stops where its chunk ends, with a checkpoint; the
runner waits for it, then exits 1 with one line, and the same command resumes it. A runner killed otherwise (kill -9)
stops its script so too: it never trains on unrecorded. An entry's flags may not place its run (--out-dir,
--run-name, the runner's own flags) or make it other than one new run (--resume, --eval, --sweep).

A full run (neither --only nor --out-dir), or any run given --record, also writes the committed files: each finished
run's record, benchmarks/results/records/<suite>/<entry>.json (its config, summary, wall time and binned curve, a few
KB: commit it), and, once every entry has finished, the report benchmarks/results/learning_<suite>.md. Run
directories live on one machine, and a suite of hours spans sessions and machines: an entry with a record is finished
too, and the report reads the record where the run directory is gone. A run with --only or --out-dir and without
--record writes no record and puts its report beside the run directories, so one machine's partial result never
stands for an entry everywhere (with the default out dir it still reads the committed records). What is committed
names paths relative to the repository: a record's config keeps its paths relative to the repository (a folder
outside it as null), a committed report names no folder outside it. A record that cannot be read or is not of a
record's shape is refused with one line naming it and what is wrong (exit 2), never skipped: skipping it would
rerun hours of training, or drop the entry from the table, without a word. Every file the runner writes goes through
scanrl.harness.files.replaced (atomic, never through a link planted at its name).

A record also says where its numbers come from, written by the runner as it runs the entry: the commit and whether
the tracked files differed from it, the script's exact command, the machine (CPU model and cores; GPU name and driver
where nvidia-smi answers), the library versions and the seeds; summary.json keeps compile and training seconds apart.
A finished run without these (one that ended with no runner waiting for it) is not recorded: one line says so.
Records made before these were kept read as before, and the report shows "not recorded" for what they lack.
`--verify ENTRY` trains the entry again from its record's command (`--verify-seeds N`: on N seeds) into
runs/verify/<suite>/ and says in one line whether the new eval IQM falls inside the record's interval. The command is
never run as written (records are committed, and CI verifies): it is read as the entry's own script, run by this
Python, and that script's flags, each value its record's config's; another program, an unknown flag or a shell
metacharacter is refused (exit 2) before anything runs, as is a record without an interval to check against.

The report comes with, per algorithm, learning_<suite>_<algo>_curves.png (IQM of the episode return over seeds
against env steps, 95% band, one panel per env) and learning_<suite>_<algo>_profile.png (the fraction of runs above
each normalised score, over the algorithm's envs). Exit 1 if an entry failed.

This file is the command line; the suites' entries, the runner, the records and the report are in
benchmarks/suite/ (its __init__ lists the modules).
"""

import json
import os
import sys
from dataclasses import dataclass

import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.suite import repository  # noqa: E402
from benchmarks.suite.entries import (  # noqa: E402
    SuiteError,
    SuiteStopped,
    check_entries,
    load_suite_file,
    select,
    shown_text,
)
from benchmarks.suite.report import report_path, write_report  # noqa: E402
from benchmarks.suite.repository import shown  # noqa: E402
from benchmarks.suite.runner import run_entries  # noqa: E402
from benchmarks.suite.scores import print_random_scores  # noqa: E402
from benchmarks.suite.suites import SUITES  # noqa: E402
from benchmarks.suite.verify import verify  # noqa: E402


@dataclass(frozen=True)
class Args:
    suite: str = "quick"
    """which suite: quick (CPU, under 20 min), memory (its ppo_rnn.py entries), offpolicy (sac.py and td3.py, the
    2018 recipe and the parallel one), minatar (10M steps per seed: hours), halfcheetah (td3.py and sac.py at the
    papers' recipe on Brax's variant of HalfCheetah: about an hour each), mujoco (the same, and ppo.py, on
    Gymnasium's MuJoCo v5 tasks: about an hour each) or full (issue 18's, GPU-sized)"""
    suite_file: str | None = None
    """a JSON suite instead: {"name": ..., "entries": [{Entry fields}, ...]} (reference: {value, text, source})"""
    only: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """run just these entries (repeat the flag, or give a comma list); the report still shows every finished one"""
    out_dir: str | None = None
    """parent of the run directories; default runs/learning/<suite>"""
    results: str | None = None
    """the markdown report; the PNGs go beside it; default benchmarks/results/learning_<suite>.md when the run writes
    the committed files (see --record) and every entry has finished, else <out-dir>/learning_<suite>.md (a partial
    report never replaces the committed table)"""
    record: bool = False
    """write the committed files, benchmarks/results/records/<suite>/<entry>.json and (once every entry has finished)
    benchmarks/results/learning_<suite>.md, even with --only or --out-dir. Without it only a full run (neither --only
    nor --out-dir) writes them: one machine's partial run never stands for an entry everywhere"""
    records: str | None = None
    """where each finished entry's record goes (config, summary, wall time and binned curve: all the report needs,
    a few KB), one JSON file per entry; default benchmarks/results/records/<suite> (to be committed), read whenever
    --out-dir is not given and written by a full run or with --record; with --out-dir and without --record, none.
    An entry with a record is finished: not rerun, and reported from it when its run directory is gone (another
    machine, a clean clone). A record that cannot be read, or is not of a record's shape, is refused with one line
    (exit 2): it stands for hours of training, so it is never skipped in silence"""
    report_only: bool = False
    """run nothing: rebuild the report from the run directories and records there are"""
    random_scores: bool = False
    """run nothing: print a uniformly random policy's mean return on each env of the (selected) entries"""
    random_episodes: int = 1000
    """episodes per env for --random-scores"""
    verify: str | None = None
    """train this entry again from its record's command (in runs/verify/<suite>/, or --out-dir) and say in one line
    whether the new eval IQM falls inside the record's 95% interval, and how long it took beside the record's time;
    exit 0 inside, 1 outside. Writes no committed file"""
    verify_seeds: int | None = None
    """with --verify: this many seeds (--seed upward, a positive integer) instead of the record's"""


# The largest count the suite's own count flags take (a seed or an episode count a script holds in int32).
MAX_COUNT = 2**31 - 1


def check_args(args):
    """SuiteError for --random-episodes or --verify-seeds outside 1..MAX_COUNT (a table of nan, or a count no script
    takes), --verify-seeds without --verify, a path flag that is empty or holds a control character, an --out-dir or
    --records that is, or lies in, a file, and a --results that is a folder."""
    for flag, value in (("--random-episodes", args.random_episodes), ("--verify-seeds", args.verify_seeds)):
        if value is not None and not 1 <= value <= MAX_COUNT:
            raise SuiteError(f"{flag} must be a positive integer up to {MAX_COUNT:,}, got {value}")
    if args.verify_seeds is not None and args.verify is None:
        raise SuiteError("--verify-seeds is the seed count of --verify ENTRY: give --verify too")
    for flag in ("out_dir", "records", "results", "suite_file"):
        value = getattr(args, flag)
        if value is not None and (not value or not value.isprintable()):
            raise SuiteError(f"--{flag.replace('_', '-')} {json.dumps(value)}: a path must be given, with no "
                             "control character")
    for flag in ("out_dir", "records"):
        if getattr(args, flag) is not None:
            existing = os.path.abspath(getattr(args, flag))
            while not os.path.exists(existing):
                existing = os.path.dirname(existing)
            if not os.path.isdir(existing):
                raise SuiteError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: {existing} is a file, not a "
                                 f"directory; choose another --{flag.replace('_', '-')}")
    if args.results is not None and os.path.isdir(args.results):
        raise SuiteError(f"--results {args.results} is a folder: name the report's file (the PNGs go beside it)")


def main(args: Args) -> int:
    """Runs the selected entries, then writes the report; -> the exit code."""
    try:
        check_args(args)
        if args.suite_file is not None:
            suite_name, entries = load_suite_file(args.suite_file)
            suite_file = shown(args.suite_file)  # a report may be committed: it names no folder of one machine
            suite_flag = f"--suite-file {os.path.basename(suite_file) if os.path.isabs(suite_file) else suite_file}"
        elif args.suite in SUITES:
            (suite_name, entries), suite_flag = (args.suite, SUITES[args.suite]), f"--suite {args.suite}"
        else:
            raise SuiteError(f"--suite {shown_text(args.suite)}: unknown; the suites are {', '.join(SUITES)} (or "
                             "--suite-file)")
        check_entries(entries)
        chosen = select(entries, args.only)
        if args.random_scores:
            print_random_scores(chosen, args.random_episodes)
            return 0
        if args.verify is not None:
            if args.verify not in {e.name for e in entries}:
                select(entries, (args.verify,))  # an unknown name: its one line
                raise SuiteError(f"--verify {shown_text(args.verify)}: name one entry of the suite")
            (e,) = select(entries, (args.verify,))
            records = args.records or os.path.join(repository.ROOT, "benchmarks", "results", "records", suite_name)
            return verify(e, records, args.out_dir or os.path.join(repository.ROOT, "runs", "verify", suite_name),
                          args.verify_seeds)
        out_dir = os.path.abspath(args.out_dir or os.path.join(repository.ROOT, "runs", "learning", suite_name))
        # The committed files (records, report) are written by a full run or when asked (--record); the committed
        # records are read by any run in the default out dir. An explicit --records or --results is asked for.
        commit = args.record or (not args.only and args.out_dir is None)
        records = args.records or (os.path.join(repository.ROOT, "benchmarks", "results", "records", suite_name)
                                   if args.out_dir is None or args.record else None)
        write_records = commit or args.records is not None
        failed = [] if args.report_only else run_entries(chosen, out_dir, records, write_records)
    except SuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except SuiteStopped as stop:
        print(f"error: {stop}", file=sys.stderr)
        return 1
    except OSError as error:  # a folder the runner makes or a file it writes (a full disk, permissions)
        print(f"error: {error.strerror or error}: {shown(error.filename or '.')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: run the same command again to go on (finished entries are kept, the stopped one "
              "resumes); the report was not rewritten", file=sys.stderr)
        return 130
    try:
        results = args.results or report_path(suite_name, entries, out_dir, records, commit)
        written = write_report(suite_name, entries, out_dir, results, suite_flag, records)
    except SuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a folder where the report goes
        print(f"error: cannot write the report {shown(results)}: {error.strerror or error}", file=sys.stderr)
        return 1
    print("written: " + ", ".join(shown(p) for p in written))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args, description=__doc__)))
