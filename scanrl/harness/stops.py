"""Stopping a run where a chunk ends: on Ctrl-C or SIGTERM, or a NaN or an infinity in training; and the one line for
what stops a run before or while it runs (a count over int32, the user's own env, a failed write, a host callback)."""

import dataclasses
import errno
import os
import re
import shlex
import signal
import sys

import jax
import numpy as np

from scanrl.harness.flags import MAX_COUNT, ConfigError, Flags, flag


class RunStopped(Exception):
    """A run ended before its last chunk: `harness.main` prints the message and exits with `code`. `abandon`: orbax's
    background writers may still hold failed writes, so a command-line run ends at once rather than wait for them
    (their tracebacks would follow the message)."""

    def __init__(self, message, code, abandon=False):
        super().__init__(message)
        self.code, self.abandon = code, abandon


def resume_command(script, run_dir, env) -> str:
    """The command that resumes `run_dir`: `python SCRIPT --resume DIR`, with `--env ENV` where the run trained on the
    user's own env (module:name): scanrl imports code only when the command line names it."""
    from scanrl.envs.custom import import_reference

    own = f" --env {shlex.quote(env)}" if import_reference(env) is not None else ""
    return f"python {script} --resume {shlex.quote(run_dir)}{own}"


def write_failed(error: OSError, script, run_dir, env):
    """RunStopped (exit 1) for a failed write (disk full, read-only, ...): one line naming the file, the cause and
    how to go on (--resume starts from the newest intact checkpoint and rebuilds metrics.csv)."""
    path = error.filename2 or error.filename  # a file replaced by its temporary: the file, not the temporary
    if path and re.fullmatch(r"\..+\.[0-9a-f]{12}\.tmp", os.path.basename(path)):  # files.replaced's temporaries
        path = os.path.join(os.path.dirname(path), os.path.basename(path)[1:-17])
    cause = error.errno or next((code for code, words in ((errno.ENOSPC, "No space left"), (errno.EDQUOT, "quota"),
                                                          (errno.EROFS, "Read-only"), (errno.EFBIG, "too large"))
                                 if words in str(error)), None)
    moved = "move it away (the run makes its own)"  # a link or a file where the run writes a folder
    permissions = "fix its permissions (chmod u+w, chattr -i)"
    fixes = {errno.ENOSPC: "make room", errno.EDQUOT: "make room", errno.EROFS: "make it writable", errno.ELOOP: moved,
             errno.ENOTDIR: moved, errno.EACCES: permissions, errno.EPERM: permissions, errno.ESTALE: "put it back",
             errno.EFBIG: "raise the file-size limit (ulimit -f)"}
    fix = fixes.get(cause, "make room (or fix permissions)")
    return RunStopped(f"error: cannot write{' ' + str(path) if path else ''}: {error.strerror or error}; training "
                      f"stopped, the checkpoints written so far are kept; {fix}, then continue with: "
                      f"{resume_command(script, run_dir, env)}", 1, abandon=True)


def callback_failure(error, script, run_dir, env, trained) -> RunStopped | None:
    """RunStopped (exit 1) for a host callback (jax.pure_callback, io_callback: a user's env may hold one) that
    raised inside the compiled run: one line with its exception and where it was raised; None for other errors.
    `trained`: whether a checkpoint was written (else the run directory is removed: nothing of it is worth keeping)."""
    text = str(error)
    if not isinstance(error, jax.errors.JaxRuntimeError) or "CpuCallback error" not in text:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    places = re.findall(r'^\s*File "([^"]*)", line (\d+)', text, re.MULTILINE)  # File "/path/my_env.py", line 8, in f
    where = f", at {':'.join(places[-1])}" if places else ""
    resume = resume_command(script, run_dir, env)
    kept = (f"the checkpoints written so far are kept: fix it, then continue with: {resume}" if trained else
            "nothing was trained, and no run directory is left")
    return RunStopped(f"error: a host callback raised {lines[-1]} inside the compiled run{where}; training "
                      f"stopped, {kept}", 1, abandon=True)


