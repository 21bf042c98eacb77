"""A run of several processes (--num-processes > 1): joining it, each process's heartbeat, and a watchdog around
every collective, so that a peer that died or hangs ends the others with one line instead of a C++ stack dump.
Imported only where more than one process runs (`harness.agents` reaches it through `collective`)."""

import argparse
import contextlib
import itertools
import os
import sys
import threading
import time

import jax

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
