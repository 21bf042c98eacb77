"""A uniformly random policy's returns on an env: the low end of each env's normalisation range (`--random-scores`)."""

import numpy as np


def random_policy_returns(env_id, episodes, seed=0) -> np.ndarray:
    """The return of the first episode of `episodes` envs under uniformly random actions (gymnax's action-space
    sampling), through the scripts' env stack (`envs.make_vec`), as summary.json's eval_return is played."""
    import jax
    import jax.numpy as jnp

    from scanrl import envs

    env, params = envs.make_vec(env_id, episodes)
    space = env.action_space(params)

    @jax.jit
    def play(key):
        key_reset, key = jax.random.split(key)
        _, state = env.reset(key_reset, params)

        def step(carry, key):
            state, finished, returns = carry
            key_act, key_step = jax.random.split(key)
            action = jax.vmap(space.sample)(jax.random.split(key_act, episodes))
            _, state, _, _, _, info = env.step(key_step, state, action, params)
            first_end = info["episode_done"] & ~finished
            return (state, finished | info["episode_done"], jnp.where(first_end, info["episode_return"], returns)), None

        carry = (state, jnp.zeros(episodes, bool), jnp.full(episodes, jnp.nan, jnp.float32))
        (_, _, returns), _ = jax.lax.scan(step, carry, jax.random.split(key, params.max_steps_in_episode))
        return returns

    return np.asarray(play(jax.random.PRNGKey(seed)))


def print_random_scores(entries, episodes):
    """--random-scores: a markdown table of the random policy's returns on each env of the entries."""
    print("| env | random policy: mean return | std | episodes that ended |")
    print("|---|---:|---:|---:|")
    for env_id in dict.fromkeys(e.env for e in entries):
        returns = random_policy_returns(env_id, episodes)
        ended = returns[~np.isnan(returns)]
        print(f"| {env_id} | {ended.mean():.4g} | {ended.std():.4g} | {ended.size} of {episodes} |", flush=True)
