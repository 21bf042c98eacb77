"""sac.py beside stable-baselines3's SAC (PyTorch) and sbx's SAC (JAX) on Pendulum-v1: training env steps/s and
wall-clock time to a return threshold, every program a whole process, the programs alternating within each round.

    python benchmarks/studies/bench_sac_peer.py --peer-python ../peer-venv/bin/python            # 1 seed, 3 rounds
    python benchmarks/studies/bench_sac_peer.py --peer-python ../peer-venv/bin/python --seeds 1 10

The peers run in their own venv (requirements-peer.txt; never in the repo's venv) through this file's
`--peer-runner`, which needs only the standard library and the peer's packages. Every program trains
rl-baselines3-zoo's SAC recipe for Pendulum-v1 (learning_rate 1e-3, 20k steps, the rest SB3's defaults): 1 env, batch
256, [256, 256] ReLU MLPs, a gradient step per env step after 100 random ones, the temperature learned from 1 towards
an entropy of -|A|, gamma 0.99, tau 0.005: SAC_FLAGS for sac.py, ZOO for the peers. N seeds: sac.py vmaps them in one
process, over a device per core as its command line does; a peer trains them one after another in one process.

- process s: the whole subprocess (imports, env, compile, training; sac.py's final evaluation, plots and files too);
- compile s: sac.py's summary.json `compile_s` (compile cache off); the peers' first `train()` and `predict()` calls
  beyond their median call (sbx's jit compiles; about 0 for PyTorch);
- train s: sac.py's summary.json `train_s`; the peers' `model.learn()` less compile s, over seeds. env steps/s: every
  seed's env steps over train s;
- time to threshold: the median seed's first env step after which the mean return of its last 10 finished training
  episodes reaches `--target-return`, in seconds of train s taken as even over the env steps.

Writes the table, the machine and the command to `--out` (benchmarks/results/sac_peer.md).
"""

import argparse
import csv
import datetime
import importlib.metadata
import itertools
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from math import inf, nan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV_ID = "Pendulum-v1"  # gymnax's port in sac.py, gymnasium's in the peers: the same dynamics, 200-step episodes
WINDOW = 10  # finished episodes the time to threshold averages
# rl-baselines3-zoo's SAC on Pendulum-v1: learning_rate and n_timesteps set, the rest SB3's SAC defaults.
ZOO = dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005, gamma=0.99,
           train_freq=1, gradient_steps=1, ent_coef="auto", target_entropy="auto")
SAC_FLAGS = ("--env", ENV_ID, "--num-envs", "1", "--update-every", "1", "--updates-per-step", "1", "--learning-rate",
             "1e-3", "--buffer-size", "1000000", "--learning-starts", "100", "--batch-size", "256", "--tau", "0.005",
             "--gamma", "0.99", "--init-alpha", "1", "--target-entropy-scale", "1", "--hidden-size", "256",
             "--log-every", "1000", "--compile-cache", "off")  # a progress line (a piece) per 1,000 env steps
PEERS = {"sb3": ("stable-baselines3", "SB3 SAC (PyTorch)"), "sbx": ("sbx-rl", "sbx SAC (JAX)")}


