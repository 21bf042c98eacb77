"""Helpers the harness's tests share (not a test file; tests/ is on sys.path): the cases, every script (and
dqn_tabular_q's learners) with a tiny run and what plants a NaN in it; each case's sweepable field; the finished tiny
runs many tests read or copy (`finished_runs`, a fixture conftest.py registers); and what reads a run back."""

import csv
import fcntl
import importlib
import shutil

import jax
import numpy as np
import pytest

from scanrl.harness.program import seed_keys

# Per case (a script, and for dqn_tabular_q a learner): its module, a tiny run of 4 iterations with 2 agents, and what
# plants a NaN: a learning rate that makes training diverge after at least one good iteration. These were found by
# scanning learning rates on tiny runs (the first bad iteration is read from metrics.csv, not assumed).
CASES = {
    "ppo": ("ppo", dict(total_timesteps=4 * 512, num_seeds=2, log_every=1, eval_episodes=3),
            # the entropy bonus alone drives log-std past float32's exp at Adam's step size: inf by iteration 5
            dict(env="Pendulum-v1", learning_rate=4.0, ent_coef=1.0, total_timesteps=8 * 512, num_chunks=8)),
    "reinforce": ("reinforce", dict(total_timesteps=4 * 512, num_seeds=2, train_v_iters=5, log_every=1,
                                    eval_episodes=3),
                  dict(env="Pendulum-v1", pi_lr=30.0, total_timesteps=8 * 512, num_chunks=8)),
    "td3": ("td3", dict(total_timesteps=1024, update_every=32, log_every=1, learning_starts=256, batch_size=64,
                        hidden_size=32, num_seeds=2, eval_episodes=2),
            dict(learning_rate=1e8, learning_starts=512)),
    "tabular_q": ("dqn_tabular_q", dict(agent="tabular", total_timesteps=4000, num_seeds=2, log_every=1,
                                        eval_episodes=3),
                  dict(learning_rate=10.0)),
    "dqn": ("dqn_tabular_q", dict(env="CartPole-v1", agent="dqn", total_timesteps=4000, learning_starts=1000,
                                  buffer_size=2000, batch_size=64, hidden_sizes=(32, 32), num_seeds=2, log_every=1,
                                  eval_episodes=3),
            dict(learning_rate=1e8)),
    "pqn": ("pqn", dict(total_timesteps=4 * 256, num_envs=8, num_steps=32, num_minibatches=4, update_epochs=2,
                        hidden_sizes=(32, 32), num_seeds=2, log_every=1, eval_episodes=3),
            dict(learning_rate=1e7, update_epochs=1, num_minibatches=1)),  # 1 step per iteration: diverges at the 2nd
}


def tiny_config(case, out_dir, **overrides):
    """(module, config) of the case's tiny run in 4 chunks."""
    name, tiny, _ = CASES[case]
    module = importlib.import_module(name)
    return module, module.Config(**{**tiny, "num_chunks": 4, "out_dir": str(out_dir), **overrides})


def check_program(algorithm, config):
    """The checks a run makes before anything compiles: harness.check's, then its program's plan (where each swept
    field is traced: one value per agent, read by the program)."""
    from scanrl import harness
    from scanrl.harness.program import plan

    config, points = harness.check(algorithm, config)
    plan(algorithm, config, points)


def cli_flags(config_fields):
    flags = []
    for key, value in config_fields.items():
        values = value if isinstance(value, tuple) else (value,)
        flags += [f"--{key.replace('_', '-')}", *map(str, values)]
    return flags


