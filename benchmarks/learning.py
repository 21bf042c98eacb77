"""Learning results across the gymnax suite, reported the way the field reports them (rliable: Agarwal et al. 2021):
per entry the interquartile mean (IQM) over seeds with a 95% stratified-bootstrap interval, next to the published
reference, learning curves and performance profiles per algorithm.

A suite is a list of entries (script, env, env-step budget, seeds, flags, published reference, normalisation range).
Each entry runs its script in a subprocess as a user would, and the run directories are the record:

    python ppo.py --env CartPole-v1 --total-timesteps 500000 --num-seeds 10 --seed 0 \\
        --out-dir runs/learning/quick --run-name ppo-CartPole-v1

    python benchmarks/learning.py --suite quick                       # under 20 min on our 2-core CPU
    python benchmarks/learning.py --suite full --only ppo-Breakout-MinAtar,dqn-Breakout-MinAtar --record
    python benchmarks/learning.py --suite quick --report-only         # rebuild table and plots from the runs
    python benchmarks/learning.py --suite quick --random-scores       # measure the random-policy scores

An entry whose run directory holds summary.json is not run again; one whose run stopped before its summary (Ctrl-C,
a kill) is continued with the script's `--resume`. A run directory made with another env, budget, seed count, seed or
value of one of the entry's flags is refused (exit 2): delete it or choose another --out-dir. Run directories go to
runs/learning/<suite>/ (git-ignored). Entries marked GPU-only are skipped, with a message, where JAX sees no GPU.

A full run (neither --only nor --out-dir), or any run given --record, also writes the committed files: each finished
run's record, benchmarks/results/records/<suite>/<entry>.json (its config, summary, wall time and binned curve, a few
KB: commit it), and, once every entry has finished, the report benchmarks/results/learning_<suite>.md. Run
directories live on one machine, and a suite of hours spans sessions and machines: an entry with a record is finished
too, and the report reads the record where the run directory is gone. A run with --only or --out-dir and without
--record writes no record and puts its report beside the run directories, so one machine's partial result never
stands for an entry everywhere (with the default out dir it still reads the committed records). What is committed
names paths relative to the repository: a record's config keeps its paths relative to the repository (a folder
outside it as null), a committed report names no folder outside it. A record that cannot be read or is not of a
record's shape is refused with one line naming it and what is wrong (exit 2), never skipped: skipping it would
rerun hours of training, or drop the entry from the table, without a word. Every file the runner writes goes through
scanrl.harness.files.replaced (atomic, never through a link planted at its name).

The report comes with, per algorithm, learning_<suite>_<algo>_curves.png (IQM of the episode return over seeds
against env steps, 95% band, one panel per env) and learning_<suite>_<algo>_profile.png (the fraction of runs above
each normalised score, over the algorithm's envs). Exit 1 if an entry failed.
"""

import csv
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import numpy as np
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scanrl.harness import aggregate  # noqa: E402
from scanrl.harness.files import replaced  # noqa: E402

# The name each script writes into config.json's "algo", by the suite's algorithm label.
SCRIPT_ALGO = {"ppo": "ppo", "ppo_rnn": "ppo_rnn", "dqn": "dqn_tabular_q", "pqn": "pqn", "vpg": "reinforce",
               "td3": "td3", "tabular_q": "dqn_tabular_q"}
MACHINE_FILE = "learning_suite.json"  # what the runner adds to a finished run directory: machine and wall time
CURVE_POINTS = 100  # learning curves are binned to at most this many points
CURVE_REPS = aggregate.PROFILE_REPS  # bootstrap replications per curve band (2,000, as rliable's profiles)


@dataclass(frozen=True)
class Reference:
    """A published result to put next to ours: `value` (None: none found) as `text` gives it, and where from."""

    value: float | None
    text: str
    source: str


NONE_FOUND = Reference(None, "none found", "")


@dataclass(frozen=True)
class Entry:
    """One line of a suite: a script trained on an env with a budget, and what to compare it with."""

    name: str
    """run directory name and --only name, one path component"""
    algo: str
    """ppo, dqn, pqn, vpg, td3 or tabular_q: the plots and the aggregate rows group by it"""
    script: str
    """the script that trains it, run from the repository root"""
    env: str
    total_timesteps: int
    """env steps per seed (--total-timesteps)"""
    num_seeds: int
    flags: tuple[str, ...] = ()
    """the script's flags beyond --env, --total-timesteps, --num-seeds, --seed, --out-dir and --run-name"""
    reference: Reference = NONE_FOUND
    low: float | None = None
    """normalised score 0 (a uniformly random policy's mean return); None leaves the entry out of the profiles"""
    high: float | None = None
    """normalised score 1 (a published or "solved" score); None: the best eval IQM on this env in the report"""
    range_source: str = ""
    """where `high` comes from"""
    gpu_only: bool = False
    """skipped, with a message, where JAX sees no GPU"""
    seed: int = 0
    """--seed: the entry's seeds are seed, seed + 1, ..."""
    sampled_episodes: int = 0
    """above 0: once trained, the final policies are also evaluated with --eval-sampled (actions sampled, as in
    training) on this many episodes per seed, for a published figure of that kind; the report adds its column"""


# Normalisation per env: (low, high, where high comes from). low: a uniformly random policy's mean return over 1,000
# episodes, measured with `python benchmarks/learning.py --suite full --random-scores` (seed 0, 2026-11-24; Brax
# HalfCheetah over 100 episodes, `--random-episodes 100`; Craftax-Classic over 200, `--only
# ppo-Craftax-Classic-Symbolic-v1 --random-episodes 200`, 1.58 ± 1.38; Seaquest with `--suite minatar`).
# high: gymnasium's reward_threshold ("solved") where the env has one, else the published return we compare with;
# None where there is neither: the report then takes the best eval IQM on that env among its entries, and says so.
SCORE_RANGES = {
    "CartPole-v1": (22.05, 475.0, "gymnasium reward_threshold"),
    "Acrobot-v1": (-498.5, -100.0, "gymnasium reward_threshold"),
    "MountainCar-v0": (-200.0, -110.0, "gymnasium reward_threshold"),
    "MountainCarContinuous-v0": (-33.18, 90.0, "gymnasium reward_threshold"),
    "Pendulum-v1": (-1221.0, -130.0, "gymnax README: gymnax-blines PPO/ES checkpoint"),
    "CartPole-v1-masked": (22.05, 475.0, "CartPole-v1's (the same dynamics and rewards, fewer observations)"),
    "MemoryChain-bsuite": (0.004, 1.0, "the optimum: +1 for the right answer (a guess scores 0 on average)"),
    "Asterix-MinAtar": (0.448, None, "best eval IQM in this report"),
    "Breakout-MinAtar": (0.408, None, "best eval IQM in this report"),
    "Freeway-MinAtar": (0.397, None, "best eval IQM in this report"),
    "SpaceInvaders-MinAtar": (4.074, None, "best eval IQM in this report"),
    "Seaquest-MinAtar": (0.104, None, "best eval IQM in this report"),
    "MiniGrid-Empty-8x8": (0.111, 0.961, "the optimum: 11 steps to the goal, 1 - 0.9 * 11 / 256"),
    "Craftax-Classic-Symbolic-v1": (1.58, 22.0, "its most: 22 achievements, +1 each the first time (the health "
                                    "rewards add up to at most 0)"),
    "playground/CartpoleBalance": (358.0, 1000.0, "the most an episode can earn: 1,000 steps of reward 1 at most"),
    "GridWorld-v0": (0.226, 1.0, "the optimum: reward 1 at the goal (scanrl/envs/gridworld.py)"),
    "FrozenLake-misc": (0.016, 0.7, "gymnasium reward_threshold of FrozenLake-v1 (4x4, slippery)"),
    "brax/halfcheetah:mjx": (-283.5, None, "best eval IQM in this report"),
}


