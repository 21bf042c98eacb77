"""Env steps/s of ppo_rnn.py beside ppo.py (and PureJaxRL's ppo_rnn.py, given a clone) at 1 and 30 seeds.

Each program runs in its own process as a user runs it, the programs alternating within each round, and the table
gives medians over the rounds (training only: compile time is its own column):

    python benchmarks/studies/bench_ppo_rnn.py                                   # ppo_rnn.py and ppo.py
    python benchmarks/studies/bench_ppo_rnn.py --purejaxrl ~/src/purejaxrl       # and PureJaxRL's ppo_rnn.py

- `ppo_rnn.py` at its defaults (GRU 64, 4 envs x 128 steps) and at PureJaxRL's network sizes (GRU 128, 128-wide
  ReLU layers), `ppo.py` at its defaults, all on `--env` with `--total-timesteps` per seed; our scripts split the
  agents over a device per core, as they do by default. Their env steps/s is summary.json's `sps`.
- PureJaxRL's `purejaxrl/ppo_rnn.py` (luchris429/purejaxrl) as `jit(vmap(make_train(config)))` on one device, its
  config but `ENV_NAME`, `TOTAL_TIMESTEPS` and `DEBUG` (off: no host callback). A thin adapter, and only that, makes
  it run on our stack (jax 0.10, flax 0.12, gymnax 1.x), without editing its logic:
  1. flax's GRU API changed (purejaxrl #29): `nn.GRUCell()` needs `features=128` and `GRUCell.initialize_carry`
     takes `(rng, input_shape)`: its two `ScannedRNN` lines are rewritten as it is loaded (zeros, as before);
  2. gymnax 1.x's `step` returns six values (`terminated`, `truncated`): the env it makes is wrapped to return five,
     `done = terminated or truncated`, as gymnax 0.0.x did (PureJaxRL then bootstraps no truncation, as before);
  3. its wrappers.py imports `navix`, which needs Python 3.12: an empty module stands in (ppo_rnn uses no navix env).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Run in a fresh process: PureJaxRL's ppo_rnn loaded through the adapter above, timed, one JSON line printed.
PUREJAXRL_RUNNER = r'''
import json, os, sys, time, types
source_dir, env_id, total_timesteps, num_seeds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path[:0] = [os.path.join(source_dir, "purejaxrl"), sys.argv[5]]
from scanrl import harness
harness.prepare_jax("purejaxrl_ppo_rnn")  # the scripts' XLA_FLAGS, before JAX makes its backend
sys.modules["navix"] = types.ModuleType("navix")
import jax, jax.numpy as jnp
from scanrl import envs

class FiveValues:
    """gymnax 0.0.x's step API over a gymnax 1.x env: (obs, state, reward, done, info)."""
    def __init__(self, env):
        self._env = env
    def __getattr__(self, name):
        return getattr(self._env, name)
    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

source = open(os.path.join(source_dir, "purejaxrl", "ppo_rnn.py")).read()
patched = source.replace("nn.GRUCell()(rnn_state, ins)", "nn.GRUCell(features=rnn_state.shape[-1])(rnn_state, ins)")
patched = patched.replace("""        return nn.GRUCell.initialize_carry(
            jax.random.PRNGKey(0), (batch_size,), hidden_size
        )""", "        return jnp.zeros((batch_size, hidden_size))")
patched = patched.replace("env, env_params = gymnax.make(config[\"ENV_NAME\"])",
                          "env, env_params = envs.make(config[\"ENV_NAME\"]); env = FiveValues(env)")
patched = patched[:patched.index('if __name__ == "__main__":')]
assert patched.count("FiveValues") == 1 and "features=" in patched and "jnp.zeros((batch_size" in patched
module = types.ModuleType("purejaxrl_ppo_rnn")
module.__dict__.update(envs=envs, FiveValues=FiveValues)
exec(compile(patched, "purejaxrl/ppo_rnn.py (adapted)", "exec"), module.__dict__)
config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": total_timesteps, "UPDATE_EPOCHS": 4,
          "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
          "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ENV_NAME": env_id, "ANNEAL_LR": True, "DEBUG": False}
