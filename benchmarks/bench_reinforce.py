"""Compile time and env steps/s of reinforce.py next to ppo.py on the same env and batch size.

Each row compiles `jit(vmap(make_train))` for the given number of seeds, then times one full run:

    python benchmarks/bench_reinforce.py                      # CartPole-v1, 1 and 32 seeds
    python benchmarks/bench_reinforce.py --seeds 1 4 --total-timesteps 102400

Rows: reinforce (value baseline, SpinningUp VPG), reinforce --baseline none (no critic, so the cost of the
80 value-function steps per epoch shows), and ppo with its own defaults but the same num_envs x num_steps.
Timings depend on the machine and its load; run on an idle machine.
"""

import os

# As in the scripts: XLA:CPU in jax 0.10 can hang on vmapped training with the concurrency-optimised scheduler.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from typing import Literal

import jax
import jax.numpy as jnp
import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ppo  # noqa: E402
import reinforce  # noqa: E402


@dataclass(frozen=True)
class Args:
    env: str = "CartPole-v1"
    """environment id"""
    seeds: tuple[int, ...] = (1, 32)
    """numbers of vmapped seeds to time"""
    num_envs: int = 8
    """parallel envs per agent, for both scripts"""
    num_steps: int = 64
    """steps per env per epoch / rollout, for both scripts (batch = num_envs * num_steps)"""
    total_timesteps: int = 51_200
    """env steps per agent in each timed run"""
    algos: tuple[Literal["reinforce", "reinforce-none", "ppo"], ...] = ("reinforce", "reinforce-none", "ppo")
    """rows to time: reinforce, reinforce-none (--baseline none), ppo"""
    out: str | None = None
    """also write the rows to this JSON file"""


def make_config(algo: str, args: Args, num_seeds: int):
    common = dict(env=args.env, num_seeds=num_seeds, num_envs=args.num_envs, num_steps=args.num_steps,
                  total_timesteps=args.total_timesteps)
    if algo == "ppo":
        return ppo, ppo.Config(**common)
    baseline = "none" if algo == "reinforce-none" else "value"
    return reinforce, reinforce.Config(baseline=baseline, **common)


def time_run(module, config):
    keys = jnp.stack([jax.random.PRNGKey(config.seed + i) for i in range(config.num_seeds)])
    train = jax.jit(jax.vmap(module.make_train(config)))
    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    _, metrics = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    env_steps = module.num_iterations(config) * module.steps_per_iteration(config)
    return compile_s, run_s, env_steps * config.num_seeds / run_s


def main(args: Args):
    batch = args.num_envs * args.num_steps
    print(f"{args.env}, batch {args.num_envs} envs x {args.num_steps} steps = {batch}, "
          f"{args.total_timesteps} env steps per agent, jax {jax.__version__}, {os.cpu_count()} CPUs\n")
    print("| script | seeds | compile s | run s | env steps/s (all seeds) |")
    print("|---|---:|---:|---:|---:|")
    rows = []
    for num_seeds in args.seeds:
        for algo in args.algos:
            module, config = make_config(algo, args, num_seeds)
            compile_s, run_s, sps = time_run(module, config)
            rows.append(dict(script=algo, seeds=num_seeds, compile_s=compile_s, run_s=run_s, sps=sps,
                             config=dataclasses.asdict(config)))
            print(f"| {algo} | {num_seeds} | {compile_s:.1f} | {run_s:.1f} | {sps:,.0f} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main(tyro.cli(Args))
