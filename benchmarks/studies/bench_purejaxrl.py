"""Our scripts beside PureJaxRL's (ppo.py beside `purejaxrl/ppo.py`, ppo_rnn.py beside `purejaxrl/ppo_rnn.py`):
env steps/s, compile and training time apart, as whole processes.

Each program runs in its own process as a user runs it, the programs alternating within each round, and the table
gives medians over the rounds (training only: compile time is its own column):

    python benchmarks/studies/bench_purejaxrl.py                                 # ppo_rnn.py and ppo.py
    python benchmarks/studies/bench_purejaxrl.py --purejaxrl ~/src/purejaxrl     # and PureJaxRL's ppo_rnn.py
    python benchmarks/studies/bench_purejaxrl.py --algo ppo --env CartPole-v1 --seeds 2048 \
        --total-timesteps 500000 --rounds 1 --purejaxrl ~/src/purejaxrl --records DIR   # PureJaxRL's GPU headline

- `--algo ppo_rnn`: `ppo_rnn.py` at its defaults (GRU 64, 4 envs x 128 steps) and at PureJaxRL's network sizes
  (GRU 128, 128-wide ReLU layers), `ppo.py` at its defaults. `--algo ppo`: `ppo.py` at its defaults, which are
  PureJaxRL's CartPole config. All on `--env` with `--total-timesteps` per seed; our scripts split the agents over
  the devices as they do by default (a device per core on a CPU, the one GPU on a GPU). Their env steps/s is
  summary.json's `sps`, their compile and training seconds its `compile_s` and `train_s`.
- PureJaxRL's `purejaxrl/<algo>.py` (luchris429/purejaxrl) as `jit(vmap(make_train(config)))` on one device, its
  config but `ENV_NAME`, `TOTAL_TIMESTEPS` and `DEBUG` (off: no host callback). A thin adapter, and only that, makes
  it run on our stack (jax 0.10, flax 0.12, gymnax 1.x), without editing its logic:
  1. flax's GRU API changed (purejaxrl #29): `nn.GRUCell()` needs `features=128` and `GRUCell.initialize_carry`
     takes `(rng, input_shape)`: ppo_rnn's two `ScannedRNN` lines are rewritten as it is loaded (zeros, as before);
  2. gymnax 1.x's `step` returns six values (`terminated`, `truncated`): the env it makes is wrapped to return five,
     `done = terminated or truncated`, as gymnax 0.0.x did (PureJaxRL then bootstraps no truncation, as before);
  3. its wrappers.py imports `navix` (Python 3.12) and `brax`: empty modules stand in where they are not installed
     (neither script uses a navix or brax env).
- `--records DIR` also writes one JSON file per row: the medians with each round's figures, and where they come
  from (commit and whether tracked files differed, the command, the machine with its GPU and driver, the library
  versions), as the learning suite's records do.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Literal

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from benchmarks.suite.runner import _ask, machine, provenance, shown_command  # noqa: E402  (the suite's provenance)

# Run in a fresh process: PureJaxRL's ppo.py or ppo_rnn.py loaded through the adapter above, timed, one JSON line.
PUREJAXRL_RUNNER = r'''
import json, os, sys, time, types
source_dir, algo, env_id, total_timesteps, num_seeds = sys.argv[1:6]
total_timesteps, num_seeds = int(total_timesteps), int(num_seeds)
sys.path[:0] = [os.path.join(source_dir, "purejaxrl"), sys.argv[6]]
from scanrl import harness
harness.prepare_jax(f"purejaxrl_{algo}")  # the scripts' XLA_FLAGS, before JAX makes its backend
import importlib.util
missing = [top for top in ("navix", "brax") if importlib.util.find_spec(top) is None]
for name in ("navix", "brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training"):
    if name.split(".")[0] in missing:
        module = sys.modules[name] = types.ModuleType(name)
        module.EpisodeWrapper = module.AutoResetWrapper = None  # names wrappers.py imports, unused here
        module.envs = module.wrappers = module.training = module
import jax, jax.numpy as jnp
from scanrl import envs

class FiveValues:
    "gymnax 0.0.x's step API over a gymnax 1.x env: (obs, state, reward, done, info)."
    def __init__(self, env):
        self._env = env
    def __getattr__(self, name):
        return getattr(self._env, name)
    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

patched = open(os.path.join(source_dir, "purejaxrl", f"{algo}.py")).read()
if algo == "ppo_rnn":
    patched = patched.replace("nn.GRUCell()(rnn_state, ins)",
                              "nn.GRUCell(features=rnn_state.shape[-1])(rnn_state, ins)")
    patched = patched.replace("""        return nn.GRUCell.initialize_carry(
            jax.random.PRNGKey(0), (batch_size,), hidden_size
        )""", "        return jnp.zeros((batch_size, hidden_size))")
    assert "features=" in patched and "jnp.zeros((batch_size" in patched
patched = patched.replace("env, env_params = gymnax.make(config[\"ENV_NAME\"])",
                          "env, env_params = envs.make(config[\"ENV_NAME\"]); env = FiveValues(env)")
patched = patched[:patched.index('if __name__ == "__main__":')]
assert patched.count("FiveValues") == 1
module = types.ModuleType(f"purejaxrl_{algo}")
module.__dict__.update(envs=envs, FiveValues=FiveValues)
exec(compile(patched, f"purejaxrl/{algo}.py (adapted)", "exec"), module.__dict__)
# Its __main__ config (ppo_rnn.py's and ppo.py's differ only in ACTIVATION, which ppo_rnn.py does not read).
config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": total_timesteps, "UPDATE_EPOCHS": 4,
          "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
          "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": env_id, "ANNEAL_LR": True,
          "DEBUG": False}
keys = jax.random.split(jax.random.PRNGKey(30), num_seeds)
start = time.perf_counter()
compiled = jax.jit(jax.vmap(module.make_train(config))).lower(keys).compile()
compile_s = time.perf_counter() - start
start = time.perf_counter()
out = jax.block_until_ready(compiled(keys))
train_s = time.perf_counter() - start
steps = total_timesteps // (config["NUM_ENVS"] * config["NUM_STEPS"]) * config["NUM_ENVS"] * config["NUM_STEPS"]
metrics = out["metrics" if algo == "ppo" else "metric"]
returns = metrics["returned_episode_returns"][:, -1].mean()  # the last rollout's running means
print(json.dumps({"compile_s": compile_s, "train_s": train_s, "sps": num_seeds * steps / train_s,
                  "final_return": float(returns)}))
'''


@dataclass(frozen=True)
class Args:
    algo: Literal["ppo_rnn", "ppo"] = "ppo_rnn"
    """which pair: ppo_rnn.py (and ppo.py) beside PureJaxRL's ppo_rnn.py, or ppo.py beside its ppo.py"""
    env: str = "CartPole-v1-masked"
    """env id for every program"""
    seeds: tuple[int, ...] = (1, 30)
    """numbers of seeds, one row per program each"""
    total_timesteps: int = 50_000
    """env steps per seed in each run"""
    rounds: int = 3
    """rounds of every program in turn; the table gives medians"""
    purejaxrl: str | None = None
    """a clone of github.com/luchris429/purejaxrl: also time its purejaxrl/<algo>.py through the adapter"""
    out: str | None = None
    """also write the rows to this JSON file"""
    records: str | None = None
    """also write each row as a record, with where it comes from, to <records>/<algo>-<env>-<seeds>-<program>.json"""


