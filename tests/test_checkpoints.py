"""Chunked training, checkpoints, --resume, --eval, Ctrl-C and non-finite values, in every script (issue 6).

Most tests call a script's `main(Config(...))` in this process (no import cost per run); the signal test runs the
script as a user would."""

import csv
import dataclasses
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ROOT
from PIL import Image

import envs

# Per case (a script, and for dqn_tabular_q an agent): its module, a tiny run of 4 chunks with 2 agents, and what
# plants a NaN: a learning rate that makes training diverge after at least one good iteration. These were found by
# scanning learning rates on tiny runs (the first bad iteration is read from metrics.csv, not assumed).
CASES = {
    "ppo": ("ppo", dict(total_timesteps=4 * 512, num_seeds=2, log_every=1, eval_episodes=3),
            dict(env="Pendulum-v1", learning_rate=10.0, total_timesteps=8 * 512, num_chunks=8)),
    "reinforce": ("reinforce", dict(total_timesteps=4 * 512, num_seeds=2, train_v_iters=5, log_every=1,
                                    eval_episodes=3),
                  dict(env="Pendulum-v1", pi_lr=30.0, total_timesteps=8 * 512, num_chunks=8)),
    "td3": ("td3", dict(total_timesteps=1024, log_every=256, learning_starts=256, batch_size=64, hidden_size=32,
                        num_seeds=2, eval_episodes=2),
            dict(learning_rate=1e8, learning_starts=512)),
    "tabular_q": ("dqn_tabular_q", dict(agent="tabular", total_timesteps=4000, num_seeds=2, log_every=1,
                                        eval_episodes=3),
                  dict(learning_rate=10.0)),
    "dqn": ("dqn_tabular_q", dict(env="CartPole-v1", agent="dqn", total_timesteps=4000, learning_starts=1000,
                                  buffer_size=2000, batch_size=64, hidden_sizes=(32, 32), num_seeds=2, log_every=1,
                                  eval_episodes=3),
            dict(learning_rate=1e8)),
}
# The word each script uses for one iteration of its training scan (one metrics row per agent).
ITERATION = {"ppo": "update", "reinforce": "epoch", "td3": "row", "dqn_tabular_q": "update"}
# An env of the same kind as the case's own, for a checkpoint that does not belong to its run directory.
OTHER_ENV = {"td3": "MountainCarContinuous-v0", "tabular_q": "FrozenLake-misc"}


def tiny_config(case, out_dir, **overrides):
    name, tiny, _ = CASES[case]
    module = importlib.import_module(name)
    config = module.Config(**{**tiny, "num_chunks": 4, "out_dir": str(out_dir), **overrides})
    # dqn_tabular_q: the agent decided and its defaults filled in, as main() does.
    return module, module.resolve(config) if hasattr(module, "resolve") else config


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
    abstract = jax.eval_shape(jax.vmap(init), module.seed_keys(config))
    checkpoints = module.Checkpoints(str(run_dir))
    runner, _, step = checkpoints.restore(str(run_dir), "--eval", config, abstract, False)
    checkpoints.close()
    return step, [np.asarray(x) for x in jax.tree.leaves(runner)]


@pytest.mark.parametrize("case", list(CASES))
def test_chunks_equal_one_train(case, tmp_path):
    """K chunks of the compiled scan give the numbers of --num-chunks 1 (one scan over every iteration), bit for
    bit; `make_train`'s single fused program gives them to float rounding (XLA may fuse init into it)."""
    module, config = tiny_config(case, tmp_path)
    keys = module.seed_keys(config)
    init, run = module.make_train_parts(config)
    init, run = jax.jit(jax.vmap(init)), jax.jit(jax.vmap(run, in_axes=(0, 0, None)))
    num = module.num_iterations(config)
    whole_runner, whole = run(keys, init(keys), jnp.arange(num))
    runner, parts = init(keys), []
    for start in range(0, num, num // config.num_chunks):
        runner, metrics = run(keys, runner, start + jnp.arange(num // config.num_chunks))
        parts.append(metrics)
    assert len(parts) == 4
    for key in whole:
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts], axis=1), whole[key], err_msg=key)
    for got, expected in zip(jax.tree.leaves(runner), jax.tree.leaves(whole_runner), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    # make_train returns the runner state, or (dqn_tabular_q) what evaluation needs of it.
    fused_out, fused = jax.jit(jax.vmap(module.make_train(config)))(keys)
    final = module.learner_of(config, runner) if hasattr(module, "learner_of") else runner
    for got, expected in zip(jax.tree.leaves(final), jax.tree.leaves(fused_out), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(whole["episode_return"], fused["episode_return"], rtol=1e-3)


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory):
    """One finished tiny run per case (every checkpoint kept), made once, copied by the tests that change it."""
    runs = {}
    for case in CASES:
        out_dir = tmp_path_factory.mktemp(case)
        module, config = tiny_config(case, out_dir, run_name="whole", keep_checkpoints=4)
        module.main(config)
        runs[case] = out_dir / "whole"
    return runs


def copy_run(finished_runs, case, tmp_path):
    run_dir = tmp_path / "runs" / "copy"
    shutil.copytree(finished_runs[case], run_dir)
    return run_dir


def checkpoint_steps(run_dir):
    return sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())


