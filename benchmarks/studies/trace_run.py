"""How often a reader following a run through the harness goes back to a module already left: a script run in this
process under `sys.setprofile`, its calls into scanrl read depth first, each function once (the first call; a later
call of a function already read is not read again, nor what it calls), as a reader of the code would.

Two walks are counted: every scanrl function the run calls (`run`), and only those called with the script's
`Algorithm` within reach of an argument (itself, `x.algorithm` or `x.job.algorithm`: the calls that pass it on, from
`harness.main`). A stop is one function read; a return is a stop in a module read before and left since.

    python benchmarks/studies/trace_run.py ppo.py --env CartPole-v1 --num-seeds 30 --total-timesteps 20000

`TRACE_LIST=1` lists the run's stops, returns marked. A module's or a class's body, a comprehension or a lambda is read
as part of what runs it; JAX's calls into our compile cache's store while it compiles are no reader's path.
"""

import inspect
import os
import runpy
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "scanrl") + os.sep


def holds_algorithm(value, depth=0):
    if type(value).__name__ == "Algorithm" and type(value).__module__ == "scanrl.harness.algorithm":
        return True
    fields = vars(value) if hasattr(value, "__dict__") and not isinstance(value, type) else {}  # no __getattr__
    return depth < 2 and any(holds_algorithm(fields.get(name), depth + 1) for name in ("algorithm", "job"))


def module_of(code):
    return os.path.relpath(code.co_filename, ROOT)


class Walk:
    """The calls into scanrl, each function read once, depth first, in the order a run makes them."""

    def __init__(self):
        self.read, self.run, self.algorithm = set(), [], []
        self.local = threading.local()

    def profile(self, frame, event, arg):
        if event not in ("call", "return"):
            return
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE):
            return
        stack = self.local.__dict__.setdefault("stack", [])
        if event == "return":
            if stack:
                stack.pop()
            return
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        if code.co_name.startswith("<") or not code.co_flags & inspect.CO_OPTIMIZED:
            # a comprehension, a lambda, a module's or a class's body: read as part of what runs it
            stack.append(stack[-1] if stack else True)
            return
        if (stack and not stack[-1]) or key in self.read or "compilation_cache" in frame.f_back.f_code.co_filename:
            # read before, called from inside a function read before, or JAX calling our compile cache's store
            stack.append(False)
            return
        self.read.add(key)
        stack.append(True)
        stop = f"{module_of(code)}:{code.co_name}"
        self.run.append(stop)
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(holds_algorithm(frame.f_locals.get(name)) for name in names):
            self.algorithm.append(stop)


def count(stops):
    """-> (stops, modules, returns to a module already left)."""
    modules = [stop.split(":")[0] for stop in stops]
    returns = sum(1 for i in range(1, len(modules)) if modules[i] != modules[i - 1] and modules[i] in modules[:i])
    return len(stops), len(set(modules)), returns


def main():
    script, *flags = sys.argv[1:]
    walk = Walk()
    with tempfile.TemporaryDirectory() as out:
        sys.argv = [script, *flags, "--out-dir", out]
        threading.setprofile(walk.profile)
        sys.setprofile(walk.profile)
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit_:
            if exit_.code:
                raise
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    for name, stops in (("the run", walk.run), ("the Algorithm passed on", walk.algorithm)):
        total, modules, returns = count(stops)
        print(f"{name}: {total} stops in {modules} modules, {returns} returns to a module already left")
    if os.environ.get("TRACE_LIST"):  # every stop of the run, its returns marked
        modules = [stop.split(":")[0] for stop in walk.run]
        for i, stop in enumerate(walk.run):
            back = i and modules[i] != modules[i - 1] and modules[i] in modules[:i]
            print(f"{stop}{'  <- return' if back else ''}")


if __name__ == "__main__":
    main()
