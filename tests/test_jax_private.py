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


def test_inputs_read_sees_through_scans_to_what_the_outputs_use_as_jit_does():
    """Inputs no output depends on, through a scan's carry: those jit drops from the program it lowers."""
    from scanrl.harness.jax_private import inputs_read

    def carried_but_unused(x):
        (count, ignored), _ = jax.lax.scan(lambda c, _: ((c[0] + 1.0, c[1] * x), None), (0.0, -x), None, 3)
        return count

    def used(x):
        (count, scaled), _ = jax.lax.scan(lambda c, _: ((c[0] + 1.0, c[1] * x), None), (0.0, 1.0), None, 3)
        return count + scaled

    def both(values):
        return carried_but_unused(values["a"]) + used(values["b"])

    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    assert inputs_read(carried_but_unused, scalar) == [False]
    assert inputs_read(used, scalar) == [True]
    assert inputs_read(both, {"b": scalar, "a": scalar}) == [False, True]  # a dict's leaves: its keys sorted
    for fn, values in ((carried_but_unused, scalar), (both, {"a": scalar, "b": scalar})):  # what jit keeps
        signature = jax.jit(fn).lower(values).as_text().split("func.func public @main(")[1].split(")")[0]
        assert signature.count("%arg") == sum(inputs_read(fn, values))
