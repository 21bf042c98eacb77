"""Training a new or resumed run: its directory claimed, the job compiled, fresh agents or a checkpoint's, then
chunks of pieces, each ending in a non-finite check and a checkpoint, a stop on a signal, and at the end the final
evaluation and the summaries."""

import contextlib
import dataclasses
import os
import shlex
import signal
import sys
import time

import jax
import numpy as np

from scanrl.harness.agents import (
    any_process,
    collective,
    exit_on_lost_peers,
    gather,
    local_agents,
)
from scanrl.harness.checkpoints import Checkpoints
from scanrl.harness.flags import ConfigError, flag
from scanrl.harness.job import awake, compile_job, plan, run_evaluation, run_pieces
from scanrl.harness.metrics import Progress, plural
from scanrl.harness.rundir import RunDirectory
from scanrl.harness.stops import RunStopped, StopRequest, callback_failure, nonfinite_stop, write_failed
from scanrl.harness.summaries import write_summaries
from scanrl.harness.sweeps import point_label, sweep_overrides

# Seconds of training between checkpoints where --num-chunks is not given: a kill loses at most about this much.
CHECKPOINT_S = 60


def start_or_resume(job, checkpoints, run_dir) -> tuple:
    """-> (runner, metrics so far or None, iterations done): fresh agents, or --resume's newest readable checkpoint;
    (None, None, done) for a finished run, which is left alone."""
    restored = None
    if job.config.resume is not None:
        restored = checkpoints.restore("--resume", job.algorithm.name, job.config, job.abstract_runner, True)
        if restored is None and job.lead:
            print("no checkpoint yet (the run stopped before its first chunk ended): starting it again")
    if restored is None:
        return job.fresh_agents(), None, 0
    runner, history, done = restored
    finished = done == job.num_iterations and os.path.exists(os.path.join(run_dir.path, "summary.json"))
    if job.lead:
        print(f"{run_dir.path} is finished ({done} of {done} iterations, summary.json written): nothing to resume"
              if finished else f"resuming after iteration {done} of {job.num_iterations}")
    return (None, None, done) if finished else (runner, history, done)


def train_chunks(job, compiled, runner, history, done, checkpoints, run_dir, progress, stop):
    """The chunks after iteration `done`, each followed by a non-finite check, a checkpoint and a stop if a signal
    came. -> (runner, every iteration's metrics). A chunk's rows go to metrics.csv once its checkpoint is committed:
    rows on disk never run ahead of a checkpoint, so a kill at any moment leaves a run --resume goes on from."""
    config, profile_dir = job.config, os.path.join(run_dir.path, "profile")
    first, pending, signum = done, None, 0  # pending: (first iteration, rows) of the chunk whose checkpoint is written

    def write_pending():
        with collective("a chunk's checkpoint"):
            checkpoints.wait()
        if pending is not None and job.lead:
            run_dir.append_metrics(*pending)

    while done < job.num_iterations and not signum:
        end = job.num_iterations if job.ends is None else next(e for e in job.ends if e > done)
        deadline = time.perf_counter() + CHECKPOINT_S if job.ends is None else float("inf")
        profiled = config.profile and done == first and job.lead
        if profiled:  # one piece, as a chunk of its own: a trace of more outgrows memory
            end = done + job.length
        with jax.profiler.trace(profile_dir, create_perfetto_trace=True) if profiled else contextlib.nullcontext():
            runner, metrics, reached = run_pieces(compiled, job, runner, done, end, progress if job.lead else None,
                                                  stop, deadline)
        write_pending()
        diverged = bool(metrics["nonfinite"].any())
        if diverged:
            if job.lead:  # the diverged rows, to see where; --resume would go on from the last checkpoint
                run_dir.append_metrics(done, metrics)
            check_divergence(job, history, metrics, done)
        history = metrics if history is None else jax.tree.map(
            lambda a, b: np.concatenate([a, b], axis=1), history, metrics)
        with collective("a chunk's checkpoint"):  # orbax syncs the processes
            checkpoints.save(reached, runner, history, job.algorithm.name, config)
        pending = None if diverged else (done, metrics)
        done = reached
        signum = any_process(stop.signal or 0)  # a signal to any process stops them all
    write_pending()
    if done < job.num_iterations:
        raise RunStopped(f"{signal.Signals(signum).name}: stopped after iteration {done} of {job.num_iterations}, "
                         f"metrics and checkpoint written; continue with: python {job.algorithm.script} --resume "
                         f"{shlex.quote(run_dir.path)}", 128 + signum)
    if config.profile and job.lead:
        print(f"profiler trace of iterations {first + 1} to {first + job.length} in {profile_dir}: open its "
              "*.trace.json.gz at https://ui.perfetto.dev")
    return runner, history