def entry(name, algo, script, env, total_timesteps, num_seeds, flags=(), reference=NONE_FOUND, **kwargs) -> Entry:
    """An Entry with its env's normalisation range from SCORE_RANGES."""
    low, high, source = SCORE_RANGES.get(env, (None, None, ""))
    return Entry(name, algo, script, env, total_timesteps, num_seeds, tuple(flags), reference, low, high, source,
                 **kwargs)


def cleanrl(value, text, script, steps="500k steps"):
    """A CleanRL benchmark table's figure (mean ± std over seeds of the episodic return, end of training)."""
    return Reference(value, text, f"CleanRL docs, {script}, {steps} (docs.cleanrl.dev)")


# ppo.py on Pendulum: tests/test_ppo.py's flags (learns to about -200 in 300k steps here).
PPO_PENDULUM = ("--num-envs", "16", "--num-steps", "128", "--num-minibatches", "32", "--update-epochs", "10",
                "--learning-rate", "1e-3", "--ent-coef", "0")
# ppo.py on MountainCarContinuous: gymnax-blines' PPO config (agents/MountainCarContinuous-v0/ppo.yaml), on ppo.py's
# 64-64 tanh MLPs (gymnax-blines': ReLU); it scores above gymnax-blines' 92 with them.
PPO_GYMNAX_BLINES_CONTINUOUS = ("--num-envs", "32", "--num-steps", "16", "--num-minibatches", "4", "--update-epochs",
                                "4", "--learning-rate", "5e-4", "--no-anneal-lr", "--max-grad-norm", "1.0")
# ppo.py on MinAtar: gymnax-blines' PPO config (agents/<game>/ppo.yaml: 64 envs x 128 steps, 8 minibatches, 4 epochs,
# constant lr 5e-4, gamma 0.999; utils/models.py: separate 256-256 ReLU MLPs on the flattened frame). Its "5% warm-up"
# is a linear schedule from lr_begin to lr_end, both 5e-4 (utils/ppo.py), so the lr is constant there too.
PPO_MINATAR = ("--num-envs", "64", "--num-steps", "128", "--num-minibatches", "8", "--update-epochs", "4",
               "--learning-rate", "5e-4", "--no-anneal-lr", "--gamma", "0.999", "--hidden-size", "256",
               "--activation", "relu")
# DQN on MinAtar: the MinAtar paper's DQN (kenjyoung/MinAtar examples/dqn.py: one env, an update every step, batch 32,
# buffer 100k, target every 1,000 steps, 5,000 warm-up steps, epsilon 1 to 0.1 over 100k of 5M steps, Huber loss,
# no lr decay). Its network is a small conv net; dqn_tabular_q.py's is an MLP on the flattened frame.
DQN_MINATAR = ("--agent", "dqn", "--num-envs", "1", "--train-frequency", "1", "--batch-size", "32", "--buffer-size",
               "100000", "--target-network-frequency", "1000", "--learning-starts", "5000", "--start-e", "1",
               "--end-e", "0.1", "--exploration-fraction", "0.02", "--loss", "huber")
# PQN on MinAtar: purejaxql's config (purejaxql/config/alg/pqn_minatar.yaml: 128 envs x 32 steps, 32 minibatches,
# 2 epochs, lr 5e-4, lambda 0.65, epsilon 1 to 0.05 over 10%).
PQN_MINATAR = ("--num-envs", "128", "--num-steps", "32", "--num-minibatches", "32",
               "--update-epochs", "2", "--learning-rate", "5e-4", "--q-lambda", "0.65", "--exploration-fraction", "0.1")
# td3.py on Brax HalfCheetah: the paper's setting (README: one env, one update per step, 10k random steps).
TD3_PAPER = ("--num-envs", "1", "--updates-per-step", "1", "--learning-starts", "10000", "--log-every", "5000")

PPO_CARTPOLE = cleanrl(490.04, "490.04 ± 6.12", "ppo.py")
PPO_ACROBOT = cleanrl(-86.36, "-86.36 ± 1.32", "ppo.py")
PPO_MOUNTAINCAR = cleanrl(-200.0, "-200.00 ± 0.00", "ppo.py")
DQN_CARTPOLE = cleanrl(488.69, "488.69 ± 16.11", "dqn.py")
DQN_ACROBOT = cleanrl(-91.54, "-91.54 ± 7.20", "dqn.py")
DQN_MOUNTAINCAR = cleanrl(-194.95, "-194.95 ± 8.48", "dqn.py")
PQN_CARTPOLE = cleanrl(495.13, "495.13 ± 6.89", "pqn.py")
PQN_ACROBOT = cleanrl(-95.63, "-95.63 ± 5.73", "pqn.py")
PQN_MOUNTAINCAR = cleanrl(-200.0, "-200.00 ± 0.00", "pqn.py")
GYMNAX_PENDULUM = Reference(-130.0, "-130", "gymnax README: gymnax-blines PPO/ES checkpoint, 1M steps")
GYMNAX_MCC = Reference(92.0, "92", "gymnax README: gymnax-blines PPO/ES checkpoint, 1M steps")
TD3_HALFCHEETAH = Reference(9636.95, "9636.95 ± 859.07", "Fujimoto et al. 2018, Table 1: MuJoCo HalfCheetah-v1, "
                            "max average return, 10 trials of 1M steps (another simulator than Brax)")
TD3_PENDULUM = Reference(-151.855, "-151.86 ± 90.23", "rl-baselines3-zoo benchmark.md: SB3 TD3 (1 update a step), "
                         "20k steps, one run, std over 750 eval episodes")
GRIDWORLD_OPTIMUM = Reference(1.0, "none found (optimum 1.0)", "scanrl/envs/gridworld.py: reward 1 at the goal")
FROZENLAKE_SOLVED = Reference(0.7, "0.70 (solved)", "gymnasium FrozenLake-v1 reward_threshold (4x4, slippery)")
MEMORY_CHAIN_OPTIMUM = Reference(1.0, "none found (optimum 1.0)", "gymnax MemoryChain-bsuite: +1 right, -1 wrong")
MASKED_NONE = Reference(None, "none found", "POPGym's StatelessCartPole (Morad et al. 2023) has other episode "
                        "lengths and a normalised score: no published return for a 500-step CartPole without "
                        "velocities")
MINATAR_NONE = Reference(None, "none found", "MinAtar and PQN papers: curves only")
# gymnax-blines evaluates its PPO checkpoints' sampled policies (utils/ppo.py: pi.sample), over num_test_rollouts = 164
# episodes (agents/<game>/ppo.yaml): the entries compared with them are evaluated so too (Entry.sampled_episodes).
GYMNAX_EPISODES = 164
# gymnax README's environment table: gymnax-blines' PPO checkpoints (agents/<game>/ppo.yaml: 10M steps), "R: <return>".
GYMNAX_MINATAR = {game: Reference(value, f"{value:g}", "gymnax README: gymnax-blines PPO checkpoint, 10M steps")
                  for game, value in (("Asterix", 15.0), ("Breakout", 28.0), ("Freeway", 58.0),
                                      ("SpaceInvaders", 131.0))}
MINATAR_GAMES = ("Breakout", "SpaceInvaders", "Asterix", "Freeway", "Seaquest")
# The optional suites (issue 26).
MINIGRID_OPTIMUM = Reference(None, "none found", "XLand-MiniGrid publishes no single-task PPO returns; the optimum on "
                             "Empty-8x8 is 0.961 (11 steps: 1 - 0.9 * 11 / 256)")
