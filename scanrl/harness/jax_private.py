"""The private JAX APIs the harness uses, and one reading of JAX's output that no API gives, each with a test
(tests/test_jax_private.py) that fails loudly when a jax upgrade changes it (jax pinned: requirements.txt).

- The compilation cache's store: JAX has a public switch for its cache but none for how entries are stored.
- The coordination service's key-value store of a multi-process run: heartbeats and arrival marks (processes.py).
- Whether a program's output depends on an input (a swept field, sweeps.py): `jax.jit` drops inputs no output depends
  on (through scans, loops and branches), and only the lowered program's text shows which it kept.
"""

import re

import jax
from jax._src import compilation_cache as _compilation_cache
from jax._src import distributed as _distributed
from jax._src.compilation_cache_interface import CacheInterface

__all__ = ["CacheInterface", "coordination_client", "install_cache_store", "reads_its_input"]


def install_cache_store(store: CacheInterface):
    """Makes `store` JAX's persistent compilation cache store (call before the first compile: JAX makes its own
    lazily, on first use)."""
    if not hasattr(_compilation_cache, "_cache"):
        raise RuntimeError("jax._src.compilation_cache._cache is gone: this jax is not the pinned one")
    _compilation_cache._cache = store


def coordination_client():
    """The key-value store client of the running `jax.distributed` job (None outside one)."""
    return _distributed.global_state.client


def reads_its_input(fn, arg) -> bool:
    """Whether any output of `fn(arg)` depends on `arg` (a ShapeDtypeStruct): traced and lowered, not compiled."""
    text = jax.jit(fn).lower(arg).as_text()
    main = re.search(r"func\.func public @main\((.*?)\)\s*->", text)
    if main is None:
        raise RuntimeError("no `func.func public @main(...)` in the lowered program: this jax is not the pinned one")
    return "%arg0" in main.group(1)
