"""The harness (scanrl/harness/), tested once: a run's outputs, chunks and checkpoints, --resume, --eval and --gif,
Ctrl-C and non-finite stops, the shared flags, wandb and --profile. Where the algorithm decides the outcome (what its
runner state holds, what its non-finite flag covers, how its policy acts), a test runs every case of CASES.

Most tests call a script's `main(Config(...))` in this process (no import cost per run); CLI tests run a script as a
user would."""

import csv
import dataclasses
import gzip
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ROOT, read_run
from PIL import Image

from scanrl import harness
from scanrl.harness.agents import seed_keys
from scanrl.harness.checkpoints import Checkpoints

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
    init, _ = module.make_train_parts(config)
    abstract = jax.eval_shape(jax.vmap(init), seed_keys(config))
    with Checkpoints(str(run_dir)) as checkpoints:
        runner, _, step = checkpoints.restore("--eval", module.ALGORITHM.name, config, abstract, False)
    return step, [np.asarray(x) for x in jax.tree.leaves(runner)]


def checkpoint_steps(run_dir):
    return sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())


# ---------------------------------------------------------------------------------------------------------------
# Every case: the algorithm decides whether these hold.


# The harness runs a run's pieces at one scan length; this guards what make_train and a fork's own loop rely on,
# for an on-policy script and an off-policy one with counters in its runner (the contract resumes every script).
@pytest.mark.slow
@pytest.mark.parametrize("case", ["ppo", "td3"])
def test_scans_of_update_in_pieces_equal_one_scan(case, tmp_path):
    """The 4 iterations of `update` scanned in pieces of 2, 1 and 1 (three compiled scan lengths, as the command
    line's pieces and chunks cut a run) give the numbers of one scan over all of them, bit for bit. (`make_train`
    under one jit agrees to float rounding: test_scale.py compares it with a sweep's agents.)"""
    module, config = tiny_config(case, tmp_path)
    keys = seed_keys(config)
    init, update = module.make_train_parts(config)
    init = jax.jit(jax.vmap(init))

    def scan(length):
        return jax.jit(jax.vmap(lambda runner: jax.lax.scan(lambda r, _: update(r), runner, None, length)))

    assert module.num_iterations(config) == 4
    whole_runner, whole = scan(4)(init(keys))
    runner, parts = init(keys), []
    for length in (2, 1, 1):
        runner, metrics = scan(length)(runner)
        parts.append(metrics)
    for key in whole:
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts], axis=1), whole[key], err_msg=key)
    for got, expected in zip(jax.tree.leaves(runner), jax.tree.leaves(whole_runner), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


@pytest.mark.slow
def test_a_compile_cache_hit_gives_identical_results(tmp_path):
    """The second run of a command loads its programs from the persistent compilation cache (JAX counts the hits)
    and gives bit-identical metrics and returns; the cache lives where --compile-cache says."""
    hits = []

    def count(event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    module, config = tiny_config("ppo", tmp_path / "runs", compile_cache=str(tmp_path / "cache"))
    jax.monitoring.register_event_listener(count)
    try:
        counts = []
        for name in ("first", "second"):
            before = len(hits)
            module.main(dataclasses.replace(config, run_name=name))
            counts.append(len(hits) - before)
    finally:
        jax.monitoring.unregister_event_listener(count)
    assert counts[0] == 0 and counts[1] >= 1, counts
    assert list((tmp_path / "cache").glob("*/jit_segment-*")), "no training program in the cache"
    first, second = (tmp_path / "runs" / name for name in ("first", "second"))
    assert (first / "metrics.csv").read_bytes() == (second / "metrics.csv").read_bytes()
    summaries = [json.loads((d / "summary.json").read_text()) for d in (first, second)]
    assert summaries[0]["eval_return"] == summaries[1]["eval_return"]


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory):
    """Finished tiny runs of ppo and the tabular learner (every checkpoint kept), made once, copied by the tests that
    change them (every case's resume and eval: the contract check, tests/test_forking.py)."""
    runs = {}
    for case in ("ppo", "tabular_q"):
        out_dir = tmp_path_factory.mktemp(case)
        module, config = tiny_config(case, out_dir, run_name="whole", keep_checkpoints=4)
        module.main(config)
        runs[case] = out_dir / "whole"
    return runs


def copy_run(finished_runs, case, tmp_path):
    run_dir = tmp_path / "runs" / "copy"
    shutil.copytree(finished_runs[case], run_dir)
    return run_dir


# Every case's --resume equals its uninterrupted run, and its --eval reproduces its summary: tests/test_forking.py
# runs the contract check (scanrl/harness/contract.py) on each.


def test_eval_of_one_agent_prints_its_line(finished_runs, capsys):
    import ppo

    summary = json.loads((finished_runs["ppo"] / "summary.json").read_text())
    ppo.main(ppo.Config(eval=str(finished_runs["ppo"]), seed_index=1, eval_episodes=1))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("seed ")]
    assert len(lines) == 1 and lines[0].startswith(f"seed {summary['seeds'][1]} (index 1)")


