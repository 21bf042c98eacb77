"""JAX's persistent compilation cache, on by default: a rerun of the same command (same script, flags that shape the
program, machine and jax) loads its compiled programs from disk instead of compiling them again.

Where: --compile-cache DIR, else $SCANRL_COMPILE_CACHE, else JAX's own JAX_COMPILATION_CACHE_DIR, else
$XDG_CACHE_HOME/scanrl/jax (~/.cache/scanrl/jax); "off" turns it off. Entries go to a sub-directory named after
the CPU (its model and instruction-set flags), so a home directory shared by different machines never hands one
a program compiled for another's instructions. JAX's own file cache writes entries in place: a process killed
mid-write (or a full disk) leaves a truncated entry that every later run fails to read and never replaces. This
one writes a temporary file and renames it, and keeps the directory under `MAX_BYTES` (least recently used go).
Entries are tied to the program that wrote them (`FORMAT`, jax and jaxlib) and checked against a digest when read:
anything else at an entry's name (another program's entry, a damaged one, a FIFO or a link) is dropped and compiled
again, with one note. The digest finds damage, not forgery (anyone can compute it): what keeps out a program someone
else planted is that, as ssh does with its keys, the cache is used only in folders this user owns and no one else
can write (group and others without write permission), and only entries this user owns are read.
"""

import hashlib
import os
import pathlib
import platform
import stat
import sys

import jax

from scanrl.harness.files import replaced
from scanrl.harness.jax_private import CacheInterface, install_cache_store

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


# What an entry is tied to besides JAX's key (which covers the program's inputs): this format and the jax and jaxlib
# that compiled it. Entries are named <key>-<PROGRAM> and hold a digest over all of it, so an entry another program
# wrote (JAX's own cache in the same folder, another tool, another version), or one that was damaged, is never run.
FORMAT = b"scanrl compile cache entry v1\n"


def program_fingerprint() -> str:
    import jaxlib

    return hashlib.sha256(FORMAT + f"{jax.__version__} {jaxlib.__version__}".encode()).hexdigest()[:16]


class FileCache(CacheInterface):
    """Compiled programs as files in `path`, written atomically; the oldest used go beyond `max_bytes`. Only regular
    files are opened (a FIFO, device or link at an entry's name is dropped, never waited on or followed); an entry
    whose digest does not match its name and content is dropped with one note and compiled again."""

    def __init__(self, path, max_bytes=MAX_BYTES):
        self._path = pathlib.Path(path)
        self.max_bytes = max_bytes
        self.program = program_fingerprint()
        self.noted = False

    def _entry(self, key):
        return self._path / f"{key}-{self.program}"

    def _digest(self, key, value) -> bytes:
        return hashlib.sha256(FORMAT + self.program.encode() + key.encode() + b"\0" + value).digest()

    def get(self, key):
        entry = self._entry(key)
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as error:  # a link (ELOOP), or unreadable
            return self._drop(entry, error.strerror or str(error))
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                return self._drop(entry, "not a regular file")
            if status.st_uid != os.getuid():
                return self._drop(entry, "written by another user")
            with os.fdopen(fd, "rb", closefd=False) as f:
                stored = f.read()
            os.utime(fd)  # its last use, for the eviction below
        except OSError as error:
            return self._drop(entry, error.strerror or str(error))
        finally:
            os.close(fd)
        head, digest, value = stored[:len(FORMAT)], stored[len(FORMAT):len(FORMAT) + 32], stored[len(FORMAT) + 32:]
        if head != FORMAT or digest != self._digest(key, value):
            return self._drop(entry, "written by another program, or damaged")
        return value

    def _drop(self, entry, why):
        """Removes an entry that cannot be used (the program is compiled again and written anew) -> None; one note per
        process."""
        try:
            entry.unlink()
        except OSError:
            pass
        if not self.noted:
            self.noted = True
            print(f"note: compile cache: dropped {entry} ({why}); the program is compiled again", file=sys.stderr)
        return None

    def put(self, key, value):  # JAX warns (and the run goes on) if this raises
        with replaced(self._entry(key), "wb") as f:  # never through a link planted in the cache
            f.write(FORMAT + self._digest(key, value) + value)
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
        for folder in (os.path.dirname(path), path):  # made for this user alone whatever the umask, each checked
            os.makedirs(folder, mode=0o700, exist_ok=True)  # before anything is made in it
            status = os.stat(folder)
            if status.st_uid != os.getuid() or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                whose = "writable by others" if status.st_uid == os.getuid() else "not yours"
                raise PermissionError(f"{folder} is {whose} (mode {stat.filemode(status.st_mode)}), so a program "
                                      "planted in it would run; use a folder of your own that only you can write "
                                      "(chmod go-w)")
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
