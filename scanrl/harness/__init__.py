"""The harness of scanrl: everything around an algorithm, written once.

A script holds one algorithm (its `Config`, networks, `make_train_parts(config) -> (init, update)`, deterministic policy
and the checks that belong to it) and hands it over as an `Algorithm` to `harness.main`, which does the rest. A script
meets five names of it: `prepare_jax`, `Flags`, `require`, `Algorithm`, `main` (its `validate` raises `ValueError`).

A run is the loop (loop.py) and its record (record.py), which writes every file of the run:

    plan (program.py) -> RunRecord(job): the run directory claimed (or taken over by --resume) and owned
    -> compile -> the agents made (or restored) -> record.start (metrics.csv, wandb, progress)
    -> each chunk: its pieces, record.piece after each (progress lines, wandb), a non-finite check, record.chunk
       (the chunk before's rows once its checkpoint is committed, this one's checkpoint started), a stop on a signal
    -> record.trained -> the final evaluation -> record.finish (summary.json, plots, wandb's end) -> record.release

The modules, one concern each, a module importing only those above it:

    migrations.py   what runs of older commits hold, and how this version reads them (no imports)
    flags.py        the command line: the shared `Flags` read by tyro, `ConfigError`, `require`, the flag checks
    algorithm.py    `Algorithm`: what the harness knows of an algorithm
    files.py        the one way a file is written in a run directory (never through a link), and its lock
    tracking.py     wandb, all of it: a run per sweep point, its live metrics, its summary
    stops.py        Ctrl-C / SIGTERM, non-finite values, failed writes, callbacks, int32 counts, your env: one line
    aggregate.py    IQM and stratified-bootstrap intervals over seeds, means that skip NaN
    jax_private.py  the private JAX APIs used (the compile cache's store, the coordination service), isolated
    compile_cache.py  JAX's persistent compilation cache, on by default
    processes.py    a run of several processes: joining, heartbeats, a watchdog per collective (imported only then)
    agents.py       the devices agents are split over, programs over them, where the run lives (one process or more)
    memory.py       the memory check, once, from shapes, before anything is allocated
    checkpoints.py  orbax checkpoints of every agent's whole state, checked before and on restore
    resume.py       --resume, all of it: config.json read back, held to its checkpoint's, then the run restored from it
    sweeps.py       --sweep: its points, their names and the checks of each point's values
    metrics.py      metrics.csv's rows and the progress lines
    program.py      one agent's programs, made once per run (`plan` -> `Job`): training, evaluation, swept fields traced
    plots.py        learning_curve.png and a sweep's learning_curves.png
    record.py       a run's record: its directory (claimed, owned), checkpoints, metrics, wandb, summaries and plots
    loop.py         a run: plan, record, compile, one chunk loop (divergence, stop), evaluation, the record's end
    evaluate.py     --eval: a saved run's config checked, its checkpoint restored, its evaluation run (plan, loop)
    cli.py          `main`: the command line checked, then training, --resume or --eval

The commands beside a run (the contract check a fork must pass, several runs on one plot) are `scanrl.tools`: they
import the harness, and the harness never imports them.

Importing the harness makes no JAX backend and changes no environment variable. A script calls
`harness.prepare_jax(__name__)` before `from scanrl import envs` (gymnax makes a backend on import): XLA_FLAGS are
read when the backend is made, and a multi-process run must start `jax.distributed` before one exists."""

import ast
import contextlib
import importlib
import os
import sys

# What `harness.<name>` gives, imported on first use: no JAX until a script needs it, so --help answers at once.
_EXPORTS = {"Algorithm": "algorithm", "ConfigError": "flags", "Flags": "flags", "require": "flags", "check": "cli",
            "main": "cli", "start_processes": "processes"}