def parse_args(argv):
    # argparse, not tyro: this file also runs under the peer venv, which has neither tyro nor scanrl.
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", required=True, help="python of the venv of requirements-peer.txt")
    parser.add_argument("--peers", nargs="+", choices=sorted(PEERS), default=["sb3", "sbx"], help="those missing in "
                        "the peer venv are skipped, with a note")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="numbers of seeds, a row per program each "
                        "(add 10 for the users' way: sac.py vmaps them, the peers train them one after another)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every program in turn; medians reported")
    parser.add_argument("--total-timesteps", type=int, default=20_000, help="env steps per seed")
    parser.add_argument("--target-return", type=float, default=-200.0, help="the return threshold")
    parser.add_argument("--seed", type=int, default=0, help="seed of agent 0; agent i uses seed + i")
    parser.add_argument("--torch-threads", type=int, default=1, help="the peers' torch threads, 0: PyTorch's default "
                        "(one per core), which collapses under load as OpenMP's threads wait on each other")
    parser.add_argument("--out-dir", default=None, help="directory of the runs' files (default: a temporary one)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "sac_peer.md"))
    return parser.parse_args(argv)


def versions(names):
    installed = {d.name.lower().replace("_", "-"): d.version for d in importlib.metadata.distributions()}
    return {name: installed[name] for name in names if name in installed}


def call(command, env=None):
    """Runs a program to its end -> its wall-clock seconds; its stderr's tail if it fails."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"error: {shlex.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def run_sac(args, seeds, out_dir, name):
    wall_s = call([sys.executable, os.path.join(ROOT, "sac.py"), *SAC_FLAGS, "--total-timesteps",
                   str(args.total_timesteps), "--seed", str(args.seed), "--num-seeds", str(seeds), "--out-dir",
                   out_dir, "--run-name", name])
    run_dir = os.path.join(out_dir, name)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    episodes = {}  # per seed: (env steps at the iteration's end, return) of each episode that ended
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        for row in csv.DictReader(f):
            # A phase's mean return, once per episode that ended in it (one env: at most one, so exact here).
            ends = [(int(row["env_steps"]), float(row["episode_return"]))] * int(row["episodes"])
            episodes.setdefault(row["seed"], []).extend(ends)
    return dict(wall_s=wall_s, compile_s=summary["compile_s"], train_s=summary["train_s"],
                steps=summary["env_steps"] * seeds, episodes=list(episodes.values()),
                seed_train_s=[summary["train_s"]] * seeds, devices=summary["num_devices"])


def run_peer(args, seeds, out_dir, name, peer):
    spec = dict(peer=peer, seeds=list(range(args.seed, args.seed + seeds)), total_timesteps=args.total_timesteps,
                torch_threads=args.torch_threads, out=os.path.join(out_dir, f"{name}.json"))
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # sbx: no accelerator probe
    wall_s = call([args.peer_python, os.path.abspath(__file__), "--peer-runner", json.dumps(spec)], env)
    runs = json.load(open(spec["out"]))
    seed_train_s = [r["learn_s"] - r["first_call_s"] for r in runs]
    return dict(wall_s=wall_s, compile_s=sum(r["first_call_s"] for r in runs), train_s=sum(seed_train_s),
                steps=args.total_timesteps * seeds, episodes=[r["episodes"] for r in runs], seed_train_s=seed_train_s)


def peer_runner(spec):
    """Under the peer venv: SAC on gymnasium's Pendulum-v1 for each seed in turn, timed; writes spec["out"]."""
    import torch  # SB3's networks; sbx's replay buffer is SB3's, in torch too

    if spec["torch_threads"]:
        torch.set_num_threads(spec["torch_threads"])
    if spec["peer"] == "sbx":
        from sbx import SAC
    else:
        from stable_baselines3 import SAC
    total, runs = spec["total_timesteps"], []
    for seed in spec["seeds"]:
        # stats_window_size: keep every episode's Monitor record (its return "r" and length "l").
        model = SAC("MlpPolicy", ENV_ID, policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu",
                    stats_window_size=total, verbose=0, **ZOO)
        calls = {"train": [], "predict": []}  # each call's seconds (the loop calls them on the instance)
        for method, times in calls.items():
            setattr(model, method, timed(getattr(model, method), times.append))
        start = time.perf_counter()
        model.learn(total_timesteps=total)
        learn_s = time.perf_counter() - start
        # The first call of each compiles (sbx's jax.jit); what it took beyond a usual call is compile time.
        first_call_s = sum(max(0.0, t[0] - statistics.median(t)) for t in calls.values() if t)
        ends = itertools.accumulate(info["l"] for info in model.ep_info_buffer)  # each episode's last env step
        episodes = [(step, float(info["r"])) for step, info in zip(ends, model.ep_info_buffer, strict=True)]
        runs.append(dict(seed=seed, learn_s=learn_s, first_call_s=first_call_s, episodes=episodes))
    with open(spec["out"], "w") as f:
        json.dump(runs, f)


def timed(method, record):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        out = method(*args, **kwargs)
        record(time.perf_counter() - start)
        return out

    return wrapper


def steps_to_target(episodes, target):
    """The env step after which the mean return of the last WINDOW finished episodes first reaches `target` (inf if
    it never does)."""
    returns = [r for _, r in episodes]
    for i in range(WINDOW, len(episodes) + 1):
        if statistics.fmean(returns[i - WINDOW:i]) >= target:
            return episodes[i - 1][0]
    return inf


def summarize(runs, args):
    """The median over rounds of a program's runs at one seed count."""
    med = statistics.median
    to_target, seconds, reached, finals = [], [], [], []
    for run in runs:
        steps = [steps_to_target(e, args.target_return) for e in run["episodes"]]  # per seed
        to_target.append(med(steps))
        seconds.append(med([s / args.total_timesteps * t for s, t in zip(steps, run["seed_train_s"], strict=True)]))
        reached.append(sum(s < inf for s in steps))
        finals.append(statistics.fmean(statistics.fmean(r for _, r in e[-WINDOW:]) if e else nan
                                       for e in run["episodes"]))
    return dict(wall_s=med(r["wall_s"] for r in runs), compile_s=med(r["compile_s"] for r in runs),
                train_s=med(r["train_s"] for r in runs), sps=med(r["steps"] / r["train_s"] for r in runs),
                final=med(finals), to_target=med(to_target), s_to_target=med(seconds), reached=med(reached))


def table(rows, args):
    target = f"{args.target_return:g}"
    lines = [f"| program | seeds | process s | compile s | train s | env steps/s (train, all seeds) | return, last "
             f"{WINDOW} episodes | env steps to {target} (median seed) | train s to {target} | seeds that reach it |",
             "|---|" + "---:|" * 9]
    for label, seeds, r in rows:
        hit = r["to_target"] < inf
        steps, seconds = (f"{r['to_target']:,.0f}", f"{r['s_to_target']:.1f}") if hit else ("not reached", "-")
        lines.append(f"| {label} | {seeds} | {r['wall_s']:.1f} | {r['compile_s']:.1f} | {r['train_s']:.1f} | "
                     f"{r['sps']:,.0f} | {r['final']:.1f} | {steps} | {seconds} | {r['reached']:g} of {seeds} |")
    return lines


def machine(peer):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor() or platform.machine())
    ours, theirs = (", ".join(f"{k} {v}" for k, v in d.items()) for d in (versions(("jax", "flax", "gymnax")), peer))
    return f"{platform.platform()}, {cpu} ({os.cpu_count()} cores); repo venv: {ours}; peer venv: {theirs}"


