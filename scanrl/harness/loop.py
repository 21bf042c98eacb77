"""A run, as the loop and its record: the job planned (`program.plan`), its record opened (`record.RunRecord`: the run
directory claimed or taken over), its programs compiled, then chunks of pieces of the scan from fresh agents
(`program.Job.fresh_agents`) or --resume's checkpoint (`resume.restored_run`), the record called after each piece and
each chunk (a non-finite check, a checkpoint, the rows, a stop on a signal), the final evaluation in pieces awake to a
signal, and the record's summaries. --eval and the contract check run its compile and evaluation."""

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from scanrl.envs.custom import import_reference
from scanrl.harness import stops
from scanrl.harness.agents import to_agents
from scanrl.harness.files import folder
from scanrl.harness.flags import ConfigError, flag
from scanrl.harness.metrics import plural
from scanrl.harness.program import CHECKPOINT_S, plan
from scanrl.harness.record import RunRecord
from scanrl.harness.resume import restored_run
from scanrl.harness.sweeps import point_label


def train(algorithm, config, points, exit_process=False):
    """A new or resumed run. `exit_process`: a command line's run, which a second Ctrl-C ends at once."""
    job, record = plan(algorithm, config, points), None
    try:
        # From here on Ctrl-C or SIGTERM (during compilation too) stop the run where the running chunk ends, and a
        # lost peer at a collective anywhere in the run is one line.
        with job.processes.lost_peers("a step the processes take together"), stops.StopRequest(exit_process) as stop:
            described = job.describe()
            record = RunRecord(job)  # claimed (config.json written) or taken over, and owned
            if job.lead:
                print(f"{described}, run dir {record.path}", flush=True)
            compiled, evaluation, compile_s = compile_run(job, record, stop)
            trained = train_run(job, compiled, record, stop)
            if trained is None:  # a finished run, left alone
                return
            runner, history, extra = trained
            eval_returns = run_evaluation(evaluation, job, runner, stop, "stopped during the final evaluation; "
                                          "training is finished, its checkpoint and metrics.csv written, summary.json "
                                          f"not: evaluate and summarise it with: {record.resume}")
            stop.stop_at_once("stopped while writing the summaries; training and evaluation are finished, the "
                              f"checkpoint and metrics.csv written, summary.json perhaps not: write it with: "
                              f"{record.resume}")
            record.finish(eval_returns, runner, history, {**extra, "compile_s": compile_s})
    finally:  # the run directory is owned until the end
        if record is not None:
            record.release()


def compile_job(job, training=True) -> tuple:
    """-> (the compiled training program, None without `training`; the compiled evaluation; seconds taken). From shapes
    alone, so an error the user's own env raised while traced is refused (ConfigError) before anything is allocated.
    Tracing the training gives `job.metric_keys`."""
    start = time.perf_counter()
    try:
        count = jax.ShapeDtypeStruct((), jnp.int32)  # a piece's first iteration, an evaluation piece's last step
        compiled = job.segment.lower(job.abstract_runner, count, job.swept).compile() if training else None
        keys = jax.ShapeDtypeStruct(job.keys.shape, job.keys.dtype, sharding=job.sharding)
        begin, steps = job.evaluate
        begin = begin.lower(keys, job.abstract_runner, job.swept).compile()
        carry = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=job.sharding), begin.out_info)
        evaluation = (begin, steps.lower(keys, job.abstract_runner, job.swept, carry, count).compile())
    except Exception as error:
        failure = error if isinstance(error, ConfigError) else stops.env_failure(job.config, error)
        failure = failure or stops.overflow_failure(job.algorithm, job.config, error)
        if failure is None:
            raise
        raise failure from None
    return compiled, evaluation, time.perf_counter() - start


def compile_run(job, record, stop):
    """A run's programs (`compile_job`), compiled with the main thread awake to signals: a new run that cannot start
    (ConfigError) leaves no directory behind; a signal during compilation stops it before any training."""
    stop.doing, doing = "stopping once compiled, before any training", stop.doing
    try:
        compiled = awake(compile_job, job)
    except ConfigError:
        record.give_up()
        raise
    stop.doing = doing
    if signum := job.processes.any(stop.signal or 0):  # nothing trained yet, nothing to wait for
        resume = job.config.resume is not None
        raise stops.RunStopped(f"{signal.Signals(signum).name}: stopped while compiling, before any training: nothing "
                               f"was trained{' further' if resume else ''}; {'continue' if resume else 'start it'} "
                               f"with: {record.resume}", 128 + signum)
    if job.lead:
        need = compiled_bytes([compiled[0], compiled[1][1]])
        size = f"{need / 1e9:.1f} GB" if need >= 1e9 else f"{max(1, round(need / 1e6))} MB"
        print(f"compiled in {compiled[2]:.1f} s" + (f" (its programs need about {size} of memory)" if need else ""),
              flush=True)
    return compiled


