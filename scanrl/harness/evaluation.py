"""The returns of the agents' deterministic policies on fresh episodes: at the end of training (summary.json's
`eval_return`) and with --eval on a saved run, on the same episodes (--eval-sampled: of the policies training acts
with, sampling their actions); --gif draws one of them."""

import dataclasses
import json
import os

import jax
import numpy as np

from scanrl.harness.checkpoints import Checkpoints, trained_config
from scanrl.harness.flags import (
    LOGGING_FLAGS,
    ConfigError,
    check_flags,
    check_paths,
    flag,
    read_run_config,
    shown,
)
from scanrl.harness.scale import (
    abstract_agents,
    agent_layout,
    agent_parts,
    check_agent_memory,
    check_memory,
    sweep_points,
)

# With threefry, fold_in(key, i) equals split(key, n)[i] for every i < n: folding a small number into an agent's
# root key gives a key its init split off (fold_in(key, 1) was ppo's actor init key). No split of the root into
# fewer than 2**32 keys reaches the largest 32-bit number.
EVALUATION_FOLD = 2**32 - 1


def evaluation_keys(keys) -> np.ndarray:
    """Each agent's evaluation key, from its root key `PRNGKey(seed)`; never one its training uses."""
    return np.asarray(jax.vmap(lambda key: jax.random.fold_in(key, EVALUATION_FOLD))(keys))


def make_evaluate(algorithm, config, sampled=False):
    """`evaluate(key, runner) -> returns (eval_episodes,)` of one agent: the first episode of each of `eval_episodes`
    envs played by its deterministic policy (`sampled`: its sampled policy, on the same episodes)."""
    from scanrl import envs

    env, env_params = envs.make_vec(config.env, config.eval_episodes)

    def evaluate(key, runner):
        act = eval_policy(algorithm, config, runner, key, sampled)
        return envs.evaluate(env, env_params, act, key, env_params.max_steps_in_episode)

    return evaluate


def eval_policy(algorithm, config, runner, key, sampled):
    """The deterministic policy, or (`sampled`) the sampled one, drawing its actions from a key folded from `key`
    (the episodes' key): the same episodes either way."""
    if not sampled:
        return algorithm.policy(config, runner)
    return algorithm.sampled_policy(config, runner, jax.random.fold_in(key, EVALUATION_FOLD))


def check_trained_config(algorithm, run_dir, saved):
    """--eval: ConfigError naming the first field (one that shapes the results) where config.json disagrees with the
    config the newest checkpoint was trained with: an edited num_seeds or layer width would restore the wrong agents
    (or none) into the program."""
    trained = trained_config(run_dir)
    if trained is None:
        return
    where, held = trained
    as_saved, held = (json.loads(json.dumps(c)) for c in (saved, held))
    for field in dataclasses.fields(algorithm.config):
        k = field.name
        if k not in LOGGING_FLAGS and k in held and k in as_saved and as_saved[k] != held[k]:
            raise ConfigError(f"--eval: {os.path.join(run_dir, 'config.json')} says {flag(k)} {shown(as_saved[k])}, "
                              f"but its newest checkpoint ({where}) was trained with {flag(k)} {shown(held[k])}; put "
                              "that value back in config.json")


def evaluate_run(algorithm, config):
    """--eval: the deterministic policies of a saved run, on the same episodes as its summary's eval_return (unless
    --eval-episodes changes their number; --eval-sampled: the policies training acts with, on the same episodes);
    --gif draws one episode of agent --seed-index."""
    from scanrl import envs

    check_paths(config)
    if config.eval_sampled and algorithm.sampled_policy is None:
        raise ConfigError(f"--eval-sampled: {algorithm.name}'s policy is deterministic (its evaluation acts as it "
                          "does); drop --eval-sampled")
    saved = read_run_config(algorithm, config.eval, "--eval", config.env)
    check_trained_config(algorithm, config.eval, saved)
    episodes = saved["eval_episodes"] if config.eval_episodes == algorithm.config().eval_episodes else \
        config.eval_episodes
    if not episodes > 0:
        raise ConfigError(f"--eval-episodes must be a positive integer, got {episodes}")
    run_config = algorithm.config(**{**saved, "eval_episodes": episodes})
    try:  # the saved config, checked as a new run's is (a config.json edited or damaged into values it cannot run)
        check_flags(dataclasses.replace(run_config, eval=config.eval))
        algorithm.validate(run_config)
    except ConfigError as error:
        raise ConfigError(f"--eval: {os.path.join(config.eval, 'config.json')} holds a config {algorithm.script} "
                          f"cannot run ({error}); put back the run's values") from None
    name = algorithm.name
    points = sweep_points(algorithm, run_config)
    check_agent_memory(algorithm, run_config, run_config.num_seeds * len(points))
    keys, swept, names = agent_layout(run_config, points)
    if config.seed_index is not None and not 0 <= config.seed_index < len(keys):
        raise ConfigError(f"--seed-index {config.seed_index} is out of range: the run has {len(keys)} agents "
                          f"(indices 0 to {len(keys) - 1})")
    if config.gif is not None and not envs.can_draw(run_config.env):
        raise ConfigError(f"--gif: gymnax cannot draw {run_config.env}; drop --gif, or evaluate a run on a "
                          "classic-control, MinAtar or misc env")
    parts = agent_parts(algorithm, run_config)
    # Restored onto one device, the one the evaluation is compiled for.
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract_runner = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
                                   abstract_agents(parts, keys, swept))
    with Checkpoints(config.eval) as checkpoints:
        restored = checkpoints.restore("--eval", name, run_config, abstract_runner, False)
    if restored is None:
        raise ConfigError(f"--eval: {config.eval} has no checkpoint in checkpoints/ yet; it was stopped or killed "
                          "before its first chunk ended: --resume it")
    runner, _, done = restored
    evaluate = jax.jit(jax.vmap(lambda key, runner, swept: make_evaluate(
        algorithm, parts(swept)[0], config.eval_sampled)(key, runner)))
    evaluate = evaluate.lower(jax.ShapeDtypeStruct(keys.shape, keys.dtype), abstract_runner, swept).compile()
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_runner))
    check_memory(run_config, algorithm, [], state_bytes, 0, evaluate)  # before it runs
    eval_keys = evaluation_keys(keys)
    returns = evaluate(eval_keys, runner, swept)
    returns = np.asarray(returns)
    indices = range(len(keys)) if config.seed_index is None else [config.seed_index]
    which = "sampled policy (actions drawn as in training)" if config.eval_sampled else "deterministic policy"
    print(f"{name} on {run_config.env}, checkpoint after {done} iterations: {which}, {episodes} episodes per agent")
    for i in indices:
        print(f"seed {names[i]} (index {i}): mean {returns[i].mean():.2f}  returns "
              + " ".join(f"{r:.1f}" for r in returns[i]))
    if len(indices) > 1:
        print(f"mean over agents: {returns.mean():.2f}")
    if config.gif is not None:
        index = config.seed_index or 0
        act = eval_policy(algorithm, parts({k: v[index].item() for k, v in swept.items()})[0],
                          jax.tree.map(lambda x: x[index], runner), eval_keys[index], config.eval_sampled)
        total, length = envs.record_episode(run_config.env, act, eval_keys[index], config.gif)
        print(f"one episode of seed {names[index]} (index {index}): return {total:.1f} in {length} steps, drawn "
              f"to {config.gif}")