def test_eval_sampled_plays_the_policy_training_acts_with(finished_runs, capsys):
    """--eval-sampled samples each action from the policy, as training does (the figure gymnax-blines and others
    publish), where --eval takes its argmax. After the tiny ppo run (4 iterations on CartPole) the policy is still
    spread out: sampled, it plays as training's last episodes did; its argmax already balances several times longer.
    The same command gives the same returns; a deterministic script and a command without --eval are refused."""
    import dqn_tabular_q
    import ppo

    def returns(**flags):
        ppo.main(ppo.Config(eval=str(finished_runs["ppo"]), eval_episodes=100, **flags))
        out = capsys.readouterr().out
        rows = [line.split("returns ")[1].split() for line in out.splitlines() if line.startswith("seed ")]
        return out, np.array(rows, dtype=float)

    out, greedy = returns()
    assert "deterministic policy, 100 episodes per agent" in out
    out, sampled = returns(eval_sampled=True)
    assert "sampled policy (actions drawn as in training), 100 episodes per agent" in out
    assert greedy.shape == sampled.shape == (2, 100)
    rows = read_csv(finished_runs["ppo"] / "metrics.csv")
    column = rows[0].index("episode_return")
    training = np.array([float(row[column]) for row in rows[1:] if row[1] == "4"])  # the last iteration, per seed
    assert (0.7 * training < sampled.mean(axis=1)).all() and (sampled.mean(axis=1) < 1.4 * training).all()
    assert (greedy.mean(axis=1) > 3 * training).all()
    np.testing.assert_array_equal(returns(eval_sampled=True)[1], sampled)

    code, err = exit_code_and_error(capsys, dqn_tabular_q.main, dqn_tabular_q.Config(
        eval=str(finished_runs["tabular_q"]), eval_sampled=True))
    assert code == 2 and err == ["error: --eval-sampled: dqn_tabular_q's policy is deterministic (its evaluation "
                                 "acts as it does); drop --eval-sampled"], err
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval_sampled=True))
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --eval-sampled evaluates a saved run: add "
                                                             "--eval <run dir>"), err


@pytest.mark.parametrize("script", ["ppo", "ppo_rnn", "reinforce", "td3", "dqn_tabular_q", "pqn"])
def test_an_untrained_sampled_policy_plays_like_a_random_one(script):
    """Each script's sampled policy (ppo_rnn's carries its GRU memory beside the key): untrained, its actor is close
    to uniform, so on CartPole it balances about as long as a uniformly random policy (22.05 steps on average over
    1,000 episodes, benchmarks/learning.py). Greedy-Q and TD3 scripts have none: --eval-sampled refuses them."""
    from scanrl.harness.evaluation import make_evaluate

    module = importlib.import_module(script)
    if script in ("td3", "dqn_tabular_q", "pqn"):
        assert module.ALGORITHM.sampled_policy is None
        return
    config = module.Config(env="CartPole-v1", eval_episodes=200)
    init, _ = module.make_train_parts(config)
    runner = init(jax.random.PRNGKey(0))
    evaluate = jax.jit(make_evaluate(module.ALGORITHM, config, sampled=True))
    returns = evaluate(jax.random.PRNGKey(1), runner)
    assert 18 < float(returns.mean()) < 27, returns.mean()


# A runner of TrainStates (ppo; td3 with a replay buffer beside them) and one without (the Q-table).
@pytest.mark.slow
@pytest.mark.parametrize("case", ["ppo", "td3", "tabular_q"])
def test_nonfinite_stops_run_and_keeps_last_good_checkpoint(case, tmp_path, capsys):
    """A diverging run stops at the end of the chunk where a value first went non-finite, names the seeds and the
    iteration, and keeps the checkpoint before it, finite."""
    module, config = tiny_config(case, tmp_path / "runs", run_name="nan", **CASES[case][2])
    code, err = exit_code_and_error(capsys, module.main, config)
    run_dir = tmp_path / "runs" / "nan"
    rows = read_csv(run_dir / "metrics.csv")
    flagged = [(int(row[0]), int(row[1])) for row in rows[1:] if row[-1] == "True"]
    assert rows[0][-1] == "nonfinite" and flagged, "the planted divergence did not happen"
    first = min(u for _, u in flagged)  # metrics.csv counts iterations from 1
    seeds = sorted({s for s, u in flagged if u == first})
    chunk = module.num_iterations(config) // config.num_chunks
    last_good = (first - 1) // chunk * chunk
    assert last_good > 0, "the plant diverges in the first chunk: no good checkpoint to check"
    assert code == 1
    assert err[-1].startswith(f"error: non-finite loss or parameters in seed(s) {', '.join(map(str, seeds))}, "
                              f"first at iteration {first} "), err
    assert f"the last good checkpoint is at iteration {last_good}" in err[-1]
    assert not (run_dir / "summary.json").exists()
    assert max(int(row[1]) for row in rows[1:]) == last_good + chunk  # the bad chunk's rows are written too
    step, params = restore_params(module, config, run_dir)
    assert step == last_good and all(np.isfinite(p).all() for p in params if p.dtype.kind == "f")


# ---------------------------------------------------------------------------------------------------------------
# The harness alone: one algorithm stands for all.


