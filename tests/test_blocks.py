"""scanrl.blocks: the algorithm building blocks, against what they replace or a reference computed another way, and
the replay buffer td3.py and sac.py keep in their train state."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scanrl import blocks


class Transition(NamedTuple):  # as td3.py and sac.py store them
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    next_obs: jax.Array


@pytest.mark.parametrize("n", [1, 2, 3, 7, 512, 1000, 65536, 70000])  # 70000: past 16 index bits, jax's own
def test_permutation_is_a_permutation(n):
    order = np.asarray(jax.jit(blocks.permutation, static_argnums=1)(jax.random.PRNGKey(n), n))
    assert order.dtype == np.int32 and sorted(order.tolist()) == list(range(n))


def test_permutation_is_uniform():
    """All 24 orders of 4 items come up about equally often over 24,000 keys (each within 5 standard deviations of
    1,000), and different keys give different orders."""
    orders = np.asarray(jax.vmap(lambda k: blocks.permutation(k, 4))(jax.random.split(jax.random.PRNGKey(0), 24_000)))
    codes, counts = np.unique(orders @ np.array([64, 16, 4, 1]), return_counts=True)
    assert len(codes) == 24
    assert np.abs(counts - 1000).max() < 5 * np.sqrt(1000 * (1 - 1 / 24)), counts


# blocks.epsilon_greedy: one uint32 per step decides exploration and breaks ties


def action_frequencies(q_row, epsilon, num=40_000, seed=0):
    bits = jax.random.bits(jax.random.PRNGKey(seed), (num,), jnp.uint32)
    q = jnp.broadcast_to(jnp.asarray(q_row, jnp.float32), (num, len(q_row)))
    actions = blocks.epsilon_greedy(q, bits, jnp.float32(epsilon))
    return np.bincount(np.asarray(actions), minlength=len(q_row)) / num


@pytest.mark.parametrize(
    "q_row, expected",
    [
        ([0.0, 0.0, 0.0, 0.0], [1 / 4] * 4),  # a zero-initialised table: uniform, not always action 0
        ([1.0, 1.0, 0.0, 1.0], [1 / 3, 1 / 3, 0.0, 1 / 3]),
        ([0.0, 0.5, 0.0, 0.5], [0.0, 1 / 2, 0.0, 1 / 2]),
        ([0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 1.0, 0.0]),
    ],
)
def test_greedy_ties_are_broken_uniformly(q_row, expected):
    freq = action_frequencies(q_row, epsilon=0.0)
    # 40k draws: the standard error of a frequency is <= 0.0025, so 0.01 is four of them.
    np.testing.assert_allclose(freq, expected, atol=0.01)


def test_epsilon_explores_uniformly_over_all_actions():
    np.testing.assert_allclose(action_frequencies([0.0, 0.0, 3.0, 0.0], epsilon=1.0), [1 / 4] * 4, atol=0.01)
    freq = action_frequencies([0.0, 0.0, 3.0, 0.0], epsilon=0.1)
    np.testing.assert_allclose(freq, [0.025, 0.025, 0.925, 0.025], atol=0.006)


def test_run_if_skips_fn_unless_an_agent_needs_it():
    calls = []

    def fn(carry):
        jax.debug.callback(lambda: calls.append(1))
        return carry + 1, carry * 10

    run = jax.jit(jax.vmap(lambda pred, carry: blocks.run_if(pred, fn, carry, jnp.int32(-1))))
    carry, out = run(jnp.array([False, False]), jnp.array([1, 2], jnp.int32))
    jax.effects_barrier()
    # No agent's predicate holds: fn never ran (a vmapped lax.cond would have run it, then selected).
    assert not calls and carry.tolist() == [1, 2] and out.tolist() == [-1, -1]
    carry, out = run(jnp.array([True, False]), jnp.array([1, 2], jnp.int32))
    jax.effects_barrier()
    assert calls and carry.tolist() == [2, 2] and out.tolist() == [10, -1]  # each agent gets its own branch


def test_replay_buffer_is_a_ring():
    column, flat = jnp.zeros((2, 1)), jnp.zeros(2)
    example = Transition(column, column, flat, flat, column)
    buffer = blocks.ReplayBuffer.create(6, example)
    for i in range(4):  # 8 rows into 6: the first two are overwritten
        rows = jnp.array([[2.0 * i], [2.0 * i + 1]])
        buffer = buffer.add(Transition(rows, rows, rows[:, 0], rows[:, 0], rows))
    assert int(buffer.size) == 6 and int(buffer.pos) == 2
    np.testing.assert_array_equal(buffer.data.obs[:, 0], [6, 7, 2, 3, 4, 5])
    sample = buffer.sample(jax.random.PRNGKey(0), 1000)
    assert set(np.asarray(sample.obs[:, 0]).tolist()) == {2, 3, 4, 5, 6, 7}
    np.testing.assert_array_equal(sample.obs[:, 0], sample.reward)  # one index for every field

    half = blocks.ReplayBuffer.create(6, example).add(jax.tree.map(jnp.ones_like, example))
    assert set(np.asarray(half.sample(jax.random.PRNGKey(0), 100).obs[:, 0]).tolist()) == {1.0}
