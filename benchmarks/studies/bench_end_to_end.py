"""End-to-end env steps/s on CartPole-v1: reinforce.py and ppo.py (one jit, vmapped seeds) next to the same
algorithms written as a PyTorch user would, with gymnasium's SyncVectorEnv and a Python loop.

"End to end" is the whole training run: acting, env steps, advantages and every gradient step. Both sides use the
same batch (`--num-envs` x `--num-steps`), networks (64-64 tanh actor and critic), hyperparameters (read from the
scripts' own Config) and number of gradient steps per batch:

- reinforce (SpinningUp VPG): one full-batch policy step and `train_v_iters` (80) full-batch value steps per epoch,
  GAE-lambda advantages, value targets the reward-to-go, both bootstrapped at truncations and at the epoch cut.
- ppo: `update_epochs` x `num_minibatches` minibatch steps of the clipped loss (clipped value loss, entropy bonus,
  global grad-norm clip, linearly annealed learning rate), GAE advantages.

JAX times `jit(vmap(make_train(config)))` for N seeds, compile time apart. PyTorch has no vmap: for N seeds it trains
N agents one after another in this process and reports total env steps over total wall time. PyTorch is slow, so it
runs `--torch-timesteps` per agent (the table says how many each side ran):

    python benchmarks/studies/bench_end_to_end.py                         # 1 and 32 seeds, reinforce and ppo
    python benchmarks/studies/bench_end_to_end.py --seeds 1 --algos ppo --torch-timesteps 10240

Writes `<out-dir>/end_to_end.md` (the table) and `<out-dir>/end_to_end.png` (a bar chart). Needs PyTorch and
gymnasium (pip install -r requirements-bench.txt). Timings depend on the machine and its load; run on an idle machine.
"""

import dataclasses
import datetime
import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import tyro

# Optional: main() says how to install them.
HAVE_TORCH = all(importlib.util.find_spec(name) is not None for name in ("torch", "gymnasium"))
if HAVE_TORCH:
    import gymnasium as gym
    import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# Importing a script sets its XLA_FLAGS (harness.prepare_jax) before anything makes JAX's backend.
import ppo  # noqa: E402
import reinforce  # noqa: E402
from scanrl import harness  # noqa: E402

ENV_ID = "CartPole-v1"  # the same id in gymnax and gymnasium


@dataclass(frozen=True)
class Args:
    seeds: tuple[int, ...] = (1, 32)
    """numbers of seeds to time: vmapped in JAX, one agent after another in PyTorch"""
    total_timesteps: int = 102_400
    """env steps per agent on the JAX side"""
    torch_timesteps: int = 20_480
    """env steps per agent on the PyTorch side (it is slow; the rate, not the total, is compared)"""
    num_envs: int = 8
    """parallel envs per agent, for both scripts and both frameworks"""
    num_steps: int = 64
    """steps per env per epoch / rollout (batch = num_envs * num_steps)"""
    algos: tuple[Literal["reinforce", "ppo"], ...] = ("reinforce", "ppo")
    """algorithms to time"""
    torch_threads: int = 1
    """PyTorch intra-op threads (0: PyTorch's default, one per core). 1 is as fast for these small networks and
    does not collapse when other processes load the cores, as OpenMP's threads then wait on each other"""
    seed: int = 0
    """seed of agent 0; agent i uses seed + i"""
    out_dir: str = "benchmarks/results"
    """directory of end_to_end.md and end_to_end.png"""


# ----------------------------------------------------------------------------------------------------------
# The math both PyTorch loops share, in numpy: one batch is small, and per-op overhead is what costs on CPU.


def calculate_gae(rewards, values, next_values, terminated, dones, gamma, gae_lambda):
    """reinforce.py's / ppo.py's GAE-lambda along axis 0 (time) -> (advantages, advantages + values): bootstrap from
    V(next obs) unless terminated, stop the recursion at every episode end."""
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    decay = gamma * gae_lambda * (1.0 - dones)
    advantages = np.zeros_like(deltas)
    advantage = np.zeros_like(deltas[0])
    for t in reversed(range(len(deltas))):
        advantage = deltas[t] + decay[t] * advantage
        advantages[t] = advantage
    return advantages, advantages + values