@pytest.mark.parametrize("damage", ["deleted", "cut mid-row", "header only", "garbage"])
def test_resume_rebuilds_metrics_csv_from_the_checkpoint(damage, finished_runs, tmp_path):
    """The checkpoint holds the metrics so far: whatever a kill or a user left of metrics.csv, --resume writes the
    uninterrupted run's file (the csv used to be trusted: rows were lost, or a half row kept)."""
    import ppo

    whole = finished_runs["ppo"]
    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    for step in checkpoint_steps(run_dir)[2:]:
        shutil.rmtree(run_dir / "checkpoints" / str(step))
    (run_dir / "summary.json").unlink()
    path = run_dir / "metrics.csv"
    text = path.read_text()
    if damage == "deleted":
        path.unlink()
    elif damage == "cut mid-row":
        path.write_text(text[: text.index("\n", len(text) // 2) - 5])
    elif damage == "header only":
        path.write_text(text.splitlines()[0] + "\n")
    else:
        path.write_text("seed,iteration\n1,2,3\nnot,a,row\n")
    ppo.main(dataclasses.replace(ppo.Config(), resume=str(run_dir)))
    assert path.read_bytes() == (whole / "metrics.csv").read_bytes()


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


@pytest.mark.slow
def test_wandb_failure_does_not_stop_training(tmp_path, capsys, monkeypatch):
    import ppo

    monkeypatch.setenv("WANDB_MODE", "not-a-mode")
    ppo.main(ppo.Config(track=True, total_timesteps=1024, out_dir=str(tmp_path / "runs")))
    assert "warning: wandb could not start" in capsys.readouterr().err
    read_run(tmp_path / "runs")


def test_help_lists_the_shared_flags_and_what_can_be_swept(run_script):
    """--help as tyro prints it, answered from the script's Config before its heavy imports (prepare_jax): JAX is
    never imported, and the text is the one the script's own parse prints after them."""
    result = run_script("ppo.py", "--help", add_out_dir=False)
    assert result.returncode == 0 and not result.stderr
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: print('jax imported:', 'jax' in sys.modules, file=sys.stderr))\n"
             f"sys.argv = [{str(ROOT / 'ppo.py')!r}, '--help']\n"
             f"runpy.run_path({str(ROOT / 'ppo.py')!r}, run_name='__main__')\n")
    quick = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert quick.stdout == result.stdout and quick.stderr.strip() == "jax imported: False"
    full = ("import sys\n"
            f"sys.argv = [{str(ROOT / 'ppo.py')!r}, '--help']\n"
            "import ppo\nimport scanrl.harness.cli\n"
            "scanrl.harness.cli.parse_flags(ppo.ALGORITHM)\n")  # the parse after the heavy imports
    slow = subprocess.run([sys.executable, "-c", full], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert slow.stdout == result.stdout
    for flag in ("--env", "--seed", "--num-seeds", "--total-timesteps", "--track", "--wandb-project",
                 "--wandb-entity", "--wandb-group", "--out-dir", "--run-name", "--log-every", "--num-chunks",
                 "--resume", "--eval", "--gif", "--sweep", "--num-devices", "--coordinator-address",
                 "--learning-rate", "--num-minibatches", "--clip-coef"):  # the last ones: ppo's own
        assert flag in result.stdout, flag
    assert "PPO ratio clipping epsilon" in result.stdout  # each field's docstring is its help line
    assert "--sweep can vary the script's own numeric fields" in result.stdout


def test_shared_flags_are_checked_before_anything_is_written(tmp_path):
    import ppo

    config = ppo.Config(out_dir=str(tmp_path / "runs"))
    bad = [
        (dict(env="CartPol-v1"), "--env: unknown env 'CartPol-v1': did you mean CartPole-v1"),
        (dict(num_seeds=-2), "--num-seeds must be a positive integer, got -2"),
        (dict(total_timesteps=0), "--total-timesteps must be a positive integer"),
        (dict(eval_episodes=0), "--eval-episodes must be a positive integer"),
        (dict(num_chunks=0), "--num-chunks must be a positive integer"),
        (dict(num_chunks=977), "--num-chunks 977 is more than the 976 iterations of this run"),
        (dict(seed=-1), "--seed -1 with --num-seeds 1: the seeds must lie in 0 to 4294967295"),
        (dict(seed=2**32 - 1, num_seeds=2), "the seeds must lie in 0 to 4294967295"),
        (dict(num_devices=0), "--num-devices must be a positive integer"),
        (dict(num_processes=2), "a multi-process run needs --coordinator-address"),
        (dict(num_processes=2, coordinator_address="localhost:1", process_id=2), "--process-id 2 must lie in 0 to"),
        (dict(learning_rate=float("nan")), "--learning-rate must be a finite number, got nan"),
        (dict(ent_coef=float("-inf")), "--ent-coef must be a finite number, got -inf"),
        (dict(learning_rate=1e40), "--learning-rate must be a finite number, got 1e+40, which is infinite in float32"),
        (dict(sweep=("lr=3e-4,nan",)), "--sweep learning_rate=nan: --learning-rate must be a finite number"),
        (dict(sweep=("gamma=inf",)), "--sweep gamma=inf: --gamma must be a finite number"),
        *[(dict(run_name=name), f"--run-name {name!r} must be one directory name")
          for name in ("../x", "/tmp/x", "a/b", ".", "..", "")],
        (dict(out_dir=str(tmp_path / "a_file" / "runs")), "a_file is a file, not a directory"),
    ]
    (tmp_path / "a_file").write_text("")
    for overrides, message in bad:
        with pytest.raises(harness.ConfigError) as error:
            harness.check(ppo.ALGORITHM, dataclasses.replace(config, **overrides))
        assert message in str(error.value) and "\n" not in str(error.value), overrides
    assert harness.check(ppo.ALGORITHM, dataclasses.replace(config, seed=2**32 - 2, num_seeds=2))
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_out_dir_exits_2_before_anything_is_written(tmp_path, capsys):
    import ppo

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(out_dir=str(locked / "runs")))
        assert code == 2 and err == [f"error: --out-dir {locked / 'runs'}: {locked} is not writable by this user; "
                                     "choose another --out-dir"]
    finally:
        locked.chmod(0o755)


def test_bad_gif_paths_exit_2(tmp_path, capsys):
    import ppo

    run_dir = tmp_path / "no_run"  # the --gif checks come before the run directory is read
    for gif, words in ((str(tmp_path), "is a directory; give a file path"),
                       (str(tmp_path / "missing" / "a.gif"), "the folder"),
                       (str(tmp_path / "episode.png"), "the file name must end in .gif")):  # was PIL's, after drawing
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(run_dir), gif=gif))
        assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --gif {gif}") and words in err[0], err


