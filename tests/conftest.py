"""Shared test helpers: run a script as a user would (in a child of tests/zygote.py's warm Python), offline, with a
timeout."""

import collections
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# As the scripts do: avoid the XLA:CPU scheduler hang on vmapped training (see README), in-process too. And the tests'
# programs compile at XLA's lowest backend optimisation level with XLA:CPU's older emitter
# (`--xla_cpu_use_fusion_emitters=false`), in-process and in the scripts they run (which inherit XLA_FLAGS): ppo.py's
# tiny program compiles in about 3 s instead of 7-8 with the newer emitter (2 cores, 2026-11-27), and a test's tiny
# runs are over before faster code would pay. At 30 seeds the older emitter's code trains 1.5-1.8x slower: the learning
# tests, which run long enough for it to pay, compile with the fusion emitters at backend level 1
# (`run_script(..., optimized=True)`): against a user's run (level 2) each of the 9 learning tests' runs compiled
# faster and trained as fast, to the same returns, 228 s against 283 s in all (2026-11-29; the GTrXL's compile 14.3 s
# against 20.1).
SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
OPTIMIZED_FLAGS = f"{SCHEDULER_FLAG} --xla_backend_optimization_level=1"
TEST_FLAGS = f"{SCHEDULER_FLAG} --xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
os.environ.setdefault("XLA_FLAGS", TEST_FLAGS)

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# The lowest level for a program compiled in this process whatever XLA_FLAGS says (a user's own):
# `jax.jit(f).lower(...).compile(FAST_COMPILE_OPTIONS)`.
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0}
sys.path.insert(0, str(ROOT))

from cases import finished_runs  # noqa: E402, F401 - the fixture of tests/cases.py that many test files share


def descendants(pid) -> list[int]:
    """Every process below `pid` (children, their children, ...), from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def stop_everything(signum, frame):
    """Ctrl-C or SIGTERM to pytest: its xdist workers and every process they started (a training script that
    would finish its chunk first, a test's own subprocesses) are stopped (SIGSTOP, so none forks any more, then
    SIGKILL) and pytest exits at once with 128 + the signal's number. Without this, pytest-xdist waits for its
    workers, which wait for their subprocesses, and SIGTERM left them all running."""
    stopped = set()
    while new := [p for p in descendants(os.getpid()) if p not in stopped]:
        for pid in new:
            with_process(pid, signal.SIGSTOP)
        stopped.update(new)
    for pid in stopped:
        with_process(pid, signal.SIGKILL)
    name = signal.Signals(signum).name
    os.write(2, f"\n{name}: pytest stopped, and the {len(stopped)} processes it had started\n".encode())
    os._exit(128 + signum)


def with_process(pid, signum):
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent():
    """Linux: this process gets SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG), so a worker whose pytest was
    killed outright (kill -9) does not run on."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def pytest_collection_modifyitems(config, items):
    """pytest-xdist hands out whole files (`--dist loadfile --no-loadscope-reorder`) in collection order: the files
    with the most slow tests go first, so the last files handed out are short ones and the workers end together
    (handed out by their number of tests, two slow files came last to one worker and the other sat idle)."""
    slow = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])  # stable: a file's tests stay together, in their order


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        die_with_parent()
    else:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stop_everything)


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory):
    """One compilation cache for the session's tests (shared by pytest-xdist's workers, whose temporary
    directories share a parent), not the user's ~/.cache: many tests compile the same programs."""
    root = tmp_path_factory.getbasetemp()
    path = (root.parent if root.name.startswith("popen-gw") else root) / "compile-cache"
    os.environ.setdefault("SCANRL_COMPILE_CACHE", str(path))
    return path


@pytest.fixture
def run_script(tmp_path):
    """`run_script("ppo.py", "--total-timesteps", "1024", ...)` -> CompletedProcess, run in `tmp_path` with
    `--out-dir tmp_path/runs` added unless given, wandb offline and its files kept inside `tmp_path` (by `run_warm`);
    `optimized`: compiled with the fusion emitters at backend level 1, to run fast (the learning tests);
    `env_overrides` (a dict) is applied last, for tests that need a different wandb, XLA or Python setting (PYTHON*:
    read as Python starts, so the run gets a Python of its own)."""

    def _run(script, *args, timeout=600, add_out_dir=True, env_overrides=None, optimized=False):
        env = {
            **os.environ,
            **({"XLA_FLAGS": OPTIMIZED_FLAGS} if optimized else {}),
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(tmp_path),
            "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
            "WANDB_SILENT": "true",
        }
        env.update(env_overrides or {})
        argv = [sys.executable, str(ROOT / script), *args]
        if add_out_dir and "--out-dir" not in args:
            argv += ["--out-dir", str(tmp_path / "runs")]
        if any(key.startswith("PYTHON") for key in env_overrides or ()):  # read as Python starts: a Python of its own
            return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        return run_warm(argv, tmp_path, env, timeout)

    return _run


ZYGOTE = {}  # this worker's warm Python (tests/zygote.py), started by its first script run, and what it has said


def run_warm(argv, cwd, env, timeout):
    """subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout), run by a child of
    tests/zygote.py, which has imported the libraries every script imports: about 5 s less a run. The zygote starts
    without PYTHONPATH: each run's own is put on its path (tests/zygote.py)."""
    if "process" not in ZYGOTE or ZYGOTE["process"].poll() is not None:
        process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "zygote.py")], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, bufsize=0, cwd=ROOT,
                                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        ZYGOTE.update(process=process, said=b"")
    with tempfile.TemporaryDirectory() as files:
        out, err = Path(files) / "stdout", Path(files) / "stderr"
        request = dict(argv=[str(a) for a in argv], cwd=str(cwd), env=env, stdout=str(out), stderr=str(err))
        ZYGOTE["process"].stdin.write(json.dumps(request).encode() + b"\n")
        pid = int(zygote_says(None))
        try:
            status = zygote_says(timeout)
        except BaseException:  # pytest's own timeout, Ctrl-C: the run and its zygote go, the next run starts one
            with_process(pid, signal.SIGKILL)
            ZYGOTE.pop("process").kill()
            raise
        if status is None:
            with_process(pid, signal.SIGKILL)
            zygote_says(None)
            raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(int(status)), out.read_text(),
                                           err.read_text())


def zygote_says(timeout):
    """The zygote's next line, or None after `timeout` seconds without one."""
    fd = ZYGOTE["process"].stdout.fileno()
    while b"\n" not in ZYGOTE["said"]:
        if not select.select([fd], [], [], timeout)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError("tests/zygote.py exited")
        ZYGOTE["said"] += chunk
    line, ZYGOTE["said"] = ZYGOTE["said"].split(b"\n", 1)
    return line


def read_run(out_dir: Path):
    """The single run directory under `out_dir` and its summary.json."""
    (run_dir,) = list(Path(out_dir).iterdir())
    return run_dir, json.loads((run_dir / "summary.json").read_text())
