"""A run of several processes (--num-processes > 1): joining it, each process's heartbeat, and a watchdog around
every collective, so that a peer that died or hangs ends the others with one line instead of a C++ stack dump.
Imported only where more than one process runs (`agents.placement`): such a run lives in `ManyProcesses`."""

import contextlib
import itertools
import os
import sys
import threading
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from scanrl.harness.flags import Flags, early_flags
from scanrl.harness.jax_private import coordination_client

# Set by start_processes; "timeout" (--distributed-timeout) is how long a collective waits for its peers.
PEERS = {"timeout": None, "process_id": 0, "num_processes": 1}
_collectives = itertools.count()


def _exit_1(line):
    """Prints `line` and exits 1 at once: a normal exit would wait for dead peers in JAX's shutdown barrier."""
    print(line, file=sys.stderr, flush=True)
    os._exit(1)


def start_processes(argv=None):
    """Joins a multi-process run (--coordinator-address, --num-processes, --process-id) through
    `jax.distributed.initialize`, before anything makes a JAX backend (gymnax makes one at import). Bad flags are
    left to the config check, which names them. Peers that do not join within --distributed-timeout end this process
    with one line, before JAX's own timeout (300 s) ends it with a C++ stack dump."""
    flags = early_flags(sys.argv[1:] if argv is None else argv)
    address = flags.get("coordinator_address")
    try:
        num_processes, process_id, timeout = (int(flags.get(k, getattr(Flags, k)))
                                              for k in ("num_processes", "process_id", "distributed_timeout"))
    except ValueError:
        return
    if not address or not 0 <= process_id < num_processes or timeout <= 0:
        return
    waiting_for = (f"the other {num_processes - 1} process(es)" if process_id == 0
                   else f"process 0 (the coordinator) at {address}, or the others")
    watchdog = threading.Timer(timeout, _exit_1, [
        f"error: process {process_id} of {num_processes}: {waiting_for} did not join within {timeout} s "
        "(--distributed-timeout); start every process with the same flags and its own --process-id"])
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(address, num_processes, process_id, initialization_timeout=timeout + 30)
    finally:
        watchdog.cancel()
    PEERS.update(timeout=timeout, process_id=process_id, num_processes=num_processes)
    threading.Thread(target=_beat, args=(process_id, min(5.0, timeout / 4)), daemon=True).start()


def _beat(process_id, every):
    """This process's heartbeat: a counter in the coordination service's store, raised every `every` s."""
    client = coordination_client()
    for beat in itertools.count():
        try:
            client.key_value_set(f"scanrl/alive/{process_id}", str(beat), allow_overwrite=True)
        except Exception:
            return
        time.sleep(every)


def _read(client, key):
    """A key's value in the coordination service's key-value store; None where it is not there."""
    with contextlib.suppress(Exception):
        return client.key_value_try_get(key)
    return None


@contextlib.contextmanager
def peers_within_timeout(what):
    """Around this process's part of a collective (`what`): peers whose heartbeat stood still, or that have not reached
    it, for --distributed-timeout seconds died or hang, and this process exits 1 naming them; once all arrived (marks in
    the coordination service's store), it waits as long as the collective takes."""
    if PEERS["timeout"] is None:
        yield
        return
    client, number = coordination_client(), next(_collectives)
    me, timeout, count = PEERS["process_id"], PEERS["timeout"], PEERS["num_processes"]

    def watch():
        beats, since, start = {}, {}, time.monotonic()
        while not done.wait(min(5.0, timeout / 4)):
            now = time.monotonic()
            if _read(client, f"scanrl/{number}/{me}") is None:  # not even its own mark: the store went with process 0
                exit_for_lost_peers(what, [0], "the coordinator does not answer")
            for p in range(count):
                if (beat := _read(client, f"scanrl/alive/{p}")) != beats.get(p):
                    beats[p], since[p] = beat, now
            dead = [p for p in range(count) if now - since[p] >= timeout]
            late = [p for p in range(count) if _read(client, f"scanrl/{number}/{p}") is None] \
                if now - start >= timeout else []
            if dead or late:
                exit_for_lost_peers(what, dead or late, f"{'no heartbeat' if dead else 'not there'} for {timeout} s, "
                                                        "--distributed-timeout")

    with contextlib.suppress(Exception):
        client.key_value_set(f"scanrl/{number}/{me}", "1")
    done = threading.Event()
    threading.Thread(target=watch, daemon=True).start()
    try:
        yield
    finally:
        done.set()


@contextlib.contextmanager
def exit_on_lost_peers(what="the end of a chunk"):
    """An error that says a peer process is gone (a collective's connection reset, the coordination service's
    heartbeat timeout; orbax's included) ends this process with `exit_for_lost_peers`; other errors pass."""
    try:
        yield
    except Exception as error:
        if any(sign in str(error) for sign in ("Gloo", "Connection reset", "heartbeat", "UNAVAILABLE",
                                               "coordination service")):
            exit_for_lost_peers(what, cause=str(error))
        raise


def exit_for_lost_peers(what, missing=None, cause=""):
    """Exits 1 with one line naming the processes that are gone (`missing`; else those whose heartbeat stood still over
    two periods: JAX's `get_live_nodes` waits like a barrier, then aborts the process after 100 s)."""
    me, count = PEERS["process_id"], PEERS["num_processes"]
    if missing is None:
        client, every = coordination_client(), min(5.0, (PEERS["timeout"] or 20) / 4)

        def beats():  # the heartbeats the store holds
            return {p: beat for p in range(count) if (beat := _read(client, f"scanrl/alive/{p}")) is not None}

        before = beats()
        time.sleep(2 * every)
        after = beats()
        missing = ([p for p in range(count) if p != me and after.get(p) == before.get(p)] if after
                   else [p for p in (0,) if p != me])  # no store: it went with process 0
    who = f"process(es) {', '.join(map(str, missing))}" if missing else "another process"
    cause = f" ({cause.strip().splitlines()[0][:200]})" if cause.strip() else ""
    _exit_1(f"error: process {me} of {count}: {who} did not reach {what}{cause}: they died or hang; restart every "
            "process with --resume <run dir> to go on from the last checkpoint")


class ManyProcesses:
    """Where a run of several processes lives (`agents.OneProcess` says what each method does): each collective is
    watched (`peers_within_timeout`), and a lost peer ends this process with one line."""

    guard, lost_peers = staticmethod(peers_within_timeout), staticmethod(exit_on_lost_peers)

    def gather(self, tree, what="the end of a chunk"):
        with peers_within_timeout(what):
            return multihost_utils.process_allgather(tree, tiled=True)

    def broadcast(self, value: int) -> int:
        with peers_within_timeout("the start of the run"):
            return int(multihost_utils.broadcast_one_to_all(np.int32(value)))

    def any(self, value: int) -> int:
        with peers_within_timeout("a chunk's checkpoint"):
            return int(np.max(multihost_utils.process_allgather(np.int32(value))))