def check_divergence(job, history, metrics, start):
    """A chunk (iterations after `start`) with `nonfinite` flags set stops the run (RunStopped), unless it is a sweep
    with finite points left: then each newly diverged point is named in a warning and trains on (its numbers NaN, its
    summary's `diverged_at_iteration` set) while the healthy points finish."""
    names = [f.name for f in dataclasses.fields(job.config)
             if f.name in ("learning_rate", "max_grad_norm") or f.name.endswith("_lr")] or ["learning_rate"]
    hint = "Lower " + " or ".join(flag(name) for name in names)
    if ":" in job.config.env:  # your own env (module:name) may be where the NaN came from
        hint += f", or check that --env {job.config.env} returns finite observations and rewards"
    flags, num_points = metrics["nonfinite"], len(job.points)
    by_point = flags.reshape(num_points, job.config.num_seeds, -1).any(axis=1)  # (points, iterations)
    now = by_point.any(axis=1)
    before = (np.zeros(num_points, bool) if history is None
              else history["nonfinite"].reshape(num_points, job.config.num_seeds, -1).any(axis=(1, 2)))
    if num_points == 1 or (now | before).all():
        raise nonfinite_stop(job.names, start, flags, hint)
    if job.lead:
        for p in np.flatnonzero(now & ~before):
            print(f"warning: sweep point {point_label(job.points[p])} diverged (non-finite loss or parameters, first "
                  f"at iteration {start + by_point[p].argmax() + 1}); the other points train on. {hint}",
                  file=sys.stderr, flush=True)


def train(algorithm, config, points, exit_process=False):
    """A new or resumed run: planned, its directory claimed, compiled, trained in chunks, evaluated, summarised.
    `exit_process`: a command line's run, which a second Ctrl-C ends at once (`StopRequest`)."""
    job = plan(algorithm, config, points)
    config = job.config  # with its device count
    if job.lead:
        for note in sweep_overrides(algorithm, config, points):
            print(note)
    run_dir = None
    try:
        with exit_on_lost_peers("a step the processes take together"):  # at a collective anywhere in the run
            # From here on Ctrl-C or SIGTERM (during compilation too) stop the run where the running chunk ends.
            with StopRequest(exit_process) as stop:
                run_dir = RunDirectory(algorithm, config, points, job.lead)  # claimed, config.json written, owned
                if job.lead:
                    print(describe_run(job, run_dir), flush=True)
                stop.doing, doing = "stopping once compiled, before any training", stop.doing
                try:
                    compiled, evaluation, compile_s = awake(compile_job, job)
                except ConfigError:
                    run_dir.give_up()  # a new run that cannot start leaves nothing behind
                    raise
                stop.doing = doing
                signum = any_process(stop.signal or 0)
                if signum:  # during compilation: nothing trained yet, nothing to wait for
                    raise RunStopped(f"{signal.Signals(signum).name}: stopped while compiling, before any training: "
                                     f"nothing was trained{' further' if config.resume else ''}; "
                                     f"{'continue' if config.resume else 'start it'} with: python {algorithm.script} "
                                     f"--resume {shlex.quote(run_dir.path)}", 128 + signum)
                if job.lead:
                    print(f"compiled in {compile_s:.1f} s", flush=True)
                trained = train_run(job, compiled, run_dir, stop)
                if trained is not None:
                    runner, history, done, start = trained
                    summarize(job, evaluation, runner, history, run_dir, {
                        "resumed_after_iteration": done or None, "compile_s": compile_s,
                        "train_s": time.perf_counter() - start}, stop)
    finally:  # a new run's directory is owned until the end
        if run_dir is not None:
            run_dir.release()


def describe_run(job, run_dir) -> str:
    """The run's first line: what trains, how long, its checkpoints, its devices and its directory."""
    algorithm, config = job.algorithm, job.config
    described = (f"{plural(config.num_seeds, 'seed')} x {len(job.points)} sweep points" if run_dir.sweep
                 else plural(len(job.keys), "agent"))
    step = algorithm.steps_per_iteration(config)
    steps = f"{config.total_timesteps:,} steps"
    if job.num_iterations * step != config.total_timesteps:  # say so where it rounds down
        steps = (f"{job.num_iterations * step:,} steps (--total-timesteps {config.total_timesteps:,} in whole "
                 f"iterations of {step:,})")
    chunks = f"checkpoints every {CHECKPOINT_S} s" if job.ends is None else f"{config.num_chunks} chunk(s)"
    return (f"{algorithm.name} on {config.env}: {described} x {steps}, {chunks}, on {job.mesh.devices.size} "
            f"device(s), run dir {run_dir.path}")


