"""Playing a policy: `evaluate` (one episode in each env of a batch, in pieces for a host that reports progress), the
`RecurrentPolicy` a policy with memory is, and `normalized_policy` (a policy fed observations as training saw them)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from scanrl.envs.wrappers import observation_normalizer


@dataclass(frozen=True)
class RecurrentPolicy:
    """A policy with memory, for `evaluate` and `record_episode` (and as an algorithm's `policy` for the harness):
    `initial_carry(num_envs)` is the memory before anything was seen, and `step(carry, obs, start) -> (carry,
    action)` acts on a batch of observations, `start` flagging the envs whose episode begins with this observation
    (the memory resets there). A feed-forward policy is a plain function `act(obs) -> action`."""

    initial_carry: Callable[[int], Any]
    step: Callable[[Any, Any, Any], tuple[Any, Any]]

    def __call__(self, obs):
        raise TypeError("this policy has memory: step it with RecurrentPolicy.step(carry, obs, start) from its "
                        "initial_carry (as envs.evaluate does), not as act(obs)")


def as_recurrent(policy) -> RecurrentPolicy:
    """`policy` as a `RecurrentPolicy`: itself, or a feed-forward `act(obs)` with an empty memory."""
    if isinstance(policy, RecurrentPolicy):
        return policy
    return RecurrentPolicy(lambda num_envs: (), lambda carry, obs, start: (carry, policy(obs)))


def normalized_policy(policy, runner) -> RecurrentPolicy:
    """`policy` (`act(obs)` or a `RecurrentPolicy`) fed observations as training saw them: standardised with the
    frozen statistics of the `NormalizeObservation` state in `runner` (an agent's state), unchanged where it holds
    none. The harness evaluates an algorithm's policy so, on an env without normalisation wrappers."""
    normalize, policy = observation_normalizer(runner), as_recurrent(policy)
    return RecurrentPolicy(policy.initial_carry, lambda carry, obs, start: policy.step(carry, normalize(obs), start))


def evaluate(env, env_params, policy, key, num_steps: int):
    """Plays one episode in each env of a `make_vec` env with `policy`: `act(obs) -> action`, or a
    `RecurrentPolicy`, whose memory starts from its initial carry and resets where an episode starts.

    Returns the return of each env's first episode, shape `(num_envs,)`; `num_steps` should cover the
    longest episode (the env's time limit). It stops once every env's first episode has ended (an env with a
    time limit of 1e9 steps ends when its episodes do). Evaluate on an env without normalisation wrappers, the
    policy normalising with training's frozen statistics (`normalized_policy`). The same in pieces, for a
    host that reports progress or stops between them: `evaluation_start`, then `evaluation_steps` until it ends.
    """
    carry = evaluation_start(env, env_params, policy, key)
    return evaluation_steps(env, env_params, policy, key, carry, num_steps).returns


class Evaluation(NamedTuple):
    """`evaluate`'s state between steps: the step count, each env's observation, where an episode starts, the
    policy's memory, the env states, whose first episode has ended, and its return (NaN until it ends)."""

    t: jax.Array
    obs: jax.Array
    start: jax.Array
    memory: Any
    state: Any
    finished: jax.Array
    returns: jax.Array


def evaluation_start(env, env_params, policy, key) -> Evaluation:
    """`evaluate`'s state before its first step: every env reset."""
    policy = as_recurrent(policy)
    key_reset, _ = jax.random.split(key)
    obs, state = env.reset(key_reset, env_params)
    num_envs = obs.shape[0]
    return Evaluation(jnp.int32(0), obs, jnp.ones(num_envs, bool), policy.initial_carry(num_envs), state,
                      jnp.zeros(num_envs, bool), jnp.full(num_envs, jnp.nan, jnp.float32))


def evaluation_steps(env, env_params, policy, key, carry: Evaluation, until) -> Evaluation:
    """`evaluate`'s steps from `carry` until step `until` (a traced int32 may set it) or every env's first episode
    has ended: pieces run one after another play the same episodes as one call."""
    policy = as_recurrent(policy)
    _, key = jax.random.split(key)

    def _eval_step(carry):
        memory, action = policy.step(carry.memory, carry.obs, carry.start)
        # fold_in(key, t) is split(key, num_steps)[t], without making num_steps keys up front
        obs, state, _, _, _, info = env.step(jax.random.fold_in(key, carry.t), carry.state, action, env_params)
        first_end = jnp.logical_and(info["episode_done"], jnp.logical_not(carry.finished))
        return Evaluation(carry.t + 1, obs, info["episode_done"], memory, state,
                          jnp.logical_or(carry.finished, info["episode_done"]),
                          jnp.where(first_end, info["episode_return"], carry.returns))

    return jax.lax.while_loop(lambda c: (c.t < until) & ~c.finished.all(), _eval_step, carry)
