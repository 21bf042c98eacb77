"""The memory check, once, before anything is allocated: the agents' state and their final evaluation (from shapes)
against what the device, the host or its cgroup has left. (The compiled programs' own figure, XLA's memory analysis,
is only reported: `loop.compile_run`.)"""

import contextlib
import dataclasses
import os
import re

import jax
import jax.numpy as jnp

from scanrl.harness.flags import ConfigError, Flags, flag


def available_memory(device) -> tuple[int | None, str]:
    """-> (bytes a run can still allocate on `device`, where that is): an accelerator's free memory, or for CPU
    devices the host's available memory (within a cgroup's limit); None where it cannot be told."""
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        return stats["bytes_limit"] - stats.get("bytes_in_use", 0), f"{device.platform} device {device.id}"
    known = [cgroup_memory_left()]  # a container's limit may be far below the host's memory
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        known += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    return min((b for b in known if b is not None), default=None), "this host"


def cgroup_memory_left(root="/sys/fs/cgroup") -> int | None:
    """Bytes this process's cgroup may still allocate (its limit less its usage, cgroup v2 or v1); None without a
    limit (v2's "max", v1's page-rounded 2**63) or a cgroup file to read."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        with contextlib.suppress(OSError, ValueError):
            with open(os.path.join(root, limit_file)) as f, open(os.path.join(root, usage_file)) as g:
                limit, usage = f.read().strip(), g.read().strip()
            return None if limit == "max" or int(limit) >= 2**62 else max(0, int(limit) - int(usage))
    return None


def checked_state(config, init, evaluation_start, keys, swept):
    """The agents' state as shapes (`init(keys, swept)`, vmapped over the agents), nothing allocated. ConfigError when
    the run cannot fit in what this process's first device (or the host) has available: the state of this process's
    agents twice (training, and a checkpoint's host copy), their keys, and their final evaluation's envs and returns
    (`evaluation_start(key, one agent's state)`)."""
    abstract = abstract_state(config, init, keys, swept)
    one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), abstract)  # one agent's state
    started = jax.eval_shape(evaluation_start, jax.ShapeDtypeStruct((2,), jnp.uint32), one)
    agents = -(-keys.shape[0] // jax.process_count())  # this process's agents, at most
    state_bytes, evaluation_bytes = agents * (nbytes(abstract) // keys.shape[0]), agents * nbytes(started)
    need, lower = 2 * state_bytes + 8 * agents + evaluation_bytes, size_flags(config)
    if evaluation_bytes > state_bytes:
        lower = (f"{flag('eval_episodes')} (the final evaluation plays {config.eval_episodes:,} episodes per agent "
                 f"at once), or {lower}")
    free, where = available_memory(jax.local_devices()[0])
    if free is not None and need > free:
        raise ConfigError(f"the run needs about {need / 1e9:.1f} GB of memory ({state_bytes / 1e9:.1f} GB of it the "
                          f"state of its {agents:,} agents) and {where} has {free / 1e9:.1f} GB available: lower "
                          f"{lower}")
    return abstract


def nbytes(tree) -> int:
    """The bytes of every array of `tree` (shapes will do)."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def abstract_state(config, init, *args):
    """`jax.eval_shape(init, *args)`: the agents' state as shapes, nothing allocated. ConfigError naming the flags to
    lower where an array has 2**63 elements or more, past XLA's int64 shapes (--hidden-size 2147483647 squared: PPO's
    flat parameter vector), which JAX reports as a traceback from its shape checks; no memory holds such a state."""
    try:
        return jax.eval_shape(init, *args)
    except (TypeError, ValueError, OverflowError) as error:
        if not beyond_int64(error):
            raise
        raise ConfigError(f"the agents' state holds an array of 2**63 elements or more, past what XLA can index (and "
                          f"what any memory holds): lower {size_flags(config)}") from None


def beyond_int64(error) -> bool:
    """Whether `error` (or an error it was raised from) is a size past int64: Python's own overflow of a C integer,
    or a number of 2**63 or more in the message (JAX's shape checks give such a shape as floats)."""
    while error is not None:
        message = str(error)
        if "too large to convert to C" in message or any(
                float(number) >= 2**63 - 1 for number in re.findall(r"\d+(?:\.\d+)?(?:e\+\d+)?", message)):
            return True
        error = error.__cause__ or error.__context__
    return False


def size_flags(config) -> str:
    """The flags that lower the memory a run needs: "--num-seeds, --buffer-size or --hidden-size"."""
    flags = [flag("num_seeds")] + ([flag("sweep") + " values"] if config.sweep else [])
    own = [f.name for f in dataclasses.fields(config) if f.name not in Flags.__dataclass_fields__]
    flags += [flag(name) for name in own if re.search(r"size|num_envs|num_steps", name)]
    return f"{', '.join(flags[:-1])} or {flags[-1]}" if len(flags) > 1 else flags[0]
