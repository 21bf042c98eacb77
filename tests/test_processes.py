"""scanrl/harness/processes.py: several processes: joined before anything makes a JAX backend, and
a process whose peers never join exits 1 in one line. (A 2-process run is compared with one-device runs in
test_agents.py, where those are made.)"""

import os
import socket
import subprocess
import sys

import pytest
from conftest import ROOT, run_warm


@pytest.mark.slow
def test_importing_the_harness_makes_no_backend_so_processes_can_start_first():
    """A multi-process run must call jax.distributed.initialize before any JAX backend exists; scripts import the
    harness, call start_processes (through prepare_jax), then import envs (gymnax makes a backend at import).
    Importing the harness leaves XLA_FLAGS alone."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    code = ("import os\n"
            "before = os.environ.get('XLA_FLAGS')\n"
            "from scanrl import harness\n"
            "from jax._src import xla_bridge\n"
            "assert not xla_bridge.backends_are_initialized()\n"
            "assert os.environ.get('XLA_FLAGS') == before\n"
            f"harness.start_processes(['--coordinator-address', 'localhost:{port}', '--num-processes', '1'])\n"
            "import jax\nfrom scanrl import envs\n"
            "print(jax.process_count(), jax.distributed.is_initialized())\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["1", "True"]


@pytest.mark.slow
@pytest.mark.parametrize("process_id", [0, 1])
def test_a_process_whose_peers_never_join_exits_1_with_one_line(process_id, tmp_path):
    """Alone, process 0 waits for the others and process 1 for the coordinator; after --distributed-timeout each
    exits 1 with one line (JAX alone would wait 300 s, then abort with a C++ stack dump)."""
    import time

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    start = time.perf_counter()
    result = run_warm([sys.executable, str(ROOT / "ppo.py"), "--coordinator-address", f"localhost:{port}",
                       "--num-processes", "2", "--process-id", str(process_id), "--distributed-timeout", "5",
                       "--out-dir", str(tmp_path / "runs")], tmp_path, env, 120)
    assert result.returncode == 1 and time.perf_counter() - start < 60
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: process {process_id} of 2: "), lines
    assert "did not join within 5 s (--distributed-timeout)" in lines[0]
    assert not (tmp_path / "runs").exists()
