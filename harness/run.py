"""`main`: a script's command line, checked before anything compiles, then trained in chunks (or resumed, or
evaluated), every agent in one compiled program split over the devices."""

import contextlib
import dataclasses
import io
import itertools
import math
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tyro
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from harness import compile_cache
from harness.checkpoints import Checkpoints
from harness.evaluation import evaluate_run, evaluation_keys, make_evaluate
from harness.flags import ConfigError, check_flags, given_fields, resumed_config
from harness.records import Progress, RunDirectory
from harness.scale import (
    agent_layout,
    any_process,
    check_memory,
    check_sweep_points,
    choose_devices,
    exit_on_lost_peers,
    gather,
    init_agents,
    local_agents,
    over_agents,
    peers_within_timeout,
    size_flags,
    sweep_points,
    to_agents,
)
from harness.stops import RunStopped, StopRequest, nonfinite_stop, write_failed


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
        if config.resume is not None:
            config = resumed_config(algorithm, config, given or ())
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
    """--help's description: the first paragraph of the script's docstring and the fields --sweep can vary."""
    summary = (sys.modules[algorithm.make_train_parts.__module__].__doc__ or "").strip().split("\n\n")[0]
    alias = {field: short for short, field in algorithm.aliases.items()}
    fields = algorithm.sweep_help or ", ".join(f"{k} ({alias[k]})" if k in alias else k for k in algorithm.sweepable)
    return f"{summary}\n\n--sweep can vary: {fields}"


def check(algorithm, config):
    """-> (the config as it trains, its sweep points); ConfigError if it cannot be trained. Writes nothing."""
    check_flags(config)
    config = algorithm.resolve(config)
    algorithm.validate(config)
    points = sweep_points(algorithm, config)
    check_sweep_points(algorithm, config, points)
    iterations = algorithm.num_iterations(config)
    if config.num_chunks is None:  # config.json records the count chosen, so --resume chunks the same way
        work = config.total_timesteps * config.num_seeds * len(points)
        config = dataclasses.replace(config, num_chunks=default_chunks(iterations,
                                                                       work / algorithm.chunk_steps_of(config)))
    elif config.num_chunks > iterations:
        raise ConfigError(f"--num-chunks {config.num_chunks} is more than the {iterations} iterations of this run; "
                          f"use 1 to {iterations}")
    return config, points


def default_chunks(num_iterations, wanted) -> int:
    """About `wanted` chunks: the first count from there to twice as many that divides the iterations (equal
    chunks), else `wanted` itself."""
    wanted = min(max(1, math.ceil(wanted)), num_iterations)
    return next((k for k in range(wanted, min(2 * wanted, num_iterations) + 1) if num_iterations % k == 0), wanted)


def chunk_ends(num_iterations, num_chunks) -> list[int]:
    """The iteration after each of `num_chunks` chunks: as equal as can be, the shorter ones (by one iteration)
    last."""
    size, longer = divmod(num_iterations, num_chunks)
    return list(itertools.accumulate(size + (i < longer) for i in range(num_chunks)))


def make_segment(run, one_agent, length):
    """`segment(agent, runner, start, count) -> (runner, metrics)`: `count` (at most `length`) iterations of `run`
    from iteration `start`, their metrics in the first `count` of `length` rows. A loop with a trip count known
    only at run time, so one compiled program runs every piece of every chunk."""
    # Under jit, the trace that finds the metrics' shapes is the one the loop's body reuses (jit's trace cache).
    run = jax.jit(run)
    shapes = jax.eval_shape(run, jax.ShapeDtypeStruct((), jnp.int32), one_agent,
                            jax.ShapeDtypeStruct((1,), jnp.int32))[1]

    def segment(agent, runner, start, count):
        def iteration(i, carry):
            runner, rows = carry
            runner, metrics = run(agent, runner, (start + i)[None])
            return runner, jax.tree.map(lambda r, m: jax.lax.dynamic_update_slice_in_dim(r, m, i, 0), rows, metrics)

        rows = jax.tree.map(lambda x: jnp.zeros((length,) + x.shape[1:], x.dtype), shapes)
        return jax.lax.fori_loop(0, count, iteration, (runner, rows))

    return segment