def compiled_bytes(programs) -> int:
    """XLA's own figure for the largest compiled program (arguments, outputs and temporaries per device; on CPU the
    devices share the host's memory), 0 where XLA gives none: reported as the run compiles, not checked again."""
    stats = [program.memory_analysis() for program in programs]
    if not stats or None in stats:
        return 0
    devices = len(jax.local_devices()) if jax.local_devices()[0].platform == "cpu" else 1
    return devices * max(s.argument_size_in_bytes + s.output_size_in_bytes - s.alias_size_in_bytes
                         + s.temp_size_in_bytes for s in stats)


def on_agents(runner, sharding):
    """The runner with every leaf split over the agents' devices: a program hands back an empty leaf (a MuJoCo model's
    zero-size arrays) replicated, not split, and would refuse it next time."""
    return jax.tree.map(lambda x: x if x.sharding == sharding else jax.device_put(x, sharding), runner)


def run_pieces(compiled, job, runner, start, end, record=None, stop=None, deadline=float("inf")):
    """Pieces of the compiled scan from iteration `start` until a chunk ends: at `end`, or after a piece once the clock
    passes `deadline` (time.perf_counter) or a stop request (`stop`) came, on any process; a piece goes to the
    `record` (its progress) while the next runs. -> (runner, every agent's metrics of the iterations run as numpy,
    iteration reached)"""
    pieces = []
    while start < end:
        runner, rows = compiled(on_agents(runner, job.sharding), np.int32(start), job.swept)  # not awaited
        if record is not None and pieces:
            wait_ready(pieces[-1][1])  # the next piece is queued meanwhile
            record.piece(pieces[-1][0], job.length, pieces[-1][1])
        pieces.append((start, rows))
        start += job.length
        due = time.perf_counter() > deadline or (stop is not None and bool(stop.signal))
        if start < end and job.processes.any(int(due)):
            break
    wait_ready(pieces[-1][1])
    if record is not None:
        record.piece(pieces[-1][0], job.length, pieces[-1][1])
    gathered = job.processes.gather([rows for _, rows in pieces])
    return runner, {key: np.concatenate([rows[key] for rows in gathered], axis=1) for key in gathered[0]}, start


def wait_ready(tree, stop=None, stopped=None):
    """Waits for a program's results with the host awake, so a signal's handler runs at once (a blocking read holds
    it until the program ends, which may be never); with `stop`, RunStopped `{SIGNAL}: {stopped}` once one came."""
    for leaf in jax.tree.leaves(tree):
        pause = 0.001
        while not leaf.is_ready():
            if stop is not None and stop.signal:
                raise stops.RunStopped(f"{stop.signal.name}: {stopped}", 128 + stop.signal, abandon=True)
            time.sleep(pause)
            pause = min(2 * pause, 0.02)  # at most 20 ms late; the next piece is queued meanwhile


def awake(fn, *args):
    """`fn(*args)` (a compile) in a thread while this, the main thread, stays awake: Python runs a signal's handler
    only in the main thread, between bytecodes, and XLA's compile holds it for seconds to minutes."""
    done = {}

    def run():
        try:
            done["value"] = fn(*args)
        except BaseException as error:  # noqa: BLE001 - handed to the main thread as it is
            done["error"] = error

    thread = threading.Thread(target=run, daemon=True)  # a process that exits does not wait for it
    thread.start()
    while thread.is_alive():
        thread.join(0.05)
    if "error" in done:
        raise done["error"]
    return done["value"]


# Env steps of the final evaluation (and --eval) between two looks of the host: its progress, a stop request.
EVAL_PIECE = 1_000


def run_evaluation(evaluation, job, runner, stop, stopped, what="the final evaluation"):
    """Every agent's evaluation (`evaluation`: compile_job's) in pieces of EVAL_PIECE env steps, until every episode
    ended or the env's time limit: its progress printed every 10 s by process 0, a stop request (`stop`) ending it
    within a piece (`stopped`: what the line says). -> each agent's episode returns (numpy, agents x episodes)."""
    start, steps = evaluation
    stop.doing = f"stopping {what}"
    keys = to_agents(job.eval_keys, job.sharding)
    runner = on_agents(runner, job.sharding)
    carry, shown = on_agents(start(keys, runner, job.swept), job.sharding), time.perf_counter()
    for until in range(EVAL_PIECE, job.eval_steps + EVAL_PIECE, EVAL_PIECE):
        carry = on_agents(steps(keys, runner, job.swept, carry, np.int32(min(until, job.eval_steps))), job.sharding)
        wait_ready(carry.finished, stop, stopped)
        local = [np.asarray(shard.data) for shard in carry.finished.addressable_shards]
        finished, episodes = sum(int(x.sum()) for x in local), sum(x.size for x in local)
        if not job.processes.any(int(finished < episodes)):
            break
        if job.lead and time.perf_counter() - shown > 10:
            shown = time.perf_counter()
            print(f"{what}: {finished:,} of {episodes:,} episodes ended after {until:,} env steps (the "
                  f"time limit: {job.eval_steps:,}); Ctrl-C stops it", flush=True)
    return job.processes.gather(carry.returns, what)


