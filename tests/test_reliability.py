"""The harness against hostile cases (issue 29), at the level of its functions: a run directory's owner, files
written without following planted links, --resume's config against its checkpoint, the memory check's limits, the
compile cache's entries. The runs these need are in tests/test_harness.py."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT

from harness import ConfigError
from harness.files import LOCK_NAME, RunLock

HOLD_LOCK = ("import sys, time; sys.path.insert(0, sys.argv[2]); from harness.files import RunLock; "
             "RunLock(sys.argv[1], '--resume'); print('locked', flush=True); time.sleep(600)")


def test_a_run_directory_has_one_owner_and_a_dead_one_holds_it_no_more(tmp_path):
    """A second owner (another process, or this one) is refused naming the first's pid; the lock of a process
    killed with -9 is gone with it; a released lock leaves no file behind."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path), str(ROOT)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=rf"^--resume: another process \(pid {holder.pid}\) is training in "):
            RunLock(str(tmp_path), "--resume")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = RunLock(str(tmp_path), "--resume")
    assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
    with pytest.raises(ConfigError, match=rf"pid {os.getpid()}"):
        RunLock(str(tmp_path), "--resume")
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()
    RunLock(str(tmp_path), "--resume").release()
