"""sbx (stable-baselines3 in JAX) beside td3.py, sac.py and crossq.py on the same MDP: sbx's TD3, SAC or CrossQ
trained on Gymnasium's own MuJoCo v5 env (C MuJoCo) at the recipe of the `--suite mujoco` records, each seed's
deterministic policy evaluated on 10 fresh episodes at the end, as the harness evaluates ours; a record per algorithm
and task, of the learning suite's kind (config, summary, the binned training curve, and the commit, command and
machine it came from).

    python benchmarks/studies/mujoco_peer.py --peer-python ../peer-venv/bin/python --algo sac --task Hopper-v5
    python benchmarks/studies/mujoco_peer.py --report        # the table and curves from the committed records

The recipe (both sides): one env, a gradient step per env step after 10,000 uniformly random ones, batch 256,
256x256 ReLU MLPs, Adam at 3e-4, gamma 0.99, tau 0.005, a 1M buffer; TD3: policy delay 2, target noise 0.2 clipped
at 0.5, Gaussian exploration noise 0.1; SAC: the temperature learned from 1 towards an entropy of -|A|. The seeds run
`--parallel` at a time (two on our 2 cores), each a process of the peer's venv (requirements-peer.txt plus
mujoco==4.0.0; never the repo's venv), so the record's wall time is sbx's wall-clock to the table on this machine.
Seeds trained in another sitting go to a record of their own, which `--report` pools with the first.
`--report` writes benchmarks/results/mujoco_peer.md (ours from benchmarks/results/records/mujoco/, the peer's from
`--records`, the policies of ours replayed on Gymnasium's env from replay_on_gymnasium.py's records) and
mujoco_peer_curves.png.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "benchmarks", "results", "mujoco_peer")
RECIPE = dict(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=10_000, batch_size=256, tau=0.005,
              gamma=0.99, train_freq=1, gradient_steps=1, policy_kwargs=dict(net_arch=[256, 256]))
TD3_RECIPE = dict(policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5)  # + N(0, 0.1) exploration noise
SAC_RECIPE = dict(ent_coef="auto", target_entropy="auto")
# CrossQ (crossq.py's defaults, the paper's): Adam 1e-3 with beta1 0.5 (sbx's default for CrossQ), policy delay 3, batch
# renormalisation momentum 0.99 and warm-up 100,000; the critics --critic-width wide, the actor 256x256.
CROSSQ_RECIPE = dict(learning_rate=1e-3, policy_delay=3, ent_coef="auto", target_entropy="auto")
PEER_PACKAGES = ("sbx-rl", "stable-baselines3", "jax", "jaxlib", "flax", "optax", "gymnasium", "mujoco", "numpy")


def parse_args(argv):
    # argparse, not tyro: this file also runs under the peer venv, which has neither tyro nor scanrl.
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", help="python of the peer's venv (requirements-peer.txt, mujoco)")
    parser.add_argument("--algo", choices=("td3", "sac", "crossq"))
    parser.add_argument("--critic-width", type=int, default=256, help="crossq: the critics' width")
    parser.add_argument("--task", choices=("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--parallel", type=int, default=2, help="seeds trained at once, a process each")
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--records", default=RECORDS, help="where the records go (and --report reads them)")
    parser.add_argument("--report", action="store_true", help="write the table and curves from the records")
    parser.add_argument("--peer-runner", help=argparse.SUPPRESS)  # one seed, inside the peer's venv
    args = parser.parse_args(argv)
    if not args.report and not args.peer_runner:
        for flag in ("peer_python", "algo", "task"):
            if getattr(args, flag) is None:
                parser.error(f"--{flag.replace('_', '-')} is needed (or --report)")
        if args.parallel < 1 or args.total_timesteps <= RECIPE["learning_starts"] or args.eval_episodes < 1 \
                or min(args.seeds) < 0 or len(set(args.seeds)) != len(args.seeds):
            parser.error("--parallel and --eval-episodes at least 1, --total-timesteps above 10,000, distinct seeds "
                         "of 0 or more")
        if not os.access(args.peer_python, os.X_OK):
            parser.error(f"--peer-python {args.peer_python}: not an executable")
    return args


def peer_runner(spec):
    """One seed of sbx in the peer's venv: trains, evaluates, prints one JSON line."""
    import gymnasium as gym
    import numpy as np
    from sbx import SAC, TD3, CrossQ
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make(spec["task"])
    actions = env.action_space.shape[0]
    if spec["algo"] == "td3":
        noise = NormalActionNoise(np.zeros(actions), 0.1 * np.ones(actions))
        model = TD3("MlpPolicy", env, action_noise=noise, seed=spec["seed"], **RECIPE, **TD3_RECIPE)
    elif spec["algo"] == "sac":
        model = SAC("MlpPolicy", env, seed=spec["seed"], **RECIPE, **SAC_RECIPE)
    else:
        width = spec["critic_width"]
        recipe = {key: value for key, value in RECIPE.items() if key != "tau"}  # no target networks to move
        kwargs = {**recipe, **CROSSQ_RECIPE, "policy_kwargs": dict(net_arch=dict(pi=[256, 256], qf=[width, width]),
                                                                   batch_norm_momentum=0.99,
                                                                   renorm_warmup_steps=100_000)}
        model = CrossQ("MlpPolicy", env, seed=spec["seed"], **kwargs)
    episodes = []

    class Episodes(BaseCallback):  # SB3's Monitor puts each finished episode's return in its info
        def _on_step(self):
            episodes.extend((self.num_timesteps, float(i["episode"]["r"])) for i in self.locals["infos"]
                            if "episode" in i)
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=spec["total_timesteps"], callback=Episodes())
    train_s = time.perf_counter() - start
    eval_env, returns = gym.make(spec["task"]), []
    for episode in range(spec["eval_episodes"]):
        obs, _ = eval_env.reset(seed=10_000 * (spec["seed"] + 1) + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = eval_env.step(model.predict(obs, deterministic=True)[0])
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    print(json.dumps({"seed": spec["seed"], "train_s": train_s, "eval_returns": returns, "episodes": episodes}))


def train_seeds(args):
    """Every seed through the peer's venv, `--parallel` at a time: -> (per-seed results, wall seconds)."""
    todo, running, results = list(args.seeds), [], []
    start = time.perf_counter()
    while todo or running:
        while todo and len(running) < args.parallel:
            spec = dict(algo=args.algo, task=args.task, seed=todo.pop(0), total_timesteps=args.total_timesteps,
                        eval_episodes=args.eval_episodes, critic_width=args.critic_width)
            command = [args.peer_python, os.path.abspath(__file__), "--peer-runner", json.dumps(spec)]
            running.append((spec["seed"], subprocess.Popen(command, stdout=subprocess.PIPE, text=True)))
            print(f"seed {spec['seed']}: started", flush=True)
        seed, process = running.pop(0)
        out, _ = process.communicate()
        if process.returncode != 0:
            sys.exit(f"error: seed {seed} of sbx's {args.algo} failed (exit {process.returncode}); its output is above")
        results.append(json.loads(out.strip().splitlines()[-1]))
        print(f"seed {seed}: eval {sum(results[-1]['eval_returns']) / args.eval_episodes:.1f}, "
              f"trained in {results[-1]['train_s']:.0f} s", flush=True)
    return sorted(results, key=lambda r: r["seed"]), time.perf_counter() - start


def binned_curve(results, total, points=100):
    """Each seed's mean return of the training episodes that ended in each of `points` equal stretches of env
    steps (None where none did), as our records bin theirs."""
    edges = [total * (i + 1) / points for i in range(points)]
    rows = []
    for result in results:
        sums, counts = [0.0] * points, [0] * points
        for step, value in result["episodes"]:
            i = min(points - 1, max(0, -(-step * points // total) - 1))
            sums[i], counts[i] = sums[i] + value, counts[i] + 1
        rows.append([s / c if c else None for s, c in zip(sums, counts, strict=True)])
    return edges, rows


def record(args, results, wall_s):
    sys.path.insert(0, ROOT)
    import numpy as np

    from benchmarks.suite.runner import machine, provenance
    from scanrl.harness.aggregate import summarize

    eval_return = [float(np.mean(r["eval_returns"])) for r in results]
    final = [float(np.mean([v for s, v in r["episodes"] if s > 0.9 * args.total_timesteps] or [np.nan]))
             for r in results]
    versions = subprocess.run([args.peer_python, "-c", "import importlib.metadata as m, json; print(json.dumps({p: "
                               f"m.version(p) for p in {PEER_PACKAGES!r}}}))"], capture_output=True, text=True)
    run = provenance(["python", *sys.argv])
    run.update(machine=machine(), peer_versions=json.loads(versions.stdout), wall_s=wall_s,
               finished=time.strftime("%Y-%m-%dT%H:%M:%S"), seeds=args.seeds)
    run["command"] = "python " + " ".join(os.path.relpath(a, ROOT) if os.path.isabs(a) and a.startswith(ROOT)
                                          else a for a in sys.argv)
    steps, rows = binned_curve(results, args.total_timesteps)
    own = {"td3": TD3_RECIPE | {"action_noise": "N(0, 0.1)"}, "sac": SAC_RECIPE,
           "crossq": CROSSQ_RECIPE | {"critic_width": args.critic_width}}[args.algo]
    out = {"config": {"peer": "sbx", "algo": args.algo, "task": args.task, "total_timesteps": args.total_timesteps,
                      "eval_episodes": args.eval_episodes, "parallel": args.parallel, "recipe": {**RECIPE, **own}},
           "summary": {"seeds": args.seeds, "eval_return": eval_return, "eval_return_iqm": summarize(eval_return),
                       "final_return": final, "train_s": [r["train_s"] for r in results], "wall_s": wall_s},
           "run": run, "curve": {"env_steps": steps, "episode_return": rows}}
    os.makedirs(args.records, exist_ok=True)
    width = f"-{args.critic_width}" if args.algo == "crossq" else ""
    # A sitting of other seeds of the same algorithm, task and budget is a record of its own (name.2.json, ...): the
    # report pools their seeds; a rerun of the same seeds replaces its sitting's record.
    stem = os.path.join(args.records, f"sbx-{args.algo}{width}-{args.task}-{args.total_timesteps // 1000}k")
    for path in (f"{stem}.json" if n == 1 else f"{stem}.{n}.json" for n in itertools.count(1)):
        if not os.path.exists(path) or set(json.load(open(path))["summary"]["seeds"]) & set(args.seeds):
            break
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    iqm = out["summary"]["eval_return_iqm"]
    print(f"sbx {args.algo} on {args.task}: eval IQM {iqm['iqm']:.1f} [{iqm['ci'][0]:.1f}, {iqm['ci'][1]:.1f}] over "
          f"{len(results)} seeds, {wall_s:.0f} s wall ({args.parallel} at a time); written to {path}")


def main(argv):
    args = parse_args(argv)
    if args.peer_runner:
        return peer_runner(json.loads(args.peer_runner))
    if args.report:
        sys.path.insert(0, ROOT)
        from benchmarks.studies.mujoco_report import write_report

        return write_report(args.records)
    results, wall_s = train_seeds(args)
    record(args, results, wall_s)


if __name__ == "__main__":
    main(sys.argv[1:])
