"""Env steps/s of ppo.py against the number of agents (seeds), 1 to 256: the scaling curve of one compiled program.

Each row builds the program `ppo.main` runs (agents split over a 1-D device mesh with shard_map, `init` per device),
compiles it once, then times `--repeats` runs of `--steps-per-row` env steps in total (split over the agents, whole
updates) and reports the median. `--devices 1 2` repeats the curve on 2 devices, each count in its own process (on CPU
through XLA_FLAGS=--xla_force_host_platform_device_count):

    python benchmarks/studies/bench_scaling.py                       # CartPole-v1, 1 to 256 seeds, 1 device
    python benchmarks/studies/bench_scaling.py --devices 1 2 --repeats 3

Writes benchmarks/results/scaling.{json,md,png}. Timings depend on load: compare rows of one run, machine idle.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "benchmarks", "results")


@dataclass(frozen=True)
class Args:
    env: str = "CartPole-v1"
    """environment id (ppo.py's other defaults are used)"""
    seeds: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    """numbers of agents to time, one row each"""
    steps_per_row: int = 1_048_576
    """env steps per timed run, over all agents (at least one update per agent)"""
    repeats: int = 3
    """timed runs per row; the median is reported"""
    devices: tuple[int, ...] = (1,)
    """device counts to time (each in its own process); on CPU they are forced host devices sharing the cores"""
    out: str = os.path.join(RESULTS, "scaling")
    """results are written to this path + .json, .md and .png"""


def time_rows(args: Args, num_devices: int):
    """In a process that sees `num_devices` devices: one row per entry of args.seeds."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sys.path.insert(0, ROOT)
    import ppo
    from scanrl.harness.agents import over_agents
    from scanrl.harness.program import agent_layout

    mesh = Mesh(np.array(jax.devices()[:num_devices]), ("agents",))
    sharding = NamedSharding(mesh, PartitionSpec("agents"))
    rows = []
    for num_seeds in args.seeds:
        if num_seeds % num_devices:  # the agents must split evenly over the devices
            continue
        batch = ppo.Config.num_envs * ppo.Config.num_steps
        per_agent = max(1, args.steps_per_row // (num_seeds * batch)) * batch
        config = ppo.Config(env=args.env, num_seeds=num_seeds, total_timesteps=per_agent)
        keys, swept, _ = agent_layout(config, [{}])
        init, update = ppo.make_train_parts(config)
        iterations = config.total_timesteps // ppo.steps_per_iteration(config)
        run = over_agents(lambda runner, update=update, n=iterations: jax.lax.scan(
            lambda r, _: update(r), runner, None, n), mesh, (0,))
        start = time.perf_counter()
        runner = jax.device_put(jax.jit(jax.vmap(init))(keys), sharding)  # made on one device, then split
        compiled = run.lower(runner).compile()
        compile_s = time.perf_counter() - start
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            jax.block_until_ready(compiled(runner))
            times.append(time.perf_counter() - start)
        run_s = statistics.median(times)
        rows.append(dict(devices=num_devices, seeds=num_seeds, steps_per_agent=per_agent, compile_s=compile_s,
                         run_s=run_s, sps=per_agent * num_seeds / run_s))
        print(f"  {num_devices} device(s), {num_seeds:4d} seeds: compile {compile_s:5.1f} s, run {run_s:6.2f} s, "
              f"{rows[-1]['sps']:12,.0f} env steps/s", file=sys.stderr, flush=True)
    return rows


def write_results(args: Args, rows, header):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(args.out + ".json", "w") as f:
        json.dump({"args": asdict(args), "header": header, "rows": rows}, f, indent=2)
    counts = sorted({r["devices"] for r in rows})
    lines = [header, "", "| seeds | " + " | ".join(f"env steps/s, {d} device(s) | per seed" for d in counts) + " |",
             "|---:|" + "---:|---:|" * len(counts)]
    for seeds in args.seeds:
        cells = []
        for d in counts:
            row = [r for r in rows if r["devices"] == d and r["seeds"] == seeds]
            cells += [f"{row[0]['sps']:,.0f}", f"{row[0]['sps'] / seeds:,.0f}"] if row else ["-", "-"]
        lines.append(f"| {seeds} | " + " | ".join(cells) + " |")
    compiles = ", ".join(f"{min(r['compile_s'] for r in rows if r['devices'] == d):.1f}-"
                         f"{max(r['compile_s'] for r in rows if r['devices'] == d):.1f} s on {d} device(s)"
                         for d in counts)
    lines += ["", f"Compile (init and the training program, apart from the timed runs): {compiles}."]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4))
    for d in counts:
        mine = [r for r in rows if r["devices"] == d]
        ax.plot([r["seeds"] for r in mine], [r["sps"] for r in mine], marker="o", label=f"{d} device(s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("agents (seeds) in one program")
    ax.set_ylabel("env steps/s, all agents")
    ax.set_title(f"ppo.py on {args.env}: scaling with seeds")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=100)
    plt.close(fig)
    print("\n".join(lines))


def main(args: Args):
    if "SCANRL_BENCH_DEVICES" in os.environ:  # a child process: time, print the rows as JSON
        print(json.dumps(time_rows(args, int(os.environ["SCANRL_BENCH_DEVICES"]))))
        return
    rows = []
    for count in args.devices:
        # importing ppo.py adds the scripts' other XLA_FLAGS (harness.prepare_jax); the device count is this one
        flags = f"--xla_force_host_platform_device_count={count}"
        env = {**os.environ, "SCANRL_BENCH_DEVICES": str(count), "XLA_FLAGS": flags}
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env, stdout=subprocess.PIPE, text=True)
        if child.returncode:
            sys.exit(child.returncode)
        rows += json.loads(child.stdout.strip().splitlines()[-1])
    import jax

    header = (f"ppo.py on {args.env}, {args.steps_per_row:,} env steps per timed run over all agents, median of "
              f"{args.repeats}; jax {jax.__version__}, {os.cpu_count()} CPU cores, {jax.devices()[0].platform}")
    write_results(args, rows, header)


if __name__ == "__main__":
    main(tyro.cli(Args))
