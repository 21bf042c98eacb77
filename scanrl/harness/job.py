"""The one driver of the compiled program: a run's `Job` (its agents over the devices, the training program, a piece
of the scan of the script's `update`, and the final evaluation), compiled from shapes with the memory check, and
run piece by piece. Training, --resume, --eval and the contract check are commands over it."""

import dataclasses
import itertools
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from scanrl.harness.agents import (
    abstract_agents,
    agent_layout,
    any_process,
    choose_devices,
    gather,
    init_agents,
    local_agents,
    over_agents,
    to_agents,
)
from scanrl.harness.evaluation import evaluation_keys, make_evaluate
from scanrl.harness.flags import MAX_COUNT, ConfigError, Flags, flag
from scanrl.harness.memory import check_agent_memory, check_memory
from scanrl.harness.stops import learned_finite
from scanrl.harness.sweeps import agent_parts


def piece_length(num_iterations, config) -> int:
    """The iterations in one piece of the compiled scan: the largest divisor of the run's iterations within
    --log-every (and a chunk), so one program of a static scan length runs every piece, and a resumed run the same."""
    most = max(1, min(config.log_every, num_iterations // (config.num_chunks or 1)))
    return max(d for d in range(1, most + 1) if num_iterations % d == 0)


def on_agents(runner, sharding):
    """The runner with every leaf split over the agents' devices: a program hands back an empty leaf (a MuJoCo model's
    zero-size arrays) replicated, not split, and would refuse it next time."""
    return jax.tree.map(lambda x: x if x.sharding == sharding else jax.device_put(x, sharding), runner)


def run_pieces(compiled, job, runner, start, end, progress, stop=None, deadline=float("inf")):
    """Pieces of the compiled scan from iteration `start` until a chunk ends: at `end`, or after a piece once the clock
    passes `deadline` (time.perf_counter) or a stop request (`stop`) came, on any process; a piece's progress is
    printed while the next runs. -> (runner, every agent's metrics of the iterations run as numpy, iteration reached)"""
    pieces = []
    while start < end:
        runner, rows = compiled(on_agents(runner, job.sharding), np.int32(start), job.swept)  # not awaited
        if progress is not None and pieces:
            wait_ready(pieces[-1][1])  # the next piece is queued meanwhile
            progress.show(pieces[-1][0], job.length, pieces[-1][1])
        pieces.append((start, rows))
        start += job.length
        due = time.perf_counter() > deadline or (stop is not None and bool(stop.signal))
        if start < end and any_process(int(due)):
            break
    wait_ready(pieces[-1][1])
    if progress is not None:
        progress.show(pieces[-1][0], job.length, pieces[-1][1])
    gathered = gather([rows for _, rows in pieces])
    return runner, {key: np.concatenate([rows[key] for rows in gathered], axis=1) for key in gathered[0]}, start


# Env steps of the final evaluation (and --eval) between two looks of the host: its progress, a stop request.
EVAL_PIECE = 1_000


def wait_ready(tree, stop=None, stopped=None):
    """Waits for a program's results with the host awake, so a signal's handler runs at once (a blocking read holds
    it until the program ends, which may be never); with `stop`, raises `stopped(signal)` once one came."""
    for leaf in jax.tree.leaves(tree):
        pause = 0.001
        while not leaf.is_ready():
            if stop is not None and stop.signal:
                raise stopped(stop.signal)
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


def run_evaluation(evaluation, job, runner, stop=None, stopped=None, what="the final evaluation"):
    """Every agent's evaluation (`evaluation`: compile_job's) in pieces of EVAL_PIECE env steps, until every episode
    ended or the env's time limit: its progress printed every 10 s by process 0, a stop request (`stop`) raising
    `stopped(signal)` within a piece. -> each agent's episode returns (numpy, agents x episodes)."""
    start, steps = evaluation
    if stop is not None:
        stop.doing = f"stopping {what}"
    keys = to_agents(evaluation_keys(job.keys), job.sharding)
    runner = on_agents(runner, job.sharding)
    carry, shown = start(keys, runner, job.swept), time.perf_counter()
    for until in range(EVAL_PIECE, job.eval_steps + EVAL_PIECE, EVAL_PIECE):
        carry = steps(keys, runner, job.swept, carry, np.int32(min(until, job.eval_steps)))
        wait_ready(carry.finished, stop, stopped)
        local = [np.asarray(shard.data) for shard in carry.finished.addressable_shards]
        finished, episodes = sum(int(x.sum()) for x in local), sum(x.size for x in local)
        if not any_process(int(finished < episodes)):
            break
        if job.lead and time.perf_counter() - shown > 10:
            shown = time.perf_counter()
            print(f"{what}: {finished:,} of {episodes:,} episodes ended after {until:,} env steps (the "
                  f"time limit: {job.eval_steps:,}); Ctrl-C stops it", flush=True)
    return gather(carry.returns, what)


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
    parts: object  # harness.sweeps.agent_parts
    abstract_runner: object  # every agent's state as shapes, split over the devices
    segment: object  # the training program, a piece of the scan, not compiled
    evaluate: tuple  # the final evaluation of every agent (its start and its steps: `run_evaluation`), not compiled
    length: int  # iterations in a piece
    num_iterations: int
    ends: list | None  # the iteration after each chunk (--num-chunks); None: a chunk ends every CHECKPOINT_S
    eval_steps: int  # the env's time limit: the longest an evaluation episode is played

    @property
    def lead(self):
        return jax.process_index() == 0  # process 0 writes the run directory and wandb

    def fresh_agents(self):
        """Every agent's `init`, split over the devices, with the host's structure of the runner (with a sweep, init's
        program gives it static parts of its own)."""
        runner = init_agents(lambda key, swept: self.parts(swept)[1](key), self.sharding, self.keys, self.swept)
        return jax.tree.unflatten(jax.tree.structure(self.abstract_runner), jax.tree.leaves(runner))


def plan(algorithm, config, points, sampled=False) -> Job:
    """The agents (sweep points x seeds) over the devices, and one agent's programs vmapped over a device's agents and
    split over the devices (shard_map); swept values go in as arrays, the script's parts made with them
    (`agent_parts`). `sampled`: the evaluation acts with training's policies (--eval-sampled)."""
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
    ends = None
    if config.num_chunks is not None:  # chunks of whole pieces, as equal as can be, the shorter ones last
        size, longer = divmod(num_iterations // length, config.num_chunks)
        ends = list(itertools.accumulate(length * (size + (i < longer)) for i in range(config.num_chunks)))
    steps = algorithm.steps_per_iteration(config)

    def segment(runner, start, swept):
        """`length` iterations of the agent's `update` from iteration `start` (`lax.scan`), each one's metrics with
        `env_steps` and `nonfinite` added; the runner handed back with the host's structure."""
        _, init, update = parts(swept)
        if swept:  # the runner's static parts (an optimizer's functions) close over another trace's swept values
            built = jax.eval_shape(init, jax.ShapeDtypeStruct((2,), jnp.uint32))
            runner = jax.tree.unflatten(jax.tree.structure(built), jax.tree.leaves(runner))

        def iteration(runner, i):
            runner, metrics = update(runner)
            if {"env_steps", "nonfinite"} & set(metrics):
                raise ConfigError(f"{algorithm.script}: its metrics hold env_steps or nonfinite, which the harness "
                                  "adds itself; drop them from the metrics dict and METRIC_KEYS")
            return runner, {"env_steps": (i + 1) * steps, **metrics, "nonfinite": ~learned_finite(runner)}

        runner, rows = jax.lax.scan(iteration, runner, start + jnp.arange(length, dtype=jnp.int32))
        return jax.tree.unflatten(structure, jax.tree.leaves(runner)), rows

    def evaluation(swept):
        return make_evaluate(algorithm, parts(swept)[0], sampled)

    evaluate = (over_agents(lambda key, runner, swept: evaluation(swept).start(key, runner), mesh, (0, 0, 0)),
                over_agents(lambda key, runner, swept, carry, until: evaluation(swept).steps(key, runner, carry, until),
                            mesh, (0, 0, 0, 0, None)))
    return Job(algorithm, config, points, keys, to_agents(swept, sharding), names, mesh, sharding, parts,
               abstract_runner, over_agents(segment, mesh, (0, None, 0)), evaluate, length, num_iterations, ends,
               make_evaluate(algorithm, config).max_steps)


def compile_job(job, training=True) -> tuple:
    """-> (the compiled training program, None without `training`; the compiled final evaluation; seconds taken).
    Compiled from shapes alone, so a run too big for memory (its training, or its evaluation on --eval-episodes envs
    per agent), METRIC_KEYS that are not the reported metrics, or an error the user's own env raised while the
    programs were traced (`env_failure`) is refused (ConfigError) before anything is allocated."""
    start = time.perf_counter()
    metric_keys = job.algorithm.metric_keys_of(job.config)
    try:
        compiled = None
        if training:
            compiled = job.segment.lower(job.abstract_runner, jax.ShapeDtypeStruct((), jnp.int32), job.swept).compile()
        keys = jax.ShapeDtypeStruct(job.keys.shape, job.keys.dtype, sharding=job.sharding)
        begin, steps = job.evaluate
        begin = begin.lower(keys, job.abstract_runner, job.swept).compile()
        carry = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=job.sharding),
                             begin.out_info)
        evaluation = (begin, steps.lower(keys, job.abstract_runner, job.swept, carry,
                                         jax.ShapeDtypeStruct((), jnp.int32)).compile())
    except Exception as error:
        failure = error if isinstance(error, ConfigError) else env_failure(job.config, error)
        failure = failure or overflow_failure(job.algorithm, job.config, error)
        if failure is None:
            raise
        raise failure from None
    compile_s = time.perf_counter() - start
    history_bytes = 0
    if training:  # METRIC_KEYS are metrics.csv's columns: a fork's new metric left out would never be written
        reported = compiled.out_info[1]
        unlisted, missing = sorted(set(reported) - set(metric_keys)), [k for k in metric_keys if k not in reported]
        if unlisted or missing:
            raise ConfigError(f"{job.algorithm.script}: its iterations report {', '.join(unlisted) or 'no'} metric(s) "
                              f"missing from its METRIC_KEYS, and METRIC_KEYS names {', '.join(missing) or 'none'} "
                              "they do not report; make METRIC_KEYS the keys of the metrics dict")
        history_bytes = len(job.keys) * job.num_iterations * len(metric_keys) * 4
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(job.abstract_runner))
    local_state_bytes = state_bytes * len(local_agents(job.sharding, len(job.keys))) // len(job.keys)
    check_memory(job.config, job.algorithm, [compiled] if training else [], local_state_bytes, history_bytes,
                 evaluation[1])
    return compiled, evaluation, compile_s


