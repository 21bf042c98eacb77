"""Faster equivalents of JAX primitives that are slow on XLA:CPU, for the scripts' jitted code."""

import math

import jax
import jax.numpy as jnp


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
