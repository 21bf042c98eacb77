"""The agents of a run (sweep points x seeds) over the devices of every process: the devices, a program over them
(shard_map of a vmap), arrays split over them, and where the run lives: one process, or several (`placement`)."""

import contextlib

import jax
from jax.sharding import PartitionSpec

from scanrl.harness.flags import ConfigError, flag


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
            raise ConfigError(f"{flag('num_devices')} {config.num_devices}: this process sees {len(devices)} device(s)")
        if num_agents % config.num_devices:
            raise ConfigError(f"{what} do not divide over --num-devices {config.num_devices}; use a divisor of "
                              f"{num_agents}")
        return devices[:config.num_devices]
    count = max(d for d in range(1, len(devices) + 1) if num_agents % d == 0)
    if 1 < num_agents and count < len(devices):  # one agent on one device needs no note
        print(f"note: {what} do not divide over {len(devices)} devices; running on {count} (--num-devices chooses)")
    return devices[:count]


def over_agents(fn, mesh, in_axes):
    """jit(vmap(fn)), the agent axis split over the mesh (shard_map, no communication); in_axes None: replicated."""
    specs = tuple(PartitionSpec("agents") if a == 0 else PartitionSpec() for a in in_axes)
    return jax.jit(jax.shard_map(jax.vmap(fn, in_axes=in_axes), mesh=mesh, in_specs=specs,
                                 out_specs=PartitionSpec("agents"), check_vma=False))


def to_agents(tree, sharding):
    """Numpy arrays of every agent's rows -> jax Arrays split over the devices (each process places its own rows)."""
    return jax.tree.map(lambda x: jax.make_array_from_callback(x.shape, sharding, lambda i: x[i]), tree)


def local_agents(sharding, num_agents) -> list[int]:
    """The agents this process trains."""
    return [i for index in sharding.addressable_devices_indices_map((num_agents,)).values()
            for i in range(num_agents)[index[0]]]


class OneProcess:
    """Where a run of one process lives (`processes.ManyProcesses`: several's): `guard(what)` around a collective and
    `lost_peers(what)` around a stretch of the run (a lost peer: one line), `gather(tree, what)` every agent's values as
    numpy on this host, `broadcast(value)` process 0's integer, `any(value)` an integer's largest over the processes
    (a signal any of them received); on one process, each is the value itself."""

    guard = lost_peers = staticmethod(lambda what="": contextlib.nullcontext())
    gather = staticmethod(lambda tree, what="": jax.device_get(tree))
    broadcast = any = staticmethod(lambda value: value)


def placement():
    """The run's processes: `OneProcess`, or `processes.ManyProcesses` (imported only then)."""
    if jax.process_count() == 1:
        return OneProcess()
    from scanrl.harness.processes import ManyProcesses
    return ManyProcesses()
