"""Files the harness writes, one way (`replaced`: whole, never through a link), in folders that are not links and no
one else can rewrite (`foreign_folder`); appends never follow a link; a run directory claimed (`claim_run_directory`)
and its owner (`RunLock`). No JAX."""

import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat

from scanrl.harness.flags import ConfigError

LOCK_NAME = ".lock"


@contextlib.contextmanager
def replaced(path, mode="w", **kwargs):
    """`with replaced(path) as f:` writes `path` atomically: a temporary beside it, created with O_EXCL under a random
    name, renamed over `path` when the block ends without error (replacing a link at `path`, never its target). A
    kill or a full disk leaves the old file or the new one. OSError (ELOOP) if `path`'s folder is a link."""
    folder, name = os.path.split(os.path.abspath(path))
    if os.path.islink(folder):
        raise OSError(errno.ELOOP, "a link, not a folder of the run (it is never written through)", folder)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        temporary = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
        with contextlib.suppress(FileExistsError):
            fd = os.open(temporary, flags, 0o666)
            break
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", path)
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def folder(path):
    """`path` as a folder to write in, made if absent; OSError (ELOOP, ENOTDIR) if it is a link or not a folder."""
    try:
        os.mkdir(path, 0o755)  # no one else may write in it, whatever the umask
    except FileExistsError:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, "a link, not a folder of the run (it is never written through)", path) from None
        if not stat.S_ISDIR(mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", path) from None
    return path


def save_figure(fig, path):
    """A matplotlib figure as a PNG at `path` (through `replaced`), closed. -> path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with replaced(path, "wb") as f:
        fig.savefig(f, dpi=100, format="png")
    plt.close(fig)
    return path


def foreign_folder(path) -> str:
    """"" if the folder at `path` (or, not there yet, the folders above it) is this user's and no one else can write in
    it or move it, else what is wrong: another user could swap its subfolders for links, or move it away and put a link
    in its place (in a folder above it that every user can write in, without the sticky bit)."""
    status = os.lstat(path) if os.path.lexists(path) else None
    if status and status.st_uid != os.geteuid():
        return f"is owned by uid {status.st_uid}, not this user (uid {os.geteuid()})"
    if status and status.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(status.st_mode):#o}; chmod go-w it if it is yours)"
    for above in (os.path.abspath(path), os.path.realpath(path)):  # the folders named, and those links lead to
        while above != (above := os.path.dirname(above)):
            mode = os.stat(above).st_mode if os.path.exists(above) else 0
            if mode & 0o002 and not mode & stat.S_ISVTX:  # sticky (/tmp): only an entry's owner may rename it
                above = os.path.realpath(above)
                return (f"lies in {above}, which every user can write in, without the sticky bit (mode "
                        f"{stat.S_IMODE(mode):#o}): another user could move it away and put a link in its place; "
                        f"chmod +t {above} (as /tmp is), or use a folder of your own")
    return ""


def open_regular(path, mode="r", follow=True, **kwargs):
    """`path` opened to read; OSError (EINVAL) for a FIFO (never waited on) or a device (never read), and without
    `follow` (ELOOP) for a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def open_append(path, **kwargs):
    """`path` opened for appending, refused (OSError ELOOP) if it is a link, and never created."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC), "a", **kwargs)


class RunLock(contextlib.AbstractContextManager):
    """The run directory's owner: an exclusive `flock` on <run dir>/.lock (holding the owner's pid) until `release`
    or the process's end (the kernel drops a dead process's lock). A second owner gets ConfigError naming the first's
    pid. The file is removed on release, so a taker checks that the file it locked is still the one at the name."""

    def __init__(self, run_dir, which):
        self.path = os.path.join(run_dir, LOCK_NAME)
        config_json = os.path.join(run_dir, "config.json")  # written first: only a run directory is locked
        if os.path.islink(config_json) or not os.path.isfile(config_json):  # nothing is left in any other
            raise ConfigError(f"{which}: {run_dir} is not a run directory (it has no config.json)")
        while True:
            try:  # O_NONBLOCK: a FIFO planted at the name is never waited on
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
                status = os.fstat(fd)
                if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:  # a hard link: its pid would overwrite
                    os.close(fd)                                              # another file
                    raise OSError(errno.EINVAL, "not a file of its own")
            except OSError as error:
                raise ConfigError(f"{which}: cannot lock {self.path} ({error.strerror}); is {run_dir} a run directory "
                                  "you can write in? (remove a .lock that is not a file of its own)") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 32, 0).decode(errors="replace").strip()
                owner = owner if owner.isdigit() else "unknown"  # what it holds is shown only if it is a pid
                os.close(fd)
                raise ConfigError(f"{which}: another process (pid {owner}) is training in {run_dir}; wait for it to "
                                  f"end or stop it, then --resume it") from None
            with contextlib.suppress(OSError):
                self.check(fd)
                break
            os.close(fd)  # the owner released (and removed) it between our open and our lock: take the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def check(self, fd=None):
        """OSError (ESTALE) unless <run dir>/.lock is, by that one name, the file this owner locked (`fd`): checked
        before each chunk's writes, so that a run writes only in the directory it claimed, never where one moved or
        replaced since would lead."""
        status = os.fstat(self.fd if fd is None else fd)
        with contextlib.suppress(OSError):
            if status.st_nlink == 1 and os.path.samestat(status, os.stat(self.path, follow_symlinks=False)):
                return
        raise OSError(errno.ESTALE, "it is no longer the run directory this run claimed (it was moved, or replaced "
                      "by a link or another folder)", os.path.dirname(self.path))

    def release(self):
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)  # closing drops the lock
        self.fd = None

    def __exit__(self, *exc):
        self.release()


def claim_run_directory(path, config_json) -> str:
    """Creates the run directory `path` (or takes an empty one) and its config.json, exclusively: of two runs started
    at once with one name, one gets it. -> "" if claimed, else the error line."""
    if not os.path.lexists(path) and (foreign := foreign_folder(path)):  # a folder above it others can rename in
        return f"run directory {path} {foreign}"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # the out dir: a link the user named is theirs
        try:
            os.mkdir(path, 0o755)  # no one else may write in it (`foreign_folder`), whatever the umask
        except FileExistsError:
            if os.path.islink(path):  # planted in a shared out dir, a link would lead the run anywhere
                return f"run directory {path} is a link, and a run never writes through one; choose another --run-name"
            if os.listdir(path):
                raise
            if foreign := foreign_folder(path):  # an empty folder someone else made: not taken
                return f"run directory {path} {foreign}; a new run takes only an empty folder of its own; choose " \
                       "another --run-name"
        if os.path.islink(path):  # made a link between our mkdir and now
            raise FileExistsError
        with open(os.path.join(path, "config.json"), "x") as f:  # "x": fails if another run created it first
            json.dump(config_json, f, indent=2)
    except FileExistsError:
        return f"run directory {path} exists and is not empty; choose another --run-name, or --resume it"
    except OSError as error:
        return f"cannot create the run directory {path}: {error.strerror}; choose another --out-dir"
    return ""