def exit_code_and_error(capsys, fn, *args):
    """Runs fn(*args), which must exit: -> (exit code, its stderr's lines)."""
    with pytest.raises(SystemExit) as exited:
        fn(*args)
    return exited.value.code, capsys.readouterr().err.strip().splitlines()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def restore_params(module, config, run_dir):
    """Every array of the newest checkpoint's runner state, as numpy."""
    from scanrl.harness.checkpoints import Checkpoints  # orbax: imported where used, not by conftest.py

    init, _ = module.make_train_parts(config)
    abstract = jax.eval_shape(jax.vmap(init), seed_keys(config))
    with Checkpoints(str(run_dir)) as checkpoints:
        runner, _, step = checkpoints.restore("--eval", module.ALGORITHM.name, config, abstract, False)
    return step, [np.asarray(x) for x in jax.tree.leaves(runner)]


def checkpoint_steps(run_dir):
    return sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())


# The cases of `finished_runs`: an algorithm of TrainStates and a Q-table.
FINISHED = ("ppo", "tabular_q")


@pytest.fixture(scope="session")
def finished_runs(tmp_path_factory):
    """Finished tiny runs of ppo and the tabular learner (every checkpoint kept), read by the tests and copied by
    those that change them (every case's resume and eval: the contract check, tests/test_forking.py). Made once per
    session: by the first pytest-xdist worker that needs them while the others wait on a lock (the workers'
    temporary directories share a parent); a run's numbers depend on the devices its agents were split over, so a
    worker that sees another device count than the maker (one whose backend was made before a script set the
    count) makes its own."""
    for case in FINISHED:  # a script sets the device count (prepare_jax) where no backend exists yet
        importlib.import_module(CASES[case][0])
    root = tmp_path_factory.getbasetemp()
    shared = (root.parent if root.name.startswith("popen-gw") else root) / f"finished-{len(jax.devices())}-devices"
    shared.mkdir(exist_ok=True)
    runs = {case: shared / case / "whole" for case in FINISHED}
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (shared / "made").exists():
            for case, run_dir in runs.items():
                shutil.rmtree(run_dir.parent, ignore_errors=True)  # what a worker that failed here left
                module, config = tiny_config(case, run_dir.parent, run_name="whole", keep_checkpoints=4)
                module.main(config)
            (shared / "made").touch()
    return runs


def copy_run(finished_runs, case, tmp_path):
    run_dir = tmp_path / "runs" / "copy"
    shutil.copytree(finished_runs[case], run_dir)
    return run_dir


def damage_checkpoint(run_dir, step):
    for path in (run_dir / "checkpoints" / str(step)).rglob("*"):
        if path.is_file() and path.suffix != ".json" and path.stat().st_size > 0:
            path.write_bytes(b"\0" * 16)


# Every script once (dqn_tabular_q's two learners share its Config).
SCRIPTS = ("ppo", "reinforce", "td3", "dqn_tabular_q", "pqn")


# Per case: a sweepable field and two of its values, and a field that sets array shapes or a loop length.
SWEEPS = {
    "ppo": ("learning_rate", (2.5e-4, 1e-3), "num_envs"),
    "reinforce": ("pi_lr", (3e-4, 1e-3), "num_steps"),
    "td3": ("tau", (0.005, 0.05), "batch_size"),
    "tabular_q": ("learning_rate", (0.1, 0.5), "num_envs"),
    "dqn": ("learning_rate", (2.5e-4, 1e-3), "batch_size"),
    "pqn": ("q_lambda", (0.8, 0.95), "num_minibatches"),
}


def tiny_flags(case, **overrides):
    _, tiny, _ = CASES[case]
    return cli_flags({**tiny, **overrides})


NAN = np.nan


def sparse_metrics(num_seeds=3, iterations=40, every=7):
    """Seed s ends an episode (return 10 * row) every `every` rows from row s + 1: most rows hold NaN."""
    returns = np.full((num_seeds, iterations), NAN)
    for s in range(num_seeds):
        returns[s, s + 1::every] = 10.0 * np.arange(s + 1, iterations, every)
    return {"env_steps": np.tile(100 * (1 + np.arange(iterations)), (num_seeds, 1)),
            "episodes": (~np.isnan(returns)).astype(np.float32), "episode_return": returns,
            "episode_length": np.where(np.isnan(returns), NAN, 200.0)}
