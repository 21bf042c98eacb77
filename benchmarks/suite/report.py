"""The report: a markdown table of every finished entry (IQM over seeds with 95% intervals, beside the published
reference), per algorithm an aggregate over its envs with curves and a performance profile, read from the run
directories and, where they are gone, the records."""

import datetime
import os
from dataclasses import dataclass

import numpy as np

from scanrl.harness import aggregate
from scanrl.harness.files import replaced

from . import repository
from .entries import Entry
from .plots import plot_curves, plot_profile
from .records import read_curve, read_notes, read_record, read_summary, record_path
from .repository import inside_repository, shown
from .scores import normalize


@dataclass
class Result:
    """What the report needs of one finished entry."""

    entry: Entry
    source: str  # the run directory, or the record it was read from
    summary: dict
    extra: dict  # MACHINE_FILE's contents ({} for a run the runner did not finish)
    eval_return: np.ndarray  # per seed, NaN where undefined
    final_return: np.ndarray
    curve: tuple[np.ndarray, np.ndarray]  # read_curve's (env steps, (seeds, points) returns)


def resumed_note(summary) -> str:
    """ " (resumed after iteration N)" beside a train s that counts only the last invocation of a resumed run."""
    after = summary.get("resumed_after_iteration")
    return f" (resumed after iteration {after})" if after else ""


def read_result(e: Entry, out_dir, records=None) -> Result | None:
    """A finished entry from its run directory, or else from its record; None if neither is there."""
    run_dir = os.path.join(out_dir, e.name)
    summary = read_summary(run_dir)  # {} where there is none; SuiteError, one line, for one that cannot be read
    if not summary:
        record = read_record(e, records)
        if record is None:
            return None
        summary, extra, source = record["summary"], record["run"], record_path(records, e)
        steps = np.array(record["curve"]["env_steps"], dtype=float)
        curve = (steps, np.array(record["curve"]["episode_return"], dtype=float).reshape(-1, steps.size))
    else:
        extra, source, curve = read_notes(run_dir), run_dir, read_curve(run_dir)

    def per_seed(key):
        return np.array([np.nan if v is None else v for v in summary[key]], dtype=float)

    return Result(e, source, summary, extra, per_seed("eval_return"), per_seed("final_return"), curve)


def fmt(x, digits=4):
    """A number for the table: `digits` significant digits, thousands grouped past them; "-" for None or NaN."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return f"{x:.{digits}g}" if abs(x) < 10 ** digits else f"{x:,.0f}"


def iqm_cell(returns):
    """"IQM [low, high]" of per-seed returns, saying how many NaN seeds (no episode to average) were dropped."""
    s = aggregate.summarize(returns)
    if s["n"] == 0:
        return "-"
    dropped = f" ({s['n_nan']} NaN dropped)" if s["n_nan"] else ""
    return f"{fmt(s['iqm'])} [{fmt(s['ci'][0])}, {fmt(s['ci'][1])}]{dropped}"


def describe_machine(m: dict) -> str:
    devices = m.get("devices") or []
    accel = "" if m.get("backend") in ("cpu", None) else f", {len(devices)} x {devices[0] if devices else '?'}"
    gpus = m.get("gpus") or []
    if gpus:  # nvidia-smi's name and driver, where the runner found it
        accel += f" (driver {', '.join(dict.fromkeys(g.get('driver', '?') for g in gpus))})"
    return f"{m['cpu']} ({m['cores']} cores){accel}, jax {m['jax']} ({m.get('backend', '?')})"


def seeds_cell(summary) -> str:
    """The seeds a row was trained on: "0-9" for a run of consecutive seeds, else the list."""
    seeds = summary.get("seeds")
    if not isinstance(seeds, list) or not seeds:
        return "not recorded"
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


NOT_RECORDED = "not recorded"


def provenance_cells(extra: dict) -> list[str]:
    """A row's commit (with "dirty" where the tracked files differed from it), command, machine and library versions,
    "not recorded" for each a record made before the runner kept it lacks."""
    commit = extra.get("commit")
    if commit:
        commit = f"`{commit[:12]}`" + (" (dirty)" if extra.get("dirty") else "" if extra.get("dirty") is False
                                       else " (clean or dirty: not recorded)")
    versions = extra.get("versions") or {}
    machine = extra.get("machine")
    cells = [commit or NOT_RECORDED, f"`{extra['command']}`" if extra.get("command") else NOT_RECORDED,
             describe_machine(machine) if machine else NOT_RECORDED,
             ", ".join(f"{k} {v}" for k, v in versions.items()) or NOT_RECORDED]
    return [table_cell(c) for c in cells]


def table_cell(text) -> str:
    """A record's text as one cell of a markdown table: a line break or '|' (which would end the row or the cell
    early, and let a record write lines of its own into a committed report) made harmless."""
    return " ".join(str(text).split()).replace("|", "\\|")


def normalization(results) -> dict:
    """{env: (low, high, source)}: the entries' ranges, a missing high taken as the best eval IQM on the env."""
    ranges = {}
    for r in results:
        e = r.entry
        low, high, source = ranges.get(e.env, (e.low, e.high, e.range_source))
        finite = r.eval_return[~np.isnan(r.eval_return)]
        if e.high is None and finite.size:
            best = aggregate.iqm(finite)
            high = best if high is None else max(high, best)
        ranges[e.env] = (low, high, source)
    return ranges


