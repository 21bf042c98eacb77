"""Running a suite's entries: each through its script's command line in a subprocess, as a user runs it (fresh, or
resumed where it stopped), nothing finished run again, each finished run recorded."""

import contextlib
import datetime
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from scanrl.harness.files import replaced

from . import repository
from .entries import Entry, SuiteError, SuiteStopped
from .records import (
    MACHINE_FILE,
    check_config,
    lacking_provenance,
    read_json,
    read_notes,
    read_record,
    record_path,
    write_record,
)
from .repository import portable, shown


def machine() -> dict:
    """This machine as the report names it: CPU model and cores, JAX's devices and version, and the GPUs' name and
    driver where nvidia-smi answers. JAX is asked in a subprocess, so this process never holds an accelerator the
    runs need."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    probe = ("import json, jax; d = jax.devices(); "
             "print(json.dumps({'backend': jax.default_backend(), 'devices': [x.device_kind for x in d]}))")
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
        jax_info = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        jax_info = {"backend": "unknown", "devices": []}
    found = {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), **jax_info,
             "jax": importlib.metadata.version("jax"), "python": sys.version.split()[0]}
    gpus = _ask(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if gpus:
        found["gpus"] = [dict(zip(("name", "driver"), (v.strip() for v in line.split(",", 1)), strict=False))
                         for line in gpus.splitlines() if line.strip()]
    return found


def _ask(cmd) -> str | None:
    """A command's stdout, stripped; None if it cannot run or fails."""
    try:
        done = subprocess.run(cmd, cwd=repository.ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


# The libraries whose versions a record names (those installed).
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "distrax", "gymnax", "numpy", "mujoco", "mujoco-mjx", "brax",
             "mujoco_playground", "craftax", "xminigrid")


def provenance(cmd) -> dict:
    """What a record needs to say where its numbers come from, taken as the run starts: the commit and whether the
    tracked files differed from it (`dirty`; None for both outside a git checkout), the script's exact command line
    (`shown_command`) and the installed versions of LIBRARIES."""
    commit = _ask(["git", "rev-parse", "HEAD"])
    changes = _ask(["git", "status", "--porcelain", "--untracked-files=no"]) if commit else None
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"commit": commit, "dirty": None if changes is None else bool(changes), "command": shown_command(cmd),
            "versions": versions}


def shown_command(cmd) -> str:
    """A script's command line as a record keeps it: `python`, then the arguments, a path inside the repository
    relative to it and one outside it as <outside the repository> (a folder of one machine)."""
    words = []
    for word in cmd[1:]:
        if os.path.isabs(word):
            word = portable(word) or "<outside the repository>"
        words.append(shlex.quote(word))
    return " ".join(["python", *words])


def check_run_dir(e: Entry, run_dir):
    """SuiteError if the entry's run directory is a link, or an existing one was made for other settings than the
    entry's. The suite never resumes, evaluates or records a run through a link it did not make: a script's --resume
    follows one by design, and would train in the folder it points to."""
    if os.path.islink(run_dir):
        raise SuiteError(f"{shown(run_dir)} is a link (to {os.readlink(run_dir)}), not a run directory the suite "
                         f"made: it never resumes or records a run through a link; remove the link (what it points "
                         f"to is left alone), or choose another --out-dir")
    if os.path.lexists(os.path.join(run_dir, "config.json")):  # none: the run never started; the script refuses
        check_config(e, read_json(run_dir, "config.json"), run_dir)  # or resumes it as it sees fit


def command(e: Entry, out_dir, run_dir, fresh=False) -> list[str]:
    """The script's command line for an entry: a fresh run, or (unless `fresh`) --resume of its run directory where
    one was started."""
    if not fresh and os.path.isdir(run_dir) and os.listdir(run_dir):
        return [sys.executable, e.script, "--resume", run_dir]
    return [sys.executable, e.script, "--env", e.env, "--total-timesteps", str(e.total_timesteps), "--num-seeds",
            str(e.num_seeds), "--seed", str(e.seed), "--out-dir", out_dir, "--run-name", e.name, *e.flags]


