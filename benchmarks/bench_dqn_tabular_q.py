"""Steps per second of dqn_tabular_q.py's training, compile time apart (no files written).

    python benchmarks/bench_dqn_tabular_q.py            # every case below
    python benchmarks/bench_dqn_tabular_q.py --only tabular

Counts env steps summed over agents and over each agent's envs; each case compiles once, then runs once.
"""

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# The same XLA_FLAGS guard as the script's, before jax is first imported.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import dqn_tabular_q as dq  # noqa: E402
import harness  # noqa: E402

# (label, config overrides); total_timesteps is per agent
CASES = {
    "tabular": [
        ("tabular GridWorld-v0, 1 agent x 1 env", dict(num_seeds=1, num_envs=1, total_timesteps=2_000_000)),
        ("tabular GridWorld-v0, 30 agents x 1 env", dict(num_seeds=30, num_envs=1, total_timesteps=1_000_000)),
        ("tabular GridWorld-v0, 30 agents x 4 envs", dict(num_seeds=30, num_envs=4, total_timesteps=2_000_000)),
        ("tabular GridWorld-v0, 30 agents x 16 envs", dict(num_seeds=30, num_envs=16, total_timesteps=4_000_000)),
    ],
    "dqn": [
        ("dqn CartPole-v1, 1 agent x 10 envs", dict(env="CartPole-v1", num_seeds=1, total_timesteps=100_000)),
        ("dqn CartPole-v1, 4 agents x 10 envs", dict(env="CartPole-v1", num_seeds=4, total_timesteps=100_000)),
    ],
}


def run_case(overrides):
    config, _ = harness.check(dq.ALGORITHM, dataclasses.replace(dq.Config(), **overrides))
    keys = jnp.stack([jax.random.PRNGKey(config.seed + i) for i in range(config.num_seeds)])
    train = jax.jit(jax.vmap(dq.make_train(config)))
    t0 = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, metrics = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - t0
    env_steps = int(metrics["env_steps"][0, -1]) * config.num_seeds
    return compile_s, run_s, env_steps / run_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(CASES), help="run one group of cases")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}")
    for group, cases in CASES.items():
        if args.only and group != args.only:
            continue
        for label, overrides in cases:
            compile_s, run_s, sps = run_case(overrides)
            print(f"{label:45s} compile {compile_s:5.1f} s  run {run_s:6.2f} s  {sps / 1e6:8.3f} M env steps/s",
                  flush=True)


if __name__ == "__main__":
    main()