def test_an_evaluation_too_big_for_memory_exits_2_before_training(finished_runs, tmp_path, capsys):
    """--eval-episodes enters the memory check: a billion episodes per agent used to train the whole run and then
    run out of memory in the final evaluation."""
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="big", eval_episodes=10**9)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: the run needs about ") and "lower --eval-episodes (the final evaluation plays " \
        "1,000,000,000 episodes per agent at once), or --num-seeds" in err[0], err
    assert "iteration" not in capsys.readouterr().out and not (tmp_path / "runs" / "big").exists()
    code, err = exit_code_and_error(capsys, module.main, module.Config(eval=str(finished_runs["ppo"]),
                                                                           eval_episodes=10**9))
    assert code == 2 and len(err) == 1 and "lower --eval-episodes" in err[0], err  # --eval: before it is read


@pytest.mark.parametrize("args, message", [
    (["--env", "CartPol-v1"], "error: --env: unknown env 'CartPol-v1': did you mean CartPole-v1"),
    (["--num-processes", "2"], "error: --num-processes 2: a multi-process run needs --coordinator-address"),
    # tyro's own parse errors, its box turned into the one line
    (["--num-seeds", "x"], "error: Error parsing --num-seeds: invalid literal for int() with base 10: 'x'"),
    (["--num-seed", "4"], "error: Unrecognized options: --num-seed"),
    (["--env"], "error: Missing value for argument '--env'"),
])
def test_cli_bad_flag_exits_2_with_one_line(run_script, tmp_path, args, message):
    result = run_script("ppo.py", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert not (tmp_path / "runs").exists()


def test_uneven_chunks_write_a_checkpoint_each_and_the_same_metrics(finished_runs, tmp_path):
    """--num-chunks 3 on 4 iterations: checkpoints after 2, 3 and 4, and metrics.csv as with 4 chunks."""
    module, config = tiny_config("tabular_q", tmp_path, num_chunks=3, run_name="three", keep_checkpoints=3)
    module.main(config)
    assert checkpoint_steps(tmp_path / "three") == [2, 3, 4]
    assert read_csv(tmp_path / "three" / "metrics.csv") == read_csv(finished_runs["tabular_q"] / "metrics.csv")


@pytest.mark.slow  # gymnax draws classic-control frames through gymnasium and pygame: ~0.2 s a frame
def test_eval_draws_one_episode(finished_runs, tmp_path, capsys):
    """--gif: one episode of the chosen agent as an animated gif, a frame per step; an env gymnax cannot draw
    (GridWorld) exits 2 before anything is loaded."""
    import dqn_tabular_q
    import ppo

    gif = tmp_path / "episode.gif"
    code, err = exit_code_and_error(capsys, dqn_tabular_q.main,
                                    dqn_tabular_q.Config(eval=str(finished_runs["tabular_q"]), gif=str(gif)))
    assert code == 2 and len(err) == 1 and "--gif: gymnax cannot draw GridWorld-v0" in err[0], err
    assert not gif.exists()
    summary = json.loads((finished_runs["ppo"] / "summary.json").read_text())
    ppo.main(ppo.Config(eval=str(finished_runs["ppo"]), seed_index=1, gif=str(gif)))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("one episode")]
    words = line.split()
    episode_return, length = float(words[words.index("return") + 1]), int(words[words.index("in") + 1])
    assert line.startswith(f"one episode of seed {summary['seeds'][1]} (index 1)")
    with Image.open(gif) as image:
        assert image.format == "GIF" and image.n_frames == length
    assert episode_return == length  # CartPole: +1 per step


@pytest.mark.slow
def test_sigint_leaves_a_resumable_run(finished_runs, run_script, tmp_path):
    """Ctrl-C during a run (here as soon as it starts compiling): it stops once compiled, before training, exit
    130, saying nothing was trained and how to start it; --resume completes the run to the numbers of an
    uninterrupted one."""
    _, tiny, _ = CASES["ppo"]
    # on the finished run's devices (this process's count), whose numbers it must end with
    devices = json.loads((finished_runs["ppo"] / "config.json").read_text())["num_devices"]
    flags = cli_flags({**tiny, "num_chunks": 4, "run_name": "cut", "out_dir": tmp_path / "runs",
                       "num_devices": devices})
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    process = subprocess.Popen([sys.executable, str(ROOT / "ppo.py"), *flags], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # the signal handler is in place once the run's first line is out
        if "run dir" in line:
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=600)
    run_dir = tmp_path / "runs" / "cut"
    assert process.returncode == 130, err
    assert f"nothing was trained; start it with: python ppo.py --resume {run_dir}" in err
    assert not (run_dir / "summary.json").exists() and not (run_dir / "metrics.csv").exists()
    result = run_script("ppo.py", "--resume", str(run_dir), add_out_dir=False)
    assert result.returncode == 0, result.stderr
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")


