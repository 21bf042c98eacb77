"""Short runs of the scripts on each optional suite (slow: each run compiles its suite's step; its own file, so
pytest-xdist runs it beside tests/test_suites.py)."""

import numpy as np
import pytest
from conftest import read_run

from scanrl.envs.suite import installed

# Found, not imported (the runs are subprocesses): every pytest-xdist worker collects this file, and importing
# Playground takes about 3 s.
for package, suite in (("craftax", "craftax"), ("xminigrid", "xminigrid"), ("mujoco_playground", "playground")):
    if not installed(package):
        pytest.skip(f"pip install -r requirements-{suite}.txt", allow_module_level=True)


# 2 seeds: split over the 2 devices of a 2-core machine, as a user's run is (a MuJoCo env state's zero-size leaves
# came back from the evaluation's first piece replicated, not split, and the next piece refused them: one device
# never showed it).
SHORT = ("--total-timesteps", "256", "--num-envs", "4", "--eval-episodes", "2", "--num-seeds", "2")
SCRIPT_FLAGS = {
    "ppo.py": ("--log-every", "1", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"),
    "ppo_rnn.py": ("--log-every", "1", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"),
    "dqn_tabular_q.py": ("--log-every", "1", "--agent", "dqn", "--num-steps", "16", "--train-frequency", "4",
                         "--target-network-frequency", "64", "--learning-starts", "64", "--batch-size", "8",
                         "--buffer-size", "256"),
}
# Each suite with scripts of different kinds (the suites share one adapter base, scanrl/envs/suite.py): a recurrent
# policy and a replay buffer on MiniGrid, a Gaussian policy on Playground, a feed-forward policy on Craftax, whose
# step compiles for minutes inside a script on a 2-core CPU. A deterministic actor on that base: td3.py on Brax
# (tests/test_brax.py).
RUNS = [("MiniGrid-Empty-5x5", "ppo_rnn.py"), ("MiniGrid-Empty-5x5", "dqn_tabular_q.py"),
        ("playground/CartpoleBalance", "ppo.py"), ("Craftax-Classic-Symbolic-v1", "ppo.py")]


# Compiling a suite's step dominates its run, at the tests' compile settings (conftest.py) too: Craftax's compiled in
# 27 s at level 0 against 45 s at the default; Playground's whole ppo.py run took 76 s at the tests' settings against
# 118 s as a user's run compiles (its evaluation's 1,000-step episodes run in slower code, but not 40 s slower).


@pytest.mark.slow
@pytest.mark.parametrize("env_id,script", RUNS)
def test_each_script_trains_on_each_suite(env_id, script, run_script, tmp_path):
    result = run_script(script, "--env", env_id, *SHORT, *SCRIPT_FLAGS[script])
    assert result.returncode == 0, result.stderr[-2000:]
    _, summary = read_run(tmp_path / "runs")
    assert summary["env"] == env_id and np.isfinite(summary["eval_return"]).all()