def report(args, runs, peer, notes):
    rows = []
    for (p, seeds), program_runs in sorted(runs.items(), key=lambda item: item[0][1]):  # by seeds, programs in turn
        label = (f"sac.py (JAX, {program_runs[0]['devices']} device(s))" if p == "sac" else
                 f"{PEERS[p][1]}{', one seed after another' if seeds > 1 else ''}")
        rows.append((label, seeds, summarize(program_runs, args)))
    command = "python " + shlex.join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    zoo = ", ".join(f"{k}={v}" for k, v in ZOO.items())
    body = [*table(rows, args), "", *notes,
            "- process s: the whole subprocess; compile s: sac.py's XLA compile, the peers' first-call excess; train "
            f"s: training, compile apart; time to {args.target_return:g}: the median seed's first env step after "
            f"which its last {WINDOW} finished episodes' mean return reaches it, in seconds of its train s taken as "
            "even over its env steps (the study's docstring says more).",
            f"- sac.py's flags: `{' '.join(SAC_FLAGS)}`; the peers' SAC(\"MlpPolicy\", net_arch=[256, 256], {zoo}), "
            f"torch threads {args.torch_threads or 'PyTorch default'}. sac.py splits several seeds over a device per "
            "core (its default); the peers train them one after another in one process."]
    print("", *body, sep="\n")
    with open(args.out, "w") as f:
        f.write("\n".join([f"# sac.py against stable-baselines3 and sbx SAC on {ENV_ID}", "",
                           f"`{command}`, {datetime.datetime.now():%Y-%m-%d %H:%M}, {machine(peer)}.", "",
                           f"{args.total_timesteps:,} env steps per seed of rl-baselines3-zoo's SAC recipe; medians of "
                           f"{args.repeats} round(s), the programs alternating within each round.", "", *body]) + "\n")
    print(f"\nwritten to {args.out}")


def main(args):
    if args.repeats < 1 or min(args.seeds) < 1:
        raise SystemExit("error: --repeats and every --seeds value must be at least 1")
    probe = subprocess.run([args.peer_python, os.path.abspath(__file__), "--peer-versions"], capture_output=True,
                           text=True, check=True)
    peer = json.loads(probe.stdout)
    notes = [f"- `{p}` skipped: `{PEERS[p][0]}` is not installed in {args.peer_python}." for p in args.peers
             if PEERS[p][0] not in peer]
    print(*notes, sep="\n")
    programs = ["sac"] + [p for p in args.peers if PEERS[p][0] in peer]
    runs = {(p, s): [] for p in programs for s in args.seeds}
    with tempfile.TemporaryDirectory() as temporary:
        out_dir = args.out_dir or temporary
        os.makedirs(out_dir, exist_ok=True)
        for round_, seeds, p in itertools.product(range(1, args.repeats + 1), args.seeds, programs):
            # The programs in turn: a drift in the machine's load falls on each alike.
            name = f"{p}_{seeds}seeds_round{round_}"
            run = run_sac(args, seeds, out_dir, name) if p == "sac" else run_peer(args, seeds, out_dir, name, p)
            runs[p, seeds].append(run)
            print(f"round {round_}: {p}, {seeds} seed(s): process {run['wall_s']:.1f} s, train {run['train_s']:.1f} "
                  f"s, {run['steps'] / run['train_s']:,.0f} env steps/s", flush=True)
    report(args, runs, peer, notes)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer-runner"]:
        peer_runner(json.loads(sys.argv[2]))
    elif sys.argv[1:2] == ["--peer-versions"]:
        print(json.dumps(versions(("torch", "stable-baselines3", "sbx-rl", "jax", "gymnasium"))))
    else:
        main(parse_args(sys.argv[1:]))