def run_chunk(compiled, agent_ids, runner, start, end, period, length, progress):
    """Iterations [start, end) as pieces of the compiled segment program, each ending where a progress line is
    due (or at `end`); while one piece runs, the host prints the last one's lines. -> (runner, every agent's
    metrics of the chunk, as numpy)."""
    pieces = []
    while start < end:
        count = min(end, (start // period + 1) * period, start + length) - start
        runner, rows = compiled(agent_ids, runner, np.int32(start), np.int32(count))  # dispatched, not awaited
        if progress is not None and pieces:
            progress.show(*pieces[-1])
        pieces.append((start, count, rows))
        start += count
    if progress is not None:
        progress.show(*pieces[-1])
    gathered = gather([rows for _, _, rows in pieces])
    return runner, {key: np.concatenate([rows[key][:, :count] for (_, count, _), rows in
                                         zip(pieces, gathered, strict=True)], axis=1) for key in gathered[0]}


def train(algorithm, config, points):
    name, metric_keys = algorithm.name_of(config), algorithm.metric_keys_of(config)
    keys, hparams, names = agent_layout(algorithm, config, points)
    mesh = Mesh(np.array(choose_devices(config, len(keys))), ("agents",))
    sharding = NamedSharding(mesh, PartitionSpec("agents"))
    lead = jax.process_index() == 0  # process 0 writes the run directory and wandb
    agents = local_agents(sharding, len(keys))
    period = algorithm.log_period_of(config)
    progress = Progress(config, points, agents, [], metric_keys, period)
    init, run = algorithm.make_train_parts(config)  # no log_fn: progress lines come from the host, below
    agent_ids = to_agents(np.arange(len(keys), dtype=np.int32), sharding)
    num_iterations = algorithm.num_iterations(config)
    abstract_runner = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                                   jax.eval_shape(jax.vmap(init), keys, hparams))
    one_agent = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), abstract_runner)
    ends = chunk_ends(num_iterations, config.num_chunks)
    length = min(period, max(end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)))
    segment = over_agents(make_segment(run, one_agent, length), mesh, (0, 0, None, None))
    # From here on Ctrl-C or SIGTERM (during compilation too) stop the run where the running chunk ends.
    with StopRequest() as stop:
        run_dir = RunDirectory(algorithm, config, points, lead)  # claimed, config.json written
        if lead:
            described = (f"{config.num_seeds} seeds x {len(points)} sweep points" if run_dir.sweep
                         else f"{len(keys)} agents")
            print(f"{name} on {config.env}: {described} x {config.total_timesteps} steps in {config.num_chunks} "
                  f"chunk(s) on {mesh.devices.size} device(s), run dir {run_dir.path}", flush=True)
        start_time = time.perf_counter()
        # Compiled once, from shapes alone, so a run too big for memory is refused before anything is allocated.
        scalar = jax.ShapeDtypeStruct((), jnp.int32)
        compiled = segment.lower(agent_ids, abstract_runner, scalar, scalar).compile()
        compile_s = time.perf_counter() - start_time
        state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_runner))
        try:
            check_memory(config, algorithm, [compiled], state_bytes * len(agents) // len(keys),
                         len(keys) * num_iterations * len(metric_keys) * 4)
        except ConfigError:
            run_dir.give_up()
            raise
        run_dir.start_wandb()
        progress.wandb_runs = run_dir.wandb_runs
        try:
            # exit_on_lost_peers is left first: a lost peer ends this process before orbax waits for it.
            with Checkpoints(run_dir.path, config.keep_checkpoints) as checkpoints, exit_on_lost_peers():
                if lead:
                    print(f"compiled in {compile_s:.1f} s", flush=True)
                restored = None
                if config.resume is not None:
                    restored = checkpoints.restore("--resume", name, config, abstract_runner, True)
                    if restored is None and lead:
                        print("no checkpoint yet (the run stopped before its first chunk ended): starting it again")
                if restored is not None:
                    runner, history, done = restored
                    if done == num_iterations and os.path.exists(os.path.join(run_dir.path, "summary.json")):
                        if lead:
                            print(f"{run_dir.path} is finished ({done} of {num_iterations} iterations, summary.json "
                                  "written): nothing to resume")
                        run_dir.finish_wandb()
                        return
                    if lead:
                        print(f"resuming after iteration {done} of {num_iterations}")
                else:
                    runner, history, done = init_agents(init, sharding, keys, hparams), None, 0
                remaining = [end for end in ends if end > done]
                chunks = list(zip([done, *remaining][:len(remaining)], remaining, strict=True))  # none: finished
                if lead:
                    run_dir.open_metrics(metric_keys, history)
                profile_dir = os.path.join(run_dir.path, "profile")
                progress.start = time.perf_counter()
                progress.start_steps = int(history["env_steps"][0, done - 1]) if done else 0
                for start, end in chunks:
                    profiled = config.profile and start == done and lead
                    trace = jax.profiler.trace(profile_dir, create_perfetto_trace=True) if profiled else None
                    with trace or contextlib.nullcontext():
                        runner, metrics = run_chunk(compiled, agent_ids, runner, start, end, period, length,
                                                    progress if lead else None)
                    if lead:
                        run_dir.append_metrics(start, metrics)
                    if metrics["nonfinite"].any():
                        raise nonfinite_stop(names, start, metrics["nonfinite"], start, algorithm.nonfinite_hint)
                    history = metrics if history is None else jax.tree.map(
                        lambda a, b: np.concatenate([a, b], axis=1), history, metrics)
                    with peers_within_timeout("a chunk's checkpoint"):  # orbax syncs the processes
                        checkpoints.save(end, runner, history, name, config)
                    signum = any_process(stop.signal or 0)  # a signal to any process stops them all
                    if signum and end < num_iterations:
                        raise RunStopped(f"{signal.Signals(signum).name}: stopped after iteration {end} of "
                                         f"{num_iterations}, metrics and checkpoint written; continue with: python "
                                         f"{algorithm.script} --resume {run_dir.path}", 128 + signum)
        except OSError as error:  # metrics.csv or a checkpoint could not be written
            run_dir.finish_wandb(exit_code=1)
            raise write_failed(error, algorithm.script, run_dir.path) from None
        except BaseException:
            run_dir.finish_wandb(exit_code=1)
            raise
    train_s = time.perf_counter() - progress.start
    if config.profile and lead:
        print(f"profiler trace in {profile_dir}: open its *.trace.json.gz at https://ui.perfetto.dev "
              "(the trace adds overhead to train_s)")

    evaluate = over_agents(make_evaluate(algorithm, config), mesh, (0, 0))
    eval_returns, stats = gather(evaluate(to_agents(evaluation_keys(keys), sharding), runner), "the final evaluation")
    if not lead:
        return
    env_steps = int(history["env_steps"][0, -1])
    sps = (env_steps - progress.start_steps) * len(keys) / train_s
    extra = {"resumed_after_iteration": done if restored is not None else None, "compile_s": compile_s,
             "train_s": train_s, "sps": sps, "num_devices": int(mesh.devices.size),
             "num_processes": jax.process_count()}
    counts, speeds = f"{env_steps} env steps", f"{sps:.0f} env steps/s"
    if "updates" in history:  # gradient updates so far, where an algorithm counts them apart from iterations
        updates = int(history["updates"][0, -1])
        updates_per_s = (updates - (int(history["updates"][0, done - 1]) if done else 0)) * len(keys) / train_s
        extra = {"updates": updates, **extra, "updates_per_s": updates_per_s}
        counts, speeds = f"{counts} and {updates} updates", f"{speeds} and {updates_per_s:.0f} updates/s"
    print(f"\n{'=' * 72}\n{name} on {config.env}: {len(keys)} agents, {counts} each")
    print(f"compile {compile_s:.1f} s, train {train_s:.1f} s, {speeds} over all agents")
    try:
        run_dir.write_summaries(algorithm, history, eval_returns.mean(axis=1), stats, extra)
    except OSError as error:
        run_dir.finish_wandb(exit_code=1)
        raise write_failed(error, algorithm.script, run_dir.path) from None
