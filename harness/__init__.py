"""The harness of scanrl: everything around an algorithm, written once.

A script holds one algorithm (its `Config`, networks, `make_train_parts`, deterministic policy and the checks that
belong to it) and hands it over as an `Algorithm` to `harness.main`, which does the rest:

    algorithm.py    `Algorithm`: what the harness knows of an algorithm
    flags.py        `Flags` (the flags every script shares), `ConfigError`, checks, --resume's config
    scale.py        sweeps, agents (sweep points x seeds), devices and processes
    records.py      the run directory: config.json, metrics.csv, progress lines, learning_curve.png, summary.json
    tracking.py     wandb
    checkpoints.py  orbax checkpoints of every agent's whole state
    stops.py        Ctrl-C / SIGTERM and non-finite values: a run stops where a chunk ends
    evaluation.py   the deterministic policies' returns, after training and for --eval / --gif
    run.py          `main`: checks, then training in chunks, resume, evaluation and the summaries
    compile_cache.py  JAX's persistent compilation cache, on by default
    aggregate.py    IQM, stratified-bootstrap intervals and performance profiles over seeds and envs
    fast.py         faster equivalents of JAX primitives that are slow on XLA:CPU (a random permutation)

    jax_private.py  the two private JAX APIs used (the compile cache's store, the coordination service), isolated

Importing the harness makes no JAX backend and changes no environment variable. A script calls
`harness.prepare_jax(__name__)` before `import envs` (gymnax makes a backend on import): XLA_FLAGS are read when the
backend is made, and a multi-process run must start `jax.distributed` before one exists.
"""

import os

from harness import fast
from harness.algorithm import Algorithm
from harness.flags import ConfigError, Flags, require_between, require_count, require_positive, require_rollouts
from harness.records import report
from harness.run import check, main
from harness.scale import start_processes
from harness.stops import all_finite

__all__ = ["Algorithm", "fast", "ConfigError", "Flags", "all_finite", "available_cores", "check", "main",
           "prepare_jax", "report", "require_between", "require_count", "require_positive", "require_rollouts",
           "start_processes"]


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, within a cgroup's CPU quota (containers)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return cores


def prepare_jax(module_name: str):
    """The first call of a script, before anything makes a JAX backend (`import envs` does: gymnax makes arrays on
    import). Adds to the user's XLA_FLAGS, which XLA reads once, when it makes the backend:
    - `--xla_cpu_enable_concurrency_optimized_scheduler=false`: XLA:CPU in jax 0.10 can hang on vmapped training
      with that scheduler;
    - one XLA:CPU device per core (one device keeps one core busy), over which the harness splits the agents
      (`--num-devices 1`: one device). A host device count already in XLA_FLAGS wins.
    Then, for the command line (`module_name == "__main__"`), joins a multi-process run (`start_processes`).
    Importing the harness changes nothing of this: a program that imports a script or the harness as a library
    gets the same flags only from this call."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "concurrency_optimized_scheduler" not in flags:
        flags += " --xla_cpu_enable_concurrency_optimized_scheduler=false"
    if "xla_force_host_platform_device_count" not in flags:
        flags += f" --xla_force_host_platform_device_count={available_cores()}"
    os.environ["XLA_FLAGS"] = flags.strip()
    if module_name == "__main__":
        start_processes()
