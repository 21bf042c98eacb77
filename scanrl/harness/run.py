"""`main`: a script's command line, checked before anything compiles, then trained in chunks (or resumed, or
evaluated), every agent in one compiled program split over the devices."""

import contextlib
import dataclasses
import io
import itertools
import os
import shlex
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tyro
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from scanrl.harness import compile_cache
from scanrl.harness.checkpoints import Checkpoints, require_checkpoints_for_progress, trained_config
from scanrl.harness.evaluation import evaluate_run, evaluation_keys, make_evaluate
from scanrl.harness.files import RunLock
from scanrl.harness.flags import ConfigError, check_flags, description, flag, given_fields, resumed_config
from scanrl.harness.records import Progress, RunDirectory, plural
from scanrl.harness.scale import (
    abstract_agents,
    agent_layout,
    agent_parts,
    any_process,
    as_built_by,
    check_agent_memory,
    check_memory,
    check_sweep_points,
    check_swept,
    choose_devices,
    exit_on_lost_peers,
    gather,
    init_agents,
    local_agents,
    over_agents,
    peers_within_timeout,
    point_label,
    size_flags,
    sweep_overrides,
    sweep_points,
    to_agents,
)
from scanrl.harness.stops import RunStopped, StopRequest, learned_finite, nonfinite_stop, write_failed

# Seconds of training between checkpoints where --num-chunks is not given: a kill loses at most about this much.
CHECKPOINT_S = 60