def damage_checkpoint(run_dir, step):
    for path in (run_dir / "checkpoints" / str(step)).rglob("*"):
        if path.is_file() and path.suffix != ".json" and path.stat().st_size > 0:
            path.write_bytes(b"\0" * 16)


def test_bad_resume_and_eval_exit_2_and_change_nothing(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"algo": "td3"}))
    cases = [
        (dict(resume=str(tmp_path / "nowhere")), "--resume: no run directory"),
        (dict(eval=str(tmp_path / "nowhere")), "--eval: no run directory"),
        (dict(resume=str(foreign)), "is a run of td3 (td3.py), not of ppo (ppo.py); use td3.py"),
        (dict(eval=str(tmp_path)), "is missing or unreadable; is"),
        (dict(resume=str(run_dir), seed=7), "--seed 7 (run: 0) would change the run's results"),
        (dict(eval=str(run_dir), seed_index=2), "--seed-index 2 is out of range: the run has 2 agents"),
    ]
    for overrides, message in cases:
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(**overrides))
        assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], (overrides, err)

    other_env = tmp_path / "other-env"  # a checkpoint of another env in this run's directory
    shutil.copytree(run_dir, other_env)
    saved = json.loads((other_env / "config.json").read_text())
    (other_env / "config.json").write_text(json.dumps({**saved, "env": "Acrobot-v1"}))
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(other_env)))
    assert code == 2 and len(err) == 1 and "config.json says --env Acrobot-v1, but its newest checkpoint" in err[0] \
        and "was trained with --env CartPole-v1" in err[0], err

    for step in checkpoint_steps(run_dir):
        damage_checkpoint(run_dir, step)
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1 and "cannot be read" in err[0] and "damaged" in err[0], err
    assert "no older checkpoint can be read either" in err[0]
    shutil.rmtree(run_dir / "checkpoints")
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(run_dir)))
    assert code == 2 and len(err) == 1 and "has no checkpoint in checkpoints/ yet" in err[0], err
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert {p: b for p, b in before.items() if "checkpoints" not in p.parts} == after


