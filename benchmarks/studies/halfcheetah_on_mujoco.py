"""A run of td3.py, sac.py, ppo.py or reinforce.py on `brax/halfcheetah:mjx`, its final deterministic policies played
on gymnasium's MuJoCo HalfCheetah-v5 (fed observations normalised with training's frozen statistics, actions clipped
to [-1, 1], as scanrl's env stack does), the simulator of the MuJoCo tables (SpinningUp, SB3, CleanRL): whether a
return earned on Brax's model (the same bodies, gears and timestep; 4 solver iterations, and shins that never touch
the floor) is worth as much there.

    python benchmarks/studies/halfcheetah_on_mujoco.py td3.py runs/learning/halfcheetah/td3-halfcheetah-100k

Prints per seed the mean return over `--episodes` MuJoCo episodes beside the run's own evaluation on Brax. Needs
gymnasium's MuJoCo envs: mujoco comes with requirements-brax.txt.
"""

import json
import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import gymnasium as gym  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tyro  # noqa: E402

from scanrl import envs  # noqa: E402
from scanrl.harness.resume import read_run_config  # noqa: E402
from scanrl.tools.contract import load_script, restored_runner  # noqa: E402


@dataclass(frozen=True)
class Args:
    script: tyro.conf.Positional[str]
    """td3.py, sac.py, ppo.py or reinforce.py"""
    run_dir: tyro.conf.Positional[str]
    """a finished run of it on brax/halfcheetah (any backend)"""
    episodes: int = 10
    """MuJoCo episodes per seed (1,000 steps each), reset with seeds 1000 x agent + episode"""


def main(args: Args):
    module = load_script(args.script)
    # on the devices this process has, as --eval does: an agent's state does not depend on how the agents were split
    config = module.ALGORITHM.config(**{**read_run_config(module.ALGORITHM, args.run_dir, "run_dir"),
                                        "num_devices": None})
    _, runner = restored_runner(module, config, args.run_dir)
    brax = json.load(open(os.path.join(args.run_dir, "summary.json")))["eval_return"]

    @jax.jit
    def act(runner, obs):
        policy = envs.normalized_policy(module.ALGORITHM.policy(config, runner), runner)
        return jnp.clip(policy.step(policy.initial_carry(1), obs, jnp.ones(1, bool))[1], -1.0, 1.0)

    env = gym.make("HalfCheetah-v5")
    means = []
    for agent in range(config.num_seeds):
        one = jax.tree.map(lambda x: x[agent], runner)  # noqa: B023
        returns = []
        for episode in range(args.episodes):
            obs, _ = env.reset(seed=1000 * agent + episode)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(np.asarray(act(one, jnp.asarray(obs)[None]))[0])
                total, done = total + reward, terminated or truncated
            returns.append(total)
        means.append(float(np.mean(returns)))
        print(f"seed {agent}: MuJoCo HalfCheetah-v5 {means[-1]:.1f} (mean of {args.episodes} episodes); "
              f"{config.env} {brax[agent]:.1f} (the run's evaluation)", flush=True)
    print(f"mean over seeds: MuJoCo {np.mean(means):.1f}, {config.env} {np.mean(brax):.1f} "
          f"({np.mean(means) / np.mean(brax):.0%})")


if __name__ == "__main__":
    main(tyro.cli(Args))
