"""scanrl/harness/stops.py: a run stops where a piece of the scan ends, resumable: on Ctrl-C or SIGTERM
(while compiling, in a single-chunk run, during a final evaluation that never ends, a second one at once), on a failed
write, on a host callback that raises, and on non-finite values (at the last good checkpoint; a sweep's diverging point
is reported while the healthy points finish)."""

import errno
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from cases import CASES, checkpoint_steps, cli_flags, exit_code_and_error, read_csv, restore_params, tiny_config
from conftest import ROOT

from scanrl import harness


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
    chunk = module.ALGORITHM.num_iterations(config) // config.num_chunks
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


@pytest.mark.slow
def test_a_signal_during_compilation_stops_before_training_saying_nothing_was_trained(tmp_path, capsys,
                                                                                       monkeypatch):
    """SIGTERM while the program compiles used to train the whole first chunk first."""

    from scanrl.harness import loop

    compile_job = loop.compile_job

    def compile_then_signal(*args):
        compiled = compile_job(*args)
        os.kill(os.getpid(), signal.SIGTERM)
        return compiled

    monkeypatch.setattr(loop, "compile_job", compile_then_signal)
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


@pytest.mark.slow
def test_a_signal_while_the_summaries_are_written_stops_at_once_and_resume_writes_them(tmp_path, capsys, monkeypatch):
    """Ctrl-C or SIGTERM while the summaries are written said "stopping after the iterations under way" and went on:
    it stops at once (nothing is left to wait for), saying what is finished and how to write the summary."""
    from scanrl.harness.record import RunRecord

    finish = RunRecord.finish

    def signalled(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        return finish(*args)

    monkeypatch.setattr(RunRecord, "finish", signalled)
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="summary", num_chunks=1)
    code, err = exit_code_and_error(capsys, module.main, config)
    run_dir = tmp_path / "runs" / "summary"
    assert code == 128 + signal.SIGTERM and err == [
        "SIGTERM: stopped while writing the summaries; training and evaluation are finished, the checkpoint and "
        f"metrics.csv written, summary.json perhaps not: write it with: python ppo.py --resume {run_dir}"], err
    assert not (run_dir / "summary.json").exists()
    monkeypatch.setattr(RunRecord, "finish", finish)
    module.main(module.Config(resume=str(run_dir)))
    assert (run_dir / "summary.json").exists()


def test_the_resume_command_names_your_own_env():
    """scanrl imports code only when the command line names it: a run on your own env resumes with --env."""
    from scanrl.harness.stops import resume_command

    assert resume_command("ppo.py", "runs/a b", "corridor:Corridor") == \
        "python ppo.py --resume 'runs/a b' --env corridor:Corridor"
    assert resume_command("ppo.py", "runs/a", "brax/halfcheetah:mjx") == "python ppo.py --resume runs/a"


@pytest.mark.parametrize("writer", ["metrics", "checkpoint", "summary"])
def test_a_failed_write_stops_with_one_line_and_the_run_resumes(writer, finished_runs, tmp_path, capsys,
                                                                monkeypatch):
    """A full disk while metrics.csv, a checkpoint or the summary is written: one line naming the file and the
    cause, exit 1, the --resume command; resuming then gives the uninterrupted run."""

    import ppo
    from scanrl.harness.checkpoints import Checkpoints
    from scanrl.harness.metrics import MetricsCsv
    from scanrl.harness.record import RunRecord

    target = {"metrics": (MetricsCsv, "append"), "checkpoint": (Checkpoints, "save"),
              "summary": (RunRecord, "write_summaries")}[writer]
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


@pytest.mark.slow
def test_a_diverging_sweep_point_is_reported_while_the_healthy_points_finish(tmp_path, capsys):
    """One point's NaNs used to stop the whole sweep, with no summary for the healthy points: the point is named in
    a warning, the others train to the end, and the ranking puts it last, marked diverged."""
    module, config = tiny_config("ppo", tmp_path, num_seeds=2, run_name="sweep", sweep=("lr=2.5e-4,1e30",))
    module.main(config)
    err = capsys.readouterr().err
    assert err.count("warning: sweep point learning_rate=1e+30 diverged (non-finite loss or parameters, first at "
                     "iteration 1); the other points train on.") == 1, err
    ranking = json.loads((tmp_path / "sweep" / "summary.json").read_text())["ranking"]
    assert [(e["point"], e["diverged_at_iteration"]) for e in ranking] == [("learning_rate=0.00025", None),
                                                                             ("learning_rate=1e+30", 1)]
    healthy = read_csv(tmp_path / "sweep" / "learning_rate=0.00025" / "metrics.csv")
    assert len(healthy) == 1 + 4 * 2 and all(row[-1] == "False" for row in healthy[1:])