def normalized_matrix(results, ranges):
    """-> (envs used, envs left out, (seeds, envs used) normalised eval returns or None): finite seeds only, each
    env's seeds cut to the fewest any env has (the bootstrap needs a matrix). An env without a range (no low, or
    a high not above it) is left out."""
    columns, used, left_out = [], [], []
    for r in results:
        low, high, _ = ranges[r.entry.env]
        finite = r.eval_return[~np.isnan(r.eval_return)]
        if low is None or high is None or high <= low or finite.size == 0:
            left_out.append(r.entry.env)
            continue
        columns.append(normalize(finite, low, high))
        used.append(r.entry.env)
    if not columns:
        return used, left_out, None
    n = min(len(c) for c in columns)
    return used, left_out, np.stack([c[:n] for c in columns], axis=1)


def table_rows(results) -> list[list]:
    """An algorithm's results as rows of the per-algorithm table, each env at most once in a row: its k-th entry on an
    env goes to row k, so a second recipe or budget on one env (td3 at 100k and 200k) is a row of its own, not a
    second env of one row."""
    rows, seen = [], {}
    for r in results:
        k = seen[r.entry.env] = seen.get(r.entry.env, -1) + 1
        if k == len(rows):
            rows.append([])
        rows[k].append(r)
    return rows


def record_link(e: Entry, records, folder, results_path) -> str:
    """A markdown link from the report to the entry's record, or "none" where it has none."""
    path = record_path(records, e)
    if path is None or not os.path.exists(path):
        return "none"
    if inside_repository(path) == inside_repository(results_path):
        return f"[{e.name}.json]({os.path.relpath(path, folder)})"
    return f"`{shown(path)}`" if inside_repository(path) else "a folder outside the repository"


