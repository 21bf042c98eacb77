"""--eval: a saved run's config read back and checked as a new run's is, its newest checkpoint restored into the job
of the run (`program.plan`), its evaluation compiled and run (`loop`), the returns printed; --gif draws an episode."""

import dataclasses
import os

import jax
import numpy as np

from scanrl.harness.checkpoints import Checkpoints
from scanrl.harness.flags import ConfigError, check_env, check_flags, check_paths, require_int32
from scanrl.harness.loop import awake, compile_job, run_evaluation
from scanrl.harness.program import eval_policy, plan
from scanrl.harness.resume import read_run_config, require_checkpoint_folder
from scanrl.harness.sweeps import sweep_points


def eval_config(algorithm, config):
    """--eval's run: (its config, as config.json holds it, checked as a new run's is, with this command's
    --eval-episodes; its sweep points). ConfigError for anything --eval cannot do with it."""
    from scanrl import envs

    check_paths(config)
    require_int32(config)  # the command line's --eval-episodes and --seed-index, before the run's config is read
    if config.eval_sampled and not algorithm.samples:
        raise ConfigError(f"--eval-sampled: {algorithm.name}'s policy is deterministic (its evaluation acts as it "
                          "does); drop --eval-sampled")
    saved = read_run_config(algorithm, config.eval, "--eval", config.env, held=True)
    episodes = saved["eval_episodes"] if config.eval_episodes == algorithm.config().eval_episodes else \
        config.eval_episodes
    # Evaluated on the devices this process has: an agent's returns do not depend on how the agents are split.
    run_config = algorithm.config(**{**saved, "eval_episodes": episodes, "num_devices": None})
    try:  # the saved config, checked as a new run's is (a config.json edited or damaged into values it cannot run)
        check_flags(dataclasses.replace(run_config, eval=config.eval))
        check_env(run_config)
        algorithm.check(run_config)
        points = sweep_points(algorithm, run_config)
    except ConfigError as error:
        raise ConfigError(f"--eval: {os.path.join(config.eval, 'config.json')} holds a config {algorithm.script} "
                          f"cannot run ({error}); put back the run's values") from None
    agents = run_config.num_seeds * len(points)
    if config.seed_index is not None and not 0 <= config.seed_index < agents:
        raise ConfigError(f"--seed-index {config.seed_index} is out of range: the run has {agents} agents "
                          f"(indices 0 to {agents - 1})")
    if config.gif is not None and not envs.can_draw(run_config.env):
        raise ConfigError(f"--gif: gymnax cannot draw {run_config.env}; drop --gif, or evaluate a run on a "
                          "classic-control, MinAtar or misc env")
    return run_config, points


def evaluate_run(algorithm, config, stop):
    """--eval: the deterministic policies of a saved run, on the same episodes as its summary's eval_return (unless
    --eval-episodes changes their number; --eval-sampled: the policies training acts with, on the same episodes);
    --gif draws one episode of agent --seed-index. The job of the run, its evaluation compiled and run."""
    from scanrl import envs

    run_config, points = eval_config(algorithm, config)
    stopped = "the evaluation stopped; nothing was written"
    stop.stop_at_once(stopped)  # nothing to wait for: it writes only --gif
    job = plan(algorithm, run_config, points, sampled=config.eval_sampled)
    require_checkpoint_folder(config.eval, "--eval")
    with Checkpoints(config.eval) as checkpoints:
        restored = checkpoints.restore("--eval", algorithm.name, run_config, job.abstract_runner, False)
    if restored is None:
        raise ConfigError(f"--eval: {config.eval} has no checkpoint in checkpoints/ yet; it was stopped or killed "
                          "before its first chunk ended: --resume it")
    runner, _, done = restored
    _, evaluation, _ = awake(compile_job, job, False)
    returns = run_evaluation(evaluation, job, runner, stop, stopped, "the evaluation")
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
        agent = jax.tree.map(lambda x: np.asarray(x)[index], job.processes.gather(runner, "the evaluation"))
        act = eval_policy(algorithm, job.parts(swept)[0], agent, job.eval_keys[index], config.eval_sampled)
        stop.stop_at_once(f"stopped while drawing the episode; {config.gif} was not written (the returns above are "
                          "the evaluation's)")
        total, length = envs.record_episode(run_config.env, act, job.eval_keys[index], config.gif)
        print(f"one episode of seed {job.names[index]} (index {index}): return {total:.1f} in {length} steps, "
              f"drawn to {config.gif}")
