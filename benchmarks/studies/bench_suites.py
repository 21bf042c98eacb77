"""Env steps/s of each optional suite inside our scan, on this machine: the scripts' env stack (`envs.make_vec`:
episode statistics, flat observations, the auto-reset) stepped with uniformly random actions in one `jax.lax.scan`,
compiled once, timed apart from compilation. CartPole-v1 is the yardstick. Each env runs in its own process, rounds
alternate the envs, and the table gives the median over rounds.

    python benchmarks/studies/bench_suites.py                      # the table in benchmarks/results/suites.md
    python benchmarks/studies/bench_suites.py --num-envs 16 128 --rounds 3

A suite that is not installed is left out with a line saying so.
"""

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENVS = ("CartPole-v1", "MiniGrid-Empty-8x8", "MiniGrid-DoorKey-8x8", "playground/CartpoleBalance",
        "playground/CheetahRun", "Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1")

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import jax
from scanrl import envs

env_id, num_envs, steps = {env_id!r}, {num_envs}, {steps}
env, params = envs.make_vec(env_id, num_envs)
space = env.action_space(params)

def run(key):
    obs, state = env.reset(key, params)
    def body(state, key):
        key_act, key_step = jax.random.split(key)
        actions = jax.vmap(space.sample)(jax.random.split(key_act, num_envs))
        obs, state, reward, terminated, truncated, info = env.step(key_step, state, actions, params)
        return state, reward.sum()
    return jax.lax.scan(body, state, jax.random.split(key, steps))[1].sum()

start = time.perf_counter()
compiled = jax.jit(run).lower(jax.random.PRNGKey(0)).compile()
compile_s = time.perf_counter() - start
jax.block_until_ready(compiled(jax.random.PRNGKey(1)))  # once, so the timed call finds everything in place
start = time.perf_counter()
jax.block_until_ready(compiled(jax.random.PRNGKey(2)))
run_s = time.perf_counter() - start
print(json.dumps({{"compile_s": compile_s, "sps": num_envs * steps / run_s}}))
"""


@dataclass(frozen=True)
class Args:
    num_envs: tuple[int, ...] = (16, 128)
    """batch sizes (envs stepped together)"""
    seconds: float = 4.0
    """about how long each timed scan runs (its length comes from a short probe)"""
    rounds: int = 3
    """rounds; every env and batch once per round, in turn"""
    envs: tuple[str, ...] = ENVS
    out: str | None = os.path.join(ROOT, "benchmarks", "results", "suites.md")
    """the markdown table; none with --out ''"""


def measure(env_id, num_envs, steps) -> dict:
    code = CHILD.format(root=ROOT, env_id=env_id, num_envs=num_envs, steps=steps)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{env_id} x {num_envs}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(args: Args) -> int:
    sys.path.insert(0, ROOT)
    from scanrl import envs

    chosen = []
    for env_id in args.envs:
        try:
            envs.make(env_id)
            chosen.append(env_id)
        except ValueError as error:
            print(f"left out: {error}", flush=True)
    # A probe sizes each scan to about --seconds.
    steps = {}
    for env_id in chosen:
        for n in args.num_envs:
            probe = measure(env_id, n, 64)
            steps[env_id, n] = max(64, int(probe["sps"] * args.seconds / n))
            print(f"probe {env_id} x {n}: {probe['sps']:,.0f} env steps/s, compile {probe['compile_s']:.1f} s",
                  flush=True)
    results = {key: [] for key in steps}
    for r in range(args.rounds):
        for key, length in steps.items():
            results[key].append(measure(*key, length))
            print(f"round {r + 1} {key[0]} x {key[1]}: {results[key][-1]['sps']:,.0f} env steps/s", flush=True)
    lines = ["| env | " + " | ".join(f"{n} envs: env steps/s" for n in args.num_envs) + " | compile (s) |",
             "|---|" + "---:|" * (len(args.num_envs) + 1)]
    for env_id in chosen:
        sps = [statistics.median(x["sps"] for x in results[env_id, n]) for n in args.num_envs]
        compile_s = statistics.median(x["compile_s"] for n in args.num_envs for x in results[env_id, n])
        lines.append(f"| {env_id} | " + " | ".join(f"{s:,.0f}" for s in sps) + f" | {compile_s:.1f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Env steps/s of the optional suites\n\n"
                    f"`python benchmarks/studies/bench_suites.py` ({args.rounds} rounds, median; random actions "
                    f"through `envs.make_vec`, one `lax.scan` of about {args.seconds:g} s, compile apart, one process "
                    "per measurement).\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
