"""`main`: a script's command line (read by `flags.parse_flags`), checked before anything compiles, then a new run
trained, a run resumed (--resume) or evaluated (--eval); every error a user can make ends here in its one line and
exit code."""

import dataclasses
import logging
import os
import sys

import jax
import numpy as np

from scanrl.harness import compile_cache
from scanrl.harness.agents import gather
from scanrl.harness.checkpoints import Checkpoints
from scanrl.harness.flags import ConfigError, check_flags, check_paths, given_fields, parse_flags, require_int32
from scanrl.harness.loop import awake, compile_job, run_evaluation
from scanrl.harness.memory import size_flags
from scanrl.harness.program import eval_policy, evaluation_keys, plan
from scanrl.harness.resume import (
    read_run_config,
    require_checkpoint_folder,
    resumed,
    trained_config,
    trained_fields,
)
from scanrl.harness.stops import RunStopped, StopRequest, env_failure
from scanrl.harness.sweeps import check_sweep_points, sweep_overrides, sweep_points
from scanrl.harness.train import train


def main(algorithm, config=None):
    """Runs a script: parses its flags (unless `config` is given), then evaluates a saved run (--eval), resumes one
    (--resume) or trains a new one. A bad config ends with its one line `error: ...` and exit code 2, before
    anything is compiled or written; a run stopped early (signal, non-finite values) with its own line and code."""
    try:
        given = None  # the fields the command line names; None when `config` is given
        if config is None:
            config = parse_flags(algorithm)
            given = given_fields(algorithm, sys.argv[1:])
            # A host callback that raises is logged with its traceback at every call; the run's one line names it.
            logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)
        compile_cache.start(config.compile_cache)
        if config.eval is not None:
            with StopRequest(exit_process=given is not None) as stop:
                evaluate_run(algorithm, config, stop)
            return
        if config.resume is not None:
            config = resumed(algorithm, config, given or ())
        config, points = check(algorithm, config)
        if jax.process_index() == 0:
            for note in sweep_overrides(algorithm, config, points):
                print(note)
        train(algorithm, config, points, exit_process=given is not None)
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
        print(f"error: out of memory ({cause}): lower {size_flags(config)}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # a bad config, or the user's own env failing where it is first traced (--eval, shapes)
        failure = error if isinstance(error, ConfigError) else None if config is None else env_failure(config, error)
        if failure is None:
            raise
        print(f"error: {failure}", file=sys.stderr)
        sys.exit(2)


def check(algorithm, config):
    """-> (the config as it trains, its sweep points); ConfigError if it cannot be trained. Writes nothing. (That
    each swept field takes one value per agent is checked on the program: `program.plan`.)"""
    check_flags(config)
    check_env(config)
    algorithm.check(config)
    points = sweep_points(algorithm, config)
    check_sweep_points(algorithm, config, points)
    iterations = algorithm.num_iterations(config)
    if iterations < 1:
        raise ConfigError(f"--total-timesteps {config.total_timesteps} is less than one iteration of "
                          f"{algorithm.script} ({algorithm.steps_per_iteration(config):,} env steps); raise it")
    if config.num_chunks is not None and config.num_chunks > iterations:
        raise ConfigError(f"--num-chunks {config.num_chunks} is more than the {iterations} iterations of this run; "
                          f"use 1 to {iterations}")
    return config, points


def check_env(config):
    """ConfigError naming --env unless scanrl can make the env (a gymnax id, one of ours, a suite's, your own)."""
    from scanrl import envs  # here, not at the top: importing gymnax makes a JAX backend

    try:
        env, env_params = envs.make(config.env)
        envs.is_discrete(env, env_params)
    except ValueError as error:
        raise ConfigError(f"--env: {error}") from None


def eval_config(algorithm, config):
    """--eval's run: (its config, as config.json holds it, checked as a new run's is, with this command's
    --eval-episodes; its sweep points). ConfigError for anything --eval cannot do with it."""
    from scanrl import envs

    check_paths(config)
    require_int32(config)  # the command line's --eval-episodes and --seed-index, before the run's config is read
    if config.eval_sampled and not algorithm.samples:
        raise ConfigError(f"--eval-sampled: {algorithm.name}'s policy is deterministic (its evaluation acts as it "
                          "does); drop --eval-sampled")
    saved = read_run_config(algorithm, config.eval, "--eval", config.env)
    trained_fields(algorithm, "--eval", config.eval, saved, trained_config(config.eval))
    episodes = saved["eval_episodes"] if config.eval_episodes == algorithm.config().eval_episodes else \
        config.eval_episodes
    # Evaluated on the devices this process has: an agent's returns do not depend on how the agents are split.
    run_config = algorithm.config(**{**saved, "eval_episodes": episodes, "num_devices": None})
    try:  # the saved config, checked as a new run's is (a config.json edited or damaged into values it cannot run)
        check_flags(dataclasses.replace(run_config, eval=config.eval))
        check_env(run_config)
        algorithm.check(run_config)
    except ConfigError as error:
        raise ConfigError(f"--eval: {os.path.join(config.eval, 'config.json')} holds a config {algorithm.script} "
                          f"cannot run ({error}); put back the run's values") from None
    points = sweep_points(algorithm, run_config)
    agents = run_config.num_seeds * len(points)
    if config.seed_index is not None and not 0 <= config.seed_index < agents:
        raise ConfigError(f"--seed-index {config.seed_index} is out of range: the run has {agents} agents "
                          f"(indices 0 to {agents - 1})")
    if config.gif is not None and not envs.can_draw(run_config.env):
        raise ConfigError(f"--gif: gymnax cannot draw {run_config.env}; drop --gif, or evaluate a run on a "
                          "classic-control, MinAtar or misc env")
    return run_config, points


def evaluate_run(algorithm, config, stop=None):
    """--eval: the deterministic policies of a saved run, on the same episodes as its summary's eval_return (unless
    --eval-episodes changes their number; --eval-sampled: the policies training acts with, on the same episodes);
    --gif draws one episode of agent --seed-index. The job of the run, its evaluation compiled and run."""
    from scanrl import envs

    run_config, points = eval_config(algorithm, config)
    if stop is not None:  # --eval writes nothing but its --gif: nothing to wait for
        stop.stop_at_once("the evaluation stopped; nothing was written")
    job = plan(algorithm, run_config, points, sampled=config.eval_sampled)
    require_checkpoint_folder(config.eval, "--eval")
    with Checkpoints(config.eval) as checkpoints:
        restored = checkpoints.restore("--eval", algorithm.name, run_config, job.abstract_runner, False)
    if restored is None:
        raise ConfigError(f"--eval: {config.eval} has no checkpoint in checkpoints/ yet; it was stopped or killed "
                          "before its first chunk ended: --resume it")
    runner, _, done = restored
    _, evaluation, _ = awake(compile_job, job, False)

    def stopped(signum):
        return RunStopped(f"{signum.name}: the evaluation stopped; nothing was written", 128 + signum, abandon=True)

    returns = run_evaluation(evaluation, job, runner, stop, stopped, "the evaluation")
    eval_keys = evaluation_keys(job.keys)
    indices = range(len(job.keys)) if config.seed_index is None else [config.seed_index]
    which = "sampled policy (actions drawn as in training)" if config.eval_sampled else "deterministic policy"
    print(f"{algorithm.name} on {run_config.env}, checkpoint after {done} iterations: {which}, "
          f"{run_config.eval_episodes} episodes per agent")
    for i in indices:
        print(f"seed {job.names[i]} (index {i}): mean {returns[i].mean():.2f}  returns "
              + " ".join(f"{r:.1f}" for r in returns[i]))
    if len(indices) > 1:
        print(f"mean over agents: {returns.mean():.2f}")
    if config.gif is not None:
        index = config.seed_index or 0
        swept = {k: np.asarray(v)[index].item() for k, v in job.swept.items()}
        agent = jax.tree.map(lambda x: np.asarray(x)[index], gather(runner, "the evaluation"))
        act = eval_policy(algorithm, job.parts(swept)[0], agent, eval_keys[index], config.eval_sampled)
        if stop is not None:
            stop.stop_at_once(f"stopped while drawing the episode; {config.gif} was not written (the returns above "
                              "are the evaluation's)")
        total, length = envs.record_episode(run_config.env, act, eval_keys[index], config.gif)
        print(f"one episode of seed {job.names[index]} (index {index}): return {total:.1f} in {length} steps, "
              f"drawn to {config.gif}")
