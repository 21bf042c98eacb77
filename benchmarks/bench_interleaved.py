"""Interleaved A/B timing of script variants in one process: each variant's `make_train_parts` run for a fixed
number of updates on CartPole-v1, jit(vmap) over `--num-seeds` agents on one device, the compiled programs timed in
turn (so load drifts hit them alike), medians. Used to keep or drop each change to ppo.py's update (README, Speed).

    cp ppo.py /tmp/a.py; <edit a copy into /tmp/b.py>
    python benchmarks/bench_interleaved.py /tmp/a.py /tmp/b.py --num-seeds 30
"""

import importlib.util
import os
import statistics
import sys
import time
from dataclasses import dataclass

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import tyro  # noqa: E402

from scanrl import harness  # noqa: E402

harness.prepare_jax("bench_interleaved")  # the scripts' XLA_FLAGS (the scheduler guard), before the backend


@dataclass(frozen=True)
class Args:
    variants: tuple[str, ...]
    """paths of script copies (each a ppo.py-like module: Config, make_train_parts)"""
    num_seeds: int = 30
    updates: int = 40
    """iterations of one timed call"""
    repeats: int = 8
    env: str = "CartPole-v1"


def compiled(path, args):
    spec = importlib.util.spec_from_file_location(f"variant_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.Config(env=args.env, total_timesteps=args.updates * module.Config().num_envs
                           * module.Config().num_steps)
    init, update = module.make_train_parts(config)
    keys = jax.random.split(jax.random.PRNGKey(0), args.num_seeds)
    runner = jax.jit(jax.vmap(init))(keys)
    program = jax.jit(jax.vmap(lambda r: jax.lax.scan(lambda r, _: update(r), r, None, args.updates))).lower(
        runner).compile()
    jax.block_until_ready(program(runner))
    return program, runner, config.num_envs * config.num_steps * args.updates * args.num_seeds


def main(args: Args):
    programs = [compiled(path, args) for path in args.variants]
    times = [[] for _ in programs]
    for _ in range(args.repeats):
        for (program, runner, _), t in zip(programs, times, strict=True):
            start = time.perf_counter()
            jax.block_until_ready(program(runner))
            t.append(time.perf_counter() - start)
    base = statistics.median(times[0])
    for path, (_, _, steps), t in zip(args.variants, programs, times, strict=True):
        print(f"{os.path.basename(path):24s} {args.num_seeds} seeds: median {steps / statistics.median(t):10,.0f} "
              f"env steps/s, time {statistics.median(t) / base:.3f}x the first")


if __name__ == "__main__":
    main(tyro.cli(Args))
