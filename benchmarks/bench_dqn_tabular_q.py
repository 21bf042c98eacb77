"""Steps per second of dqn_tabular_q.py's training, compile time apart (no files written), and the wall-clock time
DQN and PQN take to reach a return of 475 on CartPole-v1.

    python benchmarks/bench_dqn_tabular_q.py            # every case below
    python benchmarks/bench_dqn_tabular_q.py --only tabular
    python benchmarks/bench_dqn_tabular_q.py --only time_to_475 --repeats 3

Counts env steps summed over agents and over each agent's envs; each case compiles once, then runs once (the
time_to_475 cases `--repeats` times, taking turns, and report medians).
"""

import argparse
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# The same XLA_FLAGS guard as the script's, before jax is first imported.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

import jax  # noqa: E402
import numpy as np  # noqa: E402

import dqn_tabular_q as dq  # noqa: E402
import pqn  # noqa: E402
from scanrl import harness  # noqa: E402

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
        ("pqn CartPole-v1, 1 agent x 32 envs", dict(env="CartPole-v1", agent="pqn", num_seeds=1,
                                                    total_timesteps=200_000)),
        ("pqn CartPole-v1, 4 agents x 32 envs", dict(env="CartPole-v1", agent="pqn", num_seeds=4,
                                                     total_timesteps=200_000)),
    ],
}
# Whole default runs (500k env steps per agent) of the two neural learners, for the time they take to learn.
TIME_TO_475 = [(f"{agent} CartPole-v1, {seeds} agent{'s' * (seeds > 1)}",
                dict(env="CartPole-v1", agent=agent, num_seeds=seeds)) for seeds in (1, 8) for agent in ("dqn", "pqn")]
TARGET_RETURN, WINDOW = 475.0, 20_000


def compile_case(overrides):
    """-> (config, keys, compiled train of its agents, compile seconds); `agent="pqn"` is pqn.py's."""
    script = pqn if overrides.get("agent") == "pqn" else dq
    overrides = {k: v for k, v in overrides.items() if not (script is pqn and k == "agent")}
    config, _ = harness.check(script.ALGORITHM, dataclasses.replace(script.Config(), **overrides))
    keys = harness.scale.seed_keys(config)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(script.make_train(config))).lower(keys).compile()
    steps = script.steps_per_iteration(config) * np.arange(1, script.num_iterations(config) + 1)
    return config, keys, (compiled, np.broadcast_to(steps, (len(keys), len(steps)))), time.perf_counter() - t0


def run_compiled(compiled, keys):
    """-> (train seconds, metrics as numpy arrays (agent, iteration), with each iteration's env steps)."""
    compiled, env_steps = compiled
    t0 = time.perf_counter()
    _, metrics = jax.block_until_ready(compiled(keys))
    return time.perf_counter() - t0, {**jax.tree.map(np.asarray, metrics), "env_steps": env_steps}


def run_case(overrides):
    config, keys, compiled, compile_s = compile_case(overrides)
    run_s, metrics = run_compiled(compiled, keys)
    return compile_s, run_s, metrics["env_steps"][0, -1] * config.num_seeds / run_s


def steps_to_return(metrics, target=TARGET_RETURN, window=WINDOW):
    """Per agent: the env steps after which the mean return of the episodes that ended in the last `window` env
    steps first reaches `target` (inf if it never does). A window, not one iteration: an iteration sees only the
    one or two CartPole episodes that end in it."""
    steps = metrics["env_steps"][0]
    k = max(1, window // int(steps[0]))  # iterations per window
    summed = [np.cumsum(np.pad(x, ((0, 0), (1, 0))), -1)
              for x in (np.nan_to_num(metrics["episode_return"]) * metrics["episodes"], metrics["episodes"])]
    returns, episodes = (x[:, k:] - x[:, :-k] for x in summed)  # window sums ending at iterations k-1, k, ...
    mean = np.where(episodes > 0, returns / np.maximum(episodes, 1), -np.inf)
    reached = mean >= target
    return np.where(reached.any(-1), steps[k - 1:][reached.argmax(-1)], np.inf)

def time_to_475(repeats):
    """Compiles each case once, runs them `repeats` times taking turns (the machine's noise falls on all of them)
    and prints a table of medians: env steps/s, and the seconds of training until the median agent reaches 475
    (taking the training time as even over the run's env steps; the numbers are the same in every repeat)."""
    cases = [compile_case(overrides) for _, overrides in TIME_TO_475]
    times, metrics = [[] for _ in cases], [None] * len(cases)
    for _ in range(repeats):
        for i, (_, keys, compiled, _) in enumerate(cases):
            run_s, metrics[i] = run_compiled(compiled, keys)
            times[i].append(run_s)
    print(f"| learner | compile s | train s | env steps/s (all agents) | env steps to {TARGET_RETURN:g} (median "
          f"agent) | train s to {TARGET_RETURN:g} | agents that reach it |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (label, _), (config, _, _, compile_s), run_times, run_metrics in zip(TIME_TO_475, cases, times, metrics,
                                                                              strict=True):
        run_s = statistics.median(run_times)
        steps_per_agent = int(run_metrics["env_steps"][0, -1])
        reached = steps_to_return(run_metrics)
        median = float(np.median(reached))
        steps, seconds = ("not reached", "-") if np.isinf(median) else (f"{median:,.0f}",
                                                                         f"{run_s * median / steps_per_agent:.1f}")
        print(f"| {label} | {compile_s:.1f} | {run_s:.1f} | {steps_per_agent * config.num_seeds / run_s:,.0f} | "
              f"{steps} | {seconds} | {int(np.isfinite(reached).sum())} of {len(reached)} |", flush=True)

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=[*sorted(CASES), "time_to_475"], help="run one group of cases")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each time_to_475 case (medians)")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}")
    for group, cases in CASES.items():
        if args.only and group != args.only:
            continue
        for label, overrides in cases:
            compile_s, run_s, sps = run_case(overrides)
            print(f"{label:45s} compile {compile_s:5.1f} s  run {run_s:6.2f} s  {sps / 1e6:8.3f} M env steps/s",
                  flush=True)
    if args.only in (None, "time_to_475"):
        time_to_475(args.repeats)


if __name__ == "__main__":
    main()