@pytest.mark.parametrize("case", list(CASES))
def test_resume_equals_uninterrupted(case, finished_runs, tmp_path):
    """A run cut after its second chunk (the newer checkpoints and the summary lost, metrics.csv holding rows
    past the checkpoint, as after a crash mid-save) resumes to the same metrics and parameters."""
    module, config = tiny_config(case, tmp_path)
    whole = finished_runs[case]
    run_dir = copy_run(finished_runs, case, tmp_path)
    steps = checkpoint_steps(run_dir)
    assert len(steps) == 4
    for step in steps[2:]:
        shutil.rmtree(run_dir / "checkpoints" / str(step))
    (run_dir / "summary.json").unlink()
    module.main(dataclasses.replace(module.Config(), resume=str(run_dir)))
    assert read_csv(run_dir / "metrics.csv") == read_csv(whole / "metrics.csv")
    expected, got = (json.loads((d / "summary.json").read_text()) for d in (whole, run_dir))
    for key in ("final_return", "eval_return", "env_steps"):
        assert got[key] == expected[key], key
    assert got[f"resumed_after_{ITERATION[module.__name__]}"] == steps[1]
    (step_a, params_a), (step_b, params_b) = (restore_params(module, config, d) for d in (whole, run_dir))
    assert step_a == step_b == steps[-1]
    for a, b in zip(params_a, params_b, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", list(CASES))
def test_eval_reproduces_summary(case, finished_runs, capsys):
    run_dir = finished_runs[case]
    module = importlib.import_module(CASES[case][0])
    summary = json.loads((run_dir / "summary.json").read_text())
    capsys.readouterr()
    module.main(module.Config(eval=str(run_dir)))
    lines = capsys.readouterr().out.splitlines()
    means = [line.split("mean ")[1].split()[0] for line in lines if line.startswith("seed ")]
    assert means == [f"{r:.2f}" for r in summary["eval_return"]]
    module.main(module.Config(eval=str(run_dir), seed_index=1, eval_episodes=1))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("seed ")]
    assert len(lines) == 1 and lines[0].startswith(f"seed {summary['seeds'][1]} (index 1)")


@pytest.mark.slow  # gymnax draws classic-control frames through gymnasium and pygame: ~0.2 s a frame
@pytest.mark.parametrize("case", list(CASES))
def test_eval_draws_one_episode(case, finished_runs, tmp_path, capsys):
    """--gif: one episode of the chosen agent as an animated gif, a frame per step; an env gymnax cannot draw
    (GridWorld) exits 2 before anything is loaded."""
    run_dir = finished_runs[case]
    module = importlib.import_module(CASES[case][0])
    summary = json.loads((run_dir / "summary.json").read_text())
    gif = tmp_path / "episode.gif"
    if not envs.can_draw(summary["env"]):
        code, err = exit_code_and_error(capsys, module.main, module.Config(eval=str(run_dir), gif=str(gif)))
        assert code == 2 and len(err) == 1 and f"--gif: gymnax cannot draw {summary['env']}" in err[0], err
        assert not gif.exists()
        return
    capsys.readouterr()
    module.main(module.Config(eval=str(run_dir), seed_index=1, gif=str(gif)))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("one episode")]
    words = line.split()
    episode_return, length = float(words[words.index("return") + 1]), int(words[words.index("in") + 1])
    assert line.startswith(f"one episode of seed {summary['seeds'][1]} (index 1)")
    with Image.open(gif) as image:
        assert image.format == "GIF" and image.n_frames == length
    if summary["env"] == "CartPole-v1":
        assert episode_return == length  # +1 per step
    if summary["env"] == "Pendulum-v1":
        assert length == 200 and episode_return < 0


