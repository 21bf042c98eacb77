"""harness.fast: CPU-fast equivalents of JAX primitives, against what they replace."""

import jax
import numpy as np
import pytest

from harness import fast


@pytest.mark.parametrize("n", [1, 2, 3, 7, 512, 1000, 65536, 70000])  # 70000: past 16 index bits, jax's own
def test_permutation_is_a_permutation(n):
    order = np.asarray(jax.jit(fast.permutation, static_argnums=1)(jax.random.PRNGKey(n), n))
    assert order.dtype == np.int32 and sorted(order.tolist()) == list(range(n))


def test_permutation_is_uniform():
    """All 24 orders of 4 items come up about equally often over 24,000 keys (each within 5 standard deviations of
    1,000), and different keys give different orders."""
    orders = np.asarray(jax.vmap(lambda k: fast.permutation(k, 4))(jax.random.split(jax.random.PRNGKey(0), 24_000)))
    codes, counts = np.unique(orders @ np.array([64, 16, 4, 1]), return_counts=True)
    assert len(codes) == 24
    assert np.abs(counts - 1000).max() < 5 * np.sqrt(1000 * (1 - 1 / 24)), counts