def write_report(suite_name, entries, out_dir, results_path, suite_flag=None, records=None) -> list[str]:
    """The markdown table and the PNGs from the run directories and records there are; -> the files written.
    `suite_flag`: how the command line named the suite (default `--suite <name>`)."""
    results = [r for r in (read_result(e, out_dir, records) for e in entries) if r is not None]
    recorded = [r.entry.name for r in results if r.source.endswith(".json")]
    sampled = any(e.sampled_episodes > 0 for e in entries)
    missing = [e for e in entries if e.name not in {r.entry.name for r in results}]
    machines = list(dict.fromkeys(describe_machine(r.extra["machine"]) for r in results if r.extra.get("machine")))
    suite_flag = suite_flag or f"--suite {suite_name}"

    def named(path):  # a report in the repository (committed) names no folder of one machine
        if inside_repository(path) or not inside_repository(results_path):
            return f"`{shown(path)}`"
        return "a folder outside the repository"

    folder = os.path.dirname(os.path.abspath(results_path))
    stem = os.path.splitext(os.path.basename(results_path))[0]
    os.makedirs(folder, exist_ok=True)
    lines = [f"# Learning results: suite `{suite_name}`", "",
             f"Written {datetime.date.today()} by `python benchmarks/learning.py {suite_flag}` from the run "
             f"directories in {named(out_dir)}"
             + (f" and, where they are gone, the records in {named(records)} ({', '.join(recorded)})"
                if recorded else "")
             + f". Machine: {'; '.join(machines) or 'not recorded'}.",
             "",
             "Returns are the scripts' own: `eval_return` is the deterministic (greedy) policy's return on fresh "
             "episodes after training, `final_return` the mean return of the training episodes that ended in the "
             "last 10% of training, one value per seed. IQM: the mean of the middle 50% of seeds (Agarwal et al. "
             f"2021), with a 95% stratified-bootstrap interval ({aggregate.INTERVAL_REPS:,} resamples, seed 0): "
             "the bootstrap resamples seeds, the unit of replication (each seed one independent training run), "
             "so an interval says how far another set of seeds could move the IQM, not an episode's noise. "
             "Each row names its seeds. "
             "std is over seeds (ddof 0). train s and compile s are the run's own (train s counts only the last "
             "invocation of a resumed run)."
             + (" The sampled return is the final policies' mean return acting as in training, each action "
                "sampled, on the number of episodes per seed named (`--eval <run> --eval-sampled`): the figure "
                "that sources evaluating the stochastic policy publish (gymnax-blines)." if sampled else ""), "",
             "| entry | env | seeds | env steps per seed | eval return IQM [95% CI] | final return IQM [95% CI] "
             + ("| sampled return IQM [95% CI] (episodes per seed) " if sampled else "")
             + "| eval mean ± std | eval min | train s | compile s | published | source |",
             "|---|---|---:|---:|---|---|" + ("---|" if sampled else "") + "---|---:|---:|---:|---|---|"]
    for r in results:
        e, s, ev = r.entry, r.summary, r.eval_return[~np.isnan(r.eval_return)]
        mean_std = f"{fmt(ev.mean())} ± {fmt(ev.std())}" if ev.size else "-"
        run_sampled = r.extra.get("sampled_eval")
        cell = "" if not sampled else "| - " if not run_sampled else \
            f"| {iqm_cell(np.array(run_sampled['per_seed']))} ({run_sampled['episodes']}) "
        lines.append(f"| {e.name} | {e.env} | {s['num_seeds']} ({seeds_cell(s)}) | {s['env_steps']:,} "
                     f"| {iqm_cell(r.eval_return)} "
                     f"| {iqm_cell(r.final_return)} {cell}| {mean_std} | {fmt(ev.min()) if ev.size else '-'} "
                     f"| {fmt(s.get('train_s'), 3)}{resumed_note(s)} | {fmt(s.get('compile_s'), 2)} "
                     f"| {e.reference.text} | {e.reference.source} |")
    if results:
        lines += ["", "## Where each row comes from", "",
                  "The record each row is read from (or would be written to), the commit and command that made it, "
                  "the machine and the library versions, as the runner wrote them when it ran the entry; \"not "
                  "recorded\" where a record was made before the runner kept that field. Re-train a row and check "
                  "it: `python benchmarks/learning.py " + suite_flag + " --verify ENTRY` (`--verify-seeds N` for "
                  "fewer seeds).", "",
                  "| entry | record | commit | command | machine | libraries |", "|---|---|---|---|---|---|"]
        for r in results:
            lines.append(f"| {r.entry.name} | {record_link(r.entry, records, folder, results_path)} | "
                         + " | ".join(provenance_cells(r.extra)) + " |")
    if missing:
        lines += ["", "Not in the table (no summary.json or record yet): " + ", ".join(
            f"{e.name}{' (GPU only)' if e.gpu_only else ''}" for e in missing)
            + f". Run them with `python benchmarks/learning.py {suite_flag} --only "
            + ",".join(e.name for e in missing) + "`."]
    ranges = normalization(results)
    written = [results_path]
    algos = list(dict.fromkeys(r.entry.algo for r in results))
    if results:
        lines += ["", "## Per algorithm, over its envs", "",
                  "Scores normalised per env as (return - low) / (high - low): low is a uniformly random policy's "
                  "mean return, high the score named below. IQM over all seeds of all the algorithm's envs, with a "
                  "95% stratified-bootstrap interval (seeds resampled within each env). Where envs have different "
                  "seed counts, each keeps its first seeds up to the smallest count. An algorithm with two recipes or "
                  "budgets on one env has a row for each, named by its entries.", "",
                  "| algorithm | envs | seeds per env | IQM of normalised eval return [95% CI] | curves | profile |",
                  "|---|---|---:|---|---|---|"]
        for algo in algos:
            mine = [r for r in results if r.entry.algo == algo]
            curves = f"{stem}_{algo}_curves.png"
            plot_curves(os.path.join(folder, curves), algo, mine)
            written.append(os.path.join(folder, curves))
            rows = table_rows(mine)
            for i, row in enumerate(rows):
                envs_used, left_out, scores = normalized_matrix(row, ranges)
                # an algorithm with several rows names each row's entries, not its envs (the same in every row)
                used = envs_used if len(rows) == 1 else [r.entry.name for r in row if r.entry.env in envs_used]
                name = algo if i == 0 else f"{algo}_{i + 1}"
                profile, cell = "-", "-"
                if scores is not None:
                    estimate = aggregate.stratified_bootstrap_ci(scores, seed=0)
                    cell = f"{estimate.point:.3f} [{estimate.low:.3f}, {estimate.high:.3f}]"
                    profile = f"{stem}_{name}_profile.png"
                    plot_profile(os.path.join(folder, profile), algo, used, scores)
                    written.append(os.path.join(folder, profile))
                    profile = f"![{name} profile]({profile})"
                envs_cell = ", ".join(used) + (f" (left out, no range: {', '.join(left_out)})" if left_out else "")
                lines.append(f"| {algo} | {envs_cell} | {scores.shape[0] if scores is not None else '-'} "
                             f"| {cell} | ![{algo} curves]({curves}) | {profile} |")
        lines += ["", "| env | low (random policy) | high | high from |", "|---|---:|---:|---|"]
        lines += [f"| {env} | {fmt(low)} | {fmt(high)} | {source} |" for env, (low, high, source) in ranges.items()]
    with replaced(results_path) as f:
        f.write("\n".join(lines) + "\n")
    return written


def report_path(suite_name, entries, out_dir, records=None, commit=True) -> str:
    """Where the report goes without --results: the committed benchmarks/results/learning_<suite>.md when `commit`
    (a full run, or --record) and every entry has a summary.json or a record, else <out-dir>/, saying so."""
    committed = os.path.join(repository.ROOT, "benchmarks", "results", f"learning_{suite_name}.md")
    if not commit:
        print(f"the report goes to {shown(out_dir)}: a run with --only or --out-dir leaves {shown(committed)} as it "
              "is (give --record to write it)")
        return os.path.join(out_dir, f"learning_{suite_name}.md")
    finished = sum(os.path.exists(os.path.join(out_dir, e.name, "summary.json")) or read_record(e, records) is not None
                   for e in entries)
    if finished == len(entries):
        return committed
    print(f"{finished} of {len(entries)} entries have finished: the report goes to {shown(out_dir)}, and "
          f"{shown(committed)} is left as it is (it is rewritten once every entry has finished, or give --results)")
    return os.path.join(out_dir, f"learning_{suite_name}.md")
