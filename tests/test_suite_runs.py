"""A short run of each script that accepts a suite's action space, on each optional suite (slow: each run compiles
its suite's step; its own file, so pytest-xdist runs it beside tests/test_suites.py)."""

import numpy as np
import pytest
from conftest import read_run

pytest.importorskip("craftax", reason="pip install -r requirements-craftax.txt")
pytest.importorskip("xminigrid", reason="pip install -r requirements-xminigrid.txt")
pytest.importorskip("mujoco_playground", reason="pip install -r requirements-playground.txt")


SHORT = ("--total-timesteps", "256", "--num-envs", "4", "--eval-episodes", "2")
SCRIPT_FLAGS = {
    "ppo.py": ("--log-every", "1", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"),
    "ppo_rnn.py": ("--log-every", "1", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"),
    "pqn.py": ("--log-every", "1", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"),
    "dqn_tabular_q.py": ("--log-every", "1", "--agent", "dqn", "--num-steps", "16", "--train-frequency", "4",
                         "--target-network-frequency", "64", "--learning-starts", "64", "--batch-size", "8",
                         "--buffer-size", "256"),
    "reinforce.py": ("--log-every", "1"),
    "td3.py": ("--learning-starts", "64", "--batch-size", "8", "--buffer-size", "256", "--log-every", "64"),
}
DISCRETE = ("ppo.py", "ppo_rnn.py", "pqn.py", "dqn_tabular_q.py", "reinforce.py")
CONTINUOUS = ("ppo.py", "ppo_rnn.py", "reinforce.py", "td3.py")
# Craftax's step compiles for minutes inside a script on a 2-core CPU: ppo.py alone runs there (the other discrete
# scripts run on MiniGrid, through the same adapter base).
RUNS = [("MiniGrid-Empty-5x5", s) for s in DISCRETE] + [("playground/CartpoleBalance", s) for s in CONTINUOUS] + [
    ("Craftax-Classic-Symbolic-v1", "ppo.py")]


@pytest.mark.slow
@pytest.mark.parametrize("env_id,script", RUNS)
def test_each_script_trains_on_each_suite(env_id, script, run_script, tmp_path):
    result = run_script(script, "--env", env_id, *SHORT, *SCRIPT_FLAGS[script])
    assert result.returncode == 0, result.stderr[-2000:]
    _, summary = read_run(tmp_path / "runs")
    assert summary["env"] == env_id and np.isfinite(summary["eval_return"]).all()
