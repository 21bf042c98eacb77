"""Speed of td3.py: env steps/s and gradient updates/s, compile time apart.

    python benchmarks/bench_td3.py                      # Pendulum-v1 with 1 and 32 seeds, then brax/halfcheetah
    python benchmarks/bench_td3.py --no-brax --seeds 1 4

Each case is timed twice from the same compiled program shape: "acting" (learning_starts beyond the run, so
no update: env steps, exploration and buffer writes only) and "training" (td3.py's defaults: after
learning_starts, one update per update_every * num_envs * updates_per_step). Numbers are totals over all
seeds. On a machine shared with other jobs they are lower bounds.
"""

import os

# As td3.py: avoid the XLA:CPU scheduler hang on vmapped training (see README).
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import td3  # noqa: E402


def measure(config: td3.Config, num_seeds: int):
    """(compile s, run s, env steps per agent, updates per agent) of one vmapped training run."""
    keys = jnp.stack([jax.random.PRNGKey(s) for s in range(num_seeds)])
    train = jax.jit(jax.vmap(td3.make_train(config)))
    t0 = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, metrics = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - t0
    return compile_s, run_s, td3.num_iterations(config) * td3.steps_per_iteration(config), int(
        metrics["updates"][0, -1])


def report(name, config, num_seeds):
    acting = replace(config, learning_starts=config.total_timesteps + 1)
    compile_s, run_s, steps, _ = measure(acting, num_seeds)
    print(f"| {name} | {num_seeds} | acting | {compile_s:.1f} | {run_s:.2f} | {steps * num_seeds / run_s:,.0f} | - |",
          flush=True)
    compile_s, run_s, steps, updates = measure(config, num_seeds)
    print(f"| {name} | {num_seeds} | training ({updates} updates/agent) | {compile_s:.1f} | {run_s:.2f} | "
          f"{steps * num_seeds / run_s:,.0f} | {updates * num_seeds / run_s:,.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 32], help="numbers of seeds for Pendulum-v1")
    parser.add_argument("--steps", type=int, default=8000, help="env steps per agent on Pendulum-v1")
    parser.add_argument("--learning-starts", type=int, default=4000, help="random steps before updates")
    parser.add_argument("--no-brax", action="store_true", help="skip brax/halfcheetah")
    parser.add_argument("--brax-steps", type=int, default=2000, help="env steps per agent on brax/halfcheetah")
    args = parser.parse_args()

    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores; "
          "totals over all seeds, compile apart\n")
    print("| env | seeds | phase | compile s | run s | env steps/s | updates/s |")
    print("|---|---|---|---|---|---|---|")
    pendulum = td3.Config(total_timesteps=args.steps, learning_starts=args.learning_starts, log_every=1000)
    for num_seeds in args.seeds:
        report("Pendulum-v1", pendulum, num_seeds)
    if not args.no_brax:
        cheetah = td3.Config(env="brax/halfcheetah", total_timesteps=args.brax_steps,
                             learning_starts=args.brax_steps // 2, log_every=args.brax_steps // 2)
        report("brax/halfcheetah (spring)", cheetah, 1)


if __name__ == "__main__":
    main()