def evaluate_sampled(e: Entry, run_dir, head) -> bool:
    """Adds the final policies' returns with actions sampled (`--eval-sampled`, `e.sampled_episodes` episodes per
    seed) to the run's MACHINE_FILE, unless it holds them already or the entry asks for none; False if it failed."""
    path = os.path.join(run_dir, MACHINE_FILE)
    run = read_notes(run_dir)
    if e.sampled_episodes <= 0 or run.get("sampled_eval", {}).get("episodes") == e.sampled_episodes:
        return True
    cmd = [sys.executable, e.script, "--eval", run_dir, "--eval-sampled", "--eval-episodes", str(e.sampled_episodes)]
    print(f"{head}: the sampled policies, {e.sampled_episodes} episodes per seed: python {' '.join(cmd[1:])}",
          flush=True)
    done = subprocess.run(cmd, cwd=repository.ROOT, capture_output=True, text=True)
    means = [float(m) for m in re.findall(r"^seed \S+ \(index \d+\): mean (\S+)", done.stdout, re.MULTILINE)]
    if done.returncode != 0 or len(means) != e.num_seeds:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        print(f"{head}: the sampled evaluation failed ({why})", flush=True)
        return False
    run["sampled_eval"] = {"episodes": e.sampled_episodes, "per_seed": means}
    with replaced(path) as f:
        json.dump(run, f, indent=2)
    print(f"{head}: sampled policies' mean return per seed: {' '.join(f'{m:.2f}' for m in means)}", flush=True)
    return True


# SIGHUP: the terminal closed. The script, in a process group of its own, hears it only through the runner, as SIGTERM
# (the scripts stop on SIGINT and SIGTERM where a chunk ends, with a checkpoint).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# `python -c STOP_WITH_RUNNER RUNNER_PID CMD...` runs CMD (a script's command line) in a process that gets SIGTERM when
# the runner dies, however it dies (SIGKILL, which no one can pass on, too): Linux's PR_SET_PDEATHSIG, which exec keeps.
# The script stops then as on a signal passed on, with a checkpoint, never training on with no runner to record it; one
# whose runner is gone already does not start. (Set there, not between fork and exec: a fork of this process, which
# imported JAX, warns of deadlocks.)
STOP_WITH_RUNNER = ("import ctypes, os, signal, sys\n"
                    "if sys.platform == 'linux':\n"
                    "    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG\n"
                    "if os.getppid() != int(sys.argv[1]):\n"
                    "    sys.exit(1)\n"
                    "os.execv(sys.argv[2], sys.argv[2:])\n")


def run_passing_signals(cmd, head) -> tuple[int, signal.Signals | None]:
    """Runs a script's command line to its end, passing SIGINT, SIGTERM and SIGHUP (as SIGTERM) on to it: -> (its exit
    code, the first signal passed on, or None). The script runs in a process group of its own, so a Ctrl-C at the
    terminal reaches it once, through this process, as a signal sent to this process alone does: the scripts stop
    where a chunk ends, with a checkpoint (a second signal: at once); and it stops so when this process dies
    (`STOP_WITH_RUNNER`): nothing trains on with no one waiting for it."""
    received = []
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in STOP_SIGNALS}
    try:
        process = subprocess.Popen([sys.executable, "-c", STOP_WITH_RUNNER, str(os.getpid()), *cmd],
                                   cwd=repository.ROOT, process_group=0)
        passed = 0
        while True:
            for signum in received[passed:]:  # passed on here, not in the handler: each once, to a started script
                process.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)
                if not passed:
                    name = signal.Signals(signum).name
                    with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
                        print(f"{head}: {name} passed on to the script: it stops where its chunk ends, with a "
                              f"checkpoint ({name} again: at once)", flush=True)
                passed += 1
            try:
                code = process.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code, signal.Signals(received[0]) if received else None


def train_entry(e: Entry, out_dir, run_dir, head, this_machine) -> bool:
    """Runs the entry's script (fresh, or --resume where its run stopped) and, once it has finished, writes the
    runner's notes beside it (MACHINE_FILE: the machine, where the numbers come from, the wall time); -> whether it
    finished. SuiteStopped where SIGINT, SIGTERM or SIGHUP came (passed on to the script), once the script has ended."""
    cmd = command(e, out_dir, run_dir)
    resumed = "--resume" in cmd
    print(f"{head}: {'resuming' if resumed else 'running'}: python {' '.join(cmd[1:])}", flush=True)
    # The fresh command is the entry's, also when this invocation resumes it (--resume RUN_DIR names no setting).
    origin = provenance(command(e, out_dir, run_dir, fresh=True))
    start = time.perf_counter()
    code, stop = run_passing_signals(cmd, head)
    wall_s = time.perf_counter() - start
    finished = code == 0 and os.path.exists(os.path.join(run_dir, "summary.json"))
    if stop and not finished:
        raise SuiteStopped(f"{stop.name}: {e.name} stopped (exit {code}) with the checkpoints it wrote; run the same "
                           "command again to resume it (finished entries are kept); the report was not rewritten")
    if not finished:  # exit 2: the script refused the entry's flags (its line above), which a rerun would repeat
        print(f"{head}: failed (exit {code}); " + (
            "the script refused the entry (the line above), as it would again: fix the entry" if code == 2 else
            f"it wrote no {shown(os.path.join(run_dir, 'summary.json'))}: fix the entry" if code == 0 else
            "run this script again to resume it"), flush=True)
        return False
    notes = {"machine": this_machine, **origin, "seeds": list(range(e.seed, e.seed + e.num_seeds)), "wall_s": wall_s,
             "resumed": resumed, "finished": datetime.datetime.now().isoformat(timespec="seconds")}
    try:
        with replaced(os.path.join(run_dir, MACHINE_FILE)) as f:
            json.dump(notes, f, indent=2)
    except OSError as error:
        print(f"{head}: failed: cannot write {shown(os.path.join(run_dir, MACHINE_FILE))} ({error.strerror or error})"
              ", so it cannot be recorded", flush=True)
        return False
    print(f"{head}: done in {wall_s:.0f} s", flush=True)
    if stop:  # it finished as the signal came: what is left (a sampled evaluation, the record) waits for a rerun
        raise SuiteStopped(f"{stop.name}: it came as {e.name} finished, which is kept; run the same command again to "
                           "go on (it records it, then runs the entries after it); the report was not rewritten")
    return True


