"""The private JAX APIs the harness uses, and one reading of JAX's output that no API gives, each with a test
(tests/test_jax_private.py) that fails loudly when a jax upgrade changes it (jax pinned: requirements.txt).

- The compilation cache's store: JAX has a public switch for its cache but none for how entries are stored.
- The coordination service's key-value store of a multi-process run: heartbeats and arrival marks (processes.py).
- Whether a program's output depends on an input (a swept field, program.py): JAX's dead-code removal, which `jax.jit`
  runs before it drops the inputs no output depends on, says which those are; no public API does."""

import jax
from jax._src import compilation_cache as _compilation_cache
from jax._src import distributed as _distributed
from jax._src.compilation_cache_interface import CacheInterface
from jax._src.interpreters import partial_eval as _partial_eval

__all__ = ["CacheInterface", "coordination_client", "inputs_read", "install_cache_store"]


def install_cache_store(store: CacheInterface):
    """Makes `store` JAX's compilation cache store; before the first compile (JAX makes its own lazily)."""
    if not hasattr(_compilation_cache, "_cache"):
        raise RuntimeError("jax._src.compilation_cache._cache is gone: this jax is not the pinned one")
    _compilation_cache._cache = store


def coordination_client():
    """The key-value store client of the running `jax.distributed` job (None outside one)."""
    return _distributed.global_state.client


def inputs_read(fn, *args) -> list[bool]:
    """For each input of `fn(*args)` (ShapeDtypeStructs; a pytree's leaves in its order), whether any output depends on
    it (through scans, loops and branches): traced, neither lowered nor compiled."""
    closed = jax.make_jaxpr(fn)(*args)
    _, used = _partial_eval.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    return used