def train_run(job, compiled, run_dir, stop):
    """The chunks of a compiled run, with its wandb runs and checkpoints -> (runner, history, iterations it started
    from, its perf_counter start); None for a finished run. A failed write ends it in one line (exit 1)."""
    algorithm, config = job.algorithm, job.config
    run_dir.start_wandb()
    progress = Progress(config, job.points, local_agents(job.sharding, len(job.keys)), run_dir.wandb_runs,
                        algorithm.metric_keys_of(config), config.log_every)
    try:
        # exit_on_lost_peers is left first: a lost peer ends this process before orbax waits for it.
        with Checkpoints(run_dir.path, config.keep_checkpoints) as checkpoints, exit_on_lost_peers():
            runner, history, done = start_or_resume(job, checkpoints, run_dir)
            if runner is None:
                run_dir.finish_wandb()
                return None
            if job.lead:
                run_dir.open_metrics(algorithm.metric_keys_of(config), history)
            progress.start, progress.last = time.perf_counter(), job.num_iterations - 1
            progress.start_steps = int(history["env_steps"][0, done - 1]) if done else 0
            runner, history = train_chunks(job, compiled, runner, history, done, checkpoints, run_dir, progress,
                                           stop)
    except BaseException as error:
        run_dir.finish_wandb(exit_code=1)
        if isinstance(error, OSError):  # metrics.csv or a checkpoint could not be written
            raise write_failed(error, algorithm.script, run_dir.path) from None
        checkpoints_dir = os.path.join(run_dir.path, "checkpoints")
        trained = os.path.isdir(checkpoints_dir) and any(s.isdigit() for s in os.listdir(checkpoints_dir))
        failure = callback_failure(error, algorithm.script, run_dir.path, trained or config.resume is not None)
        if failure is None:
            raise
        if not trained:
            run_dir.give_up()
        raise failure from None
    return runner, history, done, progress.start


def summarize(job, evaluation, runner, history, run_dir, extra, stop=None):
    """The final evaluation of every agent (`evaluation`: compile_job's; a signal stops it within a piece), the
    end-of-run report and the run directory's summaries."""
    algorithm, config, num_agents = job.algorithm, job.config, len(job.keys)
    if job.lead:
        print(f"trained in {extra['train_s']:.1f} s; evaluating {plural(num_agents, 'agent')} on "
              f"{plural(config.eval_episodes, 'episode')} each, then writing the summaries and plots", flush=True)

    def stopped(signum):
        return RunStopped(f"{signum.name}: stopped during the final evaluation; training is finished, its checkpoint "
                          "and metrics.csv written, summary.json not: evaluate and summarise it with: python "
                          f"{algorithm.script} --resume {shlex.quote(run_dir.path)}", 128 + signum, abandon=True)

    eval_returns = run_evaluation(evaluation, job, runner, stop, stopped)
    if algorithm.write_outputs is not None:  # its outputs are made from the final runners, on the host
        runner = gather(runner, "the final runners")
    if not job.lead:
        return
    done = extra["resumed_after_iteration"] or 0

    def count_and_rate(key):
        """Per agent at the end; per second over all agents of this process's training (after iteration `done`)."""
        count = int(history[key][0, -1])
        return count, (count - (int(history[key][0, done - 1]) if done else 0)) * num_agents / extra["train_s"]

    env_steps, sps = count_and_rate("env_steps")
    extra = {**extra, "sps": sps, "num_devices": int(job.mesh.devices.size), "num_processes": jax.process_count()}
    counts, speeds = f"{env_steps} env steps", f"{sps:.0f} env steps/s"
    if "updates" in history:  # gradient updates, where an algorithm counts them apart from iterations
        updates, updates_per_s = count_and_rate("updates")
        extra = {"updates": updates, **extra, "updates_per_s": updates_per_s}
        counts, speeds = f"{counts} and {updates} updates", f"{speeds} and {updates_per_s:.0f} updates/s"
    print(f"\n{'=' * 72}\n{algorithm.name} on {config.env}: {plural(num_agents, 'agent')}, {counts} each")
    print(f"compile {extra['compile_s']:.1f} s, train {extra['train_s']:.1f} s, {speeds} over all agents")
    try:
        write_summaries(run_dir, algorithm, history, eval_returns.mean(axis=1), runner, extra)
    except OSError as error:
        run_dir.finish_wandb(exit_code=1)
        raise write_failed(error, algorithm.script, run_dir.path) from None
