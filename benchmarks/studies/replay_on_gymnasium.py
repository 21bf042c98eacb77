"""A finished run of td3.py, sac.py, ppo.py or reinforce.py on `mujoco/<Task>-v5` (MJX) or `brax/halfcheetah`, its
final deterministic policies played on Gymnasium's own env (C MuJoCo in float64, the simulator of the published
tables), fed observations as training saw them (normalised with training's frozen statistics, actions clipped to the
action space, as scanrl's env stack does): whether a return earned on MJX is worth as much in the reference env.

    python benchmarks/studies/replay_on_gymnasium.py sac.py runs/learning/mujoco/sac-Hopper-v5-100k --out DIR

Prints per seed the mean return over `--episodes` Gymnasium episodes beside the run's own evaluation; with `--out`,
also writes <DIR>/replay-<run name>.json (the returns, the commit, command and machine), which
`benchmarks/studies/mujoco_peer.py --report` reads. Needs mujoco (requirements-mujoco.txt) and gymnasium's MuJoCo
envs' imageio (comes with the dev requirements). A run dir that is not a finished run of the script on such an env
is one line, exit 2.
"""

import json
import os
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tyro  # noqa: E402

from scanrl import envs  # noqa: E402
from scanrl.harness.flags import ConfigError  # noqa: E402
from scanrl.harness.resume import read_run_config  # noqa: E402
from scanrl.tools.contract import load_script, restored_runner  # noqa: E402

BRAX_TASKS = {"brax/halfcheetah": "HalfCheetah-v5"}  # Brax's variant, played on Gymnasium's task


@dataclass(frozen=True)
class Args:
    script: tyro.conf.Positional[str]
    """td3.py, sac.py, ppo.py or reinforce.py"""
    run_dir: tyro.conf.Positional[str]
    """a finished run of it on mujoco/<Task>-v5 or brax/halfcheetah (any backend)"""
    episodes: int = 10
    """Gymnasium episodes per seed, reset with seeds 1000 x seed index + episode"""
    out: str | None = None
    """a folder for the record of the replay (replay-<run name>.json)"""


def gymnasium_task(env_id: str) -> str:
    if env_id.startswith("mujoco/"):
        return env_id.removeprefix("mujoco/")
    if env_id.split(":")[0] in BRAX_TASKS:
        return BRAX_TASKS[env_id.split(":")[0]]
    raise ConfigError(f"the run trained on {env_id}, which is not one of Gymnasium's MuJoCo tasks (mujoco/<Task>-v5 "
                      f"or {', '.join(BRAX_TASKS)})")


def load_run(args):
    """-> (module, config, runner, the run's summary): ConfigError (one line) for what is not a finished run."""
    if args.episodes < 1:
        raise ConfigError("--episodes: at least 1")
    try:
        module = load_script(args.script)
    except SystemExit as error:  # its one line
        raise ConfigError(str(error).removeprefix("error: ")) from None
    # on the devices this process has, as --eval does: an agent's state does not depend on how the agents were split
    fields = read_run_config(module.ALGORITHM, args.run_dir, "run_dir")
    config = module.ALGORITHM.config(**{**fields, "num_devices": None})
    gymnasium_task(config.env)
    try:
        with open(os.path.join(args.run_dir, "summary.json")) as f:
            summary = json.load(f)
        if not isinstance(summary.get("eval_return"), list):
            raise ValueError
    except (OSError, ValueError, AttributeError):
        raise ConfigError(f"{args.run_dir} has no summary.json with eval_return: the run has not finished "
                          f"(python {args.script} --resume {args.run_dir})") from None
    _, runner = restored_runner(module, config, args.run_dir)
    return module, config, runner, summary


def main(args: Args):
    try:
        module, config, runner, summary = load_run(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    import gymnasium as gym

    task = gymnasium_task(config.env)
    env = gym.make(task)
    low, high = env.action_space.low, env.action_space.high

    @jax.jit
    def act(runner, obs):
        policy = envs.normalized_policy(module.ALGORITHM.policy(config, runner), runner)
        return jnp.clip(policy.step(policy.initial_carry(1), obs, jnp.ones(1, bool))[1], low, high)

    means = []
    for agent in range(config.num_seeds):
        one = jax.tree.map(lambda x: x[agent], runner)  # noqa: B023
        returns = []
        for episode in range(args.episodes):
            obs, _ = env.reset(seed=1000 * agent + episode)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(np.asarray(act(one, jnp.asarray(obs)[None]))[0])
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        means.append(float(np.mean(returns)))
        print(f"seed {agent}: Gymnasium {task} {means[-1]:.1f} (mean of {args.episodes} episodes); {config.env} "
              f"{summary['eval_return'][agent]:.1f} (the run's evaluation)", flush=True)
    print(f"mean over seeds: Gymnasium {np.mean(means):.1f}, {config.env} {np.mean(summary['eval_return']):.1f}")
    if args.out:
        write_record(args, config, task, means, summary)


def write_record(args, config, task, means, summary):
    from benchmarks.suite.runner import machine, provenance
    from scanrl.harness.aggregate import summarize
    from scanrl.harness.files import replaced

    name = os.path.basename(os.path.normpath(args.run_dir))
    run = provenance(["python", *sys.argv])
    run["command"] = "python " + " ".join(os.path.relpath(a, ROOT) if os.path.isabs(a) and a.startswith(ROOT)
                                          else a for a in sys.argv)
    record = {"run_name": name, "script": os.path.basename(args.script), "env": config.env, "task": task,
              "episodes": args.episodes, "gymnasium_return": means, "gymnasium_return_iqm": summarize(means),
              "run_eval_return": summary["eval_return"], "run": {**run, "machine": machine()}}
    os.makedirs(args.out, exist_ok=True)
    with replaced(os.path.join(args.out, f"replay-{name}.json")) as f:
        json.dump(record, f, separators=(",", ":"))


if __name__ == "__main__":
    main(tyro.cli(Args))