def reward_to_go(rewards, next_values, terminated, dones, gamma):
    """reinforce.py's value target: discounted rewards to the episode end or the epoch cut, plus the discounted
    V(next obs) there unless the episode terminated."""
    stops = dones.copy()
    stops[-1] = 1.0
    return calculate_gae(rewards, np.zeros_like(rewards), next_values * stops, terminated, dones, gamma, 1.0)[0]


def normalize(x):
    # Population std (ddof 0), as jnp.std in the scripts.
    return (x - x.mean()) / (x.std(unbiased=False) + 1e-8)


# ----------------------------------------------------------------------------------------------------------
# PyTorch + gymnasium, written as SpinningUp / CleanRL would.


def torch_mlp(in_dim, out_dim, hidden_size, activation, gains=None):
    """Two hidden layers initialised as the scripts' flax Dense layers, zero biases and: orthogonal weights with
    `gains` (one per layer, ppo.py), else Flax's default LeCun normal (reinforce.py). The init matters here:
    PyTorch's default (smaller weights) makes one-step-per-epoch VPG learn CartPole about half as fast."""
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[activation]
    layers = [torch.nn.Linear(in_dim, hidden_size), torch.nn.Linear(hidden_size, hidden_size),
              torch.nn.Linear(hidden_size, out_dim)]
    for i, layer in enumerate(layers):
        if gains is not None:
            torch.nn.init.orthogonal_(layer.weight, gains[i])
        else:
            # jax.nn.initializers.lecun_normal: a normal truncated at 2 std, rescaled to variance 1 / fan_in.
            std = (1.0 / layer.in_features) ** 0.5 / 0.87962566103423978
            torch.nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
        torch.nn.init.zeros_(layer.bias)
    return torch.nn.Sequential(layers[0], act(), layers[1], act(), layers[2])


def log_prob_and_entropy(logits, action):
    log_p = torch.log_softmax(logits, dim=-1)
    return log_p.gather(1, action[:, None])[:, 0], -(log_p.exp() * log_p).sum(-1)


class Rollout(NamedTuple):
    """One batch, (num_steps, num_envs, ...) tensors viewing the collector's numpy buffers."""

    obs: "torch.Tensor"
    action: "torch.Tensor"
    reward: np.ndarray
    terminated: np.ndarray
    done: np.ndarray
    next_obs: "torch.Tensor"  # the true next observation, also at an auto-reset


class GymCollector:
    """`num_envs` gymnasium CartPole-v1 envs in a SyncVectorEnv and preallocated rollout buffers.

    Same-step autoreset, as gymnax: the step that ends an episode returns the next episode's first observation and
    the true last one in info["final_obs"], so truncations can be bootstrapped and no step is wasted on a reset.
    """

    def __init__(self, num_envs, num_steps, seed):
        self.env = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID)] * num_envs,
                                            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.obs, _ = self.env.reset(seed=seed)
        self.obs_dim = self.env.single_observation_space.shape[0]
        self.num_actions = int(self.env.single_action_space.n)
        shape = (num_steps, num_envs)
        self.buf_obs = np.zeros(shape + (self.obs_dim,), np.float32)
        self.buf_next_obs = np.zeros_like(self.buf_obs)
        self.buf_action = np.zeros(shape, np.int64)
        self.buf_reward, self.buf_terminated, self.buf_done = (np.zeros(shape, np.float32) for _ in range(3))
        self.running_return = np.zeros(num_envs)
        self.episode_returns = []  # every finished episode's return, in order

    def collect(self, actor) -> Rollout:
        for t in range(len(self.buf_obs)):
            self.buf_obs[t] = self.obs
            with torch.no_grad():
                probs = torch.softmax(actor(torch.from_numpy(self.obs)), dim=-1)
            action = torch.multinomial(probs, 1)[:, 0].numpy()
            self.obs, reward, terminated, truncated, info = self.env.step(action)
            done = terminated | truncated
            self.buf_action[t], self.buf_reward[t] = action, reward
            self.buf_terminated[t], self.buf_done[t] = terminated, done
            self.buf_next_obs[t] = self.obs
            self.running_return += reward
            if done.any():
                for i in np.flatnonzero(done):
                    self.buf_next_obs[t, i] = info["final_obs"][i]
                self.episode_returns += self.running_return[done].tolist()
                self.running_return[done] = 0.0
        # Zero-copy views: the update reads them before the next collect() overwrites the buffers.
        return Rollout(torch.from_numpy(self.buf_obs), torch.from_numpy(self.buf_action), self.buf_reward,
                       self.buf_terminated, self.buf_done, torch.from_numpy(self.buf_next_obs))


