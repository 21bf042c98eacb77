"""Scale out: the agents of a run are sweep points x seeds, trained as one program split over the devices of every
process. Agents are point-major: agent p * num_seeds + s trains sweep point p with seed `seed + s`, so every point
sees the seeds of a run without --sweep."""

import argparse
import contextlib
import dataclasses
import itertools
import os
import re
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import PartitionSpec

from scanrl.harness import jax_private
from scanrl.harness.flags import MAX_COUNT, ConfigError, Flags, flag, require_count, require_finite
from scanrl.harness.jax_private import coordination_client


def start_processes(argv=None):
    """Joins a multi-process run (--coordinator-address, --num-processes, --process-id: every process gets the same
    flags but its own id) through `jax.distributed.initialize`, which must come before anything makes a JAX
    backend; scripts call this before `import envs` (gymnax makes one at import). Only these three flags are read
    here; incomplete or bad ones are left to the config check, which names them.

    If the processes have not all joined within --distributed-timeout seconds, this one exits 1 with one line:
    JAX's own timeout ends the process with a C++ stack dump (after 300 s by default), so a watchdog ends it first.
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--coordinator-address", "--coordinator_address", default=None)
    parser.add_argument("--num-processes", "--num_processes", default="1")
    parser.add_argument("--process-id", "--process_id", default="0")
    parser.add_argument("--distributed-timeout", "--distributed_timeout", default="60")
    flags, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        num_processes, process_id = int(flags.num_processes), int(flags.process_id)
        timeout = int(flags.distributed_timeout)
    except ValueError:
        return
    if flags.coordinator_address is None or not 0 <= process_id < num_processes or timeout <= 0:
        return
    waiting_for = (f"the other {num_processes - 1} process(es)" if process_id == 0
                   else f"process 0 (the coordinator) at {flags.coordinator_address}, or the others")

    def give_up():
        print(f"error: process {process_id} of {num_processes}: {waiting_for} did not join within {timeout} s "
              "(--distributed-timeout); start every process with the same flags and its own --process-id",
              file=sys.stderr, flush=True)
        os._exit(1)

    watchdog = threading.Timer(timeout, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(flags.coordinator_address, num_processes, process_id,
                                   initialization_timeout=timeout + 30)
    finally:
        watchdog.cancel()
    PEERS.update(timeout=timeout, process_id=process_id, num_processes=num_processes)
    threading.Thread(target=_beat, args=(process_id, min(5.0, timeout / 4)), daemon=True).start()


def _beat(process_id, every):
    """This process's heartbeat for its peers' watchdogs: a counter in the coordination service's key-value
    store, raised every `every` seconds while the process lives."""
    client = coordination_client()
    for beat in itertools.count():
        try:
            client.key_value_set(f"scanrl/alive/{process_id}", str(beat), allow_overwrite=True)
        except Exception:
            return
        time.sleep(every)


# A multi-process run's --distributed-timeout, set by start_processes: how long a collective waits for its peers.
PEERS = {"timeout": None, "process_id": 0, "num_processes": 1}
_collectives = itertools.count()


@contextlib.contextmanager
def peers_within_timeout(what):
    """Around this process's part of a collective (`what`: where in the run): if some peers have not reached it
    within --distributed-timeout seconds, they died or hang, and this process exits 1 with one line naming them,
    before JAX's own heartbeat timeout ends it with a C++ stack dump. Each process marks its arrival in the
    coordination service's key-value store, which tells the missing ones apart; once all have arrived, it waits
    as long as the collective takes."""
    if jax.process_count() == 1 or PEERS["timeout"] is None:
        yield
        return
    client, number = coordination_client(), next(_collectives)
    me, timeout = PEERS["process_id"], PEERS["timeout"]
    count = PEERS["num_processes"]

    def read(key):
        try:
            return client.key_value_try_get(key)
        except Exception:  # not there
            return None

    def watch():
        """Every few seconds: a peer whose heartbeat stood still for --distributed-timeout seconds died; one that
        has not reached this collective within that time died or hangs. All alive and arrived (a slow disk,
        say): wait on."""
        beats, since, start = {}, {}, time.monotonic()
        while not done.wait(min(5.0, timeout / 4)):
            now = time.monotonic()
            if read(f"scanrl/{number}/{me}") is None:  # not even this process's mark: the store went with process 0
                exit_for_lost_peers(what, [0], "the coordinator does not answer")
            for p in range(count):
                beat = read(f"scanrl/alive/{p}")
                if beat != beats.get(p):
                    beats[p], since[p] = beat, now
            dead = [p for p in range(count) if now - since[p] >= timeout]
            late = [p for p in range(count) if read(f"scanrl/{number}/{p}") is None] \
                if now - start >= timeout else []
            if dead or late:
                exit_for_lost_peers(what, dead or late, f"{'no heartbeat' if dead else 'not there'} for {timeout} s, "
                                                        "--distributed-timeout")

    try:
        client.key_value_set(f"scanrl/{number}/{me}", "1")
    except Exception:
        pass
    done = threading.Event()
    threading.Thread(target=watch, daemon=True).start()
    try:
        yield
    finally:
        done.set()


def peer_failure(error) -> bool:
    """Whether an error of a multi-process run says a peer process is gone (a collective's connection reset, the
    coordination service's heartbeat timeout)."""
    text = str(error)
    return jax.process_count() > 1 and any(sign in text for sign in (
        "Gloo", "Connection reset", "heartbeat", "UNAVAILABLE", "coordination service"))


@contextlib.contextmanager
def exit_on_lost_peers(what="the end of a chunk"):
    """An error that says a peer process is gone (from a collective, orbax's included) ends this process with
    `exit_for_lost_peers`; other errors pass."""
    try:
        yield
    except Exception as error:
        if peer_failure(error):
            exit_for_lost_peers(what, cause=str(error))
        raise


def exit_for_lost_peers(what, missing=None, cause=""):
    """One line naming the processes of the run that are gone (`missing`; else those the coordination service no
    longer counts live), then exit 1 at once: a normal exit would wait in JAX's shutdown barrier for the dead
    peers and end in a C++ stack dump."""
    me, count = PEERS["process_id"], PEERS["num_processes"]
    if missing is None:
        try:
            live = coordination_client().get_live_nodes(list(range(count)))
            missing = [p for p in range(count) if p not in live]
        except Exception:
            missing = []
    who = f"process(es) {', '.join(map(str, missing))}" if missing else "another process"
    cause = cause.strip().splitlines()[0][:200] if cause else ""
    print(f"error: process {me} of {count}: {who} did not reach {what}{f' ({cause})' if cause else ''}: they died "
          "or hang; restart every process with --resume <run dir> to go on from the last checkpoint",
          file=sys.stderr, flush=True)
    os._exit(1)


# ---------------------------------------------------------------------------------------------------------------
# Sweeps


# Short names --sweep accepts for fields.
ALIASES = {"lr": "learning_rate"}


def sweepable_fields(config) -> tuple[str, ...]:
    """The fields --sweep may vary: the script's own numeric fields (not booleans, not the shared flags). Whether
    the compiled program can take one value per agent of each is known only when it is traced (`check_swept`)."""
    from scanrl.harness.flags import Flags

    shared = {f.name for f in dataclasses.fields(Flags)}
    return tuple(f.name for f in dataclasses.fields(config) if f.name not in shared
                 and type(getattr(config, f.name)) in (int, float))


def sweep_points(algorithm, config) -> list[dict]:
    """The grid of --sweep values, one dict {field: value} per point (one empty point without --sweep); the last
    --sweep flag varies fastest. A bad spec raises ConfigError."""
    sweepable = sweepable_fields(config)
    fields, grids = [], []
    for spec in config.sweep:
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        name = ALIASES.get(name, name)
        if not sep or not name or not values.strip():
            raise ConfigError(f"--sweep {spec!r} is malformed; write field=v1,v2,... (e.g. --sweep lr=1e-3,3e-4)")
        if name in ("seed", "num_seeds"):
            raise ConfigError(f"--sweep {name}: seeds are vmapped already; use --seed and --num-seeds")
        if name not in {f.name for f in dataclasses.fields(config)}:
            raise ConfigError(f"--sweep {spec!r}: {algorithm.script} has no field {name!r}; sweepable: "
                              f"{', '.join(sweepable)}")
        if name not in sweepable:
            raise ConfigError(f"--sweep {name}: only the script's own numeric fields can be swept in one program "
                              f"({', '.join(sweepable)}); run one job per value")
        if name in fields:
            raise ConfigError(f"--sweep {name} is given twice; list all its values in one flag")
        try:
            parsed = [float(v) for v in values.split(",")]
        except ValueError:
            raise ConfigError(f"--sweep {spec!r}: the values must be numbers separated by commas, "
                              "e.g. --sweep lr=1e-3,3e-4") from None
        if isinstance(getattr(config, name), int):
            if not all(v.is_integer() for v in parsed):
                raise ConfigError(f"--sweep {spec!r}: {flag(name)} takes whole numbers")
            parsed = [int(v) for v in parsed]
            if any(abs(v) > MAX_COUNT for v in parsed):
                raise ConfigError(f"--sweep {spec!r}: {flag(name)} is an int32 inside the compiled program; keep its "
                                  f"values within +-{MAX_COUNT:,}")
        if len(set(parsed)) < len(parsed):
            raise ConfigError(f"--sweep {spec!r} repeats a value")
        fields.append(name)
        grids.append(parsed)
    return [dict(zip(fields, values, strict=True)) for values in itertools.product(*grids)]


def point_label(point: dict) -> str:
    """`learning_rate=0.001,ent_coef=0`: a sweep point's name, also its directory in the run directory."""
    return ",".join(f"{k}={v:g}" for k, v in point.items())


def sweep_overrides(algorithm, config, points) -> list[str]:
    """A note for each swept field whose own flag was set too (its value is not the default): the sweep's values
    replace it, which the run says rather than silently drop the flag."""
    if not config.sweep:
        return []
    defaults = algorithm.config(env=config.env)  # a default may depend on the env (dqn_tabular_q's learner)
    return [f"note: --sweep {name}={','.join(f'{p[name]:g}' for p in points)} overrides {flag(name)} "
            f"{getattr(config, name)}: each point trains with its own value" for name in points[0]
            if getattr(config, name) != getattr(defaults, name)]


def check_sweep_points(algorithm, config, points):
    """Every sweep value must be one the algorithm accepts on its own."""
    if not config.sweep:
        return
    for point in points:
        try:
            point_config = dataclasses.replace(config, sweep=(), **point)
            require_finite(point_config)
            algorithm.validate(point_config)
        except ConfigError as error:
            raise ConfigError(f"--sweep {point_label(point)}: {error}") from None


# ---------------------------------------------------------------------------------------------------------------
# Agents


def seed_keys(config) -> np.ndarray:
    """`jax.random.PRNGKey(seed + i)` for every seed of the run, (num_seeds, 2) uint32, in one vmapped call."""
    seeds = np.arange(config.num_seeds, dtype=np.uint32) + np.uint32(config.seed)
    return np.asarray(jax.vmap(jax.random.PRNGKey)(seeds))


def agent_layout(config, points):
    """-> (keys, swept {field: (agents,) int32 or float32}, names), one row per agent (point-major); numpy arrays,
    built in time linear in the agents, and the agents' names made only when asked for."""
    keys = np.tile(seed_keys(config), (len(points), 1))
    return keys, swept_values(config, points), AgentNames(config, points)


def swept_values(config, points) -> dict:
    """{field: one value per agent} of the swept fields (none without --sweep), point-major like the agents."""
    return {k: np.repeat(np.array([p[k] for p in points], dtype_of(config, k)), config.num_seeds)
            for k in points[0]}


def dtype_of(config, name):
    """A swept field's type inside the compiled program."""
    return np.int32 if isinstance(getattr(config, name), int) else np.float32


def agent_parts(algorithm, config):
    """`parts(swept) -> (config, init, update)` of one agent: without swept values the run's own, made once; with
    them (traced scalars inside a compiled program), `make_train_parts` of the config holding the agent's values,
    so whatever the script reads of a swept field, wherever it reads it, is that agent's value."""
    base = (config, *algorithm.make_train_parts(config))

    def parts(swept):
        if not swept:
            return base
        agent_config = dataclasses.replace(config, **swept)
        return (agent_config, *algorithm.make_train_parts(agent_config))

    return parts


def as_built_by(init, runner):
    """`runner` with the structure `init` gives it. With a sweep, a runner's static parts (an optimizer's functions,
    which close over the agent's swept values) belong to the program that traced them, so each program rebuilds
    them from the arrays."""
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    return jax.tree.unflatten(jax.tree.structure(jax.eval_shape(init, key)), jax.tree.leaves(runner))


def abstract_agents(parts, keys, swept):
    """Every agent's initial state as shapes (`parts`: `agent_parts`), what checkpoints restore into."""
    return jax.eval_shape(jax.vmap(lambda key, values: parts(values)[1](key)), keys, swept)


def probe_program(algorithm, config, name):
    """`program(value)`: one agent's init, two iterations of training and its evaluation with `value` as its swept
    `name`: what the iterations report and the trained policy's returns (`check_swept` and the contract trace it)."""
    from scanrl.harness.evaluation import make_evaluate

    parts, key = agent_parts(algorithm, config), jax.random.PRNGKey(0)

    def program(value):
        agent_config, init, update = parts({name: value})
        runner, metrics = jax.lax.scan(lambda runner, _: update(runner), init(key), None, 2)
        return metrics, make_evaluate(algorithm, agent_config)(key, runner)

    return program


def check_swept(algorithm, config, points):
    """ConfigError naming the field, before anything is compiled or written, for a swept field the compiled program
    cannot take one value per agent of (it sets a shape, a loop length or a Python branch), and for one whose value
    changes nothing the program computes: every point would train alike (e.g. a fork's new field that its code
    does not use, or a field of a part the config switches off)."""
    if not config.sweep:
        return
    for name in points[0]:
        try:
            reads = jax_private.reads_its_input(probe_program(algorithm, config, name),
                                                jax.ShapeDtypeStruct((), dtype_of(config, name)))
        except Exception as error:
            cause = (str(error).strip().splitlines() or [""])[0][:160]
            raise ConfigError(f"--sweep {name}: {algorithm.script} needs one value of {flag(name)} for the whole "
                              f"compiled program (it sets a shape, a loop length or a Python branch: "
                              f"{type(error).__name__}: {cause}); run one job per value") from None
        if not reads:
            raise ConfigError(f"--sweep {name}: the value of config.{name} changes nothing {algorithm.script} "
                              "computes with this config (no metric, no trained policy), so every point would train "
                              "alike; read it in the compiled program, or drop it from --sweep")


class AgentNames:
    """Agent i's name in messages: its seed ("6"), and in a sweep its point ("6 at learning_rate=0.001")."""

    def __init__(self, config, points):
        self.seed, self.num_seeds, self.points = config.seed, config.num_seeds, points

    def __len__(self):
        return self.num_seeds * len(self.points)

    def __getitem__(self, i):
        p, s = divmod(i, self.num_seeds)
        return str(self.seed + s) if len(self.points) == 1 else f"{self.seed + s} at {point_label(self.points[p])}"


def point_rows(tree, p, num_seeds):
    """Sweep point p's agents (rows p * num_seeds to (p + 1) * num_seeds - 1) of every array."""
    return jax.tree.map(lambda x: x[p * num_seeds:(p + 1) * num_seeds], tree)


# ---------------------------------------------------------------------------------------------------------------
# Devices and processes


def choose_devices(config, num_agents: int) -> list:
    """The devices the agents are split over: all of them (every process's), or --num-devices of them; without
    --num-devices on one process, the most that divide the agents. A split that does not divide is refused."""
    devices = jax.devices()
    what = f"{num_agents} agents (--num-seeds x sweep points)"
    if jax.process_count() > 1:
        if config.num_devices not in (None, len(devices)) or num_agents % len(devices):
            raise ConfigError(f"{what} must split evenly over all {len(devices)} devices of the "
                              f"{jax.process_count()} processes; use a multiple of {len(devices)} agents")
        return devices
    if config.num_devices is not None:
        if config.num_devices > len(devices) and config.resume is not None:
            raise ConfigError(f"--resume: the run trained on {config.num_devices} devices and this process sees "
                              f"{len(devices)}; resume it where it sees {config.num_devices} (CPU: XLA_FLAGS="
                              f"--xla_force_host_platform_device_count={config.num_devices}), or pass --num-devices "
                              f"{len(devices)} to go on with numbers an uninterrupted run would not give")
        if config.num_devices > len(devices):
            raise ConfigError(f"{flag('num_devices')} {config.num_devices}: this process sees {len(devices)} "
                              "device(s)")
        if num_agents % config.num_devices:
            raise ConfigError(f"{what} do not divide over --num-devices {config.num_devices}; use a divisor of "
                              f"{num_agents}")
        return devices[:config.num_devices]
    count = max(d for d in range(1, len(devices) + 1) if num_agents % d == 0)
    if 1 < num_agents and count < len(devices):  # one agent on one device needs no note
        print(f"note: {what} do not divide over {len(devices)} devices; training on {count} "
              "(--num-devices chooses)")
    return devices[:count]


def over_agents(fn, mesh, in_axes):
    """jit(vmap(fn)) with the agent axis split over the mesh: each device runs the vmapped fn on its own agents
    (shard_map), with no communication between devices; arguments with in_axes None are replicated."""
    specs = tuple(PartitionSpec("agents") if a == 0 else PartitionSpec() for a in in_axes)
    return jax.jit(jax.shard_map(jax.vmap(fn, in_axes=in_axes), mesh=mesh, in_specs=specs,
                                 out_specs=PartitionSpec("agents"), check_vma=False))


def to_agents(tree, sharding):
    """Numpy arrays holding every agent's rows -> jax Arrays split over the agents' devices (each process places
    only the rows of its own devices)."""
    return jax.tree.map(lambda x: jax.make_array_from_callback(x.shape, sharding, lambda i: x[i]), tree)


def local_agents(sharding, num_agents) -> list[int]:
    """The agents this process trains."""
    return [i for index in sharding.addressable_devices_indices_map((num_agents,)).values()
            for i in range(num_agents)[index[0]]]


def init_agents(init, sharding, keys, swept):
    """jit(vmap(init)) for each of this process's devices' agents, assembled into arrays split over the agents.
    Every device's agents are initialised on the first device, one device after the other, then moved: one
    compile instead of one per device, and never two host devices at once (XLA:CPU, jax 0.10.2, deadlocked
    running the orthogonal initialiser's QR decompositions on two host devices at once)."""
    jitted, shards = jax.jit(jax.vmap(init)), []
    placement = sharding.addressable_devices_indices_map(keys.shape[:1])
    first = next(iter(placement))
    for device, index in placement.items():
        local = jax.device_put((keys[index], {k: v[index] for k, v in swept.items()}), first)
        shards.append(jax.device_put(jax.block_until_ready(jitted(*local)), device))
    return jax.tree.map(lambda *xs: jax.make_array_from_single_device_arrays(
        (len(keys),) + xs[0].shape[1:], sharding, list(xs)), *shards)


def gather(tree, what="the end of a chunk"):
    """Every agent's values as numpy on this host; with several processes a collective that all of them join."""
    if jax.process_count() > 1:
        with peers_within_timeout(what):
            return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


def broadcast(value: int) -> int:
    """Process 0's value of an integer, on every process."""
    if jax.process_count() == 1:
        return value
    with peers_within_timeout("the start of the run"):
        return int(multihost_utils.broadcast_one_to_all(np.int32(value)))


def any_process(value: int) -> int:
    """The largest of an integer over all processes (e.g. a signal any of them received)."""
    if jax.process_count() == 1:
        return value
    with peers_within_timeout("a chunk's checkpoint"):
        return int(np.max(multihost_utils.process_allgather(np.int32(value))))


# ---------------------------------------------------------------------------------------------------------------
# Memory


def available_memory(device) -> tuple[int | None, str]:
    """-> (bytes a run can still allocate on `device`, where that is): an accelerator's free memory, or for CPU
    devices the host's available memory (within a cgroup's limit); None where it cannot be told."""
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        return stats["bytes_limit"] - stats.get("bytes_in_use", 0), f"{device.platform} device {device.id}"
    free = None
    try:
        with open("/proc/meminfo") as f:
            free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    left = cgroup_memory_left()  # a container's limit may be far below the host's memory
    if left is not None:
        free = left if free is None else min(free, left)
    return free, "this host"


def cgroup_memory_left(root="/sys/fs/cgroup") -> int | None:
    """Bytes this process's cgroup may still allocate: its limit less its usage, from cgroup v2 (memory.max,
    memory.current) or v1 (memory/memory.limit_in_bytes, memory.usage_in_bytes); None without a limit (v2's "max",
    v1's page-rounded 2**63) or a cgroup file to read."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            with open(os.path.join(root, limit_file)) as f, open(os.path.join(root, usage_file)) as g:
                limit, usage = f.read().strip(), g.read().strip()
            if limit == "max" or int(limit) >= 2**62:
                return None
            return max(0, int(limit) - int(usage))
        except (OSError, ValueError):
            continue
    return None


def check_agent_memory(algorithm, config, num_agents):
    """ConfigError before anything is made per agent (keys, swept values, states, the compiled program's check):
    too many agents for an int32 count, or for their state alone in the memory available: one agent's state (its
    shapes, traced; nothing allocated) twice (training and a checkpoint's host copy) and its metrics history, times
    this process's agents. The full check (`check_memory`) follows from the compiled programs."""
    require_count(num_agents, "agents (--num-seeds x sweep points)", flag("num_seeds"))
    _, init, _ = agent_parts(algorithm, config)({})
    one = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(jax.eval_shape(
        init, jax.ShapeDtypeStruct((2,), jnp.uint32))))
    history = algorithm.num_iterations(config) * len(algorithm.metric_keys_of(config)) * 4
    local = -(-num_agents // jax.process_count())
    need = local * (2 * one + history + 8)
    free, where = available_memory(jax.local_devices()[0])
    if free is not None and need > free:
        raise ConfigError(f"the run needs about {need / 1e9:.1f} GB of memory ({local * one / 1e9:.1f} GB of it the "
                          f"state of its {local:,} agents) and {where} has {free / 1e9:.1f} GB available: lower "
                          f"{size_flags(algorithm, config, history > one)}")


def check_memory(config, algorithm, programs, state_bytes, host_bytes, evaluation=None):
    """ConfigError, before anything is allocated, when the run cannot fit: each compiled training program's
    arguments, outputs and temporaries (XLA's `memory_analysis`, per device), plus one more copy of the agents'
    state (a checkpoint copies it to the host) and `host_bytes` (the metrics history), against the memory
    available. Host devices share the host's memory, so on CPU their needs add up. `evaluation`: the compiled final
    evaluation (--eval-episodes envs per agent at once), which runs after training and is counted the same way."""
    devices = jax.local_devices()
    needs = []
    for program in [*programs, *([evaluation] if evaluation is not None else [])]:
        stats = program.memory_analysis()
        if stats is None:
            return
        needs.append(stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
                     + stats.temp_size_in_bytes)
    per_device = max(needs)
    on_cpu = devices[0].platform == "cpu"
    need = per_device * (len(devices) if on_cpu else 1) + (state_bytes + host_bytes if on_cpu else 0)
    free, where = available_memory(devices[0])
    if free is None or need <= free:
        return
    lower = size_flags(algorithm, config, host_bytes > state_bytes)
    if evaluation is not None and needs[-1] > max(needs[:-1], default=0):
        lower = (f"{flag('eval_episodes')} (the final evaluation plays {config.eval_episodes:,} episodes per agent at "
                 f"once), or {lower}")
    raise ConfigError(f"the run needs about {need / 1e9:.1f} GB of memory ({state_bytes / 1e9:.1f} GB of it the "
                      f"state of its agents) and {where} has {free / 1e9:.1f} GB available: lower {lower}")


def size_flags(algorithm, config, history=False) -> str:
    """The flags that lower the memory a run needs: "--num-seeds, --buffer-size or --hidden-size"."""
    flags = [flag("num_seeds")] + ([flag("sweep") + " values"] if config.sweep else [])
    own = [f.name for f in dataclasses.fields(algorithm.config) if f.name not in Flags.__dataclass_fields__]
    flags += [flag(name) for name in own if re.search(r"size|num_envs|num_steps", name)]
    flags += [flag("total_timesteps")] if history else []
    return f"{', '.join(flags[:-1])} or {flags[-1]}" if len(flags) > 1 else flags[0]
