"""JAX's persistent compilation cache, on by default: a rerun of the same command loads its compiled programs from
disk. Where: --compile-cache DIR, else $SCANRL_COMPILE_CACHE, else JAX_COMPILATION_CACHE_DIR, else
$XDG_CACHE_HOME/scanrl/jax (~/.cache/scanrl/jax); "off" turns it off. Entries go to a sub-directory named after the
CPU, so a shared home never hands one machine a program compiled for another's instructions. Unlike JAX's own file
cache (which a kill mid-write leaves with a truncated entry every later run fails on), entries are written atomically,
kept under `MAX_BYTES`, tied to this program (`FORMAT`, jax, jaxlib) and checked against a digest when read. The
digest finds damage, not forgery: as ssh does with its keys, only folders this user owns and no one else can write
are used, and only entries this user owns are read."""

import contextlib
import hashlib
import os
import pathlib
import platform
import stat
import sys

import jax
import jaxlib

from scanrl.harness.files import open_regular, replaced
from scanrl.harness.jax_private import CacheInterface, install_cache_store

MAX_BYTES = 2 << 30
# Entries are named <key>-<program> and hold a digest over this, the program, the key and the value, so one that
# another program wrote (JAX's own cache in the same folder, another tool or version), or a damaged one, never runs.
FORMAT = b"scanrl compile cache entry v1\n"


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
    """Compiled programs as files in `path`, written atomically; the least recently used go beyond `max_bytes`. Only
    regular files this user owns are read (a FIFO, device or link at an entry's name is dropped, never waited on or
    followed); one whose digest does not match is dropped with one note and compiled again."""

    def __init__(self, path):
        self._path = pathlib.Path(path)
        self.program = hashlib.sha256(FORMAT + f"{jax.__version__} {jaxlib.__version__}".encode()).hexdigest()[:16]
        self.noted = False

    def _entry(self, key):
        return self._path / f"{key}-{self.program}"

    def _digest(self, key, value) -> bytes:
        return hashlib.sha256(FORMAT + self.program.encode() + key.encode() + b"\0" + value).digest()

    def get(self, key):
        entry = self._entry(key)
        try:
            with open_regular(entry, "rb", follow=False) as f:
                if os.fstat(f.fileno()).st_uid != os.getuid():
                    return self._drop(entry, "written by another user")
                stored = f.read()
                os.utime(f.fileno())  # its last use, for `evict`
        except FileNotFoundError:
            return None
        except OSError as error:  # a link (ELOOP), a FIFO or a device (EINVAL), or unreadable
            return self._drop(entry, error.strerror or str(error))
        head, digest, value = stored[:len(FORMAT)], stored[len(FORMAT):len(FORMAT) + 32], stored[len(FORMAT) + 32:]
        if head != FORMAT or digest != self._digest(key, value):
            return self._drop(entry, "written by another program, or damaged")
        return value

    def _drop(self, entry, why):
        """Removes an entry that cannot be used -> None; one note per process."""
        with contextlib.suppress(OSError):
            entry.unlink()
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
            with contextlib.suppress(FileNotFoundError):  # another process evicted it
                if not entry.name.startswith("."):  # "." starts a write under way
                    status = entry.stat()
                    entries.append((status.st_mtime, status.st_size, entry))
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries):
            if total <= MAX_BYTES:
                break
            entry.unlink(missing_ok=True)
            total -= size


def start(flag: str | None) -> str | None:
    """Turns the cache on (before anything compiles) -> its directory; None when off or not usable (a note says why)."""
    root = (flag or os.environ.get("SCANRL_COMPILE_CACHE") or jax.config.jax_compilation_cache_dir
            or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "scanrl", "jax"))
    if root == "off":
        return None
    path = os.path.join(os.path.abspath(os.path.expanduser(root)), machine_tag())
    umask = os.umask(0o077)  # every folder made on the way (~/.cache/scanrl too) is this user's alone
    try:
        for folder in (os.path.dirname(path), path):  # each checked before anything is made in it
            os.makedirs(folder, mode=0o700, exist_ok=True)
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
    finally:
        os.umask(umask)
    jax.config.update("jax_compilation_cache_dir", path)
    # every program, the small ones too (what that saves: docs/speed.md, "What makes the default run fast")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    install_cache_store(FileCache(path))  # in place of JAX's (it is made lazily, so not made yet)
    return path
