"""A warm Python for the tests' script runs (conftest.py's `run_warm`, which `run_script` and the contract runs use):
it imports the libraries every script imports (jax, flax, optax, distrax, orbax, tyro, matplotlib: about 3.5 s of a
tiny run's 9 on 2 cores; and seaborn, with the scipy.stats and pandas it imports, which gymnax's Pong imports: 1.3 s
of the 1.5 s gymnax took in a child), then forks a child per run, which runs `python script.py args`,
`python -m module args` or `python -c code args` as Python would, in its own process, directory and environment, from
its first line on.

Not gymnax, scanrl or wandb: gymnax makes a JAX backend on import, which must not exist before the fork (a run's
XLA_FLAGS are read when it is made), scanrl's imports are what the tests check (a research repository's own `envs`
or `utils` beside a copied script), and wandb reads its settings from the environment. A setting Python reads as it
starts (PYTHONIOENCODING) needs a Python of its own: `run_script` starts one when a test sets a PYTHON* variable.

One JSON line per run on stdin, {"argv", "cwd", "env", "stdout", "stderr"} (the last two: files the child writes);
it answers with the child's pid, then its wait status, a line each."""

import atexit
import contextlib
import ctypes
import json
import os
import runpy
import signal
import sys
import threading

import distrax  # noqa: F401 - imported to be inherited: these are the point
import flax.linen  # noqa: F401
import jax  # noqa: F401
import matplotlib.pyplot  # noqa: F401
import optax  # noqa: F401
import orbax.checkpoint  # noqa: F401
import seaborn  # noqa: F401 - a library of gymnax's, which makes no JAX backend
import tyro  # noqa: F401


def run(request):
    """In the child: the script as its own `python script.py args` would run it, then the interpreter's exit."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    # the run's PYTHONPATH after the script's directory, as Python puts it (the zygote started without one)
    sys.path[1:1] = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    args = request["argv"][1:]
    code = 0
    try:
        if args[0] == "-m":  # python -m module args: the module's file is argv[0], the directory is on the path
            sys.argv, sys.path[0] = args[1:], os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":  # python -c code args: argv[0] is "-c", the current directory is on the path
            sys.argv, sys.path[0] = ["-c", *args[2:]], ""
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv, sys.path[0] = args, os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exited:
        code = exited.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException as error:  # Python's traceback, from the script's frame on, and exit status 1
        tb = error.__traceback__
        while tb.tb_next and tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>"):
            tb = tb.tb_next
        sys.excepthook(type(error), error.with_traceback(tb), tb)
        code = 1
    threading._shutdown()  # as the interpreter does at exit: wait for the non-daemon threads, then run atexit
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def main():
    # Linux: gone with the pytest worker that started it (PR_SET_PDEATHSIG), as conftest.die_with_parent makes the
    # workers; set here, not by the worker's Popen, whose preexec_fn would fork a process that runs JAX
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    for line in sys.stdin:  # stdout's buffer is empty at each fork: the child's output is its own
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run(request)
        print(pid, flush=True)
        print(os.waitpid(pid, 0)[1], flush=True)


if __name__ == "__main__":
    main()
