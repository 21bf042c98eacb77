"""The test command stops when asked: Ctrl-C (SIGINT to pytest's process group, as a terminal sends it) or SIGTERM
(to pytest alone, as a CI runner or `kill` sends it) ends pytest, its xdist workers and the processes their tests
started within a few seconds (tests/conftest.py's stop_everything)."""

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = "SCANRL_INTERRUPT_PROBE"  # set only by the test below: where the probes write their pids

# A stand-in for a training subprocess at its slowest to stop: it ignores SIGINT and SIGTERM.
STUBBORN = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)")


@pytest.mark.skipif(PROBE not in os.environ, reason="a probe for the test below")
@pytest.mark.parametrize("which", [0, 1])
def test_probe_waits_with_a_subprocess(which):
    child = subprocess.Popen([sys.executable, "-c", STUBBORN])
    with open(os.path.join(os.environ[PROBE], f"probe{which}"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a worker busy in a training chunk does not stop at once either
    child.wait()


def alive(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, not yet reaped
    except OSError:
        return False


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupt_stops_pytest_its_workers_and_their_processes(tmp_path, how):
    env = {**os.environ, PROBE: str(tmp_path)}
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [sys.executable, "-m", "pytest", "tests/test_suite_interrupt.py", "-k", "probe", "-n", "2",
            "--dist", "load", "-p", "no:cacheprovider", "-q"]
    # Its own session, so the Ctrl-C below (to the process group) reaches only what it started.
    pytest_run = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("probe*"))) < 2:
            assert pytest_run.poll() is None and time.monotonic() < deadline, pytest_run.communicate()[0]
            time.sleep(0.2)
        time.sleep(0.5)  # the probes' own SIGINT handlers are in place
        pids = [int(p) for f in tmp_path.glob("probe*") for p in f.read_text().split()]
        assert all(alive(p) for p in pids)
        start = time.monotonic()
        if how == "ctrl-c":
            os.killpg(pytest_run.pid, signal.SIGINT)
        else:
            pytest_run.send_signal(signal.SIGTERM)
        output, _ = pytest_run.communicate(timeout=10)
        took = time.monotonic() - start
        expected = signal.SIGINT if how == "ctrl-c" else signal.SIGTERM
        assert pytest_run.returncode == 128 + expected, output
        assert f"{expected.name}: pytest stopped" in output
        while any(alive(p) for p in pids) and time.monotonic() - start < 5:
            time.sleep(0.1)
        assert not [p for p in pids if alive(p)], "workers or their subprocesses outlived pytest"
        assert took < 5, f"pytest took {took:.1f} s to stop"
    finally:
        if pytest_run.poll() is None:
            os.killpg(pytest_run.pid, signal.SIGKILL)
        for f in tmp_path.glob("probe*"):
            for p in f.read_text().split():
                if alive(int(p)):
                    os.kill(int(p), signal.SIGKILL)