class TorchRun(NamedTuple):
    env_steps: int
    episode_returns: np.ndarray  # every finished episode's return, in order


def values_of(critic, rollout: Rollout):
    """V(obs) and V(next obs) in numpy, one batched pass each (as the scripts do after the rollout)."""
    with torch.no_grad():
        return critic(rollout.obs)[..., 0].numpy(), critic(rollout.next_obs)[..., 0].numpy()


def train_vpg_torch(config: reinforce.Config, seed: int) -> TorchRun:
    """reinforce.py's VPG with a value baseline (SpinningUp's VPG): per epoch one policy step, train_v_iters value
    steps, all full batch."""
    torch.manual_seed(seed)
    collector = GymCollector(config.num_envs, config.num_steps, seed)
    batch_size = config.num_envs * config.num_steps
    num_epochs = config.total_timesteps // batch_size
    actor = torch_mlp(collector.obs_dim, collector.num_actions, config.hidden_size, config.activation)
    critic = torch_mlp(collector.obs_dim, 1, config.hidden_size, config.activation)
    pi_opt = torch.optim.Adam(actor.parameters(), lr=config.pi_lr)
    v_opt = torch.optim.Adam(critic.parameters(), lr=config.vf_lr)
    for _ in range(num_epochs):
        rollout = collector.collect(actor)
        values, next_values = values_of(critic, rollout)
        r, term, done = rollout.reward, rollout.terminated, rollout.done
        advantages, _ = calculate_gae(r, values, next_values, term, done, config.gamma, config.gae_lambda)
        targets = reward_to_go(r, next_values, term, done, config.gamma)
        obs = rollout.obs.reshape(batch_size, -1)
        action = rollout.action.reshape(batch_size)
        advantages = torch.from_numpy(advantages.reshape(batch_size))
        if config.normalize_advantages:
            advantages = normalize(advantages)
        targets = torch.from_numpy(targets.reshape(batch_size))

        log_prob, _ = log_prob_and_entropy(actor(obs), action)
        pi_loss = -(log_prob * advantages).mean()
        pi_opt.zero_grad()
        pi_loss.backward()
        pi_opt.step()
        for _ in range(config.train_v_iters):
            v_loss = ((critic(obs)[:, 0] - targets) ** 2).mean()
            v_opt.zero_grad()
            v_loss.backward()
            v_opt.step()
    return TorchRun(num_epochs * batch_size, np.array(collector.episode_returns))


