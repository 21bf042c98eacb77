"""JAX's persistent compilation cache, on by default: a rerun of the same command (same script, flags that shape the
program, machine and jax) loads its compiled programs from disk instead of compiling them again.

Where: --compile-cache DIR, else $SCANRL_COMPILE_CACHE, else JAX's own JAX_COMPILATION_CACHE_DIR, else
$XDG_CACHE_HOME/scanrl/jax (~/.cache/scanrl/jax); "off" turns it off. Entries go to a sub-directory named after
the CPU (its model and instruction-set flags), so a home directory shared by different machines never hands one
a program compiled for another's instructions. JAX's own file cache writes entries in place: a process killed
mid-write (or a full disk) leaves a truncated entry that every later run fails to read and never replaces. This
one writes a temporary file and renames it, and keeps the directory under `MAX_BYTES` (least recently used go).
"""

import hashlib
import os
import pathlib
import platform
import sys

import jax

from harness.files import replaced
from harness.jax_private import CacheInterface, install_cache_store

MAX_BYTES = 2 << 30


def cache_root(flag: str | None) -> str | None:
    """The cache's directory from --compile-cache, the environment or the default; None when turned off."""
    where = flag or os.environ.get("SCANRL_COMPILE_CACHE") or jax.config.jax_compilation_cache_dir
    if not where:
        where = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "scanrl", "jax")
    return None if where == "off" else where


def machine_tag() -> str:
    """A short name for this CPU: a hash of its model and instruction-set flags (and the OS and architecture)."""
    described = [platform.system(), platform.machine()]
    try:
        with open("/proc/cpuinfo") as f:
            described += sorted({line.strip() for line in f if line.startswith(("model name", "flags"))})
    except OSError:
        described.append(platform.processor())
    return f"{platform.machine()}-{hashlib.sha256(' '.join(described).encode()).hexdigest()[:12]}"


class FileCache(CacheInterface):
    """Compiled programs as files in `path`, written atomically; the oldest used go beyond `max_bytes`."""

    def __init__(self, path, max_bytes=MAX_BYTES):
        self._path = pathlib.Path(path)
        self.max_bytes = max_bytes

    def get(self, key):
        entry = self._path / key
        try:
            value = entry.read_bytes()
            os.utime(entry)  # its last use, for the eviction below
            return value
        except FileNotFoundError:
            return None

    def put(self, key, value):  # JAX warns (and the run goes on) if this raises
        with replaced(self._path / key, "wb") as f:  # never through a link planted in the cache
            f.write(value)
        self.evict()

    def evict(self):
        entries = []
        for entry in self._path.iterdir():
            if entry.name.startswith("."):  # a write under way
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:  # another process evicted it
                continue
            entries.append((stat.st_mtime, stat.st_size, entry))
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries):
            if total <= self.max_bytes:
                break
            entry.unlink(missing_ok=True)
            total -= size


def start(flag: str | None) -> str | None:
    """Turns the cache on (before anything compiles) -> its directory, or None when off or not usable (a note
    says why; the run goes on without it)."""
    root = cache_root(flag)
    if root is None:
        return None
    path = os.path.join(os.path.abspath(os.path.expanduser(root)), machine_tag())
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as error:
        print(f"note: compile cache off: cannot use {path} ({error.strerror or error}); set --compile-cache to "
              "another directory, or off", file=sys.stderr)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    install_cache_store(FileCache(path))  # in place of JAX's (it is made lazily, so not made yet)
    return path