@pytest.mark.parametrize("case", list(CASES))
def test_nonfinite_stops_run_and_keeps_last_good_checkpoint(case, tmp_path, capsys):
    """A diverging run stops at the end of the chunk where a value first went non-finite, names the seeds and the
    iteration, and keeps the checkpoint before it, finite."""
    module, config = tiny_config(case, tmp_path / "runs", run_name="nan", **CASES[case][2])
    word = ITERATION[module.__name__]
    code, err = exit_code_and_error(capsys, module.main, config)
    run_dir = tmp_path / "runs" / "nan"
    rows = read_csv(run_dir / "metrics.csv")
    flagged = [(int(row[0]), int(row[1])) for row in rows[1:] if row[-1] == "True"]
    assert rows[0][-1] == "nonfinite" and flagged, "the planted divergence did not happen"
    first = min(u for _, u in flagged)
    seeds = sorted({s for s, u in flagged if u == first})
    chunk = module.num_iterations(config) // config.num_chunks
    last_good = first // chunk * chunk
    assert last_good > 0, "the plant diverges in the first chunk: no good checkpoint to check"
    assert code == 1
    assert err[-1].startswith(f"error: non-finite loss or parameters in seed(s) {', '.join(map(str, seeds))}, "
                              f"first at {word} {first} "), err
    assert f"the last good checkpoint is at {word} {last_good}" in err[-1]
    assert not (run_dir / "summary.json").exists()
    assert max(int(row[1]) for row in rows[1:]) == last_good + chunk - 1  # the bad chunk's rows are written too
    step, params = restore_params(module, config, run_dir)
    assert step == last_good and all(np.isfinite(p).all() for p in params if p.dtype.kind == "f")


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_sigint_leaves_a_resumable_run(case, run_script, tmp_path):
    """Ctrl-C during a run (here as soon as it starts compiling): the first chunk ends, metrics and a checkpoint
    are written, the exit code is 130; --resume completes the run to the numbers of an uninterrupted one."""
    name, tiny, _ = CASES[case]
    module, config = tiny_config(case, tmp_path / "runs", num_chunks=8, total_timesteps=2 * tiny["total_timesteps"])
    flags = cli_flags({**tiny, "num_chunks": 8, "total_timesteps": config.total_timesteps, "run_name": "cut",
                       "out_dir": tmp_path / "runs"})
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    process = subprocess.Popen([sys.executable, str(ROOT / f"{name}.py"), *flags], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # the signal handler is in place once the run's first line is out
        if "run dir" in line:
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=600)
    run_dir = tmp_path / "runs" / "cut"
    assert process.returncode == 130, err
    assert f"--resume {run_dir}" in err
    assert not (run_dir / "summary.json").exists()
    assert checkpoint_steps(run_dir) == [module.num_iterations(config) // 8]
    result = run_script(f"{name}.py", "--resume", str(run_dir), add_out_dir=False)
    assert result.returncode == 0, result.stderr
    assert "resuming after" in result.stdout
    module.main(dataclasses.replace(config, run_name="whole"))
    assert read_csv(run_dir / "metrics.csv") == read_csv(tmp_path / "runs" / "whole" / "metrics.csv")


def damage_newest_checkpoint(run_dir):
    newest = run_dir / "checkpoints" / str(checkpoint_steps(run_dir)[-1])
    for path in newest.rglob("*"):
        if path.is_file() and path.suffix != ".json" and path.stat().st_size > 0:
            path.write_bytes(b"\0" * 16)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_resume_and_eval_exit_2_and_change_nothing(case, finished_runs, tmp_path, capsys):
    name = CASES[case][0]
    module = importlib.import_module(name)
    run_dir = copy_run(finished_runs, case, tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    other = "td3" if name != "td3" else "ppo"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"algo": other}))
    cases = [
        (dict(resume=str(tmp_path / "nowhere")), "--resume: no run directory"),
        (dict(eval=str(tmp_path / "nowhere")), "--eval: no run directory"),
        (dict(resume=str(foreign)), f"is a run of {other}, not of "),
        (dict(resume=str(run_dir), seed=7), "--seed 7 (run: 0) would change the run's results"),
        (dict(eval=str(run_dir), seed_index=2), "--seed-index 2 is out of range: the run has 2 agents"),
    ]
    for overrides, message in cases:
        code, err = exit_code_and_error(capsys, module.main, module.Config(**overrides))
        assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], (overrides, err)

    # A checkpoint of another env in this run's directory.
    other_env = tmp_path / "other-env"
    shutil.copytree(run_dir, other_env)
    saved = json.loads((other_env / "config.json").read_text())
    (other_env / "config.json").write_text(json.dumps({**saved, "env": OTHER_ENV.get(case, "Acrobot-v1")}))
    code, err = exit_code_and_error(capsys, module.main, module.Config(eval=str(other_env)))
    assert code == 2 and "does not belong to this run directory" in err[0], err

    damage_newest_checkpoint(run_dir)
    code, err = exit_code_and_error(capsys, module.main, module.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1 and "cannot be read" in err[0] and "damaged" in err[0], err
    shutil.rmtree(run_dir / "checkpoints")
    code, err = exit_code_and_error(capsys, module.main, module.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1 and "has no checkpoint" in err[0], err
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert {p: b for p, b in before.items() if "checkpoints" not in p.parts} == after


@pytest.mark.parametrize("case", list(CASES))
def test_num_chunks_must_divide_the_run(case, tmp_path, capsys):
    module, config = tiny_config(case, tmp_path / "runs", num_chunks=3)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and len(err) == 1 and "--num-chunks 3 does not divide" in err[0], err
    assert not (tmp_path / "runs").exists()