def train_ppo_torch(config: ppo.Config, seed: int) -> TorchRun:
    """ppo.py's PPO: one Adam (eps 1e-5) over actor and critic, lr annealed linearly to 0 over all minibatch steps,
    global grad-norm clip, clipped policy and value losses, entropy bonus, advantages normalised per minibatch."""
    torch.manual_seed(seed)
    collector = GymCollector(config.num_envs, config.num_steps, seed)
    batch_size = config.num_envs * config.num_steps
    minibatch_size = batch_size // config.num_minibatches
    num_updates = config.total_timesteps // batch_size
    hidden = (config.hidden_size, config.activation)
    actor = torch_mlp(collector.obs_dim, collector.num_actions, *hidden, gains=(np.sqrt(2), np.sqrt(2), 0.01))
    critic = torch_mlp(collector.obs_dim, 1, *hidden, gains=(np.sqrt(2), np.sqrt(2), 1.0))
    params = [*actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=1e-5)
    num_opt_steps = num_updates * config.update_epochs * config.num_minibatches
    opt_step = 0
    for _ in range(num_updates):
        rollout = collector.collect(actor)
        values, next_values = values_of(critic, rollout)
        advantages, targets = calculate_gae(rollout.reward, values, next_values, rollout.terminated, rollout.done,
                                            config.gamma, config.gae_lambda)
        obs = rollout.obs.reshape(batch_size, -1)
        action = rollout.action.reshape(batch_size)
        with torch.no_grad():
            old_log_prob, _ = log_prob_and_entropy(actor(obs), action)
        old_values, advantages, targets = (torch.from_numpy(x.reshape(batch_size))
                                           for x in (values, advantages, targets))
        for _ in range(config.update_epochs):
            for idx in torch.randperm(batch_size).split(minibatch_size):
                if config.anneal_lr:
                    # optax.linear_schedule: the k-th step (from 0) uses lr * (1 - k / num_opt_steps).
                    optimizer.param_groups[0]["lr"] = config.learning_rate * (1.0 - opt_step / num_opt_steps)
                log_prob, entropy = log_prob_and_entropy(actor(obs[idx]), action[idx])
                value = critic(obs[idx])[:, 0]
                advantage = normalize(advantages[idx])
                ratio = torch.exp(log_prob - old_log_prob[idx])
                clipped_ratio = ratio.clamp(1.0 - config.clip_coef, 1.0 + config.clip_coef)
                actor_loss = -torch.min(ratio * advantage, clipped_ratio * advantage).mean()
                old_value, target = old_values[idx], targets[idx]
                value_clipped = old_value + (value - old_value).clamp(-config.clip_coef, config.clip_coef)
                critic_loss = 0.5 * torch.max((value - target) ** 2, (value_clipped - target) ** 2).mean()
                loss = actor_loss + config.vf_coef * critic_loss - config.ent_coef * entropy.mean()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
                opt_step += 1
    return TorchRun(num_updates * batch_size, np.array(collector.episode_returns))


TORCH_TRAIN = {"reinforce": train_vpg_torch, "ppo": train_ppo_torch}


# ----------------------------------------------------------------------------------------------------------
# Timing, the table and the chart.


class Row(NamedTuple):
    algo: str
    framework: str
    seeds: int
    steps_per_seed: int
    compile_s: float | None
    run_s: float
    sps: float  # env steps per second over all seeds, compile excluded


def make_configs(algo: str, args: Args, num_seeds: int):
    """-> (module, JAX config, PyTorch config): the script's defaults with this benchmark's batch and budget."""
    module = ppo if algo == "ppo" else reinforce
    config = dataclasses.replace(module.Config(), env=ENV_ID, seed=args.seed, num_seeds=num_seeds,
                                 num_envs=args.num_envs, num_steps=args.num_steps,
                                 total_timesteps=args.total_timesteps)
    return module, config, dataclasses.replace(config, num_seeds=1, total_timesteps=args.torch_timesteps)


def time_jax(algo: str, module, config) -> Row:
    keys = jnp.stack([jax.random.PRNGKey(config.seed + i) for i in range(config.num_seeds)])
    train = jax.jit(jax.vmap(module.make_train(config)))
    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    _, metrics = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    steps = module.ALGORITHM.num_iterations(config) * module.steps_per_iteration(config)
    return Row(algo, "JAX", config.num_seeds, steps, compile_s, run_s, steps * config.num_seeds / run_s)


def time_torch(algo: str, config, num_seeds: int) -> Row:
    """Trains `num_seeds` agents one after another, as a PyTorch user without vmap would, after one untimed batch
    that pays the first-call costs (imports, allocator, autograd setup), as JAX's compile is left out of run s."""
    TORCH_TRAIN[algo](dataclasses.replace(config, total_timesteps=config.num_envs * config.num_steps), config.seed)
    start = time.perf_counter()
    runs = [TORCH_TRAIN[algo](config, config.seed + i) for i in range(num_seeds)]
    run_s = time.perf_counter() - start
    steps = runs[0].env_steps
    return Row(algo, "PyTorch", num_seeds, steps, None, run_s, steps * num_seeds / run_s)