def overflow_failure(algorithm, config, error) -> ConfigError | None:
    """ConfigError for a count the flags make too large for the int32 the programs hold it in (an update count of
    --update-epochs 1e9), naming the flags set away from their defaults; None for any other error."""
    if not isinstance(error, OverflowError):
        return None
    value = str(error).rsplit("with value ", 1)[-1].split()[0] if "with value " in str(error) else "a count"
    defaults = algorithm.config(env=config.env)
    shared = {f.name for f in dataclasses.fields(Flags)} - {"total_timesteps"}  # the others count no update
    numbers = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
               if f.name not in shared and type(getattr(config, f.name)) in (int, float)}
    changed = [f"{flag(k)} {v:g}" if isinstance(v, float) else f"{flag(k)} {v}" for k, v in numbers.items()
               if v != getattr(defaults, k)]
    shown = f"{int(value):,}" if value.isdigit() else value
    return ConfigError(f"{algorithm.script}: a count of {shown} in the compiled program is more than the "
                       f"{MAX_COUNT:,} (2**31 - 1) it holds; lower the flags that multiply into it"
                       + (f" ({', '.join(changed)})" if changed else ""))


def env_failure(config, error) -> ConfigError | None:
    """ConfigError (one line: the file and line) for an error the user's own env raised while a program was made."""
    from scanrl import envs

    line = envs.user_env_failure(config.env, error)
    return None if line is None else ConfigError(line)

