"""The memory cells side by side: ppo_rnn.py with --cell gru, lstm and lru, and ppo_trxl.py, each a whole process
with --num-seeds seeds, one task after another, at the same budget per task. Prints (and writes with --out) a table
of each memory's eval return (IQM and min over seeds, summary.json's), env steps/s over all agents and train s.

    python benchmarks/studies/bench_memory_cells.py --out benchmarks/results/learning_memory_cells.md
"""

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHAIN = "benchmarks/studies/memory_chain.py:memory_chain_{}"
# task label -> (--env, env steps per seed, ppo_trxl's --memory-length: the episode's length fits in its window)
TASKS = {
    "MemoryChain-bsuite (5)": ("MemoryChain-bsuite", 100_000, 8),
    "MemoryChain 20": (CHAIN.format(20), 100_000, 24),
    "MemoryChain 50": (CHAIN.format(50), 100_000, 56),
}
MEMORIES = {"gru": ("ppo_rnn.py", "--cell", "gru"), "lstm": ("ppo_rnn.py", "--cell", "lstm"),
            "lru": ("ppo_rnn.py", "--cell", "lru"), "trxl": ("ppo_trxl.py",)}


@dataclass
class Args:
    num_seeds: int = 10
    tasks: tuple[str, ...] = tuple(TASKS)
    memories: tuple[str, ...] = tuple(MEMORIES)
    out: str = ""


def run(memory, task, num_seeds, out_dir):
    """One whole run -> (its command line, its summary.json)."""
    env, steps, window = TASKS[task]
    script, *flags = MEMORIES[memory]
    if memory == "trxl":
        flags += ["--memory-length", str(window)]
    out_dir = tempfile.mkdtemp(dir=out_dir)
    cmd = [sys.executable, script, "--env", env, "--num-seeds", str(num_seeds), "--total-timesteps", str(steps),
           *flags]
    subprocess.run([*cmd, "--out-dir", out_dir], cwd=ROOT, check=True, capture_output=True, text=True)
    (run_dir,) = os.listdir(out_dir)
    with open(os.path.join(out_dir, run_dir, "summary.json")) as f:
        return " ".join(cmd[1:]), json.load(f)


def main(args: Args):
    rows = ["| task | memory | seeds | env steps per seed | eval return IQM [95% CI] | eval min | env steps/s "
            "(all agents) | train s | compile s |", "|---|---|---:|---:|---|---:|---:|---:|---:|"]
    commands = []
    with tempfile.TemporaryDirectory() as out_dir:
        for task in args.tasks:
            for memory in args.memories:
                command, s = run(memory, task, args.num_seeds, out_dir)
                iqm = s["eval_return_iqm"]
                rows.append(f"| {task} | {memory} | {len(s['eval_return'])} | {TASKS[task][1]:,} | {iqm['iqm']:.3g} "
                            f"[{iqm['ci'][0]:.3g}, {iqm['ci'][1]:.3g}] | {min(s['eval_return']):.3g} | "
                            f"{s['sps']:,.0f} | {s['train_s']:.0f} | {s['compile_s']:.0f} |")
                commands.append(command)
                print(rows[-1], flush=True)
    text = "\n".join(rows) + "\n\nCommands (run dirs in a temporary directory):\n\n" + "\n".join(
        f"    python {c}" for c in commands) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main(tyro.cli(Args))