PLAYGROUND_NONE = Reference(None, "none found", "MuJoCo Playground reports PPO at 60M steps (2,048 envs), as curves")
# ppo.py on Playground's CartpoleBalance: Pendulum's flags with Playground's discount (dm_control_suite_params.py).
PPO_PLAYGROUND = (*PPO_PENDULUM, "--gamma", "0.995")
# ppo.py on Craftax-Classic at Craftax's 1M budget: Craftax_Baselines' ppo.py (lr 2e-4, 4 epochs, 8 minibatches,
# GAE lambda 0.8, grad norm 1.0, tanh) in the shape of its 1M sweeps (sweeps/*_1m.yaml: 256 envs x 16 steps); its
# 512-wide layers halved for this CPU.
PPO_CRAFTAX_1M = ("--num-envs", "256", "--num-steps", "16", "--num-minibatches", "8", "--update-epochs", "4",
                  "--learning-rate", "2e-4", "--gae-lambda", "0.8", "--max-grad-norm", "1.0", "--hidden-size", "256")
# The full suite's entries run 10 seeds but for these: (seeds, why).
FEWER_SEEDS = {"ppo-Craftax-Classic-Symbolic-v1": (4, "4 seeds x 1M steps took 31 min of training on our 2-core CPU")}
CRAFTAX_NONE = Reference(None, "none found", "Craftax publishes PPO at 1M for full Craftax only (2.2% of its 226); "
                         "Crafter's PPO (pixels, stable-baselines3) scores 4.2 ± 1.2 at 1M (Crafter README)")