def nonfinite_stop(names, start, flags, hint):
    """RunStopped (exit 1) naming the agents with `nonfinite` set after iteration `start`, and the first such one."""
    agents = np.flatnonzero(flags.any(axis=1)).tolist()
    bad = ", ".join(str(names[i]) for i in agents[:8]) + (f" and {len(agents) - 8} more" if len(agents) > 8 else "")
    kept = f"the last good checkpoint is at iteration {start}" if start else "no checkpoint was written"
    return RunStopped(f"error: non-finite loss or parameters in seed(s) {bad}, first at iteration "
                      f"{start + flags.any(axis=0).argmax() + 1} (metrics.csv's numbering); training stopped, {kept}. "
                      f"{hint}", 1)


class StopRequest:
    """A context manager: SIGINT (Ctrl-C) or SIGTERM is remembered, to stop once compilation or the iterations under
    way end (a chunk's end in a multi-process run), with a checkpoint; a second one stops at once: `exit_process` (a
    command line's run) ends the process from the handler itself, which may run inside a callback that would swallow
    an exception (JAX's garbage-collection hook); else it raises RunStopped. The previous handlers come back on exit."""

    def __init__(self, exit_process=False):
        self.exit_process = exit_process
        self.doing = "stopping after the iterations under way, with a checkpoint"  # what the first signal does

    def __enter__(self):
        self.signal, self.at_once = None, None
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def stop_at_once(self, message):
        """From now on a first signal stops at once too, with the line `{SIGNAL}: {message}` (what is left undone and
        how to go on): for a step that cannot end early and need not be waited for (a gif's drawing, the summary)."""
        self.at_once = message

    def _handle(self, signum, frame):
        if self.signal is not None or self.at_once is not None:
            self.__exit__()
            message = (f"{signal.Signals(signum).name}: {self.at_once}" if self.signal is None else
                       f"{signal.Signals(signum).name} again: stopped at once; the checkpoints written so far are "
                       "kept, with their rows in metrics.csv: --resume goes on from the last one")
            if self.exit_process:
                sys.stdout.flush()
                print(message, file=sys.stderr, flush=True)
                os._exit(128 + signum)
            raise RunStopped(message, 128 + signum, abandon=True)
        self.signal = signal.Signals(signum)
        print(f"\n{self.signal.name}: {self.doing} (again to abort at once)", file=sys.stderr, flush=True)


def overflow_failure(algorithm, config, error) -> ConfigError | None:
    """ConfigError for a count the flags make too large for the int32 the programs hold it in (an update count of
    --update-epochs 1e9), naming the flags set away from their defaults; None for any other error."""
    if not isinstance(error, OverflowError):
        return None
    value = str(error).rsplit("with value ", 1)[-1].split()[0] if "with value " in str(error) else "a count"
    defaults = algorithm.config(env=config.env)
    shared = {f.name for f in dataclasses.fields(Flags)} - {"total_timesteps"}  # the others count no update
    numbers = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
               if f.name not in shared and type(getattr(config, f.name)) in (int, float)}
    changed = [f"{flag(k)} {v:g}" if isinstance(v, float) else f"{flag(k)} {v}" for k, v in numbers.items()
               if v != getattr(defaults, k)]
    shown = f"{int(value):,}" if value.isdigit() else value
    return ConfigError(f"{algorithm.script}: a count of {shown} in the compiled program is more than the "
                       f"{MAX_COUNT:,} (2**31 - 1) it holds; lower the flags that multiply into it"
                       + (f" ({', '.join(changed)})" if changed else ""))


def env_failure(config, error) -> ConfigError | None:
    """ConfigError (one line: the file and line) for an error the user's own env raised while a program was made."""
    from scanrl import envs

    return None if (line := envs.user_env_failure(config.env, error)) is None else ConfigError(line)