def table_lines(rows: list[Row]) -> list[str]:
    torch_sps = {(r.algo, r.seeds): r.sps for r in rows if r.framework == "PyTorch"}
    lines = ["| algo | framework | seeds | env steps per seed | compile s | run s | env steps/s (all seeds) "
             "| speed-up vs PyTorch |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        compile_s = "-" if r.compile_s is None else f"{r.compile_s:.1f}"
        speedup = r.sps / torch_sps[r.algo, r.seeds] if (r.algo, r.seeds) in torch_sps else float("nan")
        lines.append(f"| {r.algo} | {r.framework} | {r.seeds} | {r.steps_per_seed:,} | {compile_s} | {r.run_s:.1f} "
                     f"| {r.sps:,.0f} | {speedup:.1f}x |")
    return lines


def plot(path, rows: list[Row]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r.algo, r.seeds) for r in rows))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(groups) + 2), 4))
    width = 0.38
    for offset, framework, color in ((-width / 2, "PyTorch", "tab:orange"), (width / 2, "JAX", "tab:blue")):
        sps = {(r.algo, r.seeds): r.sps for r in rows if r.framework == framework}
        xs = [i + offset for i, g in enumerate(groups) if g in sps]
        heights = [sps[g] for g in groups if g in sps]
        bars = ax.bar(xs, heights, width, label=framework, color=color)
        ax.bar_label(bars, labels=[f"{h:,.0f}" for h in heights], fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)), [f"{algo}\n{n} seed{'s' if n > 1 else ''}" for algo, n in groups])
    ax.set_ylabel("env steps/s, all seeds (log scale)")
    ax.set_title(f"{ENV_ID} end to end: JAX (jit + vmap) vs PyTorch + gymnasium")
    ax.margins(y=0.15)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def validate(args: Args) -> str | None:
    """Returns one line saying what is wrong with the arguments, or None."""
    if not args.seeds or min(args.seeds) <= 0:
        return "--seeds must be positive integers"
    if not args.algos:
        return "--algos must name at least one algorithm"
    for algo in args.algos:
        module, config, _ = make_configs(algo, args, 1)
        try:
            harness.check(module.ALGORITHM, config)
        except harness.ConfigError as error:
            return f"{algo}: {error}"
    batch = args.num_envs * args.num_steps
    if args.torch_threads < 0:
        return f"--torch-threads must be 0 (PyTorch's default) or positive, got {args.torch_threads}"
    if args.torch_timesteps < batch:
        return (f"--torch-timesteps {args.torch_timesteps} is smaller than one batch "
                f"(--num-envs x --num-steps = {batch})")
    return None


def main(args: Args):
    if not HAVE_TORCH:
        print("error: PyTorch and gymnasium are needed for this benchmark: pip install -r requirements-bench.txt",
              file=sys.stderr)
        sys.exit(2)
    error = validate(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    batch = args.num_envs * args.num_steps
    threads = torch.get_num_threads()
    header = (f"{datetime.datetime.now():%Y-%m-%d %H:%M}, jax {jax.__version__}, torch {torch.__version__} "
              f"({threads} thread{'s' if threads > 1 else ''}), gymnasium {gym.__version__}, {os.cpu_count()} CPUs. "
              f"{ENV_ID}, batch {args.num_envs} envs x {args.num_steps} steps = {batch}; JAX "
              f"{args.total_timesteps:,} and PyTorch {args.torch_timesteps:,} env steps per agent (budget).")
    print(header + "\n")
    rows = []
    for algo in args.algos:
        for num_seeds in args.seeds:
            module, jax_config, torch_config = make_configs(algo, args, num_seeds)
            rows.append(time_torch(algo, torch_config, num_seeds))
            rows.append(time_jax(algo, module, jax_config))
            lines = table_lines(rows)
            print("\n".join(lines if len(rows) == 2 else lines[-2:]), flush=True)
    notes = ("env steps/s = env steps of all seeds / run s; JAX compile time is reported apart and not in run s. "
             "PyTorch trains the seeds one after another (no vmap), after one untimed warm-up batch; its run s "
             "includes building envs and networks, as JAX's compiled program includes env reset and network init.")
    os.makedirs(args.out_dir, exist_ok=True)
    md_path = os.path.join(args.out_dir, "end_to_end.md")
    with open(md_path, "w") as f:
        f.write(f"# End-to-end training speed: scanrl (JAX) vs PyTorch + gymnasium\n\n{header}\n\n"
                + "\n".join(table_lines(rows)) + f"\n\n{notes}\n")
    png_path = os.path.join(args.out_dir, "end_to_end.png")
    plot(png_path, rows)
    print(f"\n{notes}\nwritten: {md_path}, {png_path}")


if __name__ == "__main__":
    main(tyro.cli(Args))
