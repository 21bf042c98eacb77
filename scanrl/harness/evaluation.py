"""The programs that measure a policy: the returns of an agent's deterministic policy on fresh episodes (the final
evaluation, summary.json's `eval_return`; --eval on a saved run, on the same episodes), or of the policy training
acts with (--eval-sampled), and each agent's evaluation key. No harness imports: the job and the sweep checks use
them."""

from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

# With threefry, fold_in(key, i) equals split(key, n)[i] for every i < n: folding a small number into an agent's
# root key gives a key its init split off. No split of the root into fewer than 2**32 keys reaches this one.
EVALUATION_FOLD = 2**32 - 1


def evaluation_keys(keys) -> np.ndarray:
    """Each agent's evaluation key, from its root key `PRNGKey(seed)`; never one its training uses."""
    return np.asarray(jax.vmap(lambda key: jax.random.fold_in(key, EVALUATION_FOLD))(keys))


class Evaluate(NamedTuple):
    """One agent's evaluation (see `make_evaluate`): whole, or in pieces the host runs until every episode ended."""

    returns: Callable  # (key, runner) -> the return of each episode, (eval_episodes,)
    start: Callable  # (key, runner) -> envs.Evaluation before the first step
    steps: Callable  # (key, runner, evaluation, until) -> envs.Evaluation at step `until` or once all episodes ended
    max_steps: int  # the env's time limit: no episode is played longer


def make_evaluate(algorithm, config, sampled=False) -> Evaluate:
    """One agent's evaluation: the first episode of each of `eval_episodes` envs played by its deterministic policy
    (`sampled`: its sampled policy, on the same episodes), from a key (`evaluation_keys`) and its runner."""
    from scanrl import envs

    env, env_params = envs.make_vec(config.env, config.eval_episodes)
    max_steps = int(env_params.max_steps_in_episode)

    def start(key, runner):
        return envs.evaluation_start(env, env_params, eval_policy(algorithm, config, runner, key, sampled), key)

    def steps(key, runner, evaluation, until):
        act = eval_policy(algorithm, config, runner, key, sampled)
        return envs.evaluation_steps(env, env_params, act, key, evaluation, until)

    return Evaluate(lambda key, runner: steps(key, runner, start(key, runner), max_steps).returns, start, steps,
                    max_steps)


def eval_policy(algorithm, config, runner, key, sampled):
    """The deterministic policy, or (`sampled`) the sampled one drawing its actions from a key folded from `key`
    (the episodes' key): the same episodes either way."""
    if not sampled:
        return algorithm.policy(config, runner)
    return algorithm.sampled_policy(config, runner, jax.random.fold_in(key, EVALUATION_FOLD))
