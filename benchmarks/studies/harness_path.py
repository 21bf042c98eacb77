"""The way an `Algorithm` takes through the harness in one tiny run of a script, read from the calls themselves.

Every call of a function in `scanrl/harness/` that is handed the script's `Algorithm` (as an argument, or inside an
object that holds it: the job) is a stop, the Algorithm's own methods aside (its name, its script); a stop counts
once, at its first call. A return is a stop in a module the way entered before and left since. Prints each stop
(module.function), then the totals:

    python benchmarks/studies/harness_path.py [SCRIPT] [its flags for a tiny run]

(default: ppo.py --total-timesteps 2048 --num-seeds 2 --eval-episodes 2, in a temporary directory).
"""

import importlib.util
import os
import sys
import tempfile
import threading


def holds(value, algorithm) -> bool:
    return value is algorithm or any(getattr(value, name, None) is algorithm for name in ("algorithm", "_algorithm"))


def main():
    script = sys.argv[1] if len(sys.argv) > 1 else "ppo.py"
    flags = sys.argv[2:] or ["--total-timesteps", "2048", "--num-seeds", "2", "--eval-episodes", "2"]
    out_dir = tempfile.mkdtemp()
    sys.argv = [script, *flags, "--out-dir", out_dir]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    spec = importlib.util.spec_from_file_location("traced_script", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["traced_script"] = module
    spec.loader.exec_module(module)
    algorithm, stops, seen = module.ALGORITHM, [], set()
    harness = os.path.join("scanrl", "harness") + os.sep

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or harness not in code.co_filename or code.co_name.startswith("<"):
            return
        where = (os.path.splitext(os.path.basename(code.co_filename))[0], code.co_qualname)
        if where in seen:
            return
        args = [frame.f_locals[n] for n in code.co_varnames[:code.co_argcount] if n in frame.f_locals]
        if args and args[0] is algorithm and code.co_varnames[0] == "self":  # its own methods: read, not passed on
            return
        if any(holds(a, algorithm) for a in args):
            seen.add(where)
            stops.append(where)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        module.main()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    returns, left, previous = 0, set(), None
    for mod, name in stops:
        mark = ""
        if mod != previous:
            if mod in left:
                returns, mark = returns + 1, "   <- back"
            if previous is not None:
                left.add(previous)
            previous = mod
        print(f"{mod}.{name}{mark}")
    modules = {m for m, _ in stops}
    print(f"{len(stops)} stops in {len(modules)} modules, {returns} returns to a module already left")


if __name__ == "__main__":
    main()
