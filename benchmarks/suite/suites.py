"""The suites' data: each suite's entries, with the published references and the flags they are run with."""

import dataclasses

from .entries import Reference, entry


def cleanrl(value, text, script, steps="500k steps"):
    """A CleanRL benchmark table's figure (mean ± std over seeds of the episodic return, end of training)."""
    return Reference(value, text, f"CleanRL docs, {script}, {steps} (docs.cleanrl.dev)")


# ppo.py on Pendulum: tests/test_ppo.py's flags (learns to about -200 in 300k steps here).
PPO_PENDULUM = ("--num-envs", "16", "--num-steps", "128", "--num-minibatches", "32", "--update-epochs", "10",
                "--learning-rate", "1e-3", "--ent-coef", "0")
# The memories' (ppo_rnn.py's cells) on the masked Pendulum: the same rollouts and epochs in 4 minibatches of 4
# whole env sequences (a recurrent minibatch is whole sequences: 32 do not divide 16 envs).
PPO_PENDULUM_MEMORY = ("--num-envs", "16", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "10",
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
# And the paper's optimizer, centered RMSProp: with Adam at the same step size no seed learned Asterix (6 seeds, returns
# falling from 0.9 to 0.55 by 2.4M steps), where RMSProp's 2 seeds reached 3 by 1.4M, rising.
DQN_MINATAR = ("--agent", "dqn", "--num-envs", "1", "--train-frequency", "1", "--batch-size", "32",
               "--buffer-size", "100000", "--target-network-frequency", "1000", "--learning-starts", "5000",
               "--start-e", "1", "--end-e", "0.1", "--exploration-fraction", "0.02", "--loss", "huber",
               "--optimizer", "rmsprop")


def with_flag(flags, name, value):
    """A copy of `flags` with the value after `name` replaced by `value` (the order kept)."""
    i = flags.index(name)
    return (*flags[:i + 1], value, *flags[i + 2:])


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
MASKED_PENDULUM_NONE = Reference(None, "none found", "POPGym's StatelessPendulum (Morad et al. 2023) reports a "
                                 "normalised score: no published return for Pendulum-v1 without its angular velocity")
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
MINIGRID_MEMORY_NONE = Reference(None, "none found", "XLand-MiniGrid publishes no single-task returns; the reward is "
                                 "below 1 (1 - 0.9 * steps / 320 for the right object), a guess earns about half")
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
# The Craftax-1M scoreboard (Craftax README): the mean return as a % of full Craftax's maximum reward, 226.
CRAFTAX_1M_PPO = Reference(0.022 * 226, "2.2% of 226 (4.97)", "Craftax README scoreboard, 1M steps: PPO")
CRAFTAX_1M_PPO_RNN = Reference(0.023 * 226, "2.3% of 226 (5.20)", "Craftax README scoreboard, 1M steps: PPO-RNN")
CRAFTAX_1M_TRXL = Reference(None, "none found", "Craftax README scoreboard: PPO-GTrXL at 1B steps only (18.3%)")
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
# 25 min a game), then the MinAtar paper's DQN at its budget (5M steps, one env, an update per step; Seaquest 1.6M,
# below) with 6 seeds:
# Breakout's record trained at 7.6k env steps/s here, 65 min (frames stored as bool), Asterix's (RMSProp) at 7.3k,
# 69 min. Its time grows with the seeds
# (1,343 and 1,207 env steps/s over 6 and 10 agents, 2026-11-27, beside a training run), so 10 seeds would take about
# 1.7 times as long. The runner resumes a game a session cannot finish.
SUITES["minatar"] = (
    *(entry(f"ppo-{game}-MinAtar", "ppo", "ppo.py", f"{game}-MinAtar", 10_000_000, 6, PPO_MINATAR,
            GYMNAX_MINATAR.get(game, MINATAR_NONE), sampled_episodes=GYMNAX_EPISODES) for game in MINATAR_GAMES),
    *(entry(f"pqn-{game}-MinAtar", "pqn", "pqn.py", f"{game}-MinAtar", 10_000_000, 10, PQN_MINATAR, MINATAR_NONE)
      for game in MINATAR_GAMES),
    *(entry(f"dqn-{game}-MinAtar", "dqn", "dqn_tabular_q.py", f"{game}-MinAtar", 5_000_000, 6,
            DQN_MINATAR, MINATAR_NONE) for game in MINATAR_GAMES if game != "Seaquest"),
    # Seaquest at 1.6M steps a seed, not the paper's 5M: 5M took 2.6 h at 3.2k env steps/s on one machine here and
    # would take 6.7 h at the 1.24k another gave (2026-11-28), more than a session. Epsilon still anneals over 100k.
    entry("dqn-Seaquest-MinAtar", "dqn", "dqn_tabular_q.py", "Seaquest-MinAtar", 1_600_000, 6,
          with_flag(DQN_MINATAR, "--exploration-fraction", "0.0625"), MINATAR_NONE),
)
# Memory (ppo_rnn.py, issue 25; about 7 min here): the quick suite's entries on tasks that need memory, and ppo.py on
# the masked CartPole beside them to show what memory buys (in no other suite: a task it cannot solve by design would
# weigh in ppo's aggregate score there).
# And the memories side by side (issue 51): ppo_rnn.py's four cells, the GTrXL's window longer than an episode
# on MemoryChain at memory lengths 50 and 100, at one budget: 100k env steps per seed, ppo_rnn's MemoryChain budget;
# and the other cells on the masked CartPole at the GRU's budget there (500k), the GTrXL with a window of 8 steps
# (its learning test's: enough to tell velocities).
CHAIN = "benchmarks/studies/memory_chain.py:memory_chain_{}"
MEMORIES = {"ppo_rnn": ("ppo_rnn.py", ("--cell", "gru")), "ppo_rnn_lstm": ("ppo_rnn.py", ("--cell", "lstm")),
            "ppo_rnn_lru": ("ppo_rnn.py", ("--cell", "lru")),
            "ppo_rnn_gtrxl": ("ppo_rnn.py", ("--cell", "gtrxl", "--memory-length", "{}"))}


def memories_on(task, env, steps, reference, window, flags=(), skip=()):
    """An entry `<memory>-<task>` for each memory but those in `skip`, 10 seeds, with `flags` and the GTrXL's window
    `window` steps long."""
    return tuple(entry(f"{algo}-{task}", algo, script, env, steps, 10,
                       (*flags, *(flag.format(window) for flag in own)), reference)
                 for algo, (script, own) in MEMORIES.items() if algo not in skip)


SUITES["memory"] = (
    *(e for e in SUITES["quick"] if e.env.endswith("-masked") or e.env == "MemoryChain-bsuite"),
    entry("ppo-CartPole-v1-masked", "ppo", "ppo.py", "CartPole-v1-masked", 500_000, 10, (), MASKED_NONE),
    *(e for length in (50, 100)
      for e in memories_on(f"MemoryChain-{length}", CHAIN.format(length), 100_000, MEMORY_CHAIN_OPTIMUM, length + 8)),
    *memories_on("CartPole-v1-masked", "CartPole-v1-masked", 500_000, MASKED_NONE, 8, skip=("ppo_rnn",)),
    # The masked Pendulum (continuous actions) at the masked CartPole's 500k: ppo.py without memory on its Pendulum
    # flags, each memory on PPO_PENDULUM_MEMORY; the GTrXL with the masked CartPole's window.
    entry("ppo-Pendulum-v1-masked", "ppo", "ppo.py", "Pendulum-v1-masked", 500_000, 10, PPO_PENDULUM,
          MASKED_PENDULUM_NONE),
    *memories_on("Pendulum-v1-masked", "Pendulum-v1-masked", 500_000, MASKED_PENDULUM_NONE, 8, PPO_PENDULUM_MEMORY),
    # XLand-MiniGrid's Memory task (MemoryS8, 8 wide): an object to remember in the first room, a corridor, its twin
    # and another at the corridor's end; the right one ends the episode with 1 - 0.9 * steps / 320, the wrong one with
    # 0, and a 3 x 3 view hides the first object by then. 1M (the GRU's probe learnt it there), 16 envs (the
    # MiniGrid entry's); ppo.py without memory beside the memories, the GTrXL with a 16-step window.
    entry("ppo-MiniGrid-MemoryS8", "ppo", "ppo.py", "MiniGrid-MemoryS8", 1_000_000, 10, ("--num-envs", "16"),
          MINIGRID_MEMORY_NONE),
    *memories_on("MiniGrid-MemoryS8", "MiniGrid-MemoryS8", 1_000_000, MINIGRID_MEMORY_NONE, 16, ("--num-envs", "16")),
    # Craftax (full, symbolic) at the Craftax-1M scoreboard's budget, 10 seeds: ppo.py without memory, the GRU and the
    # GTrXL, each with the Craftax-Classic entry's Craftax_Baselines flags; the GRU as wide as the layers, the GTrXL's
    # window two rollouts long (32 steps). ppo.py and the GRU also run on our 2-core CPU (2 seeds took 28 and 21 min of
    # training; the runner resumes an entry a session cannot finish); the GTrXL on a GPU only.
    *(entry(f"{algo}-Craftax-Symbolic-v1", algo, script, "Craftax-Symbolic-v1", 1_000_000, 10,
            (*PPO_CRAFTAX_1M, *flags), reference, gpu_only=algo == "ppo_rnn_gtrxl")
      for algo, script, flags, reference in (
          ("ppo", "ppo.py", (), CRAFTAX_1M_PPO), ("ppo_rnn", "ppo_rnn.py", ("--cell", "gru", "--cell-size", "256"),
                                                 CRAFTAX_1M_PPO_RNN),
          ("ppo_rnn_gtrxl", "ppo_rnn.py", ("--cell", "gtrxl", "--memory-length", "32"), CRAFTAX_1M_TRXL))),
)
# Off-policy at the scale of parallel envs (issue 41): sac.py and td3.py in the 2018 recipe (their defaults: 8 envs,
# batch 256, an update per transition) and the parallel one (16 envs, batch 1024, an update per 8 transitions: half
# the gradient work), on Pendulum at rl-baselines3-zoo's 20k, and on two MuJoCo Playground DM Control tasks
# (CartpoleBalance, CartpoleSwingup) beside ppo.py at the same budget. 64-wide layers (the learning tests'): the
# defaults' 256 cost 16x the FLOPs, more than this CPU affords for 10 seeds of an update per transition.
SAC_PENDULUM = Reference(-156.995, "-157.00 ± 88.71", "rl-baselines3-zoo benchmark.md: SB3 SAC, 20k steps, one run, "
                         "std over its eval episodes")
SMALL = ("--hidden-size", "64")
PARALLEL = ("--num-envs", "16", "--batch-size", "1024", "--updates-per-step", "0.125", *SMALL)
PLAYGROUND_DM_CONTROL = Reference(None, "none found", "MuJoCo Playground reports SAC and PPO on DM Control as curves "
                                  "over millions of steps; 1,000 is the most an episode can earn")
OFFPOLICY_STEPS = 50_000  # the Playground tasks
SUITES["offpolicy"] = (
    *(entry(f"{algo}-Pendulum-v1{tag}", algo, f"{algo}.py", "Pendulum-v1", 20_000, 10, flags, reference)
      for algo, reference in (("sac", SAC_PENDULUM), ("td3", TD3_PENDULUM))
      for tag, flags in (("", SMALL), ("-parallel", PARALLEL))),
    *(item for task in ("CartpoleBalance", "CartpoleSwingup") for item in (
        *(entry(f"{algo}-playground-{task}{tag}", algo, f"{algo}.py", f"playground/{task}", OFFPOLICY_STEPS, 10,
                flags, PLAYGROUND_DM_CONTROL)
          for algo in ("sac", "td3") for tag, flags in (("", SMALL), ("-parallel", PARALLEL))),
        entry(f"ppo-playground-{task}-50k", "ppo", "ppo.py", f"playground/{task}", OFFPOLICY_STEPS, 10,
              PPO_PLAYGROUND, PLAYGROUND_DM_CONTROL),
        # ppo.py at 10x the budget: its wall-clock to a return beside the off-policy scripts'
        entry(f"ppo-playground-{task}-500k", "ppo", "ppo.py", f"playground/{task}", 10 * OFFPOLICY_STEPS, 10,
              PPO_PLAYGROUND, PLAYGROUND_DM_CONTROL))),
)
# HalfCheetah on a 2-core CPU (issue 72): td3.py and sac.py at the papers' recipe (one env, an update per env step,
# batch 256, 256x256, 10k random steps first; SAC at the paper's lr 3e-4), 100k env steps x 6 seeds (5 would not
# divide over the 2 devices and train on one), on Brax's MuJoCo-XLA backend: MuJoCo's model, timestep and gears, so
# its returns stand beside the MuJoCo tables (a random policy: -283.5; D4RL's MuJoCo random: -280). Inside td3.py
# mjx and generalized trained equally fast here (207 and 215 env steps/s over 6 agents; compile 114 s and 78 s):
# mjx is the GPU's backend and the 1M entry's, so one normalisation range holds both.
TD3_PAPER_100K = Reference(5514.0, "5,514 (seed mean)", "Fujimoto et al. 2018: the authors' stored learning curves "
                           "(github.com/sfujim/TD3, learning_curves/HalfCheetah), mean of 10 seeds at 100k steps, "
                           "MuJoCo HalfCheetah-v1")
TD3_PAPER_200K = Reference(6833.0, "6,833 (seed mean)", "Fujimoto et al. 2018: the authors' stored learning curves "
                           "(github.com/sfujim/TD3, learning_curves/HalfCheetah), mean of 10 seeds at 200k steps, "
                           "MuJoCo HalfCheetah-v1")
SAC_SPINNINGUP_100K = Reference(6081.0, "6,081 (seed mean, read off the plot)", "SpinningUp benchmarks: SAC "
                                "(PyTorch) on HalfCheetah-v3, mean of 10 seeds at 100k steps")
PPO_SPINNINGUP_1M = Reference(1733.0, "1,733 (seed mean, read off the plot)", "SpinningUp benchmarks: PPO "
                              "(PyTorch) on HalfCheetah-v3, mean of 10 seeds at 1M steps")
VPG_SPINNINGUP_1M = Reference(-49.0, "-49 (seed mean, read off the plot)", "SpinningUp benchmarks: VPG (PyTorch) on "
                              "HalfCheetah-v3, mean of 10 seeds at 1M steps")
# ppo.py: CleanRL's MuJoCo recipe (ppo_continuous_action.py: a 2,048-step batch, 32 minibatches, 10 epochs, lr 3e-4
# annealed, no entropy bonus, observation and reward normalisation, 64-64 tanh) from 32 envs x 64 steps, not 1 x 2,048
# (2,235 env steps/s over 6 agents here against 1,956 at 16 x 128: 45 min for 6 x 1M). reinforce.py: SpinningUp's VPG
# (its defaults) on 16 envs x 64 steps an epoch (SpinningUp's: 4,000 steps), about 1,990 env steps/s over 6 agents.
PPO_MUJOCO = ("--num-envs", "32", "--num-steps", "64", "--num-minibatches", "32", "--update-epochs", "10",
              "--learning-rate", "3e-4", "--ent-coef", "0", "--log-every", "10")
HALFCHEETAH = "brax/halfcheetah:mjx"
SUITES["halfcheetah"] = (
    entry("ppo-halfcheetah-1m", "ppo", "ppo.py", HALFCHEETAH, 1_000_000, 6, PPO_MUJOCO, PPO_SPINNINGUP_1M),
    entry("vpg-halfcheetah-1m", "vpg", "reinforce.py", HALFCHEETAH, 1_000_000, 6,
          ("--num-envs", "16", "--num-steps", "64", "--log-every", "20"), VPG_SPINNINGUP_1M),
    entry("td3-halfcheetah-100k", "td3", "td3.py", HALFCHEETAH, 100_000, 6, TD3_PAPER, TD3_PAPER_100K),
    # td3.py at 200k, the "200k if one sitting holds it": about 1 h 55 min of training for 6 seeds here
    entry("td3-halfcheetah-200k", "td3", "td3.py", HALFCHEETAH, 200_000, 6, TD3_PAPER, TD3_PAPER_200K),
    entry("sac-halfcheetah-100k", "sac", "sac.py", HALFCHEETAH, 100_000, 6,
          (*TD3_PAPER, "--learning-rate", "3e-4"), SAC_SPINNINGUP_100K),
)
# Gymnasium's MuJoCo tasks, v5, on MJX (issue 86): the MDPs of the published tables. td3.py and sac.py at the recipe of
# the Brax records above (TD3_PAPER: one env, an update per env step, batch 256, 256x256, 10k random steps; SAC's lr
# 3e-4, the paper's), 6 seeds x 100k; sac.py (not td3.py) on Hopper and Walker2d: the published SAC files cover both
# at 100k. ppo.py at CleanRL's MuJoCo recipe, 1M.
TD3_SPINNINGUP_100K = Reference(5242.0, "5,242 (seed mean, read off the plot)", "SpinningUp benchmarks: TD3 (PyTorch) "
                                "on HalfCheetah-v3, mean of 10 seeds at 100k steps")


def simba_sac(value, task):
    return Reference(value, f"{value:,.0f} (IQM of 10 seeds)", "SimbaV2's SAC result files (github.com/dojeon-ai/"
                     f"SimbaV2, results/baseline/sac.csv): SAC on {task}-v4 at 99,996 env steps")


def crossq_published(value, task):
    return Reference(value, f"{value:,.0f} (IQM)", f"CrossQ with 2,048-wide critics on {task}-v4 at 100k env steps, as "
                     "issue 88 quotes it from the result files SimbaV2's and MR.Q's repositories publish")


# crossq.py (issue 88): the recipe of the SAC rows (TD3_PAPER: one env, an update per env step, batch 256, 10k random
# steps) with crossq.py's own optimiser (the paper's: Adam 1e-3, beta1 0.5, policy delay 3), critics 256 and 512 wide
# (the paper's 2,048 is a GPU's width).

# ppo.py: CleanRL's MuJoCo recipe as PPO_MUJOCO, its 2,048-step rollout from 4 envs x 512 steps (CleanRL's: 1 x 2,048):
# 12 envs a device at 6 seeds on 2 cores. MJX's step on XLA:CPU slows past 16 envs a device (HalfCheetah-v5: 1,927
# env steps/s at 16, 702 at 24, 688 at 100; docs/speed.md), where PPO_MUJOCO's 32 envs would put 96.
PPO_MUJOCO_V5 = ("--num-envs", "4", "--num-steps", "512", *PPO_MUJOCO[4:])
SUITES["mujoco"] = (
    entry("td3-HalfCheetah-v5-100k", "td3", "td3.py", "mujoco/HalfCheetah-v5", 100_000, 6, TD3_PAPER,
          TD3_SPINNINGUP_100K),
    entry("sac-HalfCheetah-v5-100k", "sac", "sac.py", "mujoco/HalfCheetah-v5", 100_000, 6,
          (*TD3_PAPER, "--learning-rate", "3e-4"), simba_sac(6107.0, "HalfCheetah")),
    entry("sac-Hopper-v5-100k", "sac", "sac.py", "mujoco/Hopper-v5", 100_000, 6,
          (*TD3_PAPER, "--learning-rate", "3e-4"), simba_sac(1068.0, "Hopper")),
    entry("sac-Walker2d-v5-100k", "sac", "sac.py", "mujoco/Walker2d-v5", 100_000, 6,
          (*TD3_PAPER, "--learning-rate", "3e-4"), simba_sac(701.0, "Walker2d")),
    entry("ppo-HalfCheetah-v5-1m", "ppo", "ppo.py", "mujoco/HalfCheetah-v5", 1_000_000, 6, PPO_MUJOCO_V5,
          PPO_SPINNINGUP_1M),
    *(entry(f"crossq{'' if width == 256 else f'-{width}'}-{task}-v5-100k", "crossq", "crossq.py", f"mujoco/{task}-v5",
            100_000, 6, (*TD3_PAPER, "--critic-width", str(width)), crossq_published(value, task))
      for task, value in (("HalfCheetah", 8365.0), ("Walker2d", 4435.0)) for width in (256, 512)),
)