keys = jax.random.split(jax.random.PRNGKey(30), num_seeds)
start = time.perf_counter()
compiled = jax.jit(jax.vmap(module.make_train(config))).lower(keys).compile()
compile_s = time.perf_counter() - start
start = time.perf_counter()
out = jax.block_until_ready(compiled(keys))
train_s = time.perf_counter() - start
steps = total_timesteps // (config["NUM_ENVS"] * config["NUM_STEPS"]) * config["NUM_ENVS"] * config["NUM_STEPS"]
returns = out["metric"]["returned_episode_returns"][:, -1].mean()  # the last rollout's running means
print(json.dumps({"compile_s": compile_s, "sps": num_seeds * steps / train_s, "final_return": float(returns)}))
'''


@dataclass(frozen=True)
class Args:
    env: str = "CartPole-v1-masked"
    """env id for every program"""
    seeds: tuple[int, ...] = (1, 30)
    """numbers of seeds, one row per program each"""
    total_timesteps: int = 50_000
    """env steps per seed in each run"""
    rounds: int = 3
    """rounds of every program in turn; the table gives medians"""
    purejaxrl: str | None = None
    """a clone of github.com/luchris429/purejaxrl: also time its purejaxrl/ppo_rnn.py through the adapter"""
    out: str | None = None
    """also write the rows to this JSON file"""


PROGRAMS = {
    "ppo_rnn.py": ("ppo_rnn.py",),
    "ppo_rnn.py, PureJaxRL's sizes": ("ppo_rnn.py", "--gru-size", "128", "--hidden-size", "128", "--activation",
                                      "relu"),
    "ppo.py": ("ppo.py",),
}


def run_script(argv, args, seeds):
    with tempfile.TemporaryDirectory() as out_dir:
        command = [sys.executable, os.path.join(ROOT, argv[0]), *argv[1:], "--env", args.env, "--num-seeds",
                   str(seeds), "--total-timesteps", str(args.total_timesteps), "--out-dir", out_dir, "--run-name",
                   "bench", "--compile-cache", "off"]
        subprocess.run(command, check=True, capture_output=True, text=True)
        summary = json.load(open(os.path.join(out_dir, "bench", "summary.json")))
    return {"compile_s": summary["compile_s"], "sps": summary["sps"],
            "final_return": statistics.mean(summary["final_return"])}


def run_purejaxrl(args, seeds):
    result = subprocess.run([sys.executable, "-c", PUREJAXRL_RUNNER, os.path.expanduser(args.purejaxrl), args.env,
                             str(args.total_timesteps), str(seeds), ROOT], check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(args: Args):
    programs = list(PROGRAMS) + (["PureJaxRL ppo_rnn.py (adapted)"] if args.purejaxrl else [])
    results = {(name, seeds): [] for name in programs for seeds in args.seeds}
    for round_ in range(args.rounds):
        for seeds in args.seeds:
            for name in programs:
                row = run_purejaxrl(args, seeds) if name not in PROGRAMS else run_script(PROGRAMS[name], args, seeds)
                results[name, seeds].append(row)
                print(f"round {round_ + 1}: {name}, {seeds} seed(s): {row['sps']:,.0f} env steps/s, compile "
                      f"{row['compile_s']:.1f} s", flush=True)
    rows = []
    print(f"\n{args.env}, {args.total_timesteps:,} env steps per seed, medians of {args.rounds} rounds\n")
    print("| program | seeds | env steps/s | compile s | final return (mean over seeds) |")
    print("|---|---:|---:|---:|---:|")
    for seeds in args.seeds:
        for name in programs:
            runs = results[name, seeds]
            row = {"program": name, "seeds": seeds, **{key: statistics.median(r[key] for r in runs)
                                                       for key in ("sps", "compile_s", "final_return")}}
            rows.append(row)
            print(f"| {name} | {seeds} | {row['sps']:,.0f} | {row['compile_s']:.1f} | {row['final_return']:.1f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(tyro.cli(Args))
