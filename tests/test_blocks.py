"""scanrl.blocks: the algorithm building blocks, against what they replace or a reference computed another way, and
the replay buffer td3.py and sac.py keep in their train state."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def example_transitions(obs_size):
    """One transition of each field's shape and dtype, as DQN's init makes them: (obs, action, reward, next_obs,
    terminated)."""
    zeros = jnp.zeros(1)
    return zeros[:, None].repeat(obs_size, 1), zeros.astype(jnp.int32), zeros, zeros[:, None].repeat(obs_size, 1), \
        zeros


# Few distinct shapes: every new (capacity, batch) pair compiles the buffer's ops again.
@settings(max_examples=40, deadline=None)
@given(capacity=st.sampled_from([1, 3, 8]), n=st.sampled_from([1, 2, 3, 8]), writes=st.integers(1, 8))
def test_replay_buffer_wraps_at_any_capacity_and_samples_only_filled_slots(capacity, n, writes):
    """Writes of n rows at a time (a script's num_envs); a capacity that is not a multiple of n (dqn_tabular_q's
    --buffer-size) wraps inside a write."""
    n = min(n, capacity)
    buffer = blocks.ReplayBuffer.create(capacity, example_transitions(2))
    next_id = 1  # transition k carries reward k, obs (k, -k); empty slots hold zeros
    for _ in range(writes):
        ids = jnp.arange(next_id, next_id + n, dtype=jnp.float32)
        buffer = buffer.add((jnp.stack([ids, -ids], -1), ids.astype(jnp.int32), ids, jnp.stack([ids, ids], -1),
                             jnp.zeros(n)))
        next_id += n
    total = next_id - 1
    assert int(buffer.size) == min(total, capacity) and int(buffer.pos) == total % capacity
    # The newest min(total, capacity) transitions, each in slot (k - 1) % capacity.
    newest = np.arange(max(1, total - capacity + 1), total + 1)
    np.testing.assert_array_equal(np.asarray(buffer.data[2])[(newest - 1) % capacity], newest)
    if total < capacity:
        assert not np.asarray(buffer.data[2])[total:].any()
    obs, action, reward, next_obs, _ = buffer.sample(jax.random.PRNGKey(total), 256)
    assert set(np.asarray(reward).tolist()) <= set(newest.tolist())
    np.testing.assert_array_equal(np.asarray(obs[:, 0]), np.asarray(reward))  # fields stay aligned
    np.testing.assert_array_equal(np.asarray(action), np.asarray(reward))
    if len(newest) <= 4:
        assert set(np.asarray(reward).tolist()) == set(newest.tolist())  # every filled slot can come up


def test_replay_buffer_is_vmappable():
    buffers = jax.vmap(lambda _: blocks.ReplayBuffer.create(5, example_transitions(1)))(jnp.arange(3))
    ids = jnp.arange(1.0, 4.0)
    buffers = jax.vmap(lambda b, i: b.add((i[None, None], i[None].astype(jnp.int32), i[None], i[None, None],
                                           jnp.zeros(1))))(buffers, ids)
    assert buffers.data[2].shape == (3, 5) and buffers.size.tolist() == [1, 1, 1]
    np.testing.assert_array_equal(np.asarray(buffers.data[2][:, 0]), [1.0, 2.0, 3.0])