def train_run(job, compiled, record, stop):
    """The chunks of a compiled run, in its record -> (runner, history, {resumed_after_iteration, train_s}); None for a
    finished run. A failed write ends it in one line (exit 1)."""
    config = job.config
    try:
        # lost_peers is left first: a lost peer ends this process before orbax waits for it.
        with record.saving() as checkpoints, job.processes.lost_peers():
            restored = restored_run(job, checkpoints, record.path) if config.resume is not None else None
            runner, history, done = restored or (job.fresh_agents(), None, 0)
            if runner is None:
                return None
            record.start(history, done)
            start = time.perf_counter()
            runner, history = train_chunks(job, compiled, runner, history, done, record, stop)
    except BaseException as error:
        if (failure := record.failed(error)) is None:
            raise
        raise failure from None
    train_s = time.perf_counter() - start
    if job.lead:
        print(f"trained in {train_s:.1f} s; evaluating {plural(len(job.keys), 'agent')} on "
              f"{plural(config.eval_episodes, 'episode')} each, then writing the summaries and plots", flush=True)
    return runner, history, {"resumed_after_iteration": done or None, "train_s": train_s}


def train_chunks(job, compiled, runner, history, done, record, stop):
    """The chunks after iteration `done`, each handed to the record (a checkpoint, the rows) after a non-finite check,
    and a stop if a signal came. -> (runner, every iteration's metrics)."""
    config, profile_dir = job.config, os.path.join(record.path, "profile")
    first, signum = done, 0
    while done < job.num_iterations and not signum:
        end = job.num_iterations if job.ends is None else next(e for e in job.ends if e > done)
        deadline = time.perf_counter() + CHECKPOINT_S if job.ends is None else float("inf")
        profiled = config.profile and done == first and job.lead
        if profiled:  # one piece, as a chunk of its own: a trace of more outgrows memory
            end = done + job.length
        tracing = jax.profiler.trace(folder(profile_dir), create_perfetto_trace=True) if profiled else None
        with tracing or contextlib.nullcontext():
            runner, metrics, reached = run_pieces(compiled, job, runner, done, end, record if job.lead else None,
                                                  stop, deadline)
        diverged = check_divergence(job, history, metrics, done) if metrics["nonfinite"].any() else None
        history = metrics if history is None else jax.tree.map(
            lambda a, b: np.concatenate([a, b], axis=1), history, metrics)
        record.chunk(done, reached, runner, history, metrics, save=diverged is None)
        if diverged is not None:  # the rows written, the last good checkpoint kept
            raise diverged
        done = reached
        signum = job.processes.any(stop.signal or 0)  # a signal to any process stops them all
    record.trained()
    if done < job.num_iterations:
        raise stops.RunStopped(f"{signal.Signals(signum).name}: stopped after iteration {done} of "
                               f"{job.num_iterations}, metrics and checkpoint written; continue with: {record.resume}",
                               128 + signum)
    if config.profile and job.lead:
        print(f"profiler trace of iterations {first + 1} to {first + job.length} in {profile_dir}: open its "
              "*.trace.json.gz at https://ui.perfetto.dev")
    return runner, history


def check_divergence(job, history, metrics, start):
    """A chunk (iterations after `start`) with `nonfinite` flags set stops the run (-> its RunStopped), unless it is a
    sweep with finite points left: then each newly diverged point is named in a warning and trains on (its numbers
    NaN, its summary's `diverged_at_iteration` set) while the healthy points finish (-> None)."""
    names = [f.name for f in dataclasses.fields(job.config)
             if f.name in ("learning_rate", "max_grad_norm") or f.name.endswith("_lr")] or ["learning_rate"]
    hint = "Lower " + " or ".join(flag(name) for name in names)
    if import_reference(job.config.env) is not None:  # your own env (module:name) may be where the NaN came from
        hint += f", or check that --env {job.config.env} returns finite observations and rewards"
    flags, num_points = metrics["nonfinite"], len(job.points)
    by_point = flags.reshape(num_points, job.config.num_seeds, -1).any(axis=1)  # (points, iterations)
    now = by_point.any(axis=1)
    before = (np.zeros(num_points, bool) if history is None
              else history["nonfinite"].reshape(num_points, job.config.num_seeds, -1).any(axis=(1, 2)))
    if num_points == 1 or (now | before).all():
        return stops.nonfinite_stop(job.names, start, flags, hint)
    if job.lead:
        for p in np.flatnonzero(now & ~before):
            print(f"warning: sweep point {point_label(job.points[p])} diverged (non-finite loss or parameters, first "
                  f"at iteration {start + by_point[p].argmax() + 1}); the other points train on. {hint}",
                  file=sys.stderr, flush=True)
    return None