PROGRAMS = {
    "ppo_rnn": {
        "ppo_rnn.py": ("ppo_rnn.py",),
        "ppo_rnn.py, PureJaxRL's sizes": ("ppo_rnn.py", "--cell-size", "128", "--hidden-size", "128", "--activation",
                                          "relu"),
        "ppo.py": ("ppo.py",),
    },
    "ppo": {"ppo.py": ("ppo.py",)},
}


def script_command(argv, args, seeds, out_dir):
    return [sys.executable, os.path.join(ROOT, argv[0]), *argv[1:], "--env", args.env, "--num-seeds", str(seeds),
            "--total-timesteps", str(args.total_timesteps), "--out-dir", out_dir, "--run-name", "bench",
            "--compile-cache", "off"]


def run_script(argv, args, seeds):
    with tempfile.TemporaryDirectory() as out_dir:
        subprocess.run(script_command(argv, args, seeds, out_dir), check=True, capture_output=True, text=True)
        summary = json.load(open(os.path.join(out_dir, "bench", "summary.json")))
    return {"compile_s": summary["compile_s"], "train_s": summary["train_s"], "sps": summary["sps"],
            "final_return": statistics.mean(summary["final_return"]),
            "eval_return": statistics.mean(summary["eval_return"])}


def run_purejaxrl(args, seeds):
    result = subprocess.run([sys.executable, "-c", PUREJAXRL_RUNNER, os.path.expanduser(args.purejaxrl), args.algo,
                             args.env, str(args.total_timesteps), str(seeds), ROOT], check=True, capture_output=True,
                            text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def write_records(args, rows, results):
    """One JSON file per row: its figures, each round's, and where they come from (the learning suite's fields)."""
    os.makedirs(args.records, exist_ok=True)
    where = {"machine": machine(), **provenance([sys.executable, *sys.argv]), "date": time.strftime("%Y-%m-%d")}
    if args.purejaxrl:
        where["purejaxrl_commit"] = _ask(["git", "-C", os.path.expanduser(args.purejaxrl), "rev-parse", "HEAD"])
    for row in rows:
        name, seeds = row["program"], row["seeds"]
        argv = PROGRAMS[args.algo].get(name)
        program = (shown_command(script_command(argv, args, seeds, "<tmp>")) if argv else
                   f"purejaxrl/{args.algo}.py (adapted), jit(vmap(make_train(config))) over {seeds} keys")
        slug = "".join(c if c.isalnum() or c in ".-" else "_" for c in name.split(",")[0].split(" (")[0])
        path = os.path.join(args.records, f"{args.algo}-{args.env}-{seeds}-{slug}.json")
        with open(path, "w") as f:
            json.dump({**row, "env": args.env, "total_timesteps": args.total_timesteps, "program_command": program,
                       "rounds": results[name, seeds], **where}, f, indent=1)
        print(f"wrote {path}")


def main(args: Args):
    scripts = PROGRAMS[args.algo]
    programs = list(scripts) + ([f"PureJaxRL {args.algo}.py (adapted)"] if args.purejaxrl else [])
    results = {(name, seeds): [] for name in programs for seeds in args.seeds}
    for round_ in range(args.rounds):
        for seeds in args.seeds:
            for name in programs:
                row = run_purejaxrl(args, seeds) if name not in scripts else run_script(scripts[name], args, seeds)
                results[name, seeds].append(row)
                print(f"round {round_ + 1}: {name}, {seeds} seed(s): {row['sps']:,.0f} env steps/s, compile "
                      f"{row['compile_s']:.1f} s, train {row['train_s']:.1f} s, final return "
                      f"{row['final_return']:.1f}", flush=True)
    rows = []
    print(f"\n{args.env}, {args.total_timesteps:,} env steps per seed, medians of {args.rounds} rounds\n")
    print("| program | seeds | env steps/s | compile s | train s | final return (mean over seeds) |")
    print("|---|---:|---:|---:|---:|---:|")
    for seeds in args.seeds:
        for name in programs:
            runs = results[name, seeds]
            row = {"program": name, "seeds": seeds, **{key: statistics.median(r[key] for r in runs)
                                                       for key in ("sps", "compile_s", "train_s", "final_return")}}
            rows.append(row)
            print(f"| {name} | {seeds} | {row['sps']:,.0f} | {row['compile_s']:.1f} | {row['train_s']:.1f} | "
                  f"{row['final_return']:.1f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    if args.records:
        write_records(args, rows, results)


if __name__ == "__main__":
    main(tyro.cli(Args))