def record_run(e: Entry, run_dir, records, head) -> bool:
    """Writes a finished run's record, and says where; False, with one line and nothing written, where its run
    directory lacks the runner's notes of where its numbers come from (a run that finished with no runner waiting for
    it): a record never goes without them."""
    lacking = lacking_provenance(read_notes(run_dir))
    if lacking:
        print(f"{head}: not recorded: {shown(os.path.join(run_dir, MACHINE_FILE))} has no {lacking} (the runner "
              f"writes them as it runs the entry); delete {shown(run_dir)} to run {e.name} again", flush=True)
        return False
    print(f"{head}: recorded in {shown(write_record(e, run_dir, records))}", flush=True)
    return True


def run_entries(entries, out_dir, records=None, write_records=True) -> list[str]:
    """Runs each entry that has neither a summary.json nor a record in `records` yet (fresh or resumed), recording
    each finished run there (None: none; `write_records` False: the records are read, not written); -> the names
    that failed. SuiteStopped where SIGINT, SIGTERM or SIGHUP stopped a run (passed on to its script)."""
    os.makedirs(out_dir, exist_ok=True)
    for e in entries:  # refuse a link, a mismatched directory or record before spending time on any run
        if os.path.lexists(os.path.join(out_dir, e.name)):
            check_run_dir(e, os.path.join(out_dir, e.name))
        read_record(e, records)
    failed, this_machine = [], None
    for i, e in enumerate(entries):
        run_dir = os.path.join(out_dir, e.name)
        head = f"[{i + 1}/{len(entries)}] {e.name}"
        if os.path.exists(os.path.join(run_dir, "summary.json")):
            print(f"{head}: finished before ({run_dir}/summary.json), not rerun", flush=True)
            if not evaluate_sampled(e, run_dir, head):
                failed.append(e.name)
            elif write_records and records is not None and \
                    (read_record(e, records) or {}).get("run") != portable(read_notes(run_dir)) and \
                    not record_run(e, run_dir, records, head):
                failed.append(e.name)
            continue
        if read_record(e, records) is not None:
            print(f"{head}: finished before ({shown(record_path(records, e))}), not rerun", flush=True)
            continue
        this_machine = this_machine or machine()
        if e.gpu_only and this_machine.get("backend") != "gpu":
            print(f"{head}: skipped, it needs a GPU and JAX sees {this_machine.get('backend')} here", flush=True)
            continue
        missing = envs_missing(e.env)
        if missing:
            print(f"{head}: skipped, {missing}", flush=True)
            continue
        if os.path.lexists(run_dir):
            check_run_dir(e, run_dir)  # again: a link planted while the entries before it ran is refused too
        if not train_entry(e, out_dir, run_dir, head, this_machine) or not evaluate_sampled(e, run_dir, head):
            failed.append(e.name)
        elif records is not None and write_records:
            if not record_run(e, run_dir, records, head):
                failed.append(e.name)
        elif records is not None:
            print(f"{head}: not recorded in {shown(records)} (a partial run: --record commits its record)",
                  flush=True)
    return failed


# The optional suites by id prefix: (package, requirements file). scanrl/envs/<suite>.py knows the same, but importing
# envs imports gymnax, which starts JAX in this process: the runs need the accelerator to themselves.
SUITE_PACKAGES = {"mujoco/": ("mujoco", "mujoco"), "brax/": ("brax", "brax"),
                  "playground/": ("mujoco_playground", "playground"), "Craftax-": ("craftax", "craftax"),
                  "MiniGrid-": ("xminigrid", "xminigrid")}


def envs_missing(env_id) -> str | None:
    """Why an entry's env cannot be made here (an optional suite not installed), or None."""
    for prefix, (package, suite) in SUITE_PACKAGES.items():
        if env_id.startswith(prefix) and importlib.util.find_spec(package) is None:
            return f"it needs {package}: pip install -r requirements-{suite}.txt"
    return None
