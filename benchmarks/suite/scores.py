"""The suite's scores: a uniformly random policy's returns on an env (`--random-scores`, the low end of each env's
normalisation range), normalised scores, and rliable's performance profiles over them."""

from typing import NamedTuple

import numpy as np

from scanrl.harness import aggregate

PROFILE_REPS = 2_000  # rliable's default for performance profiles


class Profile(NamedTuple):
    """A performance profile: at each threshold `taus[i]`, the fraction of runs scoring above it and its interval."""

    taus: np.ndarray
    fraction: np.ndarray
    low: np.ndarray
    high: np.ndarray


def performance_profile(score_matrix, taus, reps: int = PROFILE_REPS, confidence: float = 0.95,
                        seed: int = 0) -> Profile:
    """rliable's run-score profile: at each threshold tau, the fraction of all runs (over every task) whose score
    is above tau (strictly), with stratified-bootstrap percentile intervals (`aggregate.stratified_bootstrap_ci`).
    `score_matrix` is (num_runs, num_tasks); normalise envs of different scales first (`normalize`)."""
    x = np.asarray(score_matrix, dtype=float)
    if np.isnan(x).any():
        raise ValueError("performance_profile: the scores hold NaN; drop those runs first")
    taus = np.asarray(taus, dtype=float).reshape(-1)

    def fraction_above(stack):
        return (stack[..., None] > taus).mean(axis=(-3, -2))

    estimate = aggregate.stratified_bootstrap_ci(x, fraction_above, reps, confidence, seed)
    return Profile(taus, estimate.point, estimate.low, estimate.high)


def normalize(scores, low, high):
    """(scores - low) / (high - low): 0 at `low` (e.g. a random policy's score), 1 at `high` (e.g. a published
    score), so envs of different scales share one axis. `low` and `high` are numbers or one per task (the last
    axis); NaN scores stay NaN."""
    scores, low, high = (np.asarray(v, dtype=float) for v in (scores, low, high))
    if np.any(high == low):
        raise ValueError("normalize: high equals low, the range is empty")
    return (scores - low) / (high - low)


RANDOM_PIECE = 1_000  # env steps between two looks at whether every random episode has ended


def random_policy_returns(env_id, episodes, seed=0) -> np.ndarray:
    """The return of the first episode of `episodes` envs under uniformly random actions (gymnax's action-space
    sampling), through the scripts' env stack (`envs.make_vec`), as summary.json's eval_return is played."""
    import jax
    import jax.numpy as jnp

    from scanrl import envs

    env, params = envs.make_vec(env_id, episodes)
    space = env.action_space(params)

    def step(carry, key):
        state, finished, returns = carry
        key_act, key_step = jax.random.split(key)
        action = jax.vmap(space.sample)(jax.random.split(key_act, episodes))
        _, state, _, _, _, info = env.step(key_step, state, action, params)
        first_end = info["episode_done"] & ~finished
        return (state, finished | info["episode_done"], jnp.where(first_end, info["episode_return"], returns)), None

    @jax.jit
    def play(carry, keys):
        return jax.lax.scan(step, carry, keys)[0]

    # Up to the episode's step limit, in pieces, stopping once every episode has ended (full Craftax's limit is
    # 100,000 steps; its random episodes end long before).
    key_reset, key = jax.random.split(jax.random.PRNGKey(seed))
    carry = (env.reset(key_reset, params)[1], jnp.zeros(episodes, bool), jnp.full(episodes, jnp.nan, jnp.float32))
    keys = jax.random.split(key, params.max_steps_in_episode)
    for start in range(0, len(keys), RANDOM_PIECE):
        carry = play(carry, keys[start:start + RANDOM_PIECE])
        if bool(carry[1].all()):
            break
    return np.asarray(carry[2])


def print_random_scores(entries, episodes):
    """--random-scores: a markdown table of the random policy's returns on each env of the entries."""
    print("| env | random policy: mean return | std | episodes that ended |")
    print("|---|---:|---:|---:|")
    for env_id in dict.fromkeys(e.env for e in entries):
        returns = random_policy_returns(env_id, episodes)
        ended = returns[~np.isnan(returns)]
        print(f"| {env_id} | {ended.mean():.4g} | {ended.std():.4g} | {ended.size} of {episodes} |", flush=True)