def main(algorithm, config=None):
    """Runs a script: parses its flags (unless `config` is given), then evaluates a saved run (--eval), resumes one
    (--resume) or trains a new one. A bad config ends with its one line `error: ...` and exit code 2, before
    anything is compiled or written; a run stopped early (signal, non-finite values) with its own line and code."""
    try:
        given = None  # the fields the command line names; None when `config` is given
        if config is None:
            config = parse_flags(algorithm)
            given = given_fields(algorithm, sys.argv[1:])
        compile_cache.start(config.compile_cache)
        if config.eval is not None:
            evaluate_run(algorithm, config)
            return
        with contextlib.ExitStack() as held:
            if config.resume is not None:
                if config.process_id == 0 and os.path.isdir(config.resume):  # one owner from here to the end
                    held.enter_context(RunLock(config.resume, "--resume"))
                config = resumed_config(algorithm, config, given or (), trained_config(config.resume))
                require_checkpoints_for_progress(config.resume, algorithm.script)
            config, points = check(algorithm, config)
            train(algorithm, config, points)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except RunStopped as stopped:
        print(stopped, file=sys.stderr)
        if stopped.abandon and given is not None:  # from the command line: nothing of this process is needed
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(stopped.code)
        sys.exit(stopped.code)
    except jax.errors.JaxRuntimeError as error:  # an allocation the memory check did not foresee
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        cause = str(error).strip().splitlines()[0]
        print(f"error: out of memory ({cause}): lower {size_flags(algorithm, config)}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # the user's own env, failing where it is first traced (--eval, the agents' shapes)
        failure = env_failure(config, error) if config is not None else None
        if failure is None:
            raise
        print(f"error: {failure}", file=sys.stderr)
        sys.exit(2)


def parse_flags(algorithm):
    """tyro's parse of the command line; its error box (a bad value, an unknown flag) becomes our one line
    `error: ...` naming the flag, exit 2 as before. --help prints as tyro prints it."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(algorithm.config, description=describe(algorithm))
    except SystemExit as exit_:
        if exit_.code in (0, None):
            sys.stderr.write(captured.getvalue())
            raise
        # The box: a title line (the kind of error), the message (wrapped over lines, naming the flag), a rule.
        message = []
        for line in captured.getvalue().splitlines()[1:]:
            text = line.strip().strip("│").strip()
            if not text.strip("─"):
                break
            message.append(text)
        raise ConfigError(f"{' '.join(message) or 'cannot parse the command line'} (see --help)") from None


def describe(algorithm) -> str:
    """--help's description (`flags.description` of the script's docstring)."""
    return description(sys.modules[algorithm.make_train_parts.__module__].__doc__)


def check(algorithm, config):
    """-> (the config as it trains, its sweep points); ConfigError if it cannot be trained. Writes nothing."""
    check_flags(config)
    algorithm.validate(config)
    points = sweep_points(algorithm, config)
    check_sweep_points(algorithm, config, points)
    check_swept(algorithm, config, points)
    iterations = algorithm.num_iterations(config)
    if iterations < 1:
        raise ConfigError(f"--total-timesteps {config.total_timesteps} is less than one iteration of "
                          f"{algorithm.script} ({algorithm.steps_per_iteration(config):,} env steps); raise it")
    if config.num_chunks is not None and config.num_chunks > iterations:
        raise ConfigError(f"--num-chunks {config.num_chunks} is more than the {iterations} iterations of this run; "
                          f"use 1 to {iterations}")
    return config, points


def piece_length(num_iterations, config) -> int:
    """The iterations in one piece of the compiled scan: the largest divisor of the run's iterations that is at most
    --log-every (and, with --num-chunks, at most a chunk), so that one compiled program, a scan of a static length,
    runs every piece of the run, and a resumed run the same pieces."""
    most = max(1, min(config.log_every, num_iterations // (config.num_chunks or 1)))
    return max(d for d in range(1, most + 1) if num_iterations % d == 0)


def chunk_ends(num_pieces, num_chunks) -> list[int]:
    """The piece after each of `num_chunks` chunks of whole pieces: as equal as can be, the shorter ones last."""
    size, longer = divmod(num_pieces, num_chunks)
    return list(itertools.accumulate(size + (i < longer) for i in range(num_chunks)))


def on_agents(runner, sharding):
    """The runner with every leaf split over the agents' devices as the compiled programs take it: a program hands
    back an empty leaf (a MuJoCo model's zero-size arrays) replicated, not split, and would refuse it next time."""
    return jax.tree.map(lambda x: x if x.sharding == sharding else jax.device_put(x, sharding), runner)


def run_pieces(compiled, job, runner, start, end, progress, stop=None, deadline=float("inf")):
    """Pieces of the compiled scan from iteration `start` until a chunk ends: at iteration `end`, or after a piece
    once the clock passes `deadline` (time.perf_counter) or a stop request (`stop`) came, on any process. While one
    piece runs, the host prints the last one's progress lines. -> (runner, every agent's metrics of the iterations
    run, as numpy, the iteration reached)."""
    pieces = []
    while start < end:
        runner, rows = compiled(on_agents(runner, job.sharding), np.int32(start), job.swept)  # not awaited
        if progress is not None and pieces:
            progress.show(pieces[-1][0], job.length, pieces[-1][1])
        pieces.append((start, rows))
        start += job.length
        due = time.perf_counter() > deadline or (stop is not None and bool(stop.signal))
        if start < end and any_process(int(due)):
            break
    if progress is not None:
        progress.show(pieces[-1][0], job.length, pieces[-1][1])
    gathered = gather([rows for _, rows in pieces])
    return runner, {key: np.concatenate([rows[key] for rows in gathered], axis=1) for key in gathered[0]}, start


@dataclasses.dataclass
class Job:
    """A run's plan, before anything is compiled or written: its agents, their devices and the programs."""

    algorithm: object
    config: object
    points: list
    keys: np.ndarray  # each agent's root key
    swept: dict  # each agent's swept values, split over the devices
    names: object  # agents' names in messages
    mesh: Mesh
    sharding: NamedSharding
    parts: object  # harness.scale.agent_parts
    abstract_runner: object  # every agent's state as shapes, split over the devices
    segment: object  # the training program, a piece of the scan, not compiled
    evaluate: object  # the final evaluation of every agent, not compiled
    length: int  # iterations in a piece
    num_iterations: int
    ends: list | None  # the iteration after each chunk (--num-chunks); None: a chunk ends every CHECKPOINT_S

    @property
    def lead(self):
        return jax.process_index() == 0  # process 0 writes the run directory and wandb



def plan(algorithm, config, points) -> Job:
    """The agents (sweep points x seeds) over the devices, and the training program of one agent, vmapped over a
    device's agents and split over the devices (shard_map). Each agent's swept values go in as arrays, and the
    script's parts are made in the program with them (`agent_parts`)."""
    check_agent_memory(algorithm, config, config.num_seeds * len(points))  # before anything per agent is made
    keys, swept, names = agent_layout(config, points)
    devices = choose_devices(config, len(keys))
    # config.json and the checkpoints record the count, so --resume trains on as many devices (its numbers depend on
    # how the agents are split), or says it cannot.
    config = dataclasses.replace(config, num_devices=len(devices))
    mesh = Mesh(np.array(devices), ("agents",))
    sharding = NamedSharding(mesh, PartitionSpec("agents"))
    parts = agent_parts(algorithm, config)
    abstract_runner = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                                   abstract_agents(parts, keys, swept))
    structure = jax.tree.structure(abstract_runner)
    num_iterations = algorithm.num_iterations(config)
    length = piece_length(num_iterations, config)
    ends = None if config.num_chunks is None else [
        length * end for end in chunk_ends(num_iterations // length, config.num_chunks)]
    steps = algorithm.steps_per_iteration(config)

    def segment(runner, start, swept):
        """`length` iterations of the agent's `update` from iteration `start`, as `lax.scan`, each one's metrics
        with `env_steps` and `nonfinite` added; the runner handed back with the host's structure."""
        _, init, update = parts(swept)
        if swept:
            runner = as_built_by(init, runner)

        def iteration(runner, i):
            runner, metrics = update(runner)
            if {"env_steps", "nonfinite"} & set(metrics):
                raise ConfigError(f"{algorithm.script}: its metrics hold env_steps or nonfinite, which the harness "
                                  "adds itself; drop them from the metrics dict and METRIC_KEYS")
            return runner, {"env_steps": (i + 1) * steps, **metrics, "nonfinite": ~learned_finite(runner)}

        runner, rows = jax.lax.scan(iteration, runner, start + jnp.arange(length, dtype=jnp.int32))
        return jax.tree.unflatten(structure, jax.tree.leaves(runner)), rows

    evaluate = over_agents(lambda key, runner, swept: make_evaluate(algorithm, parts(swept)[0])(key, runner), mesh,
                           (0, 0, 0))
    return Job(algorithm, config, points, keys, to_agents(swept, sharding), names, mesh, sharding, parts,
               abstract_runner, over_agents(segment, mesh, (0, None, 0)), evaluate, length, num_iterations, ends)


def compile_training(job, run_dir) -> tuple:
    """-> (the compiled training program, the compiled final evaluation, seconds they took). Compiled from shapes
    alone, so a run too big for memory (its training, or its evaluation on --eval-episodes envs per agent) is
    refused before anything is allocated (the run directory given up)."""
    start = time.perf_counter()
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(job.abstract_runner))
    metric_keys = job.algorithm.metric_keys_of(job.config)
    agents = local_agents(job.sharding, len(job.keys))
    try:  # a ConfigError while tracing (a metric the harness adds itself) or after: nothing is left behind
        compiled = job.segment.lower(job.abstract_runner, scalar, job.swept).compile()
        keys = jax.ShapeDtypeStruct(job.keys.shape, job.keys.dtype, sharding=job.sharding)
        evaluation = job.evaluate.lower(keys, job.abstract_runner, job.swept).compile()
        compile_s = time.perf_counter() - start
        check_metric_keys(job.algorithm, metric_keys, compiled.out_info[1])
        check_memory(job.config, job.algorithm, [compiled], state_bytes * len(agents) // len(job.keys),
                     len(job.keys) * job.num_iterations * len(metric_keys) * 4, evaluation)
    except Exception as error:
        failure = error if isinstance(error, ConfigError) else env_failure(job.config, error)
        if failure is None:
            raise
        run_dir.give_up()
        raise failure from None
    return compiled, evaluation, compile_s


def env_failure(config, error) -> ConfigError | None:
    """ConfigError (one line: the file and line) for an error the user's own env raised while a program was made."""
    from scanrl import envs

    line = envs.user_env_failure(config.env, error)
    return None if line is None else ConfigError(line)


def check_metric_keys(algorithm, metric_keys, reported):
    """ConfigError unless the script's METRIC_KEYS (metrics.csv's columns) are the metrics its iterations report:
    a fork's new metric left out of them would be computed and never written."""
    unlisted = sorted(set(reported) - set(metric_keys))
    missing = [k for k in metric_keys if k not in reported]
    if unlisted or missing:
        raise ConfigError(f"{algorithm.script}: its iterations report {', '.join(unlisted) or 'no'} metric(s) missing "
                          f"from its METRIC_KEYS, and METRIC_KEYS names {', '.join(missing) or 'none'} they do not "
                          "report; make METRIC_KEYS the keys of the metrics dict")


def start_or_resume(job, checkpoints, run_dir) -> tuple:
    """-> (runner, metrics so far or None, iterations done): fresh agents, or --resume's newest readable checkpoint;
    (None, None, done) for a finished run, which is left alone."""
    name, config = job.algorithm.name, job.config
    restored = None
    if config.resume is not None:
        restored = checkpoints.restore("--resume", name, config, job.abstract_runner, True)
        if restored is None and job.lead:
            print("no checkpoint yet (the run stopped before its first chunk ended): starting it again")
    if restored is None:
        runner = init_agents(lambda key, swept: job.parts(swept)[1](key), job.sharding, job.keys, job.swept)
        # With a sweep, init's program gave the runner static parts of its own: the host keeps one structure.
        return jax.tree.unflatten(jax.tree.structure(job.abstract_runner), jax.tree.leaves(runner)), None, 0
    runner, history, done = restored
    if done == job.num_iterations and os.path.exists(os.path.join(run_dir.path, "summary.json")):
        if job.lead:
            print(f"{run_dir.path} is finished ({done} of {done} iterations, summary.json written): nothing to "
                  "resume")
        return None, None, done
    if job.lead:
        print(f"resuming after iteration {done} of {job.num_iterations}")
    return runner, history, done


def train_chunks(job, compiled, runner, history, done, checkpoints, run_dir, progress, stop):
    """The chunks after iteration `done`: after each, a non-finite check, a checkpoint, and a stop if a signal came.
    A chunk's rows go to metrics.csv once its checkpoint is committed (at the next chunk's end, or the run's), so the
    rows on disk never run ahead of a checkpoint: a kill at any moment leaves a run --resume goes on from, and a
    resumed run rebuilds metrics.csv from its checkpoint. -> (runner, every iteration's metrics)."""
    config, algorithm = job.config, job.algorithm
    profile_dir = os.path.join(run_dir.path, "profile")
    pending = None  # (first iteration, rows) of the chunk whose checkpoint is being written

    def write_pending():
        """The rows of the chunk before, once its checkpoint is committed (it was written while this chunk ran)."""
        nonlocal pending
        with peers_within_timeout("a chunk's checkpoint"):
            checkpoints.wait()
        if pending is not None and job.lead:
            run_dir.append_metrics(*pending)
        pending = None

    first = done
    while done < job.num_iterations:
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
        with peers_within_timeout("a chunk's checkpoint"):  # orbax syncs the processes
            checkpoints.save(reached, runner, history, algorithm.name, config)
        pending = None if diverged else (done, metrics)
        done = reached
        signum = any_process(stop.signal or 0)  # a signal to any process stops them all
        if signum and done < job.num_iterations:
            write_pending()
            raise RunStopped(f"{signal.Signals(signum).name}: stopped after iteration {done} of {job.num_iterations}, "
                             f"metrics and checkpoint written; continue with: python {algorithm.script} --resume "
                             f"{shlex.quote(run_dir.path)}", 128 + signum)
    write_pending()
    if config.profile and job.lead:
        print(f"profiler trace of iterations {first + 1} to {first + job.length} in {profile_dir}: open its "
              "*.trace.json.gz at https://ui.perfetto.dev")
    return runner, history


def nonfinite_hint(config) -> str:
    """What to change when training diverges: the script's learning rates (learning_rate, *_lr) and gradient clip."""
    names = [f.name for f in dataclasses.fields(config) if f.name in ("learning_rate", "max_grad_norm")
             or f.name.endswith("_lr")] or ["learning_rate"]
    return "lower " + " or ".join(flag(name) for name in names)


def check_divergence(job, history, metrics, start):
    """A chunk whose `nonfinite` flags are set (iterations from `start`): the run stops (RunStopped) unless it is a
    sweep with points whose agents are all finite: then each point newly diverged is named in a warning, its agents
    go on (their numbers are NaN, their summaries say `diverged_at_iteration`) and the healthy points finish."""
    num_seeds, num_points = job.config.num_seeds, len(job.points)
    flags = metrics["nonfinite"]
    now = flags.reshape(num_points, num_seeds, -1).any(axis=(1, 2))
    before = (np.zeros(num_points, bool) if history is None
              else history["nonfinite"].reshape(num_points, num_seeds, -1).any(axis=(1, 2)))
    if num_points == 1 or (now | before).all():
        raise nonfinite_stop(job.names, start, flags, start, nonfinite_hint(job.config))
    if job.lead:
        for p in np.flatnonzero(now & ~before):
            rows = flags[p * num_seeds:(p + 1) * num_seeds]
            first = start + int(np.nonzero(rows.any(axis=0))[0].min()) + 1
            print(f"warning: sweep point {point_label(job.points[p])} diverged (non-finite loss or parameters, first "
                  f"at iteration {first}); the other points train on. {nonfinite_hint(job.config)[0].upper()}"
                  f"{nonfinite_hint(job.config)[1:]}", file=sys.stderr, flush=True)


def train(algorithm, config, points):
    """A new or resumed run: planned, its directory claimed, compiled, trained in chunks, then evaluated and
    summarised."""
    job = plan(algorithm, config, points)
    config = job.config  # with its device count
    if job.lead:
        for note in sweep_overrides(algorithm, config, points):
            print(note)
    progress = Progress(config, points, local_agents(job.sharding, len(job.keys)), [],
                        algorithm.metric_keys_of(config), config.log_every)
    run_dir = None
    try:
        # From here on Ctrl-C or SIGTERM (during compilation too) stop the run where the running chunk ends.
        with StopRequest() as stop:
            run_dir = RunDirectory(algorithm, config, points, job.lead)  # claimed, config.json written, owned
            if job.lead:
                described = (f"{plural(config.num_seeds, 'seed')} x {len(points)} sweep points" if run_dir.sweep
                             else plural(len(job.keys), "agent"))
                step = algorithm.steps_per_iteration(config)
                steps = f"{config.total_timesteps:,} steps"
                if job.num_iterations * step != config.total_timesteps:  # say so where it rounds down
                    steps = (f"{job.num_iterations * step:,} steps (--total-timesteps {config.total_timesteps:,} "
                             f"in whole iterations of {step:,})")
                chunks = (f"checkpoints every {CHECKPOINT_S} s" if job.ends is None
                          else f"{config.num_chunks} chunk(s)")
                print(f"{algorithm.name} on {config.env}: {described} x {steps}, {chunks}, on "
                      f"{job.mesh.devices.size} device(s), run dir {run_dir.path}", flush=True)
            compiled, evaluation, compile_s = compile_training(job, run_dir)
            signum = any_process(stop.signal or 0)
            if signum:  # during compilation: nothing trained yet, nothing to wait for
                raise RunStopped(f"{signal.Signals(signum).name}: stopped while compiling, before any training: "
                                 f"nothing was trained{' further' if config.resume else ''}; "
                                 f"{'continue' if config.resume else 'start it'} with: python {algorithm.script} "
                                 f"--resume {shlex.quote(run_dir.path)}", 128 + signum)
            run_dir.start_wandb()
            progress.wandb_runs = run_dir.wandb_runs
            try:
                # exit_on_lost_peers is left first: a lost peer ends this process before orbax waits for it.
                with Checkpoints(run_dir.path, config.keep_checkpoints) as checkpoints, exit_on_lost_peers():
                    if job.lead:
                        print(f"compiled in {compile_s:.1f} s", flush=True)
                    runner, history, done = start_or_resume(job, checkpoints, run_dir)
                    if runner is None:
                        run_dir.finish_wandb()
                        return
                    if job.lead:
                        run_dir.open_metrics(algorithm.metric_keys_of(config), history)
                    progress.start, progress.last = time.perf_counter(), job.num_iterations - 1
                    progress.start_steps = int(history["env_steps"][0, done - 1]) if done else 0
                    runner, history = train_chunks(job, compiled, runner, history, done, checkpoints, run_dir,
                                                   progress, stop)
            except OSError as error:  # metrics.csv or a checkpoint could not be written
                run_dir.finish_wandb(exit_code=1)
                raise write_failed(error, algorithm.script, run_dir.path) from None
            except BaseException:
                run_dir.finish_wandb(exit_code=1)
                raise
        train_s = time.perf_counter() - progress.start
        summarize(job, evaluation, runner, history, run_dir, {"resumed_after_iteration": done or None,
                                                               "compile_s": compile_s, "train_s": train_s},
                  progress.start_steps)
    finally:  # a new run's directory is owned until the end
        if run_dir is not None:
            run_dir.release()


def summarize(job, evaluate, runner, history, run_dir, extra, start_steps):
    """The final evaluation of every agent (`evaluate`: job.evaluate compiled), the end-of-run report and the run
    directory's summaries."""
    algorithm, config, keys = job.algorithm, job.config, job.keys
    if job.lead:
        print(f"trained in {extra['train_s']:.1f} s; evaluating {plural(len(keys), 'agent')} on "
              f"{plural(config.eval_episodes, 'episode')} each, then writing the summaries and plots", flush=True)
    eval_returns = gather(evaluate(to_agents(evaluation_keys(keys), job.sharding), on_agents(runner, job.sharding),
                                   job.swept), "the final evaluation")
    if algorithm.write_outputs is not None:  # its outputs are made from the final runners, on the host
        runner = gather(runner, "the final runners")
    if not job.lead:
        return
    env_steps = int(history["env_steps"][0, -1])
    sps = (env_steps - start_steps) * len(keys) / extra["train_s"]
    extra = {**extra, "sps": sps, "num_devices": int(job.mesh.devices.size), "num_processes": jax.process_count()}
    counts, speeds = f"{env_steps} env steps", f"{sps:.0f} env steps/s"
    if "updates" in history:  # gradient updates so far, where an algorithm counts them apart from iterations
        updates = int(history["updates"][0, -1])
        done = extra["resumed_after_iteration"] or 0
        updates_per_s = (updates - (int(history["updates"][0, done - 1]) if done else 0)) * len(keys) / extra[
            "train_s"]
        extra = {"updates": updates, **extra, "updates_per_s": updates_per_s}
        counts, speeds = f"{counts} and {updates} updates", f"{speeds} and {updates_per_s:.0f} updates/s"
    print(f"\n{'=' * 72}\n{algorithm.name} on {config.env}: {plural(len(keys), 'agent')}, {counts} each")
    print(f"compile {extra['compile_s']:.1f} s, train {extra['train_s']:.1f} s, {speeds} over all agents")
    try:
        run_dir.write_summaries(algorithm, history, eval_returns.mean(axis=1), runner, extra)
    except OSError as error:
        run_dir.finish_wandb(exit_code=1)
        raise write_failed(error, algorithm.script, run_dir.path) from None