__all__ = ["available_cores", "prepare_jax", "print_help", *_EXPORTS]


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'scanrl.harness' has no attribute {name!r}")
    globals()[name] = value = getattr(importlib.import_module(f"scanrl.harness.{_EXPORTS[name]}"), name)
    return value


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, within a cgroup's CPU quota (containers)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with contextlib.suppress(OSError, ValueError), open("/sys/fs/cgroup/cpu.max") as f:
        quota, period = f.read().split()
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    return cores


def prepare_jax(module_name: str):
    """A script's first call, before its other imports. From the command line it answers --help at once from the
    `Config` alone (`print_help`), or prints a first line while the libraries load, and joins a multi-process run
    (`start_processes`). Then it adds to XLA_FLAGS, read once when the backend is made (`import envs` makes it):
    the concurrency-optimised XLA:CPU scheduler off (jax 0.10 can hang with it on vmapped training) and one XLA:CPU
    device per core (one device keeps one core busy; a device count already in XLA_FLAGS wins)."""
    main = module_name == "__main__"
    from scanrl.harness.flags import early_flags

    early = early_flags(sys.argv[1:]) if main else {}
    if main:  # a path or run name this terminal's encoding cannot show is printed escaped, not a traceback
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="backslashreplace")
        # A jax.py (or jax/, numpy.py, ...) beside the script would stand in for a package scanrl imports (Python
        # imports the script's folder first), with a traceback from deep inside: exit 2 with one line instead.
        folder = os.path.dirname(os.path.abspath(sys.argv[0]))
        for name in ("jax", "jaxlib", "flax", "optax", "distrax", "chex", "orbax", "gymnax", "tyro", "wandb", "numpy",
                     "matplotlib"):
            for path in (os.path.join(folder, f"{name}.py"), os.path.join(folder, name, "__init__.py")):
                if os.path.isfile(path):
                    print(f"error: {path} beside the script stands in for the {name} package (Python imports the "
                          f"script's folder first); rename it", file=sys.stderr)
                    sys.exit(2)
    if "help" in early:
        print_help(sys.modules["__main__"])  # exits, unless the Config needs the script's other names
    elif main and early.get("process_id", "0") == "0":  # a first line at once: the imports take seconds
        print(f"{os.path.basename(sys.argv[0])}: loading JAX and the environments ...", flush=True)
    flags = os.environ.get("XLA_FLAGS", "")
    if "concurrency_optimized_scheduler" not in flags:
        flags += " --xla_cpu_enable_concurrency_optimized_scheduler=false"
    if "xla_force_host_platform_device_count" not in flags:
        flags += f" --xla_force_host_platform_device_count={available_cores()}"
    os.environ["XLA_FLAGS"] = flags.strip()
    if "coordinator_address" in early:
        from scanrl.harness.processes import start_processes  # several processes: joined before any backend

        start_processes()


def print_help(script):
    """--help of the running `script` from its `Config` class and light imports alone (run in its namespace): tyro
    prints what the full script would, and exits 0. Returns where the Config needs more of the script: the script's
    own parse prints the help then, after its heavy imports."""
    import tyro

    from scanrl.harness.flags import description

    # Modules a Config may use that cost nothing to import; of scanrl, the harness only (scanrl.envs imports gymnax).
    cheap = ("dataclasses", "typing", "collections", "enum", "scanrl.harness")

    def imported(node):  # the modules an import statement imports (`from scanrl import harness`: scanrl.harness)
        if isinstance(node, ast.ImportFrom):
            return [f"{node.module}.{a.name}" if node.module == "scanrl" else node.module or "" for a in node.names]
        return [a.name for a in node.names]

    try:
        with open(script.__file__, encoding="utf-8") as f:
            tree = ast.parse(f.read(), script.__file__)
        light = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom) and all(
            any(n == m or n.startswith(m + ".") for m in cheap) for n in imported(node))]
        (config,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Config"]
        exec(compile(ast.Module(body=[*light, config], type_ignores=[]), script.__file__, "exec"), vars(script))
    except Exception:  # not one Config, or it needs the rest of the script
        return
    tyro.cli(script.Config, description=description(script.__doc__))
