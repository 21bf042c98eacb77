"""The memory check, before anything is allocated: the agents' state (from shapes) and the compiled programs'
needs (XLA's memory analysis) against what the device, the host or its cgroup has left."""

import contextlib
import dataclasses
import os
import re

import jax

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


def check_memory(config, state_bytes, programs=None, host_bytes=0, evaluation=None, agents=None):
    """ConfigError when the run cannot fit in what this process's first device (or the host) has available. Before
    anything is made per agent (`programs` None): the state of this process's `agents` (`state_bytes`) twice (training
    and a checkpoint's host copy), and their keys. Once compiled: each program's (and the final `evaluation`'s)
    arguments, outputs and temporaries (XLA's `memory_analysis`, per device; on CPU the devices share the host's
    memory, so they add up), plus a checkpoint's host copy of the state and `host_bytes` (the metrics history)."""
    lower, what = size_flags(config, host_bytes > state_bytes), "agents"
    if programs is None:
        need, what = 2 * state_bytes + 8 * agents, f"{agents:,} agents"
    else:
        needs = []
        for program in [*programs, evaluation] if evaluation is not None else programs:
            stats = program.memory_analysis()
            if stats is None:
                return
            needs.append(stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
                         + stats.temp_size_in_bytes)
        on_cpu = jax.local_devices()[0].platform == "cpu"
        need = max(needs) * (len(jax.local_devices()) if on_cpu else 1) + (state_bytes + host_bytes if on_cpu else 0)
        if evaluation is not None and needs[-1] > max(needs[:-1], default=0):
            lower = (f"{flag('eval_episodes')} (the final evaluation plays {config.eval_episodes:,} episodes per agent "
                     f"at once), or {lower}")
    free, where = available_memory(jax.local_devices()[0])
    if free is not None and need > free:
        raise ConfigError(f"the run needs about {need / 1e9:.1f} GB of memory ({state_bytes / 1e9:.1f} GB of it the "
                          f"state of its {what}) and {where} has {free / 1e9:.1f} GB available: lower {lower}")


def size_flags(config, history=False) -> str:
    """The flags that lower the memory a run needs: "--num-seeds, --buffer-size or --hidden-size"."""
    flags = [flag("num_seeds")] + ([flag("sweep") + " values"] if config.sweep else [])
    own = [f.name for f in dataclasses.fields(config) if f.name not in Flags.__dataclass_fields__]
    flags += [flag(name) for name in own if re.search(r"size|num_envs|num_steps", name)]
    flags += [flag("total_timesteps")] if history else []
    return f"{', '.join(flags[:-1])} or {flags[-1]}" if len(flags) > 1 else flags[0]
