"""scanrl/harness/jax_private.py: the private JAX APIs the harness uses, each failing here, loudly,
when a jax upgrade moves it."""


import jax
import jax.numpy as jnp


def test_private_jax_apis_are_where_the_harness_expects_them():
    from jax._src import compilation_cache, distributed

    from scanrl.harness import jax_private

    assert hasattr(compilation_cache, "_cache")  # replaced by compile_cache.FileCache
    assert {"get", "put"} <= set(dir(jax_private.CacheInterface))
    assert hasattr(distributed.global_state, "client")
    assert jax_private.coordination_client() is None  # no multi-process run in this test


def test_reads_its_input_sees_through_scans_to_what_the_outputs_use():
    """jit drops inputs no output depends on, through a scan's carry; the lowered program's signature tells."""
    from scanrl.harness.jax_private import reads_its_input

    def carried_but_unused(x):
        (count, ignored), _ = jax.lax.scan(lambda c, _: ((c[0] + 1.0, c[1] * x), None), (0.0, -x), None, 3)
        return count

    def used(x):
        (count, scaled), _ = jax.lax.scan(lambda c, _: ((c[0] + 1.0, c[1] * x), None), (0.0, 1.0), None, 3)
        return count + scaled

    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    assert not reads_its_input(carried_but_unused, scalar)
    assert reads_its_input(used, scalar)
