"""Algorithm building blocks shared by the scripts: plain JAX functions a script calls inside its jitted training.

    max_truncations, next_obs_values  bootstrapping a rollout's truncated episodes from their true final observations
    ended_episodes                    the mean return and length of the episodes that ended in a rollout
    epsilon_greedy                    epsilon-greedy actions from one random word per step
    permutation                       a random permutation, about 5x faster than jax.random.permutation on XLA:CPU
    sampling_policy                   a distribution's samples as a policy for `envs.evaluate` (--eval --eval-sampled)
    run_if                            a branch on a counter in the runner that vmapped agents skip together
    ReplayBuffer                      a ring buffer of transitions inside the train state (td3, sac)
    action_bounds                     a Box action space's bounds as arrays

They know nothing of the harness: a fork may call them, copy them into its script, or replace them.
"""

import math

import jax
import jax.numpy as jnp
from flax import struct

from scanrl.envs import RecurrentPolicy


def max_truncations(env_params, num_envs: int, num_steps: int) -> int:
    """The most time-limit truncations `num_envs` envs can have in a rollout of `num_steps` steps: a limit of L
    steps truncates an env at most (num_steps - 1) // L + 1 times; every step where the env has no time limit."""
    time_limit = getattr(env_params, "max_steps_in_episode", None) or 1
    return num_envs * min(num_steps, (num_steps - 1) // time_limit + 1)


def next_obs_values(value_fn, values, done, terminated, next_obs, last_obs, env_params, memory=None):
    """The value of every step's true next observation in a rollout (num_steps, num_envs), for bootstrapping:
    `values` (of each step's observation) shifted by one, and `value_fn(last_obs)` after the last step, except where
    an episode ended, where the next observation is the final one (`next_obs`, info["final_observation"]). Only a
    truncated ending bootstraps from it (a termination's is masked out by its user), and the env's time limit
    (`env_params`) allows at most `max_truncations` of those in the rollout, so `value_fn` sees those final
    observations alone, not every step's. Terminated steps get a value that must not be used.

    A critic with memory passes `memory` (num_steps, num_envs, ...): the memory each step's observation left, the
    state its next observation is seen from. `value_fn(obs, memory)` then gets, with each observation, the memory of
    the step before it: `memory[-1]` with `last_obs`, and the ended step's own with its final observation (the
    episode that ended, not reset)."""
    num_steps, num_envs = values.shape
    truncated = (done * (1.0 - terminated)).reshape(-1)
    most = max_truncations(env_params, num_envs, num_steps)
    rows = jnp.nonzero(truncated, size=most, fill_value=truncated.size)[0]  # past the end: dropped below
    rows_in = jnp.minimum(rows, truncated.size - 1)
    final_obs = next_obs.reshape(truncated.size, *next_obs.shape[2:])[rows_in]
    obs = jnp.concatenate([last_obs, final_obs])
    if memory is None:
        extra = value_fn(obs)
    else:
        ended = memory.reshape(truncated.size, *memory.shape[2:])[rows_in]
        extra = value_fn(obs, jnp.concatenate([memory[-1], ended]))
    next_values = jnp.concatenate([values[1:], extra[None, :num_envs]]).reshape(-1)
    return next_values.at[rows].set(extra[num_envs:], mode="drop").reshape(num_steps, num_envs)


def ended_episodes(env_state_start, env_state_end, episodes, reward_sum, num_steps):
    """Mean return and length of the episodes that ended during an update, from two per-env counters
    carried through the step scan (episodes ended, rewards collected) and the running episode sums that
    `EpisodeStatistics` keeps in the env state: each step adds its reward and 1 to the running sums and an
    episode's end moves them to the ended ones, so ended = collected + running at start - running at end.
    (Carrying fewer values through the scan keeps its body one fast XLA:CPU loop.)"""
    ended_return = reward_sum + env_state_start.episode_return - env_state_end.episode_return
    ended_length = num_steps + env_state_start.episode_length - env_state_end.episode_length
    total = episodes.sum()
    return {
        "episodes": total,
        # Means over the episodes that ended in this update; NaN if none did.
        "episode_return": ended_return.sum() / total,
        "episode_length": ended_length.sum() / total,
    }


def epsilon_greedy(q, bits, epsilon):
    """Epsilon-greedy actions for a batch of Q rows `q` (n, num_actions) from one uint32 `bits` per row.

    The low 16 bits decide exploration (probability epsilon, to 1/65536); the high 16 bits pick uniformly
    among the candidates: the tied greedy actions, or every action when exploring. A plain argmax would
    always pick action 0 on a zero-initialised table. One word of randomness per step keeps the PRNG, the
    most expensive part of a tabular step on CPU, small.
    """
    explore = (bits & 0xFFFF) < (epsilon * 65536.0).astype(jnp.uint32)
    candidates = (q == q.max(-1, keepdims=True)) | explore[:, None]
    count = candidates.sum(-1, dtype=jnp.uint32)
    k = ((bits >> 16) * count) >> 16  # uniform in [0, count)
    kth_candidate = candidates & (jnp.cumsum(candidates, -1, dtype=jnp.uint32) == (k + 1)[:, None])
    return jnp.argmax(kth_candidate, -1).astype(jnp.int32)


def permutation(key, n: int):
    """A uniformly random permutation of range(n), as `jax.random.permutation(key, n)` draws one (sort by random
    keys, in rounds enough that ties do not bias it), about 5x faster on CPU: XLA:CPU sorts a single array of
    integers natively but calls a compiled comparator for each comparison of a key-value sort, so each key here
    carries its position in its low bits."""
    index_bits = max(1, (n - 1).bit_length())
    if index_bits > 16:  # too few bits left for the random keys: jax's own, key-value sort
        return jax.random.permutation(key, n)
    key_bits = 32 - index_bits
    rounds = math.ceil(3 * math.log(max(n, 2)) / (key_bits * math.log(2)))  # jax's rule, for key_bits-bit keys
    position = jnp.arange(n, dtype=jnp.uint32)
    order = None
    for round_key in jax.random.split(key, rounds):
        # Sorting keys that end in their position is a stable sort by the random high bits: ties keep the order of
        # the previous round, which was random already.
        packed = (jax.random.bits(round_key, (n,), jnp.uint32) << index_bits) | position
        moved = (jnp.sort(packed) & ((1 << index_bits) - 1)).astype(jnp.int32)
        order = moved if order is None else order[moved]
    return order


def sampling_policy(distribution, key) -> RecurrentPolicy:
    """A feed-forward policy that acts as in training, sampling each action from `distribution(obs batch) -> a
    distrax distribution`: a `RecurrentPolicy` whose memory is its PRNG key, split at every step."""

    def step(key, obs, start):
        key, key_action = jax.random.split(key)
        return key, distribution(obs).sample(seed=key_action)

    return RecurrentPolicy(lambda num_envs: key, step)


def run_if(pred, fn, carry, default):
    """`fn(carry)` (a new carry and outputs) where `pred`, else `(carry, default)`, as a `lax.while_loop` of at most
    one pass. Under `jax.vmap` over agents whose `pred` (a counter in each agent's runner) is batched, `lax.cond`
    becomes a select that runs `fn` for every agent every time; a batched while loop runs its body while any agent's
    `pred` holds, so agents that agree (all of a run's, unless --sweep varies the counter's threshold) skip it."""

    def body(state):
        _, carry, _ = state
        return (jnp.zeros_like(pred), *fn(carry))

    _, carry, out = jax.lax.while_loop(lambda state: state[0], body, (pred, carry, default))
    return carry, out


@struct.dataclass
class ReplayBuffer:
    """A fixed-size ring buffer of transitions (any pytree of arrays with a leading batch axis): a plain pytree, so
    it lives in the train state and vmaps."""

    data: object  # the transitions' arrays with a leading capacity axis
    pos: jax.Array  # next row to write
    size: jax.Array  # rows filled so far

    @classmethod
    def create(cls, capacity: int, example):
        data = jax.tree.map(lambda x: jnp.zeros((capacity,) + x.shape[1:], x.dtype), example)
        return cls(data, jnp.int32(0), jnp.int32(0))

    def add(self, batch):
        """Writes a batch of n transitions (leading axis; n <= capacity, the same n every time) after the newest,
        wrapping round to row 0: one slice where the capacity is a multiple of n (no write wraps), else a scatter."""
        n = jax.tree.leaves(batch)[0].shape[0]
        capacity = jax.tree.leaves(self.data)[0].shape[0]
        if capacity % n:
            rows = (self.pos + jnp.arange(n)) % capacity
            data = jax.tree.map(lambda d, x: d.at[rows].set(x), self.data, batch)
        else:
            data = jax.tree.map(lambda d, x: jax.lax.dynamic_update_slice_in_dim(d, x, self.pos, 0), self.data, batch)
        return ReplayBuffer(data, (self.pos + n) % capacity, jnp.minimum(self.size + n, capacity))

    def sample(self, key, batch_size: int):
        """Uniformly, with replacement, from the filled rows."""
        index = jax.random.randint(key, (batch_size,), 0, self.size)
        return jax.tree.map(lambda x: x[index], self.data)


def action_bounds(env, env_params):
    """A Box action space's (low, high), float32 arrays of the action's shape."""
    space = env.action_space(env_params)
    low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), space.shape)
    high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), space.shape)
    return low, high
