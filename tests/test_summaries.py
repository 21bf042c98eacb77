"""The end of a run (`record.RunRecord.finish`): every output a run writes, and the final returns."""

import json

import numpy as np
import pytest
from cases import NAN, checkpoint_steps, read_csv, sparse_metrics
from conftest import read_run

from scanrl.harness import record


@pytest.mark.slow
def test_run_writes_every_output(run_script, tmp_path):
    result = run_script("ppo.py", "--num-seeds", "2", "--total-timesteps", "2048", "--log-every", "1",
                        "--run-name", "small", "--track")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "ppo.py: loading JAX and the environments ..."  # before the imports
    assert "compiled in" in result.stdout and "iteration      4  env_steps       2048" in result.stdout
    run_dir, summary = read_run(tmp_path / "runs")
    assert run_dir.name == "small"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"] == "ppo" and config["num_seeds"] == 2 and config["learning_rate"] == 2.5e-4
    assert set(summary) == {"algo", "env", "num_seeds", "seeds", "total_timesteps", "env_steps", "compile_s",
                            "train_s", "sps", "final_return", "eval_return", "resumed_after_iteration", "num_devices",
                            "num_processes", "sweep_point", "eval_return_iqm", "final_return_iqm"}
    iqm = summary["eval_return_iqm"]  # 2 seeds: the IQM is their mean, the interval spans the resampled means
    assert iqm["iqm"] == pytest.approx(np.mean(summary["eval_return"])) and iqm["n"] == 2
    assert iqm["ci"] == pytest.approx(sorted(summary["eval_return"]))
    assert summary["algo"] == "ppo" and summary["env_steps"] == 2048 and summary["seeds"] == [0, 1]
    assert summary["resumed_after_iteration"] is None and summary["sweep_point"] is None
    assert summary["sps"] == pytest.approx(2048 * 2 / summary["train_s"])
    assert len(summary["final_return"]) == 2 and all(r is not None and r > 0 for r in summary["eval_return"])
    rows = read_csv(run_dir / "metrics.csv")
    assert rows[0][:3] == ["seed", "iteration", "env_steps"] and rows[0][-1] == "nonfinite"
    assert [row[:3] for row in rows[1:3]] == [["0", "1", "512"], ["1", "1", "512"]] and len(rows) == 1 + 2 * 4
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
    assert checkpoint_steps(run_dir) == [4]
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and any(offline[0].glob("*.wandb"))


def test_final_return_falls_back_to_the_last_finished_episode():
    metrics = sparse_metrics(num_seeds=2, iterations=40, every=30)  # episodes end at rows 1, 31 and 2, 32
    metrics["episode_return"][1, 32] = NAN
    metrics["episodes"][1, 32] = 0
    final, fallback = record.final_returns(metrics, with_fallback=True)
    np.testing.assert_array_equal(fallback, [True, True])  # the last 4 rows hold no episode
    np.testing.assert_array_equal(final, [310.0, 20.0])
