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

Importing the harness makes no JAX backend. A multi-process run must start `jax.distributed` before one exists,
and importing gymnax makes one, so a script imports the harness, starts its processes, then imports `envs`.
"""

import os


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


# XLA reads XLA_FLAGS when it makes the first backend, so these are in time; added to any XLA_FLAGS the user sets:
# - XLA:CPU in jax 0.10 can hang on vmapped training with the concurrency-optimised scheduler (see README);
# - one XLA:CPU device keeps one core busy, so the CPU backend gets one device per core, and the harness splits
#   the agents over them (--num-devices 1: one device, as before). A host device count in XLA_FLAGS wins.
_FLAGS = os.environ.get("XLA_FLAGS", "")
if "concurrency_optimized_scheduler" not in _FLAGS:
    _FLAGS += " --xla_cpu_enable_concurrency_optimized_scheduler=false"
if "xla_force_host_platform_device_count" not in _FLAGS:
    _FLAGS += f" --xla_force_host_platform_device_count={available_cores()}"
os.environ["XLA_FLAGS"] = _FLAGS.strip()

from harness import fast  # noqa: E402
from harness.algorithm import Algorithm  # noqa: E402
from harness.flags import ConfigError, Flags, require_between, require_count, require_positive  # noqa: E402
from harness.records import report  # noqa: E402
from harness.run import check, main  # noqa: E402
from harness.scale import start_processes, swept, with_hparams  # noqa: E402
from harness.stops import all_finite  # noqa: E402

__all__ = ["Algorithm", "fast", "ConfigError", "Flags", "all_finite", "check", "main", "report", "require_between",
           "require_count", "require_positive", "start_processes", "swept", "with_hparams"]