# docs/envs.md's corridor, with episodes that never end (a time limit of 1e9 steps), and with a host callback that
# raises inside the compiled run.
USER_ENVS = (ROOT / "docs" / "examples" / "corridor.py").read_text() + '''

@struct.dataclass
class EndlessParams(Params):
    max_steps_in_episode: int = 1_000_000_000


class Endless(Corridor):
    @property
    def default_params(self):
        return EndlessParams()

    def step_env(self, key, state, action, params):
        obs, state, reward, _, info = super().step_env(key, state, action, params)
        return obs, state, reward, jnp.bool_(False), info


class Raises(Corridor):
    def step_env(self, key, state, action, params):
        def fail(a):
            raise RuntimeError("the simulator is gone")
        action = jax.pure_callback(fail, jax.ShapeDtypeStruct((), jnp.int32), action, vmap_method="broadcast_all")
        return super().step_env(key, state, action, params)
'''


def start_ppo(tmp_path, *flags):
    (tmp_path / "user_envs.py").write_text(USER_ENVS)
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": ""}
    return subprocess.Popen([sys.executable, str(ROOT / "ppo.py"), *flags, "--out-dir", str(tmp_path / "runs")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_ctrl_c_stops_a_final_evaluation_whose_episodes_never_end(tmp_path):
    """The final evaluation runs in pieces: Ctrl-C stops it within a piece, even where no episode ever ends (it ran
    until the time limit of 1e9 steps, and signals were not heard), saying that training is kept and how to finish."""
    process = start_ppo(tmp_path, "--env", "user_envs:Endless", "--total-timesteps", "4096", "--num-seeds", "2",
                        "--num-chunks", "2", "--run-name", "endless")
    for line in process.stdout:
        if line.startswith("trained in"):
            break
    time.sleep(1)
    process.send_signal(signal.SIGINT)
    start = time.perf_counter()
    _, err = process.communicate(timeout=60)
    run_dir = tmp_path / "runs" / "endless"
    assert process.returncode == 130 and time.perf_counter() - start < 10, err
    assert err.strip().splitlines()[-1] == (
        "SIGINT: stopped during the final evaluation; training is finished, its checkpoint and metrics.csv written, "
        f"summary.json not: evaluate and summarise it with: python ppo.py --resume {run_dir} --env user_envs:Endless")
    assert checkpoint_steps(run_dir) == [4, 8] and not (run_dir / "summary.json").exists()


@pytest.mark.slow
def test_a_host_callback_that_raises_in_the_run_is_one_line_and_leaves_no_run_directory(tmp_path):
    """A user env's pure_callback raising inside the compiled run was 100 lines (a traceback per call, then JAX's own
    at exit): one line with the exception and where it was raised; nothing trained, so no run directory is left."""
    process = start_ppo(tmp_path, "--env", "user_envs:Raises", "--total-timesteps", "2048", "--num-seeds", "2")
    out, err = process.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert process.returncode == 1 and len(lines) == 1, err
    assert lines[0].startswith("error: a host callback raised RuntimeError: the simulator is gone inside the "
                               f"compiled run, at {tmp_path / 'user_envs.py'}:"), lines
    assert lines[0].endswith("training stopped, nothing was trained, and no run directory is left")
    assert not any((tmp_path / "runs").iterdir())


def test_a_failed_write_names_the_file_and_what_fixes_it():
    """A write through a temporary that failed (chattr +i on metrics.csv: os.replace refused) named the temporary
    and said "make room": the file it replaces is named, and the advice follows the cause."""
    from scanrl.harness.stops import write_failed

    refused = OSError(errno.EPERM, "Operation not permitted", "/r/.metrics.csv.0123456789ab.tmp", None,
                      "/r/metrics.csv")
    assert str(write_failed(refused, "ppo.py", "/r", "CartPole-v1")) == (
        "error: cannot write /r/metrics.csv: Operation not permitted; training stopped, the checkpoints written so "
        "far are kept; fix its permissions (chmod u+w, chattr -i), then continue with: python ppo.py --resume /r")
    full = OSError(errno.ENOSPC, "No space left on device", "/r/.summary.json.00000000000a.tmp")
    assert str(write_failed(full, "ppo.py", "/r", "CartPole-v1")).startswith(
        "error: cannot write /r/summary.json: No space left on device; training stopped, the checkpoints written so "
        "far are kept; make room, then")
    planted = OSError(errno.ELOOP, "a link, not a folder of the run (it is never written through)",
                      "/r/damaged_checkpoints")
    assert "; move it away (the run makes its own), then continue with: python ppo.py --resume /r" in \
        str(write_failed(planted, "ppo.py", "/r", "CartPole-v1"))
    limited = OSError(0, "File too large", "/r/checkpoints")  # ulimit -f, as orbax's error says it
    assert str(write_failed(limited, "ppo.py", "/r", "CartPole-v1")) == (
        "error: cannot write /r/checkpoints: File too large; training stopped, the checkpoints written so far are "
        "kept; raise the file-size limit (ulimit -f), then continue with: python ppo.py --resume /r")
