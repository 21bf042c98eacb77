"""benchmarks/bench_scaling.py runs (tiny) on 1 and 2 devices and writes its table, JSON and chart."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_scaling_benchmark_writes_table_and_chart(tmp_path):
    out = tmp_path / "scaling"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_scaling.py"), "--seeds", "1", "2",
                             "--steps-per-row", "1024", "--repeats", "1", "--devices", "1", "2", "--out", str(out)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "scaling.json").read_text())["rows"]
    assert [(r["devices"], r["seeds"]) for r in rows] == [(1, 1), (1, 2), (2, 2)]  # 1 seed cannot split over 2
    assert all(r["sps"] > 0 and r["steps_per_agent"] % 512 == 0 for r in rows)
    table = (tmp_path / "scaling.md").read_text()
    assert "| 1 |" in table and "| - | - |" in table and "| 2 |" in table
    assert (tmp_path / "scaling.png").stat().st_size > 1000
