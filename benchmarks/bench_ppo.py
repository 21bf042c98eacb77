"""Compile time, run time and env steps/s of ppo.py, for several numbers of vmapped seeds.

Each row compiles `jit(vmap(make_train(config)))` once, then times `--repeats` full runs and reports the median:

    python benchmarks/bench_ppo.py                                 # CartPole-v1 defaults, 1, 8 and 32 seeds
    python benchmarks/bench_ppo.py --env Pendulum-v1 --seeds 1 4 --total-timesteps 200000

The anchor to beat is PureJaxRL's ppo.py on the same machine class (see README): CartPole-v1 defaults,
1 seed 76-87k env steps/s, 30 seeds 85-95k in total, compile 6-10 s. Timings depend on load; compare rows of
one run on an idle machine.
"""

import os

# As in the scripts: XLA:CPU in jax 0.10 can hang on vmapped training with the concurrency-optimised scheduler.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ppo  # noqa: E402


@dataclass(frozen=True)
class Args:
    env: str = "CartPole-v1"
    """environment id (ppo.py's other defaults are used unless given below)"""
    seeds: tuple[int, ...] = (1, 8, 32)
    """numbers of vmapped seeds to time, one row each"""
    total_timesteps: int = 500_000
    """env steps per agent in each timed run"""
    repeats: int = 3
    """timed runs per row; the median is reported"""
    out: str | None = None
    """also write the rows to this JSON file"""


def time_row(config: ppo.Config, repeats: int):
    keys = jnp.stack([jax.random.PRNGKey(config.seed + i) for i in range(config.num_seeds)])
    train = jax.jit(jax.vmap(ppo.make_train(config)))
    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start
    run_times = []
    for _ in range(repeats):
        start = time.perf_counter()
        _, metrics = jax.block_until_ready(compiled(keys))
        run_times.append(time.perf_counter() - start)
    env_steps = ppo.num_iterations(config) * ppo.steps_per_iteration(config)
    run_s = statistics.median(run_times)
    return compile_s, run_s, env_steps * config.num_seeds / run_s, float(jnp.nanmean(metrics["episode_return"][:, -1]))


def main(args: Args):
    print(f"ppo.py on {args.env}, {args.total_timesteps} env steps per agent, median of {args.repeats} runs, "
          f"jax {jax.__version__}, {os.cpu_count()} CPUs\n")
    print("| seeds | compile s | run s | env steps/s (all seeds) | env steps/s per seed | last return |")
    print("|---:|---:|---:|---:|---:|---:|")
    rows = []
    for num_seeds in args.seeds:
        config = ppo.Config(env=args.env, num_seeds=num_seeds, total_timesteps=args.total_timesteps)
        compile_s, run_s, sps, last_return = time_row(config, args.repeats)
        rows.append(dict(seeds=num_seeds, compile_s=compile_s, run_s=run_s, sps=sps, last_return=last_return,
                         config=dataclasses.asdict(config)))
        print(f"| {num_seeds} | {compile_s:.1f} | {run_s:.1f} | {sps:,.0f} | {sps / num_seeds:,.0f} | "
              f"{last_return:.1f} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main(tyro.cli(Args))