def test_resume_of_a_finished_run_says_so_and_changes_nothing(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    ppo.main(ppo.Config(resume=str(run_dir)))
    assert "is finished (4 of 4 iterations, summary.json written): nothing to resume" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_resume_of_a_run_another_process_owns_exits_2_and_changes_nothing(finished_runs, tmp_path, capsys):
    """A --resume of a run directory another process holds (a run training in it) exits 2 naming that process's pid
    (two trainers used to write one metrics.csv). That a training run holds its directory is tested with the stop
    of a single-chunk run below."""
    import ppo
    from scanrl.harness.files import RunLock

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with RunLock(str(run_dir), "--resume"):
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and err == [f"error: --resume: another process (pid {os.getpid()}) is training in {run_dir}; "
                                 "wait for it to end or stop it, then --resume it"], err
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_resume_falls_back_past_a_damaged_newest_checkpoint(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    damage_checkpoint(run_dir, 4)
    ppo.main(ppo.Config(resume=str(run_dir)))
    out = capsys.readouterr().out
    assert f"warning: checkpoint {run_dir / 'checkpoints' / '4'} cannot be read" in out
    assert "resuming after iteration 3 of 4" in out
    assert (run_dir / "damaged_checkpoints" / "4").is_dir() and checkpoint_steps(run_dir)[-1] == 4
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")


@pytest.mark.parametrize("loss", ["deleted", "emptied", "a file"])
def test_resume_never_discards_recorded_iterations_when_the_checkpoints_are_gone(loss, finished_runs, tmp_path,
                                                                                   capsys):
    """A run whose metrics.csv records iterations but whose checkpoints/ is gone is refused, not started again (it
    used to be, replacing metrics.csv); nothing in the directory changes."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints")
    if loss != "deleted":
        (run_dir / "checkpoints").mkdir() if loss == "emptied" else (run_dir / "checkpoints").write_text("")
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1, err
    if loss == "a file":
        assert err[0].startswith(f"error: --resume: {run_dir / 'checkpoints'} is not a folder; move it away")
    else:
        assert err[0] == (f"error: --resume: {run_dir / 'checkpoints'} "
                          f"{'is missing' if loss == 'deleted' else 'holds no checkpoint'}, but metrics.csv records 4 "
                          "iterations: starting again would discard them; put back its checkpoints, or train a new "
                          "run (python ppo.py without --resume)")
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_resume_holds_config_json_to_the_config_its_checkpoint_was_trained_with(finished_runs, tmp_path, capsys):
    """A config.json that lost a field or had its seed changed used to change the resumed run silently (a longer
    run, another seed's labels on the seed-0 agents): it is refused naming the field, unless the command line names
    the field with the checkpoint's value."""
    import ppo
    from scanrl.harness.checkpoints import trained_config
    from scanrl.harness.saved import resumed_config

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    saved = json.loads((run_dir / "config.json").read_text())
    newest = run_dir / "checkpoints" / "4"
    edits = {"total_timesteps": ({k: v for k, v in saved.items() if k != "total_timesteps"},
                                 f"has no total_timesteps, but its newest checkpoint ({newest}) was trained with "
                                 f"--total-timesteps {saved['total_timesteps']}; put that value back in config.json, "
                                 f"or pass --total-timesteps {saved['total_timesteps']} to resume the run as it was "
                                 "trained"),
             "seed": ({**saved, "seed": 5}, f"says --seed 5, but its newest checkpoint ({newest}) was trained with "
                                            "--seed 0; ")}
    for field, (edited, message) in edits.items():
        (run_dir / "config.json").write_text(json.dumps(edited))
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
        assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --resume: {run_dir / 'config.json'} "
                                                                 f"{message}"), err
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
        # The command line naming the checkpoint's value settles it; another value would change the results.
        value, flag_name = saved[field], "--" + field.replace("_", "-")
        resumed = resumed_config(ppo.ALGORITHM, ppo.Config(resume=str(run_dir), **{field: value}), {"resume", field},
                                 trained_config(str(run_dir)))
        assert (resumed.seed, resumed.total_timesteps) == (0, saved["total_timesteps"])
        with pytest.raises(harness.ConfigError, match=f"was trained with {flag_name}"):
            resumed_config(ppo.ALGORITHM, ppo.Config(resume=str(run_dir), **{field: value + 1}), {"resume", field},
                           trained_config(str(run_dir)))


@pytest.mark.parametrize("field, value", [("num_seeds", 1.5), ("num_seeds", "two"), ("learning_rate", None),
                                          ("env", "NoSuchEnv-v0"), ("num_seeds", 3), ("hidden_size", 32)])
def test_a_foreign_or_damaged_config_json_is_one_error_line(field, value, finished_runs, tmp_path, capsys):
    """--eval and --resume of a run whose config.json holds values of the wrong type, an unknown env, or sizes other
    than its checkpoint was trained with: one line naming config.json and the field, exit 2 (they were tracebacks)."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    saved = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**saved, field: value}))
    for flag in ("eval", "resume"):
        code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(**{flag: str(run_dir)}))
        assert code == 2 and len(err) == 1 and err[0].startswith("error: "), (flag, err)
        assert field in err[0] or field.replace("_", "-") in err[0], (flag, err)


@pytest.mark.parametrize("damage", ["truncated array file", "arrays unlike their checksums"])
def test_resume_sets_damaged_checkpoint_data_aside_and_goes_on_from_an_intact_one(damage, finished_runs, tmp_path,
                                                                                   capsys):
    """Damage inside the newest checkpoint's arrays: a file cut short (orbax raised a bare Exception: a traceback)
    or arrays that read but are not what was written (flipped bytes, restored silently): the checkpoint is set
    aside with a warning and the run goes on from the one before, to the uninterrupted run's metrics."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    (run_dir / "summary.json").unlink()
    newest = run_dir / "checkpoints" / "4"
    if damage == "truncated array file":
        data = max((p for p in (newest / "runner").rglob("*") if p.is_file() and p.parent.name == "d"),
                   key=lambda p: p.stat().st_size)
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    else:  # the arrays as written, their recorded checksum not: as if the arrays had changed after the write
        meta = json.loads((newest / "meta" / "metadata").read_text())
        meta["checksums"]["runner"][0] ^= 1
        (newest / "meta" / "metadata").write_text(json.dumps(meta))
    ppo.main(ppo.Config(resume=str(run_dir)))
    out = capsys.readouterr().out
    assert f"warning: checkpoint {newest} cannot be read (" in out and "resuming after iteration 3 of 4" in out
    assert (run_dir / "damaged_checkpoints" / "4").is_dir()
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")


def test_a_signal_during_compilation_stops_before_training_saying_nothing_was_trained(tmp_path, capsys,
                                                                                       monkeypatch):
    """SIGTERM while the program compiles used to train the whole first chunk first."""

    from scanrl.harness import train

    compile_job = train.compile_job

    def compile_then_signal(*args):
        compiled = compile_job(*args)
        os.kill(os.getpid(), signal.SIGTERM)
        return compiled

    monkeypatch.setattr(train, "compile_job", compile_then_signal)
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="stopped")
    code, err = exit_code_and_error(capsys, module.main, config)
    run_dir = tmp_path / "runs" / "stopped"
    assert code == 128 + signal.SIGTERM and err[-1] == ("SIGTERM: stopped while compiling, before any training: "
                                                        "nothing was trained; start it with: python ppo.py --resume "
                                                        f"{run_dir}"), err
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


def test_a_signal_in_a_single_chunk_run_stops_where_the_iterations_under_way_end(finished_runs, tmp_path, capsys,
                                                                                monkeypatch):
    """With one chunk, SIGTERM was acted on only when the run had ended (exit 0): it stops after the piece of the
    chunk under way (here 1 iteration), with metrics and a checkpoint, and --resume ends with the uninterrupted
    run's metrics. While it trains, the run holds its directory: another trainer is refused, naming its pid."""
    from scanrl.harness.files import LOCK_NAME, RunLock
    from scanrl.harness.metrics import Progress

    show, shown = Progress.show, []

    def show_then_signal(self, *args):
        if not shown:
            with pytest.raises(harness.ConfigError, match=f"another process \\(pid {os.getpid()}\\) is training"):
                RunLock(str(tmp_path / "runs" / "one_chunk"), "--resume")
            os.kill(os.getpid(), signal.SIGTERM)
        shown.append(args[0])
        return show(self, *args)

    monkeypatch.setattr(Progress, "show", show_then_signal)
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="one_chunk", num_chunks=1)
    code, err = exit_code_and_error(capsys, module.main, config)
    run_dir = tmp_path / "runs" / "one_chunk"
    assert code == 128 + signal.SIGTERM and err[-1].startswith("SIGTERM: stopped after iteration 2 of 4, metrics and "
                                                               "checkpoint written; continue with: "), err
    assert checkpoint_steps(run_dir) == [2] and len(read_csv(run_dir / "metrics.csv")) == 1 + 2 * 2
    assert shown and not (run_dir / LOCK_NAME).exists()  # the stopped run let its directory go
    monkeypatch.setattr(Progress, "show", show)
    module.main(module.Config(resume=str(run_dir)))
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")


