"""The way an `Algorithm` takes through the harness in a tiny training run of a script, in --resume of that run cut
after its first chunk, and in --eval of it, read from the calls themselves (`sys.setprofile`, in this process).

A stop is a call of a function in `scanrl/harness/` handed the script's `Algorithm` (as an argument, or inside an
object that holds it: the job); the methods of the Algorithm and of the job are read, not passed on, and are no stop.
A stop called from another harness module enters its module. An entry made by train.py's own sequence (`train`) or
called back by JAX or the script (a traced program, the script's code between) is expected; a module entered twice
otherwise is a way back into a module the run had left. Prints, for each command: the harness functions entered
(any), the stops, the modules in the order entered, and the modules entered twice:

    python benchmarks/studies/harness_path.py [SCRIPT] [its flags for a tiny run]

(default: ppo.py --total-timesteps 4096 --num-seeds 2 --num-chunks 2 --eval-episodes 2, in a temporary directory).
"""

import importlib.util
import os
import shutil
import sys
import tempfile
import threading

HARNESS = os.path.join("scanrl", "harness") + os.sep


def module_of(frame):
    """The harness module a frame runs in, or None outside the harness."""
    name = frame.f_code.co_filename
    return os.path.splitext(os.path.basename(name))[0] if HARNESS in name else None


def trace(command, algorithm):
    """Runs `command()` traced -> (harness functions entered, stops, entries [(module, function, entered from)])."""
    functions, stops, entries = set(), set(), []

    def holds(value):
        return value is algorithm or any(getattr(value, n, None) is algorithm for n in ("algorithm", "_algorithm"))

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or (module := module_of(frame)) is None or code.co_name.startswith("<"):
            return
        functions.add((module, code.co_qualname))
        args = [frame.f_locals[n] for n in code.co_varnames[:code.co_argcount] if n in frame.f_locals]
        if (module, code.co_qualname) in stops or not any(map(holds, args)):
            return
        if args and code.co_varnames[0] == "self" and holds(args[0]):  # the Algorithm's or the job's own
            return
        stops.add((module, code.co_qualname))
        caller = module_of(frame.f_back)
        if caller is None:  # called back by JAX or the script: from the harness frame below, if any
            outer = frame.f_back
            while outer is not None and module_of(outer) is None:
                outer = outer.f_back
            caller = None if outer is None else f"{module_of(outer)} (a callback)"
        elif caller == "train":
            caller = "train (its sequence)"
        if caller != module:
            entries.append((module, code.co_qualname, caller))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        command()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return functions, stops, entries


def report(what, functions, stops, entries):
    print(f"\n== {what}: {len(functions)} harness functions entered, {len(stops)} stops, "
          f"{len({m for m, _, _ in entries})} modules")
    print("modules entered: " + " > ".join(f"{m}" + ("" if c is None or c.startswith("cli") else f" [{c}]")
                                           for m, _, c in entries))
    twice = {}
    for module, name, caller in entries:
        if caller is None or not caller.endswith(")"):
            twice.setdefault(module, []).append(f"{name} from {caller}")
    twice = {m: calls for m, calls in twice.items() if len(calls) > 1}
    for module, calls in twice.items():
        print(f"entered twice: {module}: " + "; ".join(calls))
    print(f"{len(twice)} modules entered twice (apart from train.py's sequence and callbacks)")


def main():
    script = sys.argv[1] if len(sys.argv) > 1 else "ppo.py"
    flags = sys.argv[2:] or ["--total-timesteps", "4096", "--num-seeds", "2", "--num-chunks", "2",
                             "--eval-episodes", "2"]
    out_dir = tempfile.mkdtemp()
    sys.argv = [script, *flags, "--out-dir", out_dir, "--run-name", "run"]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    spec = importlib.util.spec_from_file_location("traced_script", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["traced_script"] = module
    spec.loader.exec_module(module)
    run_dir = os.path.join(out_dir, "run")
    runs = [("training", sys.argv[1:]), ("--resume", ["--resume", run_dir]), ("--eval", ["--eval", run_dir])]
    results = []
    for what, argv in runs:
        if what == "--resume":  # cut after the first chunk: its newest checkpoint and its summary gone
            folder = os.path.join(run_dir, "checkpoints")
            shutil.rmtree(os.path.join(folder, max((s for s in os.listdir(folder) if s.isdigit()), key=int)))
            os.remove(os.path.join(run_dir, "summary.json"))
        sys.argv = [script, *argv]
        results.append((what, trace(module.main, module.ALGORITHM)))
    for what, result in results:
        report(what, *result)
    shutil.rmtree(out_dir)


if __name__ == "__main__":
    main()
