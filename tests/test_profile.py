"""`--profile` on every script writes a JAX profiler trace (Perfetto JSON) into the run directory."""

import gzip
import json

import pytest

SHORT_RUNS = {
    "ppo.py": ["--total-timesteps", "1024"],
    "reinforce.py": ["--total-timesteps", "1024"],
    "td3.py": ["--total-timesteps", "1200", "--learning-starts", "800", "--log-every", "400", "--hidden-size", "32",
               "--eval-episodes", "2"],
    "dqn_tabular_q.py": ["--total-timesteps", "2000"],
}


@pytest.mark.parametrize("script", sorted(SHORT_RUNS))
def test_profile_writes_a_trace_of_the_training_run(run_script, tmp_path, script):
    result = run_script(script, *SHORT_RUNS[script], "--profile", "--run-name", "profiled")
    assert result.returncode == 0, result.stderr
    traces = list((tmp_path / "runs" / "profiled" / "profile").rglob("*.trace.json.gz"))
    assert len(traces) == 1, result.stdout
    events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
    # The compiled training program ran under the profiler: XLA's executor shows up in the trace.
    assert any("ThunkExecutor" in str(event.get("name", "")) for event in events)
    assert "profiler trace in" in result.stdout