def test_a_second_signal_stops_at_once_in_one_line(tmp_path, capsys, monkeypatch):
    """The second Ctrl-C or SIGTERM ends the run at once: one line and 128 + the signal (it was a KeyboardInterrupt
    traceback)."""
    from scanrl.harness.metrics import Progress

    monkeypatch.setattr(Progress, "show", lambda self, *args: [os.kill(os.getpid(), signal.SIGTERM)
                                                               for _ in range(2)])
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="twice", num_chunks=1)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 128 + signal.SIGTERM and err[-1].startswith("SIGTERM again: stopped at once; "), err
    assert not any("Traceback" in line for line in err)


def test_resume_keeps_the_device_count_the_run_trained_on(finished_runs, tmp_path, capsys):
    """config.json records the devices a run was split over; a resume where there are fewer says so (it used to
    switch the count, and the numbers, silently)."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["num_devices"] == json.loads((run_dir / "summary.json").read_text())["num_devices"] >= 1
    (run_dir / "summary.json").unlink()
    more = len(jax.devices()) + 1
    (run_dir / "config.json").write_text(json.dumps({**saved, "num_devices": more}))
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1 and err[0].startswith(
        f"error: --resume: the run trained on {more} devices and this process sees {len(jax.devices())}; "), err


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_again(finished_runs, tmp_path, capsys):
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    shutil.rmtree(run_dir / "checkpoints")
    for name in ("summary.json", "metrics.csv", "learning_curve.png"):
        (run_dir / name).unlink()
    ppo.main(ppo.Config(resume=str(run_dir)))
    assert "no checkpoint yet" in capsys.readouterr().out
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")
    assert json.loads((run_dir / "summary.json").read_text())["resumed_after_iteration"] is None


@pytest.mark.slow
def test_profile_writes_a_trace_of_the_training_run(tmp_path, capsys):
    """--profile traces one piece of the scan (a trace of a whole chunk took 7.5 GB for 2 CartPole seeds), as a
    chunk of its own; the rest of the run trains as it would."""
    import ppo

    ppo.main(ppo.Config(total_timesteps=4096, log_every=2, profile=True, run_name="profiled",
                        out_dir=str(tmp_path / "runs")))
    assert checkpoint_steps(tmp_path / "runs" / "profiled") == [2, 8]
    assert len(read_csv(tmp_path / "runs" / "profiled" / "metrics.csv")) == 1 + 8
    traces = list((tmp_path / "runs" / "profiled" / "profile").rglob("*.trace.json.gz"))
    assert len(traces) == 1
    events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
    # The compiled training program ran under the profiler: XLA's executor shows up in the trace.
    assert any("ThunkExecutor" in str(event.get("name", "")) for event in events)
    assert "profiler trace of iterations 1 to 2 in" in capsys.readouterr().out


def test_evaluation_key_is_no_key_of_init():
    """fold_in(key, i) equals split(key, n)[i]; the evaluation key is folded with a number no split reaches."""
    from scanrl.harness.evaluation import evaluation_keys

    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(jax.random.fold_in(key, 1), jax.random.split(key, 4)[1])  # why it matters
    evaluation = evaluation_keys(np.asarray(key)[None])[0]
    assert not any(np.array_equal(evaluation, k) for k in np.asarray(jax.random.split(key, 64)))
    assert not np.array_equal(evaluation, np.asarray(key))


def test_of_many_claims_on_one_run_directory_exactly_one_wins(tmp_path):
    """Creating the directory and its config.json is one exclusive step: threads that start together never share a
    run directory (the old check-then-create let two runs write one metrics.csv)."""
    import threading

    from scanrl.harness.rundir import claim_run_directory

    start, results = threading.Barrier(16), []

    def claim(i):
        start.wait()
        results.append((i, claim_run_directory(str(tmp_path / "runs" / "one"), {"claimant": i})))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, error in results if not error]
    assert len(winners) == 1
    assert all("exists and is not empty" in error for _, error in results if error)
    assert json.loads((tmp_path / "runs" / "one" / "config.json").read_text()) == {"claimant": winners[0]}


@pytest.mark.slow
def test_two_runs_started_at_once_with_one_run_name_one_trains_the_other_exits_2(tmp_path):
    _, tiny, _ = CASES["ppo"]
    flags = cli_flags({**tiny, "num_seeds": 1, "run_name": "same", "out_dir": str(tmp_path / "runs")})
    processes = [subprocess.Popen([sys.executable, str(ROOT / "ppo.py"), *flags], cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    codes = sorted(p.returncode for p in processes)
    assert codes == [0, 2], outputs
    (err,) = [e for p, (_, e) in zip(processes, outputs, strict=True) if p.returncode == 2]
    assert err.strip().splitlines() == [f"error: run directory {tmp_path / 'runs' / 'same'} exists and is not empty; "
                                        "choose another --run-name, or --resume it"]
    assert len(read_csv(tmp_path / "runs" / "same" / "metrics.csv")) == 1 + 4  # header, 4 iterations of 1 seed


@pytest.mark.slow
def test_default_run_names_of_runs_started_in_the_same_second_differ(tmp_path, monkeypatch):
    import time
    import types

    import ppo

    # One second for both runs (the run directory module's clock only).
    from scanrl.harness import rundir

    monkeypatch.setattr(rundir, "time", types.SimpleNamespace(time=lambda: 1_800_000_000.0,
                                                                      perf_counter=time.perf_counter))
    config = ppo.Config(**{**CASES["ppo"][1], "num_seeds": 1, "out_dir": str(tmp_path)})
    for _ in range(2):
        ppo.main(config)
    names = os.listdir(tmp_path)
    assert len(names) == 2 and all(n.startswith("CartPole-v1__ppo__0__1800000000_") for n in names)


def test_resume_takes_logging_flags_given_at_their_defaults(finished_runs, tmp_path):
    """A run directory saved with --track (someone else's, say) resumes with --no-track: a flag the command line
    names wins, although it equals the default."""
    import ppo
    from scanrl.harness.saved import given_fields, resumed_config

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    saved = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**saved, "track": True, "wandb_entity": "someone"}))
    argv = ["--resume", str(run_dir), "--no-track", "--wandb-entity=mine", "--eval-episodes", "10"]
    assert given_fields(ppo.ALGORITHM, argv) == {"resume", "track", "wandb_entity", "eval_episodes"}
    config = ppo.Config(resume=str(run_dir), track=False, wandb_entity="mine")
    resumed = resumed_config(ppo.ALGORITHM, config, given_fields(ppo.ALGORITHM, argv))
    assert (resumed.track, resumed.wandb_entity, resumed.eval_episodes) == (False, "mine", 10)
    assert resumed_config(ppo.ALGORITHM, config).track  # without the command line: only what differs from defaults


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
        result = run_script("ppo.py", "--total-timesteps", "1024", "--track", "--sweep", "lr=1e-3,3e-4", timeout=300,
                            env_overrides={"WANDB_MODE": "online", "WANDB_API_KEY": "0" * 40,
                                           "WANDB_BASE_URL": f"http://127.0.0.1:{server.getsockname()[1]}"})
        elapsed = time.perf_counter() - start
    finally:
        server.close()
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("warning: wandb could not start") == 1, result.stderr[-3000:]
    read_run(tmp_path / "runs")
    assert elapsed < 60, elapsed  # compile and train take ~15 s; wandb's own default would add 2 x 90 s


@pytest.mark.parametrize("writer", ["metrics", "checkpoint", "summary"])
def test_a_failed_write_stops_with_one_line_and_the_run_resumes(writer, finished_runs, tmp_path, capsys,
                                                                monkeypatch):
    """A full disk while metrics.csv, a checkpoint or the summary is written: one line naming the file and the
    cause, exit 1, the --resume command; resuming then gives the uninterrupted run."""
    import errno

    import ppo
    from scanrl.harness import train
    from scanrl.harness.checkpoints import Checkpoints
    from scanrl.harness.metrics import MetricsCsv

    target = {"metrics": (MetricsCsv, "append"), "checkpoint": (Checkpoints, "save"),
              "summary": (train, "write_summaries")}[writer]
    original, calls = getattr(*target), []

    def fail_on_the_third_call(*args, **kwargs):
        calls.append(1)
        if len(calls) == (1 if writer == "summary" else 3):
            raise OSError(errno.ENOSPC, "No space left on device", "/full/disk/file")
        return original(*args, **kwargs)

    monkeypatch.setattr(*target, fail_on_the_third_call)
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="full")
    code, err = exit_code_and_error(capsys, module.main, config)
    run_dir = tmp_path / "runs" / "full"
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("error: cannot write /full/disk/file: No space left on device; training stopped")
    assert err[0].endswith(f"continue with: python ppo.py --resume {run_dir}")
    monkeypatch.setattr(*target, original)
    ppo.main(ppo.Config(resume=str(run_dir)))
    assert read_csv(run_dir / "metrics.csv") == read_csv(finished_runs["ppo"] / "metrics.csv")
    assert json.loads((run_dir / "summary.json").read_text())["final_return"] == \
        json.loads((finished_runs["ppo"] / "summary.json").read_text())["final_return"]


# ---------------------------------------------------------------------------------------------------------------
# The private JAX APIs (scanrl/harness/jax_private.py): each fails here, loudly, when a jax upgrade moves it.


def test_private_jax_apis_are_where_the_harness_expects_them():
    from jax._src import compilation_cache, distributed

    from scanrl.harness import jax_private

    assert hasattr(compilation_cache, "_cache")  # replaced by compile_cache.FileCache
    assert {"get", "put"} <= set(dir(jax_private.CacheInterface))
    assert hasattr(distributed.global_state, "client")
    assert jax_private.coordination_client() is None  # no multi-process run in this test


def test_reads_its_input_sees_through_scans_to_what_the_outputs_use():
    """jit drops inputs no output depends on, through a scan's carry; the lowered program's signature tells."""
    from scanrl.harness.jax_private import reads_its_input

    def carried_but_unused(x):
        (count, ignored), _ = jax.lax.scan(lambda c, _: ((c[0] + 1.0, c[1] * x), None), (0.0, -x), None, 3)
        return count

    def used(x):
        (count, scaled), _ = jax.lax.scan(lambda c, _: ((c[0] + 1.0, c[1] * x), None), (0.0, 1.0), None, 3)
        return count + scaled

    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    assert not reads_its_input(carried_but_unused, scalar)
    assert reads_its_input(used, scalar)
