"""scanrl/harness/tracking.py: wandb never stops training (a failure, or a server that never
answers, is one warning), and a sweep logs one wandb run per point in one group."""

import socket

import pytest
from cases import tiny_flags
from conftest import read_run


@pytest.mark.slow
def test_wandb_failure_does_not_stop_training(tmp_path, capsys, monkeypatch):
    import ppo

    monkeypatch.setenv("WANDB_MODE", "not-a-mode")
    ppo.main(ppo.Config(track=True, total_timesteps=1024, out_dir=str(tmp_path / "runs")))
    assert "warning: wandb could not start" in capsys.readouterr().err
    read_run(tmp_path / "runs")


@pytest.mark.slow
def test_wandb_without_its_server_waits_once_and_briefly(run_script, tmp_path):
    """A server that accepts connections and never answers (a network that hangs): wandb gives up after its 10 s
    start timeout, once for a 2-point sweep, and the run trains with its local files."""
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)  # never accepted: every request hangs
    try:
        start = time.perf_counter()
        # the next test's run (its compiled program comes from the session's compile cache)
        result = run_script("ppo.py", *tiny_flags("ppo"), "--track", "--sweep", "lr=1e-3,3e-4", timeout=300,
                            env_overrides={"WANDB_MODE": "online", "WANDB_API_KEY": "0" * 40,
                                           "WANDB_BASE_URL": f"http://127.0.0.1:{server.getsockname()[1]}"})
        elapsed = time.perf_counter() - start
    finally:
        server.close()
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("warning: wandb could not start") == 1, result.stderr[-3000:]
    _, summary = read_run(tmp_path / "runs")
    # Beside compiling and training (which slow down on a busy machine): wandb's 10 s, imports and the summaries.
    # With its own default, wandb would wait 90 s.
    waited = elapsed - summary["compile_s"] - summary["train_s"]
    assert waited < 60, (elapsed, summary["compile_s"], summary["train_s"])


@pytest.mark.slow
def test_sweep_logs_one_wandb_run_per_point_in_one_group(run_script, tmp_path):
    result = run_script("ppo.py", *tiny_flags("ppo", run_name="sweep"), "--sweep", "lr=1e-3,3e-4", "--track")
    assert result.returncode == 0, result.stderr[-3000:]
    offline = sorted((tmp_path / "runs" / "sweep" / "wandb").glob("offline-run-*"))
    assert len(offline) == 2
    records = [next(d.glob("*.wandb")).read_bytes() for d in offline]
    assert all(b"sweep/learning_rate=" in r for r in records)  # run names; the group is the run name
    assert sum(b"sweep/learning_rate=0.001" in r for r in records) == 1