SUITES = {
    # Under 20 min on our 2-core CPU: CleanRL's 500k-step budgets on classic control, the learning tests' budgets
    # elsewhere, 10 seeds each (the README gives the time it took).
    # Issue 18's suite, 10 seeds each; budgets from the published sources named beside them.
    "full": (
        # CleanRL ppo.py, classic control: 500k (its default --total-timesteps, benchmark/ppo.sh).
        entry("ppo-CartPole-v1", "ppo", "ppo.py", "CartPole-v1", 500_000, 10, (), PPO_CARTPOLE),
        entry("ppo-Acrobot-v1", "ppo", "ppo.py", "Acrobot-v1", 500_000, 10, (), PPO_ACROBOT),
        entry("ppo-MountainCar-v0", "ppo", "ppo.py", "MountainCar-v0", 500_000, 10, (), PPO_MOUNTAINCAR),
        # gymnax-blines PPO, Pendulum and MountainCarContinuous: 1M (agents/<env>/ppo.yaml num_train_steps).
        entry("ppo-Pendulum-v1", "ppo", "ppo.py", "Pendulum-v1", 1_000_000, 10, PPO_PENDULUM, GYMNAX_PENDULUM),
        entry("ppo-MountainCarContinuous-v0", "ppo", "ppo.py", "MountainCarContinuous-v0", 1_000_000, 10,
              PPO_GYMNAX_BLINES_CONTINUOUS, GYMNAX_MCC),
        # gymnax-blines PPO and purejaxql's PPO on MinAtar: 10M (ppo.yaml num_train_steps, ppo_minatar.yaml).
        *(entry(f"ppo-{game}-MinAtar", "ppo", "ppo.py", f"{game}-MinAtar", 10_000_000, 10, PPO_MINATAR,
                GYMNAX_MINATAR[game], sampled_episodes=GYMNAX_EPISODES)
          for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders")),
        # ppo_rnn.py on tasks that need memory: its default budget (500k) on the masked CartPole, 100k on MemoryChain.
        entry("ppo_rnn-CartPole-v1-masked", "ppo_rnn", "ppo_rnn.py", "CartPole-v1-masked", 500_000, 10, (),
              MASKED_NONE),
        entry("ppo_rnn-MemoryChain-bsuite", "ppo_rnn", "ppo_rnn.py", "MemoryChain-bsuite", 100_000, 10, (),
              MEMORY_CHAIN_OPTIMUM),
        # CleanRL dqn.py and pqn.py, classic control: 500k (their default --total-timesteps).
        *(entry(f"dqn-{env}", "dqn", "dqn_tabular_q.py", env, 500_000, 10, ("--agent", "dqn"), reference)
          for env, reference in (("CartPole-v1", DQN_CARTPOLE), ("Acrobot-v1", DQN_ACROBOT),
                                 ("MountainCar-v0", DQN_MOUNTAINCAR))),
        # The MinAtar paper's DQN: 5M frames (examples/dqn.py NUM_FRAMES; MinAtar skips no frames: 5M env steps).
        *(entry(f"dqn-{game}-MinAtar", "dqn", "dqn_tabular_q.py", f"{game}-MinAtar", 5_000_000, 10, DQN_MINATAR,
                MINATAR_NONE) for game in ("Breakout", "SpaceInvaders")),
        *(entry(f"pqn-{env}", "pqn", "pqn.py", env, 500_000, 10, (), reference)
          for env, reference in (("CartPole-v1", PQN_CARTPOLE), ("Acrobot-v1", PQN_ACROBOT),
                                 ("MountainCar-v0", PQN_MOUNTAINCAR))),
        # purejaxql PQN on MinAtar: 10M (pqn_minatar.yaml TOTAL_TIMESTEPS).
        *(entry(f"pqn-{game}-MinAtar", "pqn", "pqn.py", f"{game}-MinAtar", 10_000_000, 10, PQN_MINATAR,
                MINATAR_NONE) for game in ("Breakout", "SpaceInvaders")),
        # VPG: SpinningUp benchmarks only MuJoCo; no published classic-control budget, so CleanRL's 500k there and
        # gymnax-blines' 1M on Pendulum (README's Pendulum flags).
        entry("vpg-CartPole-v1", "vpg", "reinforce.py", "CartPole-v1", 500_000, 10),
        entry("vpg-Acrobot-v1", "vpg", "reinforce.py", "Acrobot-v1", 500_000, 10),
        entry("vpg-Pendulum-v1", "vpg", "reinforce.py", "Pendulum-v1", 1_000_000, 10,
              ("--num-envs", "16", "--pi-lr", "2e-3")),
        # TD3: td3.py's default 50k on Pendulum (the quick suite: rl-baselines3-zoo's 20k, its published figure) and
        # gymnax-blines' 1M on MountainCarContinuous. HalfCheetah: the paper's 1M, on a GPU only.
        entry("td3-Pendulum-v1", "td3", "td3.py", "Pendulum-v1", 50_000, 10, (), TD3_PENDULUM),
        entry("td3-MountainCarContinuous-v0", "td3", "td3.py", "MountainCarContinuous-v0", 1_000_000, 10),
        entry("td3-brax-halfcheetah", "td3", "td3.py", "brax/halfcheetah:mjx", 1_000_000, 10, TD3_PAPER,
              TD3_HALFCHEETAH, gpu_only=True),
        # The optional suites, at budgets a 2-core CPU finishes (none has a published figure at them).
        entry("ppo-MiniGrid-Empty-8x8", "ppo", "ppo.py", "MiniGrid-Empty-8x8", 200_000, 10, ("--num-envs", "16"),
              MINIGRID_OPTIMUM),
        entry("ppo-playground-CartpoleBalance", "ppo", "ppo.py", "playground/CartpoleBalance", 1_000_000, 10,
              PPO_PLAYGROUND, PLAYGROUND_NONE),
        entry("ppo-Craftax-Classic-Symbolic-v1", "ppo", "ppo.py", "Craftax-Classic-Symbolic-v1", 1_000_000,
              FEWER_SEEDS["ppo-Craftax-Classic-Symbolic-v1"][0], PPO_CRAFTAX_1M, CRAFTAX_NONE),
        # Tabular Q: no published budget; 1M, which its learning test shows is enough on GridWorld.
        entry("tabular-GridWorld-v0", "tabular_q", "dqn_tabular_q.py", "GridWorld-v0", 1_000_000, 10,
              ("--agent", "tabular"), GRIDWORLD_OPTIMUM),
        entry("tabular-FrozenLake-misc", "tabular_q", "dqn_tabular_q.py", "FrozenLake-misc", 1_000_000, 10,
              ("--agent", "tabular"), FROZENLAKE_SOLVED),
    ),
}

# Under 20 min on our 2-core CPU: the full suite's classic-control entries, 10 seeds each, at the full suite's budgets
# but for three taken from the learning tests (the README gives the time it took); MinAtar, TD3 on
# MountainCarContinuous and Brax are what a CPU cannot afford here.
QUICK_BUDGETS = {
    "ppo-CartPole-v1": None, "ppo-Acrobot-v1": None, "ppo-Pendulum-v1": 300_000, "dqn-CartPole-v1": None,
    "dqn-Acrobot-v1": None, "pqn-CartPole-v1": None, "pqn-Acrobot-v1": None, "vpg-CartPole-v1": 200_000,
    "td3-Pendulum-v1": 20_000, "tabular-GridWorld-v0": None, "ppo-MountainCar-v0": None,
    "ppo-MountainCarContinuous-v0": None, "dqn-MountainCar-v0": None, "pqn-MountainCar-v0": None,
    "vpg-Acrobot-v1": None, "tabular-FrozenLake-misc": None, "ppo_rnn-CartPole-v1-masked": None,
    "ppo_rnn-MemoryChain-bsuite": None, "ppo-MiniGrid-Empty-8x8": None,
}
_FULL = {e.name: e for e in SUITES["full"]}
SUITES["quick"] = tuple(dataclasses.replace(_FULL[name], total_timesteps=steps or _FULL[name].total_timesteps)
                        for name, steps in QUICK_BUDGETS.items())
# MinAtar at the field's budget (issue 30): 10M env steps per seed, every game, the full suite's configurations.
# ppo.py first on every game (6 seeds: 5 would not divide over the 2 devices and train on one; 66 min a game here, at
# 15k env steps/s over the 6 agents), the published column and the requirement, then PQN (10 seeds, about
# 25 min a game). The MinAtar paper's DQN (5M steps, one env, an update per step) runs at 4.9k env steps/s here with 6
# seeds: 1.7 h a game, so it is not in this suite.
SUITES["minatar"] = (
    *(entry(f"ppo-{game}-MinAtar", "ppo", "ppo.py", f"{game}-MinAtar", 10_000_000, 6, PPO_MINATAR,
            GYMNAX_MINATAR.get(game, MINATAR_NONE), sampled_episodes=GYMNAX_EPISODES) for game in MINATAR_GAMES),
    *(entry(f"pqn-{game}-MinAtar", "pqn", "pqn.py", f"{game}-MinAtar", 10_000_000, 10, PQN_MINATAR, MINATAR_NONE)
      for game in MINATAR_GAMES),
)
# Memory (ppo_rnn.py, issue 25; about 7 min here): the quick suite's entries on tasks that need memory, and ppo.py on
# the masked CartPole beside them to show what memory buys (in no other suite: a task it cannot solve by design would
# weigh in ppo's aggregate score there).
SUITES["memory"] = (
    *(e for e in SUITES["quick"] if e.env.endswith("-masked") or e.env == "MemoryChain-bsuite"),
    entry("ppo-CartPole-v1-masked", "ppo", "ppo.py", "CartPole-v1-masked", 500_000, 10, (), MASKED_NONE),
)


@dataclass(frozen=True)
class Args:
    suite: str = "quick"
    """which suite: quick (CPU, under 20 min), memory (its ppo_rnn.py entries), minatar (10M steps per seed: hours)
    or full (issue 18's, GPU-sized)"""
    suite_file: str | None = None
    """a JSON suite instead: {"name": ..., "entries": [{Entry fields}, ...]} (reference: {value, text, source})"""
    only: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """run just these entries (repeat the flag, or give a comma list); the report still shows every finished one"""
    out_dir: str | None = None
    """parent of the run directories; default runs/learning/<suite>"""
    results: str | None = None
    """the markdown report; the PNGs go beside it; default benchmarks/results/learning_<suite>.md when the run writes
    the committed files (see --record) and every entry has finished, else <out-dir>/learning_<suite>.md (a partial
    report never replaces the committed table)"""
    record: bool = False
    """write the committed files, benchmarks/results/records/<suite>/<entry>.json and (once every entry has finished)
    benchmarks/results/learning_<suite>.md, even with --only or --out-dir. Without it only a full run (neither --only
    nor --out-dir) writes them: one machine's partial run never stands for an entry everywhere"""
    records: str | None = None
    """where each finished entry's record goes (config, summary, wall time and binned curve: all the report needs,
    a few KB), one JSON file per entry; default benchmarks/results/records/<suite> (to be committed), read whenever
    --out-dir is not given and written by a full run or with --record; with --out-dir and without --record, none.
    An entry with a record is finished: not rerun, and reported from it when its run directory is gone (another
    machine, a clean clone). A record that cannot be read, or is not of a record's shape, is refused with one line
    (exit 2): it stands for hours of training, so it is never skipped in silence"""
    report_only: bool = False
    """run nothing: rebuild the report from the run directories and records there are"""
    random_scores: bool = False
    """run nothing: print a uniformly random policy's mean return on each env of the (selected) entries"""
    random_episodes: int = 1000
    """episodes per env for --random-scores"""


class SuiteError(Exception):
    """A suite, a name or a run directory that cannot be used: one line, exit 2."""


# ----------------------------------------------------------------------------------------------------------
# Suites


def load_suite_file(path) -> tuple[str, tuple[Entry, ...]]:
    """-> (suite name, entries) of a JSON suite file; SuiteError if it cannot be read."""
    try:
        with open(path) as f:
            data = json.load(f)
        entries = []
        for item in data["entries"]:
            fields = dict(item)
            if isinstance(fields.get("reference"), dict):
                fields["reference"] = Reference(**fields["reference"])
            fields["flags"] = tuple(fields.get("flags", ()))
            if "low" not in fields and "high" not in fields:
                low, high, source = SCORE_RANGES.get(fields.get("env"), (None, None, ""))
                fields.update(low=low, high=high, range_source=source)
            entries.append(Entry(**fields))
        name = data.get("name") or os.path.splitext(os.path.basename(path))[0]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SuiteError(f"--suite-file {path}: {error}") from None
    return name, tuple(entries)


def check_args(args):
    """SuiteError for --random-episodes below 1 (a table of nan) and an --out-dir that is, or lies in, a file."""
    if args.random_episodes < 1:
        raise SuiteError(f"--random-episodes must be a positive integer, got {args.random_episodes}")
    if args.out_dir is not None:
        existing = os.path.abspath(args.out_dir)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise SuiteError(f"--out-dir {args.out_dir}: {existing} is a file, not a directory; choose another "
                             "--out-dir")


def check_entries(entries):
    """SuiteError unless the names are distinct directory names and each algo label is known."""
    names = [e.name for e in entries]
    for e in entries:
        if not e.name or "/" in e.name or e.name in (".", ".."):
            raise SuiteError(f"entry name {e.name!r} must be one directory name")
        if e.algo not in SCRIPT_ALGO:
            raise SuiteError(f"entry {e.name}: algo {e.algo!r} is not one of {', '.join(SCRIPT_ALGO)}")
    if len(set(names)) < len(names):
        raise SuiteError(f"entry names repeat: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")


def select(entries, only) -> tuple[Entry, ...]:
    """The entries named by --only (comma lists allowed), in suite order; all when none is named."""
    names = [n.strip() for item in only for n in item.split(",") if n.strip()]
    if not names:
        return entries
    known = {e.name for e in entries}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SuiteError(f"--only: unknown entry {', '.join(unknown)}; the suite has: "
                         f"{', '.join(e.name for e in entries)}")
    return tuple(e for e in entries if e.name in names)


# ----------------------------------------------------------------------------------------------------------
# Running the entries


def machine() -> dict:
    """This machine as the report names it: CPU model and cores, JAX's devices and version. JAX is asked in a
    subprocess, so this process never holds an accelerator the runs need."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    probe = ("import json, jax; d = jax.devices(); "
             "print(json.dumps({'backend': jax.default_backend(), 'devices': [x.device_kind for x in d]}))")
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
        jax_info = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        jax_info = {"backend": "unknown", "devices": []}
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), **jax_info,
            "jax": importlib.metadata.version("jax"), "python": sys.version.split()[0]}


def describe_machine(m: dict) -> str:
    devices = m.get("devices") or []
    accel = "" if m.get("backend") in ("cpu", None) else f", {len(devices)} x {devices[0] if devices else '?'}"
    return f"{m['cpu']} ({m['cores']} cores){accel}, jax {m['jax']} ({m.get('backend', '?')})"


def flag_settings(flags, config: dict) -> dict:
    """An entry's flags as {config field: value as written}, for the fields `config` has: "--a-b V" or "--a-b=V" ->
    a_b: "V", "--a-b V W" -> a_b: ["V", "W"], "--a-b" -> a_b: True, "--no-a-b" -> a_b: False."""
    settings, i = {}, 0
    while i < len(flags):
        name, equals, value = flags[i].removeprefix("--").partition("=")
        name, values = name.replace("-", "_"), [value] if equals else []
        i += 1
        while i < len(flags) and not flags[i].startswith("--"):
            values.append(flags[i])
            i += 1
        if values:
            settings[name] = values if isinstance(config.get(name), list) else values[0]
        elif name.startswith("no_") and name not in config:
            settings[name[3:]] = False
        else:
            settings[name] = True
    return {k: v for k, v in settings.items() if k in config}


def same_setting(saved, written) -> bool:
    """Whether a config.json value is the value a flag wrote (5e-4 and 0.0005 are the same)."""
    if isinstance(saved, list) and isinstance(written, list):
        return len(saved) == len(written) and all(map(same_setting, saved, written))
    if isinstance(saved, bool) or isinstance(written, bool):
        return saved == written
    try:
        return float(saved) == float(written)
    except (TypeError, ValueError):
        return str(saved) == str(written)


def check_run_dir(e: Entry, run_dir):
    """SuiteError if an existing run directory was made for other settings than the entry's."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return  # no config: the run never started; the script refuses or resumes it as it sees fit
    check_config(e, config, run_dir)


def check_config(e: Entry, config: dict, where):
    """SuiteError if a run's config.json (of a run directory or a record at `where`) has other settings than the
    entry's."""
    wanted = {"algo": SCRIPT_ALGO[e.algo], "env": e.env, "total_timesteps": e.total_timesteps,
              "num_seeds": e.num_seeds, "seed": e.seed}
    differ = [f"{k} {config.get(k)!r} (suite: {v!r})" for k, v in wanted.items() if config.get(k) != v]
    differ += [f"--{k.replace('_', '-')} {config[k]!r} (suite: {v!r})"
               for k, v in flag_settings(e.flags, config).items() if not same_setting(config[k], v)]
    if differ:
        raise SuiteError(f"{shown(where)} was made with {', '.join(differ)}: delete it, or use another "
                         f"{'--records' if where.endswith('.json') else '--out-dir'}")


def command(e: Entry, out_dir, run_dir) -> list[str]:
    """The script's command line for an entry: a fresh run, or --resume of its run directory."""
    if os.path.isdir(run_dir) and os.listdir(run_dir):
        return [sys.executable, e.script, "--resume", run_dir]
    return [sys.executable, e.script, "--env", e.env, "--total-timesteps", str(e.total_timesteps), "--num-seeds",
            str(e.num_seeds), "--seed", str(e.seed), "--out-dir", out_dir, "--run-name", e.name, *e.flags]


def evaluate_sampled(e: Entry, run_dir, head) -> bool:
    """Adds the final policies' returns with actions sampled (`--eval-sampled`, `e.sampled_episodes` episodes per
    seed) to the run's MACHINE_FILE, unless it holds them already or the entry asks for none; False if it failed."""
    path = os.path.join(run_dir, MACHINE_FILE)
    run = {}
    if os.path.exists(path):
        with open(path) as f:
            run = json.load(f)
    if e.sampled_episodes <= 0 or run.get("sampled_eval", {}).get("episodes") == e.sampled_episodes:
        return True
    cmd = [sys.executable, e.script, "--eval", run_dir, "--eval-sampled", "--eval-episodes", str(e.sampled_episodes)]
    print(f"{head}: the sampled policies, {e.sampled_episodes} episodes per seed: python {' '.join(cmd[1:])}",
          flush=True)
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    means = [float(m) for m in re.findall(r"^seed \S+ \(index \d+\): mean (\S+)", done.stdout, re.MULTILINE)]
    if done.returncode != 0 or len(means) != e.num_seeds:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        print(f"{head}: the sampled evaluation failed ({why})", flush=True)
        return False
    run["sampled_eval"] = {"episodes": e.sampled_episodes, "per_seed": means}
    with replaced(path) as f:
        json.dump(run, f, indent=2)
    print(f"{head}: sampled policies' mean return per seed: {' '.join(f'{m:.2f}' for m in means)}", flush=True)
    return True


def read_json(run_dir, name) -> dict:
    """A JSON file of a run directory; {} where there is none."""
    path = os.path.join(run_dir, name)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def record_path(records, e: Entry) -> str | None:
    return None if records is None else os.path.join(records, f"{e.name}.json")


def portable(value):
    """A value as a record keeps it: an absolute path inside the repository made relative to it, one outside it
    None (a folder of one machine), anything else as it is; dicts and lists item by item."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return os.path.relpath(value, ROOT) if inside_repository(value) else None
    return value


def write_record(e: Entry, run_dir, records) -> str:
    """A finished run's record: config.json, summary.json, the runner's MACHINE_FILE and the binned curve of
    metrics.csv, in one JSON file (NaN as null, paths relative to the repository: `portable`), written whole or not
    at all; -> its path."""
    steps, returns = read_curve(run_dir)
    record = {"config": portable(read_json(run_dir, "config.json")),
              "summary": portable(read_json(run_dir, "summary.json")),
              "run": portable(read_json(run_dir, MACHINE_FILE)),
              "curve": {"env_steps": steps.tolist(),
                        "episode_return": [[None if np.isnan(v) else v for v in row] for row in returns.tolist()]}}
    path = record_path(records, e)
    os.makedirs(records, exist_ok=True)
    with replaced(path) as f:
        json.dump(record, f, separators=(",", ":"))
    return path


def _kind(value) -> str:
    """A JSON value's kind, as a message names it."""
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _number(value, null=False) -> bool:
    return (null and value is None) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _numbers(value, null=False) -> bool:
    return isinstance(value, list) and all(_number(v, null) for v in value)


def record_problem(record) -> str | None:
    """What keeps a parsed record from being read (the fields the runner and the report use), in a few words; None
    if nothing does. Keys beyond these are let be."""
    if not isinstance(record, dict):
        return f"it holds {_kind(record)}, not an object"
    for key in ("config", "summary", "run", "curve"):
        if key not in record:
            return f'it has no "{key}"'
        if not isinstance(record[key], dict):
            return f'"{key}" is {_kind(record[key])}, not an object'
    summary, run, curve = record["summary"], record["run"], record["curve"]
    if summary:  # {}: a run that never finished, read as no record
        for key in ("eval_return", "final_return"):
            if key not in summary:
                return f'"summary" has no "{key}"'
            if not _numbers(summary[key], null=True):
                return (f'"summary.{key}" is {_kind(summary[key])}, not a list of numbers' if not
                        isinstance(summary[key], list) else f'"summary.{key}" holds other than numbers (or null)')
        for key, null in (("num_seeds", False), ("env_steps", False), ("train_s", True), ("compile_s", True)):
            if not _number(summary.get(key), null):
                return f'"summary" has no "{key}"' if key not in summary else \
                    f'"summary.{key}" is {_kind(summary[key])}, not a number'
    machine = run.get("machine")
    if machine:
        if not isinstance(machine, dict):
            return f'"run.machine" is {_kind(machine)}, not an object'
        for key in ("cpu", "cores", "jax"):
            if key not in machine:
                return f'"run.machine" has no "{key}"'
    sampled = run.get("sampled_eval")
    if sampled is not None and not (isinstance(sampled, dict) and _number(sampled.get("episodes"))
                                    and _numbers(sampled.get("per_seed"))):
        return '"run.sampled_eval" is not {"episodes": a number, "per_seed": a list of numbers}'
    steps, rows = curve.get("env_steps"), curve.get("episode_return")
    if not _numbers(steps):
        return '"curve.env_steps" is not a list of numbers'
    if not (isinstance(rows, list) and all(_numbers(row, null=True) and len(row) == len(steps) for row in rows)):
        return f'"curve.episode_return" is not a list of rows of {len(steps)} numbers (or null), one per seed'
    return None


def read_record(e: Entry, records) -> dict | None:
    """An entry's record, or None where there is none; SuiteError (one line naming the file and what is wrong) if
    it cannot be read, is not of a record's shape (`record_problem`) or was made for other settings. A record stands
    for a finished run, so a broken one is refused rather than skipped: skipping would rerun the entry, or leave it
    out of the report, without a word."""
    path = record_path(records, e)
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as error:
        problem = str(error)
    else:
        problem = record_problem(record)
    if problem:
        raise SuiteError(f"{shown(path)} cannot be read ({problem}): delete it to run {e.name} again")
    check_config(e, record["config"], path)
    return record if record["summary"] else None


def run_entries(entries, out_dir, records=None, write_records=True) -> list[str]:
    """Runs each entry that has neither a summary.json nor a record in `records` yet (fresh or resumed), recording
    each finished run there (None: none; `write_records` False: the records are read, not written); -> the names
    that failed."""
    os.makedirs(out_dir, exist_ok=True)
    for e in entries:  # refuse a mismatched directory or record before spending time on any run
        if os.path.isdir(os.path.join(out_dir, e.name)):
            check_run_dir(e, os.path.join(out_dir, e.name))
        read_record(e, records)
    failed, this_machine = [], None
    for i, e in enumerate(entries):
        run_dir = os.path.join(out_dir, e.name)
        head = f"[{i + 1}/{len(entries)}] {e.name}"
        if os.path.exists(os.path.join(run_dir, "summary.json")):
            print(f"{head}: finished before ({run_dir}/summary.json), not rerun", flush=True)
            if not evaluate_sampled(e, run_dir, head):
                failed.append(e.name)
            elif write_records and records is not None and \
                    (read_record(e, records) or {}).get("run") != portable(read_json(run_dir, MACHINE_FILE)):
                print(f"{head}: recorded in {shown(write_record(e, run_dir, records))}", flush=True)
            continue
        if read_record(e, records) is not None:
            print(f"{head}: finished before ({shown(record_path(records, e))}), not rerun", flush=True)
            continue
        this_machine = this_machine or machine()
        if e.gpu_only and this_machine.get("backend") != "gpu":
            print(f"{head}: skipped, it needs a GPU and JAX sees {this_machine.get('backend')} here", flush=True)
            continue
        missing = envs_missing(e.env)
        if missing:
            print(f"{head}: skipped, {missing}", flush=True)
            continue
        cmd = command(e, out_dir, run_dir)
        resumed = "--resume" in cmd
        print(f"{head}: {'resuming' if resumed else 'running'}: python {' '.join(cmd[1:])}", flush=True)
        start = time.perf_counter()
        process = subprocess.Popen(cmd, cwd=ROOT)
        try:
            code = process.wait()
        except KeyboardInterrupt:
            # The run got the Ctrl-C too: it stops where its chunk ends, with a checkpoint. Wait for that (a second
            # Ctrl-C stops both at once); the next invocation resumes it.
            print(f"{head}: stopping where its chunk ends (Ctrl-C again: at once)", flush=True)
            process.wait()
            raise
        wall_s = time.perf_counter() - start
        if code != 0 or not os.path.exists(os.path.join(run_dir, "summary.json")):
            print(f"{head}: failed (exit {code}); run this script again to resume it", flush=True)
            failed.append(e.name)
            continue
        with replaced(os.path.join(run_dir, MACHINE_FILE)) as f:
            json.dump({"machine": this_machine, "wall_s": wall_s, "resumed": resumed,
                       "finished": datetime.datetime.now().isoformat(timespec="seconds")}, f, indent=2)
        print(f"{head}: done in {wall_s:.0f} s", flush=True)
        if not evaluate_sampled(e, run_dir, head):
            failed.append(e.name)
        elif records is not None and write_records:
            print(f"{head}: recorded in {shown(write_record(e, run_dir, records))}", flush=True)
        elif records is not None:
            print(f"{head}: not recorded in {shown(records)} (a partial run: --record commits its record)",
                  flush=True)
    return failed


# The optional suites by id prefix: (package, requirements file). scanrl/envs/<suite>.py knows the same, but importing
# envs imports gymnax, which starts JAX in this process: the runs need the accelerator to themselves.
SUITE_PACKAGES = {"brax/": ("brax", "brax"), "playground/": ("mujoco_playground", "playground"),
                  "Craftax-": ("craftax", "craftax"), "MiniGrid-": ("xminigrid", "xminigrid")}


def envs_missing(env_id) -> str | None:
    """Why an entry's env cannot be made here (an optional suite not installed), or None."""
    for prefix, (package, suite) in SUITE_PACKAGES.items():
        if env_id.startswith(prefix) and importlib.util.find_spec(package) is None:
            return f"it needs {package}: pip install -r requirements-{suite}.txt"
    return None


def random_policy_returns(env_id, episodes, seed=0) -> np.ndarray:
    """The return of the first episode of `episodes` envs under uniformly random actions (gymnax's action-space
    sampling), through the scripts' env stack (`envs.make_vec`), as summary.json's eval_return is played."""
    import jax
    import jax.numpy as jnp

    from scanrl import envs

    env, params = envs.make_vec(env_id, episodes)
    space = env.action_space(params)

    @jax.jit
    def play(key):
        key_reset, key = jax.random.split(key)
        _, state = env.reset(key_reset, params)

        def step(carry, key):
            state, finished, returns = carry
            key_act, key_step = jax.random.split(key)
            action = jax.vmap(space.sample)(jax.random.split(key_act, episodes))
            _, state, _, _, _, info = env.step(key_step, state, action, params)
            first_end = info["episode_done"] & ~finished
            return (state, finished | info["episode_done"], jnp.where(first_end, info["episode_return"], returns)), None

        carry = (state, jnp.zeros(episodes, bool), jnp.full(episodes, jnp.nan, jnp.float32))
        (_, _, returns), _ = jax.lax.scan(step, carry, jax.random.split(key, params.max_steps_in_episode))
        return returns

    return np.asarray(play(jax.random.PRNGKey(seed)))


def print_random_scores(entries, episodes):
    """--random-scores: a markdown table of the random policy's returns on each env of the entries."""
    print("| env | random policy: mean return | std | episodes that ended |")
    print("|---|---:|---:|---:|")
    for env_id in dict.fromkeys(e.env for e in entries):
        returns = random_policy_returns(env_id, episodes)
        ended = returns[~np.isnan(returns)]
        print(f"| {env_id} | {ended.mean():.4g} | {ended.std():.4g} | {ended.size} of {episodes} |", flush=True)


# ----------------------------------------------------------------------------------------------------------
# Reading the run directories


@dataclass
class Result:
    """What the report needs of one finished entry."""

    entry: Entry
    source: str  # the run directory, or the record it was read from
    summary: dict
    extra: dict  # MACHINE_FILE's contents ({} for a run the runner did not finish)
    eval_return: np.ndarray  # per seed, NaN where undefined
    final_return: np.ndarray
    curve: tuple[np.ndarray, np.ndarray]  # read_curve's (env steps, (seeds, points) returns)


def read_result(e: Entry, out_dir, records=None) -> Result | None:
    """A finished entry from its run directory, or else from its record; None if neither is there."""
    run_dir = os.path.join(out_dir, e.name)
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        record = read_record(e, records)
        if record is None:
            return None
        summary, extra, source = record["summary"], record["run"], record_path(records, e)
        steps = np.array(record["curve"]["env_steps"], dtype=float)
        curve = (steps, np.array(record["curve"]["episode_return"], dtype=float).reshape(-1, steps.size))
    else:
        extra, source, curve = {}, run_dir, read_curve(run_dir)
        if os.path.exists(os.path.join(run_dir, MACHINE_FILE)):
            with open(os.path.join(run_dir, MACHINE_FILE)) as f:
                extra = json.load(f)

    def per_seed(key):
        return np.array([np.nan if v is None else v for v in summary[key]], dtype=float)

    return Result(e, source, summary, extra, per_seed("eval_return"), per_seed("final_return"), curve)


def read_curve(run_dir, points=CURVE_POINTS):
    """metrics.csv binned into at most `points` stretches of iterations: -> (env steps at each stretch's end,
    (seeds, points) mean return of the episodes that ended in it, NaN where none did)."""
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    seeds = sorted({int(r["seed"]) for r in rows})
    iterations = max(int(r["iteration"]) for r in rows)  # counted from 1
    returns = np.full((len(seeds), iterations), np.nan)
    episodes = np.zeros((len(seeds), iterations))
    steps = np.zeros(iterations)
    where = {s: i for i, s in enumerate(seeds)}
    for r in rows:
        i, u = where[int(r["seed"])], int(r["iteration"]) - 1
        returns[i, u], episodes[i, u], steps[u] = float(r["episode_return"]), float(r["episodes"]), \
            float(r["env_steps"])
    edges = np.linspace(0, iterations, min(points, iterations) + 1).astype(int)
    total = np.add.reduceat(np.nan_to_num(returns) * episodes, edges[:-1], axis=1)
    count = np.add.reduceat(episodes, edges[:-1], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        binned = np.where(count > 0, total / count, np.nan)
    return steps[edges[1:] - 1], binned


# ----------------------------------------------------------------------------------------------------------
# The report


def fmt(x, digits=4):
    """A number for the table: `digits` significant digits, thousands grouped past them; "-" for None or NaN."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return f"{x:.{digits}g}" if abs(x) < 10 ** digits else f"{x:,.0f}"


def iqm_cell(returns):
    """"IQM [low, high]" of per-seed returns, saying how many NaN seeds (no episode to average) were dropped."""
    s = aggregate.summarize(returns)
    if s["n"] == 0:
        return "-"
    dropped = f" ({s['n_nan']} NaN dropped)" if s["n_nan"] else ""
    return f"{fmt(s['iqm'])} [{fmt(s['ci'][0])}, {fmt(s['ci'][1])}]{dropped}"


def normalization(results) -> dict:
    """{env: (low, high, source)}: the entries' ranges, a missing high taken as the best eval IQM on the env."""
    ranges = {}
    for r in results:
        e = r.entry
        low, high, source = ranges.get(e.env, (e.low, e.high, e.range_source))
        finite = r.eval_return[~np.isnan(r.eval_return)]
        if e.high is None and finite.size:
            best = aggregate.iqm(finite)
            high = best if high is None else max(high, best)
        ranges[e.env] = (low, high, source)
    return ranges


def normalized_matrix(results, ranges):
    """-> (envs used, envs left out, (seeds, envs used) normalised eval returns or None): finite seeds only, each
    env's seeds cut to the fewest any env has (the bootstrap needs a matrix). An env without a range (no low, or
    a high not above it) is left out."""
    columns, used, left_out = [], [], []
    for r in results:
        low, high, _ = ranges[r.entry.env]
        finite = r.eval_return[~np.isnan(r.eval_return)]
        if low is None or high is None or high <= low or finite.size == 0:
            left_out.append(r.entry.env)
            continue
        columns.append(aggregate.normalize(finite, low, high))
        used.append(r.entry.env)
    if not columns:
        return used, left_out, None
    n = min(len(c) for c in columns)
    return used, left_out, np.stack([c[:n] for c in columns], axis=1)


def plot_curves(path, algo, results):
    """One panel per entry: the IQM over seeds of the episode return against env steps (metrics.csv, binned), its
    95% stratified-bootstrap band, the published reference and the random policy's score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, MaxNLocator

    cols = min(3, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, r in zip(axes.flat, results, strict=False):
        e = r.entry
        steps, returns = r.curve
        ok = ~np.isnan(returns).any(axis=0)  # points where every seed finished an episode
        if ok.any():
            band = aggregate.stratified_bootstrap_ci(returns[:, ok], lambda s: aggregate.iqm(s, axis=-2),
                                                     reps=CURVE_REPS, seed=0)
            ax.plot(steps[ok], band.point, color="tab:blue", label=f"IQM of {returns.shape[0]} seeds")
            ax.fill_between(steps[ok], band.low, band.high, color="tab:blue", alpha=0.25, label="95% CI")
        if e.reference.value is not None:
            ax.axhline(e.reference.value, color="tab:green", ls="--", lw=1, label=f"reference {e.reference.text}")
        if e.low is not None:
            ax.axhline(e.low, color="gray", ls=":", lw=1, label="random policy")
        ax.set_title(e.env, fontsize=10)
        ax.set_xlabel("env steps per seed")
        ax.xaxis.set_major_locator(MaxNLocator(5))  # a few ticks, named 250k, 1M: no run-together labels
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylabel("episode return")
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(results):]:
        ax.axis("off")
    fig.suptitle(f"{algo}: IQM over seeds, 95% CI", fontsize=11)
    fig.tight_layout()
    with replaced(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


def plot_profile(path, algo, envs_used, scores):
    """The run-score performance profile of normalised scores (seeds, envs), with its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    taus = np.linspace(min(0.0, scores.min()), max(1.0, scores.max()), 201)
    profile = aggregate.performance_profile(scores, taus, seed=0)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(taus, profile.fraction, color="tab:blue", label=f"{algo}: {scores.shape[0]} seeds x {len(envs_used)} envs")
    ax.fill_between(taus, profile.low, profile.high, color="tab:blue", alpha=0.25, label="95% CI")
    ax.set_xlabel("normalised eval return tau (0: random policy, 1: the env's high score)")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(textwrap.fill(f"{algo}: performance profile over {', '.join(envs_used)}", 80), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with replaced(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


def inside_repository(path) -> bool:
    path = os.path.abspath(path)
    return path == ROOT or path.startswith(ROOT + os.sep)


def shown(path) -> str:
    """A path as messages show it: relative to the repository inside it, absolute outside."""
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if inside_repository(path) else path


def write_report(suite_name, entries, out_dir, results_path, suite_flag=None, records=None) -> list[str]:
    """The markdown table and the PNGs from the run directories and records there are; -> the files written.
    `suite_flag`: how the command line named the suite (default `--suite <name>`)."""
    results = [r for r in (read_result(e, out_dir, records) for e in entries) if r is not None]
    recorded = [r.entry.name for r in results if r.source.endswith(".json")]
    sampled = any(e.sampled_episodes > 0 for e in entries)
    missing = [e for e in entries if e.name not in {r.entry.name for r in results}]
    machines = list(dict.fromkeys(describe_machine(r.extra["machine"]) for r in results if r.extra.get("machine")))
    suite_flag = suite_flag or f"--suite {suite_name}"

    def named(path):  # a report in the repository (committed) names no folder of one machine
        if inside_repository(path) or not inside_repository(results_path):
            return f"`{shown(path)}`"
        return "a folder outside the repository"

    folder = os.path.dirname(os.path.abspath(results_path))
    stem = os.path.splitext(os.path.basename(results_path))[0]
    os.makedirs(folder, exist_ok=True)
    lines = [f"# Learning results: suite `{suite_name}`", "",
             f"Written {datetime.date.today()} by `python benchmarks/learning.py {suite_flag}` from the run "
             f"directories in {named(out_dir)}"
             + (f" and, where they are gone, the records in {named(records)} ({', '.join(recorded)})"
                if recorded else "")
             + f". Machine: {'; '.join(machines) or 'not recorded'}.",
             "",
             "Returns are the scripts' own: `eval_return` is the deterministic (greedy) policy's return on fresh "
             "episodes after training, `final_return` the mean return of the training episodes that ended in the "
             "last 10% of training, one value per seed. IQM: the mean of the middle 50% of seeds (Agarwal et al. "
             f"2021), with a 95% stratified-bootstrap interval ({aggregate.INTERVAL_REPS:,} resamples, seed 0). "
             "std is over seeds (ddof 0). train s and compile s are the run's own (train s counts only the last "
             "invocation of a resumed run)."
             + (" The sampled return is the final policies' mean return acting as in training, each action "
                "sampled, on the number of episodes per seed named (`--eval <run> --eval-sampled`): the figure "
                "that sources evaluating the stochastic policy publish (gymnax-blines)." if sampled else ""), "",
             "| entry | env | seeds | env steps per seed | eval return IQM [95% CI] | final return IQM [95% CI] "
             + ("| sampled return IQM [95% CI] (episodes per seed) " if sampled else "")
             + "| eval mean ± std | eval min | train s | compile s | published | source |",
             "|---|---|---:|---:|---|---|" + ("---|" if sampled else "") + "---|---:|---:|---:|---|---|"]
    for r in results:
        e, s, ev = r.entry, r.summary, r.eval_return[~np.isnan(r.eval_return)]
        mean_std = f"{fmt(ev.mean())} ± {fmt(ev.std())}" if ev.size else "-"
        run_sampled = r.extra.get("sampled_eval")
        cell = "" if not sampled else "| - " if not run_sampled else \
            f"| {iqm_cell(np.array(run_sampled['per_seed']))} ({run_sampled['episodes']}) "
        lines.append(f"| {e.name} | {e.env} | {s['num_seeds']} | {s['env_steps']:,} | {iqm_cell(r.eval_return)} "
                     f"| {iqm_cell(r.final_return)} {cell}| {mean_std} | {fmt(ev.min()) if ev.size else '-'} "
                     f"| {fmt(s.get('train_s'), 3)} | {fmt(s.get('compile_s'), 2)} | {e.reference.text} "
                     f"| {e.reference.source} |")
    if missing:
        lines += ["", "Not in the table (no summary.json or record yet): " + ", ".join(
            f"{e.name}{' (GPU only)' if e.gpu_only else ''}" for e in missing)
            + f". Run them with `python benchmarks/learning.py {suite_flag} --only "
            + ",".join(e.name for e in missing) + "`."]
    ranges = normalization(results)
    written = [results_path]
    algos = list(dict.fromkeys(r.entry.algo for r in results))
    if results:
        lines += ["", "## Per algorithm, over its envs", "",
                  "Scores normalised per env as (return - low) / (high - low): low is a uniformly random policy's "
                  "mean return, high the score named below. IQM over all seeds of all the algorithm's envs, with a "
                  "95% stratified-bootstrap interval (seeds resampled within each env). Where envs have different "
                  "seed counts, each keeps its first seeds up to the smallest count.", "",
                  "| algorithm | envs | seeds per env | IQM of normalised eval return [95% CI] | curves | profile |",
                  "|---|---|---:|---|---|---|"]
        for algo in algos:
            mine = [r for r in results if r.entry.algo == algo]
            curves = f"{stem}_{algo}_curves.png"
            plot_curves(os.path.join(folder, curves), algo, mine)
            written.append(os.path.join(folder, curves))
            envs_used, left_out, scores = normalized_matrix(mine, ranges)
            profile, cell = "-", "-"
            if scores is not None:
                estimate = aggregate.stratified_bootstrap_ci(scores, seed=0)
                cell = f"{estimate.point:.3f} [{estimate.low:.3f}, {estimate.high:.3f}]"
                profile = f"{stem}_{algo}_profile.png"
                plot_profile(os.path.join(folder, profile), algo, envs_used, scores)
                written.append(os.path.join(folder, profile))
                profile = f"![{algo} profile]({profile})"
            envs_cell = ", ".join(envs_used) + (f" (left out, no range: {', '.join(left_out)})" if left_out else "")
            lines.append(f"| {algo} | {envs_cell} | {scores.shape[0] if scores is not None else '-'} "
                         f"| {cell} | ![{algo} curves]({curves}) | {profile} |")
        lines += ["", "| env | low (random policy) | high | high from |", "|---|---:|---:|---|"]
        lines += [f"| {env} | {fmt(low)} | {fmt(high)} | {source} |" for env, (low, high, source) in ranges.items()]
    with replaced(results_path) as f:
        f.write("\n".join(lines) + "\n")
    return written


def report_path(suite_name, entries, out_dir, records=None, commit=True) -> str:
    """Where the report goes without --results: the committed benchmarks/results/learning_<suite>.md when `commit`
    (a full run, or --record) and every entry has a summary.json or a record, else <out-dir>/, saying so."""
    committed = os.path.join(ROOT, "benchmarks", "results", f"learning_{suite_name}.md")
    if not commit:
        print(f"the report goes to {shown(out_dir)}: a run with --only or --out-dir leaves {shown(committed)} as it "
              "is (give --record to write it)")
        return os.path.join(out_dir, f"learning_{suite_name}.md")
    finished = sum(os.path.exists(os.path.join(out_dir, e.name, "summary.json")) or read_record(e, records) is not None
                   for e in entries)
    if finished == len(entries):
        return committed
    print(f"{finished} of {len(entries)} entries have finished: the report goes to {shown(out_dir)}, and "
          f"{shown(committed)} is left as it is (it is rewritten once every entry has finished, or give --results)")
    return os.path.join(out_dir, f"learning_{suite_name}.md")


def main(args: Args) -> int:
    """Runs the selected entries, then writes the report; -> the exit code."""
    try:
        if args.suite_file is not None:
            suite_name, entries = load_suite_file(args.suite_file)
            suite_file = shown(args.suite_file)  # a report may be committed: it names no folder of one machine
            suite_flag = f"--suite-file {os.path.basename(suite_file) if os.path.isabs(suite_file) else suite_file}"
        elif args.suite in SUITES:
            (suite_name, entries), suite_flag = (args.suite, SUITES[args.suite]), f"--suite {args.suite}"
        else:
            raise SuiteError(f"--suite {args.suite}: unknown; the suites are {', '.join(SUITES)} (or --suite-file)")
        check_entries(entries)
        chosen = select(entries, args.only)
        check_args(args)
        if args.random_scores:
            print_random_scores(chosen, args.random_episodes)
            return 0
        out_dir = os.path.abspath(args.out_dir or os.path.join(ROOT, "runs", "learning", suite_name))
        # The committed files (records, report) are written by a full run or when asked (--record); the committed
        # records are read by any run in the default out dir. An explicit --records or --results is asked for.
        commit = args.record or (not args.only and args.out_dir is None)
        records = args.records or (os.path.join(ROOT, "benchmarks", "results", "records", suite_name)
                                   if args.out_dir is None or args.record else None)
        write_records = commit or args.records is not None
        failed = [] if args.report_only else run_entries(chosen, out_dir, records, write_records)
    except SuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: run the same command again to go on (finished entries are kept, the stopped one "
              "resumes); the report was not rewritten", file=sys.stderr)
        return 130
    try:
        results = args.results or report_path(suite_name, entries, out_dir, records, commit)
        written = write_report(suite_name, entries, out_dir, results, suite_flag, records)
    except SuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("written: " + ", ".join(shown(p) for p in written))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args, description=__doc__)))
