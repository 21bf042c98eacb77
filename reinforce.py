"""REINFORCE / vanilla policy gradient (Williams 1992) with a learned value baseline and GAE-lambda
advantages, as in OpenAI SpinningUp's VPG; discrete and continuous actions.

Each epoch collects `num_envs * num_steps` steps, takes ONE policy-gradient step and `train_v_iters`
full-batch value steps. The whole run is one `lax.scan` inside one `jax.jit`, and `jax.vmap` trains
`--num-seeds` agents at once in the same compiled program:

    python reinforce.py --env CartPole-v1 --num-seeds 4
    python reinforce.py --baseline none     # plain REINFORCE with discounted reward-to-go

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per epoch and seed), learning_curve.png
and summary.json; with `--track`, a wandb run as well.
"""

import os

# XLA:CPU in jax 0.10 can hang on vmapped training with the concurrency-optimised scheduler (see README); added to
# any XLA_FLAGS the user sets (e.g. --xla_force_host_platform_device_count=N for N CPU devices).
if "concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_enable_concurrency_optimized_scheduler=false"]).strip()

import argparse
import csv
import itertools
import json
import signal
import sys
import threading
import time
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Literal, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import tyro
from flax.training.train_state import TrainState
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def start_processes(argv):
    """A multi-process run (--coordinator-address, --num-processes, --process-id; every process gets the same
    flags but its own id) starts JAX's distributed runtime here, before `import envs`: it must come before anything
    creates a JAX backend, and importing gymnax does. Only these three flags are read here; tyro reads them all."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--coordinator-address", "--coordinator_address", default=None)
    parser.add_argument("--num-processes", "--num_processes", type=int, default=1)
    parser.add_argument("--process-id", "--process_id", type=int, default=0)
    flags, _ = parser.parse_known_args(argv)
    if flags.num_processes == 1 and flags.coordinator_address is None:
        return
    if flags.coordinator_address is None or not 0 <= flags.process_id < flags.num_processes:
        print(f"error: a multi-process run needs --coordinator-address host:port and --process-id in 0 to "
              f"{flags.num_processes - 1}", file=sys.stderr)
        sys.exit(2)
    jax.distributed.initialize(flags.coordinator_address, flags.num_processes, flags.process_id)


if __name__ == "__main__":
    start_processes(sys.argv[1:])

import envs  # noqa: E402 - after start_processes, see there


@dataclass(frozen=True)
class Config:
    # experiment
    env: str = "CartPole-v1"
    """environment id: any gymnax id, or one of ours (see envs.list_envs())"""
    seed: int = 0
    """seed of agent 0; agent i uses seed + i, so any agent can be re-run alone with --seed"""
    num_seeds: int = 1
    """independent agents trained in parallel in one compiled program (vmapped)"""
    total_timesteps: int = 500_000
    """env steps per agent"""
    # algorithm
    num_envs: int = 8
    """parallel envs per agent"""
    num_steps: int = 64
    """steps per env in each epoch (steps per epoch = num_envs * num_steps)"""
    baseline: Literal["value", "none"] = "value"
    """value: learned V(s) baseline, GAE-lambda advantages (SpinningUp VPG); none: reward-to-go, no critic"""
    pi_lr: float = 3e-4
    """Adam learning rate of the policy (one step per epoch)"""
    vf_lr: float = 1e-3
    """Adam learning rate of the value function"""
    train_v_iters: int = 80
    """full-batch value-function steps per epoch"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.97
    """lambda of generalised advantage estimation (value baseline only)"""
    normalize_advantages: bool = True
    """standardise the advantages (or reward-to-go) over each epoch"""
    normalize: Literal["auto", "on", "off"] = "auto"
    """running observation and reward normalisation; auto: on for continuous actions, off for discrete"""
    # network
    hidden_size: int = 64
    """width of the two hidden layers of policy and value networks"""
    activation: str = "tanh"
    """hidden activation: tanh or relu"""
    log_std_init: float = -0.5
    """initial log-std of the Gaussian policy (state-independent; continuous actions only)"""
    # evaluation and logging
    eval_episodes: int = 10
    """episodes of the deterministic final policy per agent"""
    track: bool = False
    """log to Weights & Biases"""
    wandb_project: str = "scanrl"
    """wandb project"""
    wandb_entity: str | None = None
    """wandb entity (team or user)"""
    wandb_group: str | None = None
    """wandb group"""
    out_dir: str = "runs"
    """parent directory of the run directory"""
    run_name: str | None = None
    """run directory name; default {env}__reinforce__{seed}__{unix time}"""
    log_every: int = 50
    """print progress (and log to wandb) every this many epochs"""
    profile: bool = False
    """write a JAX profiler trace of the first chunk of training to <run dir>/profile (Perfetto / TensorBoard)"""
    # chunks, checkpoints, resume and evaluation
    num_chunks: int = 1
    """train in this many equal chunks of epochs (one compiled scan, run K times with the state handed on): after
    each, metrics.csv and a checkpoint are written, and Ctrl-C or SIGTERM stop the run there, resumable"""
    keep_checkpoints: int = 2
    """how many of the newest checkpoints <run dir>/checkpoints keeps"""
    resume: str | None = None
    """continue the run in this run directory from its last checkpoint, with its config (only logging flags may
    differ)"""
    eval: str | None = None
    """do not train: load the last checkpoint of this run directory and print the returns of its deterministic
    policies over --eval-episodes episodes"""
    seed_index: int | None = None
    """with --eval: only the agent at this index of the run's seeds (0 is the run's --seed); default all"""
    gif: str | None = None
    """with --eval: also write one episode of the agent at --seed-index (default 0) to this path as an animated gif
    (envs gymnax can draw: classic control, MinAtar, bsuite Catch, misc)"""
    # scale out: sweeps, devices and processes
    sweep: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """field=v1,v2,...: train every value x every seed in one compiled program; repeat the flag for a grid
    (fields: pi_lr or lr, vf_lr, gamma, gae_lambda)"""
    num_devices: int | None = None
    """shard the agents over this many devices (default: as many as there are, or the most that divide the agents)"""
    coordinator_address: str | None = None
    """host:port of process 0 for a multi-process run (jax.distributed); every process gets the same flags"""
    num_processes: int = 1
    """processes of a multi-process run (one per host, or per GPU)"""
    process_id: int = 0
    """this process's index, 0 to --num-processes - 1; process 0 writes the run directory and wandb"""


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


class Actor(nn.Module):
    """SpinningUp's MLP policy: categorical logits, or a Gaussian mean with a state-independent log-std."""

    action_dim: int
    discrete: bool
    hidden_size: int
    activation: str
    log_std_init: float

    @nn.compact
    def __call__(self, obs):
        # Flax's default init, as SpinningUp keeps PyTorch's default init (no orthogonal init here).
        act = ACTIVATIONS[self.activation]
        x = act(nn.Dense(self.hidden_size)(obs))
        x = act(nn.Dense(self.hidden_size)(x))
        out = nn.Dense(self.action_dim)(x)
        if self.discrete:
            return distrax.Categorical(logits=out)
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (self.action_dim,))
        return distrax.MultivariateNormalDiag(out, jnp.exp(log_std))


class Critic(nn.Module):
    hidden_size: int
    activation: str

    @nn.compact
    def __call__(self, obs):
        act = ACTIVATIONS[self.activation]
        x = act(nn.Dense(self.hidden_size)(obs))
        x = act(nn.Dense(self.hidden_size)(x))
        return nn.Dense(1)(x).squeeze(-1)


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    done: jax.Array
    next_obs: jax.Array  # the true next observation, also at an auto-reset
    episode_return: jax.Array
    episode_length: jax.Array


class RunnerState(NamedTuple):
    actor_state: TrainState
    critic_state: TrainState
    env_state: object
    obs: jax.Array
    rng: jax.Array
    hparams: dict  # this agent's values of the SWEEPABLE fields, as arrays (a sweep gives each agent its own)


# Config fields that enter the jitted code as arrays, one value per agent: --sweep may vary them in one program.
SWEEPABLE = ("pi_lr", "vf_lr", "gamma", "gae_lambda")
SWEEP_ALIASES = {"lr": "pi_lr"}


def calculate_gae(rewards, values, next_values, terminated, dones, gamma, gae_lambda):
    """GAE-lambda along axis 0 (time) -> (advantages, advantages + values). Bootstraps from V(next obs)
    unless the episode terminated, so truncations and the epoch cut are bootstrapped; the recursion stops
    at every episode end, terminated or truncated (time limits are not failures)."""
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    decay = gamma * gae_lambda * (1.0 - dones)

    def _backward(advantage, step):
        delta, decay_t = step
        advantage = delta + decay_t * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(_backward, jnp.zeros_like(deltas[0]), (deltas, decay), reverse=True)
    return advantages, advantages + values


def reward_to_go(rewards, next_values, terminated, dones, gamma):
    """Discounted reward-to-go along axis 0, summed to the episode's end or the epoch cut, plus the discounted
    V(next obs) there unless the episode terminated. With zero next values it is plain REINFORCE's return;
    with a critic, SpinningUp's value target. GAE with lambda = 1 and zero values sums exactly this when
    V(next obs) is kept only where the sum stops."""
    stops = dones.at[-1].set(1.0)
    zeros = jnp.zeros_like(rewards)
    return calculate_gae(rewards, zeros, next_values * stops, terminated, dones, gamma, 1.0)[0]


def all_finite(tree):
    """True if no leaf of `tree` holds a NaN or an infinity."""
    return jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(tree)]))


def use_normalization(config: Config, discrete: bool) -> bool:
    return config.normalize == "on" or (config.normalize == "auto" and not discrete)


def make_networks(config: Config, env, env_params):
    discrete = envs.is_discrete(env, env_params)
    space = env.action_space(env_params)
    action_dim = space.n if discrete else int(np.prod(space.shape))
    actor = Actor(action_dim, discrete, config.hidden_size, config.activation, config.log_std_init)
    critic = Critic(config.hidden_size, config.activation)
    return actor, critic, discrete


def make_train(config: Config, log_fn=None):
    """Returns `train(rng) -> (runner_state, metrics)`, pure and jittable; metrics have a leading epoch axis.

    `log_fn(agent, epoch, metrics)`, if given, is called on the host every `log_every` epochs (once per
    agent when vmapped); it only reads values, so it cannot change the numbers a run produces.
    """
    init, run = make_train_parts(config, log_fn)

    def train(rng):
        return run(rng, init(rng), jnp.arange(num_iterations(config)))

    return train


def num_iterations(config: Config) -> int:
    """Iterations of the training scan: here, epochs (a rollout of num_envs x num_steps and its updates)."""
    return config.total_timesteps // (config.num_envs * config.num_steps)


def default_hparams(config: Config) -> dict:
    """The SWEEPABLE fields of `config`, as float32 arrays: an agent's hyperparameters when no sweep sets them."""
    return {k: jnp.float32(getattr(config, k)) for k in SWEEPABLE}


def make_train_parts(config: Config, log_fn=None):
    """`train` in two pure, jittable parts: `init(rng, hparams=None) -> runner_state` (hparams: a dict of this
    agent's SWEEPABLE values; default the config's) and `run(agent, runner_state, epochs) -> (runner_state,
    metrics)`, which runs the epochs numbered `epochs` (a 1-D array) in one `lax.scan`; `agent` only labels the
    calls of `log_fn`. Chunked training calls `run` on consecutive slices of `arange(num_epochs)`: the
    same compiled scan body, so any chunking gives the numbers of one call over all of them, bit for bit
    (`train(rng)`, compiled as one fused program, agrees with them to float rounding)."""
    steps_per_epoch = config.num_envs * config.num_steps
    env, env_params = envs.make_vec(config.env, config.num_envs)
    actor, critic, discrete = make_networks(config, env, env_params)
    if use_normalization(config, discrete):
        env, env_params = envs.make_vec(
            config.env, config.num_envs, normalize_obs=True, normalize_reward=True, gamma=config.gamma
        )
    learn_value = config.baseline == "value"
    # inject_hyperparams keeps each learning rate in its optimizer state, as an array: each agent of a sweep
    # carries its own (set in init). optax.flatten runs Adam on one flat vector: a few large ops per step instead
    # of a few per parameter array, and a fusion XLA compiles alike with or without sharding (per-array Adam
    # rounded its bias correction differently on 1 and 2 devices).
    actor_tx = optax.flatten(optax.inject_hyperparams(optax.adam)(learning_rate=config.pi_lr))
    critic_tx = optax.flatten(optax.inject_hyperparams(optax.adam)(learning_rate=config.vf_lr))

    def with_learning_rate(state, learning_rate):
        opt_state = state.opt_state._replace(hyperparams={"learning_rate": jnp.asarray(learning_rate, jnp.float32)})
        return state.replace(opt_state=opt_state)

    def init(rng, hparams=None):
        hparams = default_hparams(config) if hparams is None else hparams
        rng, key_actor, key_critic, key_reset = jax.random.split(rng, 4)
        obs, env_state = env.reset(key_reset, env_params)
        actor_state = TrainState.create(apply_fn=actor.apply, params=actor.init(key_actor, obs[0]), tx=actor_tx)
        critic_state = TrainState.create(apply_fn=critic.apply, params=critic.init(key_critic, obs[0]), tx=critic_tx)
        actor_state = with_learning_rate(actor_state, hparams["pi_lr"])
        critic_state = with_learning_rate(critic_state, hparams["vf_lr"])
        return RunnerState(actor_state, critic_state, env_state, obs, rng, hparams)

    def run(agent, runner, epochs):
        hp = runner.hparams  # this agent's hyperparameters (arrays, constant over training)

        def _env_step(runner, _):
            actor_state, critic_state, env_state, obs, rng, hparams = runner
            rng, key_action, key_step = jax.random.split(rng, 3)
            action = actor.apply(actor_state.params, obs).sample(seed=key_action)
            next_obs, env_state, reward, terminated, truncated, info = env.step(
                key_step, env_state, action, env_params
            )
            transition = Transition(
                obs, action, reward, terminated.astype(jnp.float32), info["episode_done"].astype(jnp.float32),
                info["final_observation"], info["episode_return"], info["episode_length"],
            )
            return RunnerState(actor_state, critic_state, env_state, next_obs, rng, hparams), transition

        def _actor_loss(params, obs, action, advantage):
            pi = actor.apply(params, obs)
            log_prob = pi.log_prob(action)
            # The policy-gradient estimator E[grad log pi(a|s) * A] (SpinningUp VPG, "pi loss").
            return -(log_prob * advantage).mean(), (log_prob, pi.entropy().mean())

        def _critic_loss(params, obs, target):
            return ((critic.apply(params, obs) - target) ** 2).mean()

        def _update_critic(critic_state, obs, target):
            loss, grads = jax.value_and_grad(_critic_loss)(critic_state.params, obs, target)
            return critic_state.apply_gradients(grads=grads), loss

        def _epoch(runner, epoch):
            runner, traj = jax.lax.scan(_env_step, runner, None, config.num_steps)
            actor_state, critic_state, env_state, obs, rng, hparams = runner
            if learn_value:
                # V(obs) and V(next obs) in one batched pass each, outside the rollout scan.
                values = critic.apply(critic_state.params, traj.obs)
                next_values = critic.apply(critic_state.params, traj.next_obs)
                advantages, _ = calculate_gae(
                    traj.reward, values, next_values, traj.terminated, traj.done, hp["gamma"], hp["gae_lambda"]
                )
                targets = reward_to_go(traj.reward, next_values, traj.terminated, traj.done, hp["gamma"])
            else:
                # Plain REINFORCE: weight log pi by the reward-to-go itself, cut (not bootstrapped) at the epoch end.
                no_values = jnp.zeros_like(traj.reward)
                advantages = targets = reward_to_go(traj.reward, no_values, traj.terminated, traj.done, hp["gamma"])
            obs_batch, action_batch, advantages, targets = jax.tree.map(
                lambda x: x.reshape((steps_per_epoch,) + x.shape[2:]), (traj.obs, traj.action, advantages, targets)
            )
            if config.normalize_advantages:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

            # One policy-gradient step on the whole epoch.
            (actor_loss, (old_log_prob, entropy)), grads = jax.value_and_grad(_actor_loss, has_aux=True)(
                actor_state.params, obs_batch, action_batch, advantages
            )
            actor_state = actor_state.apply_gradients(grads=grads)
            new_log_prob = actor.apply(actor_state.params, obs_batch).log_prob(action_batch)
            approx_kl = (old_log_prob - new_log_prob).mean()  # SpinningUp's KL diagnostic
            if learn_value:
                # train_v_iters full-batch regressions onto the reward-to-go (SpinningUp's value target).
                critic_state, critic_losses = jax.lax.scan(
                    lambda state, _: _update_critic(state, obs_batch, targets), critic_state, None,
                    config.train_v_iters,
                )
                critic_loss = critic_losses[0]  # before this epoch's fit, as SpinningUp reports LossV
            else:
                critic_loss = jnp.float32(jnp.nan)

            episodes = traj.done.sum()
            metrics = {
                "env_steps": (epoch + 1) * steps_per_epoch,
                "episodes": episodes,
                # Mean over the episodes that ended in this epoch; NaN if none did.
                "episode_return": (traj.episode_return * traj.done).sum() / episodes,
                "episode_length": (traj.episode_length * traj.done).sum() / episodes,
                "loss/actor": actor_loss,
                "loss/critic": critic_loss,
                "entropy": entropy,
                "approx_kl": approx_kl,
                # Checked by the host after each chunk: no sync here. (loss/critic is NaN by design without a
                # learned baseline; the critic's parameters and Adam moments are checked instead.)
                "nonfinite": ~all_finite((actor_state, critic_state, actor_loss)),
            }
            if log_fn is not None:
                jax.lax.cond(
                    (epoch + 1) % config.log_every == 0,
                    lambda: jax.debug.callback(log_fn, agent, epoch, metrics),
                    lambda: None,
                )
            return RunnerState(actor_state, critic_state, env_state, obs, rng, hparams), metrics

        return jax.lax.scan(_epoch, runner, epochs)

    return init, run


def deterministic_policy(config: Config, runner):
    """`act(obs batch) -> actions`: one agent's deterministic policy (argmax / mean action), with training's
    observation statistics frozen."""
    env, env_params = envs.make_vec(config.env, 1)
    actor, _, _ = make_networks(config, env, env_params)
    stats = envs.observation_stats(runner.env_state)

    def act(obs):
        if stats is not None:
            obs = envs.normalize_observation(stats, obs)
        return actor.apply(runner.actor_state.params, obs).mode()

    return act


def make_evaluate(config: Config):
    """Returns `evaluate(rng, runner_state) -> (eval_episodes,)` returns of the deterministic policy on fresh
    episodes."""
    env, env_params = envs.make_vec(config.env, config.eval_episodes)

    def evaluate(rng, runner):
        return envs.evaluate(env, env_params, deterministic_policy(config, runner), rng,
                             env_params.max_steps_in_episode)

    return evaluate


# ----------------------------------------------------------------------------------------------------------
# Checking the config, and everything written to the run directory.


def validate(config: Config) -> str | None:
    """Returns one line saying what is wrong with the config, or None if it can be trained."""
    for name in ("num_seeds", "total_timesteps", "num_envs", "num_steps", "train_v_iters", "hidden_size",
                 "eval_episodes", "log_every", "num_chunks", "keep_checkpoints"):
        if getattr(config, name) <= 0:
            return f"--{name.replace('_', '-')} must be a positive integer, got {getattr(config, name)}"
    for name in ("pi_lr", "vf_lr"):
        if not getattr(config, name) > 0:
            return f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}"
    if not 0 <= config.gamma <= 1 or not 0 <= config.gae_lambda <= 1:
        return "--gamma and --gae-lambda must lie in [0, 1]"
    if config.num_devices is not None and config.num_devices <= 0:
        return f"--num-devices must be a positive integer, got {config.num_devices}"
    if not 0 <= config.process_id < config.num_processes:
        return (f"--process-id {config.process_id} must lie in 0 to --num-processes - 1 "
                f"({config.num_processes - 1})")
    if config.activation not in ACTIVATIONS:
        return f"--activation {config.activation!r} is unknown; use one of {', '.join(ACTIVATIONS)}"
    try:
        env, env_params = envs.make(config.env)
        discrete = envs.is_discrete(env, env_params)
    except ValueError as error:
        return f"--env: {error}"
    try:
        points = sweep_points(config)
    except ValueError as error:
        return str(error)
    if len(points) > 1:
        if "gamma" in points[0] and use_normalization(config, discrete):
            return ("--sweep gamma: the reward normaliser (--normalize) is built with one gamma; sweep gamma with "
                    "--normalize off, or run one job per value")
        unused = [k for k in ("vf_lr", "gae_lambda") if k in points[0]]
        if unused and config.baseline == "none":
            return (f"--sweep {unused[0]}: --baseline none learns no value function, so it changes nothing; "
                    "sweep it with --baseline value")
        for point in points:  # every value must be valid on its own
            error = validate(Config(**{**asdict(config), **point, "sweep": ()}))
            if error:
                return f"--sweep {point_label(point)}: {error}"
    steps_per_epoch = config.num_envs * config.num_steps
    if config.total_timesteps < steps_per_epoch:
        return (f"--total-timesteps {config.total_timesteps} is smaller than one epoch "
                f"(--num-envs x --num-steps = {steps_per_epoch}); raise it or shrink the epoch")
    num_epochs = config.total_timesteps // steps_per_epoch
    if num_epochs % config.num_chunks:
        divisors = [d for d in range(1, min(num_epochs, 1000) + 1) if num_epochs % d == 0]
        return (f"--num-chunks {config.num_chunks} does not divide the {num_epochs} epochs (--total-timesteps // "
                f"epoch size); use one of {', '.join(map(str, divisors))}")
    return None


METRIC_KEYS = ("env_steps", "episodes", "episode_return", "episode_length",
               "loss/actor", "loss/critic", "entropy", "approx_kl", "nonfinite")


class MetricsCsv:
    """<run dir>/metrics.csv, one row per epoch and agent, appended as each chunk ends: a killed run loses at
    most the chunk it was in. Rows go epoch by epoch, so any chunking writes the same file."""

    def __init__(self, path, keep_iterations=0, make_dir=False):
        self.path = path
        if make_dir:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        kept = []
        if keep_iterations and os.path.exists(path):
            # Resuming: rows past the checkpoint (written before a crash cut its save short) go, the rest stay as
            # written.
            with open(path, newline="") as f:
                kept = [row for row in list(csv.reader(f))[1:] if int(row[1]) < keep_iterations]
        with open(f"{path}.tmp", "w", newline="") as f:
            csv.writer(f).writerows([["seed", "epoch", *METRIC_KEYS], *kept])
        os.replace(f"{path}.tmp", path)

    def append(self, seeds, first, metrics):
        with open(self.path, "a", newline="") as f:
            writer = csv.writer(f)
            for u in range(metrics["env_steps"].shape[1]):
                for i, seed in enumerate(seeds):
                    writer.writerow([seed, first + u, *(metrics[k][i, u] for k in METRIC_KEYS)])


class Progress:
    """Host side of the logging callback: gathers one epoch's metrics from every agent this process trains, then
    prints a line (process 0) and logs each sweep point to its wandb run. Training never waits on it beyond the
    call itself."""

    def __init__(self, config: Config, points, agents, wandb_runs):
        self.seed, self.num_seeds, self.points = config.seed, config.num_seeds, points
        self.agents = set(agents)  # the agent indices this process trains
        self.wandb_runs = wandb_runs  # one per sweep point, or None
        self.pending = {}
        self.lock = threading.Lock()
        self.start = time.perf_counter()
        self.start_steps = 0  # env steps per agent already done when `start` was taken (a resumed run)

    def __call__(self, agent, epoch, metrics):
        agent, epoch = int(agent), int(epoch)
        with self.lock:
            got = self.pending.setdefault(epoch, {})
            got[agent] = {k: float(v) for k, v in metrics.items()}
            if len(got) < len(self.agents):
                return
            del self.pending[epoch]
        if jax.process_index() == 0:
            self._emit(epoch, got)

    def _emit(self, epoch, by_agent):
        agents = sorted(by_agent)
        returns = np.array([by_agent[a]["episode_return"] for a in agents])
        env_steps = int(by_agent[agents[0]]["env_steps"])
        sps = (env_steps - self.start_steps) * len(agents) / (time.perf_counter() - self.start)
        line = f"epoch {epoch + 1:6d}  env_steps {env_steps:10d}  sps {sps:10.0f}  {describe_returns(returns)}"
        if len(self.points) > 1:
            means = [nanmean([by_agent[a]["episode_return"] for a in agents if a // self.num_seeds == p])
                     for p in range(len(self.points))]
            line += "  by point: " + " ".join(f"{m:.1f}" for m in means)
        if len(agents) < len(self.points) * self.num_seeds:
            line += f"  ({len(agents)} agents of process 0)"
        print(line, flush=True)
        for p, wandb_run in enumerate(self.wandb_runs or []):
            mine = [a for a in agents if a // self.num_seeds == p]
            if wandb_run is None or not mine:
                continue
            log = {"sps": sps * len(mine) / len(agents)}
            for key in METRIC_KEYS[1:]:
                log[f"{key}/mean"] = nanmean([by_agent[a][key] for a in mine])
            point_returns = [by_agent[a]["episode_return"] for a in mine]
            log["episode_return/min"] = np.nan if np.all(np.isnan(point_returns)) else np.nanmin(point_returns)
            log["episode_return/max"] = np.nan if np.all(np.isnan(point_returns)) else np.nanmax(point_returns)
            log.update({f"episode_return/seed_{self.seed + a % self.num_seeds}": by_agent[a]["episode_return"]
                        for a in mine})
            safe_wandb(wandb_run.log, log, step=env_steps)


def nanmean(values):
    """Mean of the non-NaN values; NaN (without a warning) if there are none."""
    values = np.asarray(values, dtype=float)
    return np.nan if np.all(np.isnan(values)) else float(np.nanmean(values))


def describe_returns(returns):
    if np.all(np.isnan(returns)):
        return "no episode ended"
    return (f"return mean {np.nanmean(returns):8.2f}  min {np.nanmin(returns):8.2f}  "
            f"max {np.nanmax(returns):8.2f}")


# ----------------------------------------------------------------------------------------------------------
# Checkpoints, resume, evaluation of a saved run, and stopping cleanly.


def fail(message):
    """A user error: one line on stderr, exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


class Checkpoints:
    """<run dir>/checkpoints/<iterations done>/, written with orbax: the runner state of every agent (networks,
    optimizer, env states, RNG keys), the metrics so far (item "history": orbax reserves "metrics") and the
    config. Saves are asynchronous: the next chunk trains while the files are written."""

    def __init__(self, run_dir, keep=None):
        # keep=None opens an existing run read-only (--eval).
        self.manager = ocp.CheckpointManager(
            os.path.abspath(os.path.join(run_dir, "checkpoints")),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=keep is not None,
                                                 read_only=keep is None),
        )

    def save(self, done, runner, metrics, config: Config):
        meta = {"algo": "reinforce", "env": config.env, "iterations": done, "config": asdict(config)}
        self.manager.save(done, args=ocp.args.Composite(
            runner=ocp.args.StandardSave(runner), history=ocp.args.StandardSave(metrics),
            meta=ocp.args.JsonSave(meta),
        ))

    def restore(self, run_dir, flag, config: Config, abstract_runner, with_metrics):
        """-> (runner, metrics or None, iterations done) of the newest checkpoint; a clear exit-2 error for a
        missing or damaged one, or one of another script or env."""
        step = self.manager.latest_step()
        if step is None:
            fail(f"{flag}: {run_dir} has no checkpoint in checkpoints/; was it started before checkpoints "
                 "existed, or killed before its first chunk ended?")
        where = os.path.join(run_dir, "checkpoints", str(step))
        try:
            meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
            if meta["algo"] != "reinforce" or meta["env"] != config.env:
                fail(f"{flag}: checkpoint {where} is of {meta['algo']} on {meta['env']}, but the run is reinforce on "
                     f"{config.env}; it does not belong to this run directory")
            items = {"runner": ocp.args.StandardRestore(abstract_runner)}
            if with_metrics:
                items["history"] = ocp.args.StandardRestore()
            restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        except (OSError, ValueError, KeyError, TypeError) as error:
            fail(f"{flag}: checkpoint {where} cannot be read ({type(error).__name__}: "
                 f"{str(error).splitlines()[0] if str(error) else ''}); it is damaged or incomplete")
        metrics = jax.tree.map(np.asarray, dict(restored.history)) if with_metrics else None
        return restored.runner, metrics, step

    def close(self):
        self.manager.wait_until_finished()
        self.manager.close()


# Flags that change what is logged, not what is computed: they may differ on --resume and --eval.
RUN_FLAGS = ("track", "wandb_project", "wandb_entity", "wandb_group", "out_dir", "run_name", "log_every",
             "profile", "keep_checkpoints", "resume", "eval", "seed_index", "eval_episodes",
             "gif", "num_devices", "coordinator_address", "num_processes", "process_id")


def read_run_config(run_dir, flag) -> dict:
    """The config.json of a ppo run directory, as a dict; a clear exit-2 error otherwise."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isdir(run_dir):
        fail(f"{flag}: no run directory {run_dir}")
    try:
        with open(path) as f:
            saved = json.load(f)
        algo = saved.pop("algo")
        if algo == "reinforce":
            return {k: v for k, v in saved.items() if k in Config.__dataclass_fields__}
    except (OSError, ValueError, KeyError, AttributeError):
        fail(f"{flag}: {path} is missing or unreadable; is {run_dir} a run directory of reinforce.py?")
    fail(f"{flag}: {run_dir} is a run of {algo}, not of reinforce; use that script")


def resumed_config(config: Config) -> Config:
    """The run's own config, with the logging flags given on this command line; any other flag that differs
    from the run's would change its results, and is refused."""
    saved = read_run_config(config.resume, "--resume")
    # Compared as JSON, the form config.json holds (tuples are lists there).
    given, defaults, as_saved = (json.loads(json.dumps(c)) for c in (asdict(config), asdict(Config()), saved))
    changed = [k for k in saved if k not in RUN_FLAGS and given[k] != defaults[k] and given[k] != as_saved[k]]
    if changed:
        flags = ", ".join(f"--{k.replace('_', '-')} {given[k]} (run: {saved[k]})" for k in changed)
        fail(f"--resume: {flags} would change the run's results; drop it to resume, or start a new run")
    overrides = {k: getattr(config, k) for k in RUN_FLAGS if given[k] != defaults[k]}
    return Config(**{**saved, **overrides, "resume": config.resume, "eval": None})


class StopRequest:
    """SIGINT (Ctrl-C) or SIGTERM during training is remembered and acted on when the running chunk ends; a
    second one stops at once."""

    def __init__(self):
        self.signal = None
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum, frame):
        if self.signal is not None:
            self.restore()
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum)
        print(f"\n{self.signal.name}: stopping when this chunk ends (again to abort at once)", file=sys.stderr,
              flush=True)

    def restore(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def nonfinite_message(seeds, first, flags, last_good):
    rows, iterations = np.nonzero(flags)
    bad = ", ".join(str(seeds[i]) for i in sorted(set(rows.tolist())))
    kept = f"the last good checkpoint is at epoch {last_good}" if last_good else "no checkpoint was written"
    return (f"error: non-finite loss or parameters in seed(s) {bad}, first at epoch {first + iterations.min()} "
            f"(metrics.csv's numbering); training stopped, {kept}. Lower --pi-lr or --vf-lr")


def stop_run(checkpoints, wandb_runs, message, code):
    """Ends a run before its last chunk: waits for the checkpoint being written, says why on stderr, exits."""
    checkpoints.close()
    print(message, file=sys.stderr)
    for wandb_run in wandb_runs or []:
        if wandb_run is not None:
            safe_wandb(wandb_run.finish, exit_code=1)
    sys.exit(code)


def seed_keys(config: Config):
    return jnp.stack([jax.random.PRNGKey(config.seed + i) for i in range(config.num_seeds)])


# ----------------------------------------------------------------------------------------------------------
# Scale out: sweep points x seeds are the agents of one program, split over devices and processes.


def sweep_points(config: Config) -> list[dict]:
    """The grid of --sweep values, one dict {field: value} per point (one empty point without --sweep); the last
    --sweep flag varies fastest. A bad spec raises ValueError with one line saying what to do."""
    fields, grids = [], []
    for spec in config.sweep:
        name, sep, values = spec.partition("=")
        name = SWEEP_ALIASES.get(name.strip().replace("-", "_"), name.strip().replace("-", "_"))
        if not sep or not name or not values.strip():
            raise ValueError(f"--sweep {spec!r} is malformed; write field=v1,v2,... (e.g. --sweep lr=1e-3,3e-4)")
        if name in ("seed", "num_seeds"):
            raise ValueError(f"--sweep {name}: seeds are vmapped already; use --seed and --num-seeds")
        if name not in Config.__dataclass_fields__:
            raise ValueError(f"--sweep {spec!r}: reinforce has no field {name!r}; sweepable: {', '.join(SWEEPABLE)}")
        if name not in SWEEPABLE:
            raise ValueError(f"--sweep {name}: it changes array shapes or the compiled program, so one program "
                             f"cannot vary it; run one job per value (sweepable: {', '.join(SWEEPABLE)})")
        if name in fields:
            raise ValueError(f"--sweep {name} is given twice; list all its values in one flag")
        try:
            parsed = [float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"--sweep {spec!r}: the values must be numbers separated by commas, "
                             "e.g. --sweep lr=1e-3,3e-4") from None
        if len(set(parsed)) < len(parsed):
            raise ValueError(f"--sweep {spec!r} repeats a value")
        fields.append(name)
        grids.append(parsed)
    return [dict(zip(fields, values, strict=True)) for values in itertools.product(*grids)]


def point_label(point: dict) -> str:
    """`pi_lr=0.001,gamma=0.99`: a sweep point's name, also its directory in the run directory."""
    return ",".join(f"{k}={v:g}" for k, v in point.items())


def agent_layout(config: Config, points):
    """Agents point-major: agent p * num_seeds + s trains sweep point p with seed config.seed + s, so every point
    sees the seeds a run without --sweep would. -> (keys, hparams {field: (agents,)}, names), numpy."""
    keys = np.tile(np.asarray(seed_keys(config)), (len(points), 1))
    hparams = {k: np.array([p.get(k, getattr(config, k)) for p in points for _ in range(config.num_seeds)],
                           np.float32) for k in SWEEPABLE}
    names = [str(config.seed + s) if len(points) == 1 else f"{config.seed + s} at {point_label(p)}"
             for p in points for s in range(config.num_seeds)]
    return keys, hparams, names


def choose_devices(config: Config, num_agents: int) -> list:
    """The devices the agents are split over: all of them (every process's), or --num-devices of them; without
    --num-devices on one process, the most that divide the agents. A split that does not divide is refused."""
    devices = jax.devices()
    what = f"{num_agents} agents (--num-seeds x sweep points)"
    if jax.process_count() > 1:
        if config.num_devices not in (None, len(devices)) or num_agents % len(devices):
            fail(f"{what} must split evenly over all {len(devices)} devices of the {jax.process_count()} "
                 f"processes; use a multiple of {len(devices)} agents")
        return devices
    if config.num_devices is not None:
        if config.num_devices > len(devices):
            fail(f"--num-devices {config.num_devices}: this process sees {len(devices)} device(s)")
        if num_agents % config.num_devices:
            fail(f"{what} do not divide over --num-devices {config.num_devices}; use a divisor of {num_agents}")
        return devices[:config.num_devices]
    count = max(d for d in range(1, len(devices) + 1) if num_agents % d == 0)
    if count < len(devices):
        print(f"note: {what} do not divide over {len(devices)} devices; training on {count} "
              "(--num-devices chooses)")
    return devices[:count]


def over_agents(fn, mesh, in_axes):
    """jit(vmap(fn)) with the agent axis split over the mesh: each device runs the vmapped fn on its own agents
    (shard_map), with no communication between devices; arguments with in_axes None are replicated."""
    specs = tuple(PartitionSpec("agents") if a == 0 else PartitionSpec() for a in in_axes)
    return jax.jit(jax.shard_map(jax.vmap(fn, in_axes=in_axes), mesh=mesh, in_specs=specs,
                                 out_specs=PartitionSpec("agents"), check_vma=False))


def to_agents(tree, sharding):
    """Numpy arrays holding every agent's rows -> jax Arrays split over the agents' devices (each process places
    only the rows of its own devices)."""
    return jax.tree.map(lambda x: jax.make_array_from_callback(x.shape, sharding, lambda i: x[i]), tree)


def init_agents(init, sharding, keys, hparams):
    """jit(vmap(init)) on each of this process's devices for that device's agents, one device after the other,
    assembled into arrays split over the agents. One after the other: XLA:CPU (jax 0.10.2) deadlocked running
    ppo's orthogonal initialiser's QR decompositions on two host devices at once (init runs once, so this costs
    little here too)."""
    jitted, shards = jax.jit(jax.vmap(init)), []
    for device, index in sharding.addressable_devices_indices_map(keys.shape[:1]).items():
        local = jax.device_put((keys[index], {k: v[index] for k, v in hparams.items()}), device)
        shards.append(jax.block_until_ready(jitted(*local)))
    return jax.tree.map(lambda *xs: jax.make_array_from_single_device_arrays(
        (len(keys),) + xs[0].shape[1:], sharding, list(xs)), *shards)


def gather(tree):
    """Every agent's values as numpy on this host; with several processes a collective that all of them join."""
    if jax.process_count() > 1:
        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


def point_rows(tree, p, num_seeds):
    """Sweep point p's agents (point-major: rows p * num_seeds to (p + 1) * num_seeds - 1) of every array."""
    return jax.tree.map(lambda x: x[p * num_seeds:(p + 1) * num_seeds], tree)


def evaluate_run(config: Config):
    """--eval: the deterministic policies of a saved run, on the same episodes as its summary's eval_return
    (unless --eval-episodes changes their number)."""
    saved = read_run_config(config.eval, "--eval")
    episodes = config.eval_episodes if config.eval_episodes != Config.eval_episodes else saved["eval_episodes"]
    if episodes <= 0:
        fail(f"--eval-episodes must be a positive integer, got {episodes}")
    run_config = Config(**{**saved, "eval_episodes": episodes})
    keys, hparams, names = agent_layout(run_config, sweep_points(run_config))
    if config.seed_index is not None and not 0 <= config.seed_index < len(keys):
        fail(f"--seed-index {config.seed_index} is out of range: the run has {len(keys)} agents "
             f"(indices 0 to {len(keys) - 1})")
    if config.gif is not None and not envs.can_draw(run_config.env):
        fail(f"--gif: gymnax cannot draw {run_config.env}; drop --gif, or evaluate a run on a classic-control, "
             "MinAtar or misc env")
    init, _ = make_train_parts(run_config)
    abstract_runner = jax.eval_shape(jax.vmap(init), keys, hparams)
    checkpoints = Checkpoints(config.eval)
    runner, _, done = checkpoints.restore(config.eval, "--eval", run_config, abstract_runner, False)
    checkpoints.close()
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    returns = np.asarray(jax.jit(jax.vmap(make_evaluate(run_config)))(eval_keys, runner))
    indices = range(len(keys)) if config.seed_index is None else [config.seed_index]
    print(f"reinforce on {run_config.env}, checkpoint after {done} epochs: deterministic policy, "
          f"{episodes} episodes per agent")
    for i in indices:
        print(f"seed {names[i]} (index {i}): mean {returns[i].mean():.2f}  returns "
              + " ".join(f"{r:.1f}" for r in returns[i]))
    if len(indices) > 1:
        print(f"mean over agents: {returns.mean():.2f}")
    if config.gif is not None:
        index = config.seed_index or 0
        agent = jax.tree.map(lambda x: x[index], runner)
        act = deterministic_policy(run_config, agent)
        total, length = envs.record_episode(run_config.env, act, eval_keys[index], config.gif)
        print(f"one episode of seed {names[index]} (index {index}): return {total:.1f} in {length} "
              f"steps, drawn to {config.gif}")


def safe_wandb(fn, *args, **kwargs):
    """Calls a wandb function; a wandb failure becomes a one-line warning, never a stopped run."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - wandb may raise anything; training must go on
        print(f"warning: wandb: {type(error).__name__}: {error}", file=sys.stderr)
        return None


def start_wandb(config: Config, run_name, run_dir, group, values):
    """A wandb run (one per sweep point, grouped by the sweep), its config holding the point's values."""
    try:
        import wandb

        return wandb.init(
            project=config.wandb_project, entity=config.wandb_entity, group=group, name=run_name,
            config={**asdict(config), **values}, dir=run_dir, reinit="create_new",
        )
    except Exception as error:  # noqa: BLE001
        print(f"warning: wandb could not start ({type(error).__name__}: {error}); "
              "training goes on with local files only", file=sys.stderr)
        return None


def finish_wandb(wandb_run, summary, curve_path):
    def _finish():
        import wandb

        wandb_run.log({"learning_curve": wandb.Image(curve_path)})
        wandb_run.summary.update(summary)
        wandb_run.finish()

    safe_wandb(_finish)


def final_returns(metrics):
    """Per seed: mean return of the episodes that ended in the last 10% of epochs."""
    num_epochs = metrics["episodes"].shape[1]
    tail = slice(num_epochs - max(1, num_epochs // 10), None)
    episodes = metrics["episodes"][:, tail]
    total = np.nansum(metrics["episode_return"][:, tail] * episodes, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / episodes.sum(axis=1)


def plot_learning_curve(path, metrics, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = metrics["env_steps"][0]
    returns = metrics["episode_return"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no episode ended yet
        mean, low, high = np.nanmean(returns, 0), np.nanmin(returns, 0), np.nanmax(returns, 0)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, label=f"mean over {returns.shape[0]} seeds")
    ax.fill_between(steps, low, high, alpha=0.25, label="min to max")
    ax.set_xlabel("env steps per agent")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def to_json(x):
    x = np.asarray(x)
    return [None if np.isnan(v) else float(v) for v in x.ravel()]


def write_point(point_dir, config: Config, seeds, metrics, eval_returns, extra) -> dict:
    """learning_curve.png and summary.json of one sweep point (the whole run without --sweep) -> the summary."""
    plot_learning_curve(os.path.join(point_dir, "learning_curve.png"), metrics, f"reinforce on {config.env}")
    env_steps = int(metrics["env_steps"][0, -1])
    final = final_returns(metrics)
    summary = {"algo": "reinforce", "env": config.env, "num_seeds": config.num_seeds, "seeds": seeds,
               "total_timesteps": config.total_timesteps, "env_steps": env_steps, **extra,
               "final_return": to_json(final), "eval_return": to_json(eval_returns)}
    with open(os.path.join(point_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"final return (last 10% of training): mean {nanmean(final):.2f}, per seed "
          + " ".join(f"{r:.1f}" for r in final))
    print(f"eval return (deterministic policy):  mean {eval_returns.mean():.2f}, per seed "
          + " ".join(f"{r:.1f}" for r in eval_returns))
    return summary


def main(config: Config):
    if config.eval is not None:
        evaluate_run(config)
        return
    if config.resume is not None:
        config = resumed_config(config)
    error = validate(config)
    if error:
        fail(error)
    points = sweep_points(config)
    keys, hparams, names = agent_layout(config, points)
    mesh = Mesh(np.array(choose_devices(config, len(keys))), ("agents",))
    sharding = NamedSharding(mesh, PartitionSpec("agents"))
    lead = jax.process_index() == 0  # process 0 writes the run directory and wandb
    if config.resume is not None:
        run_dir = config.resume
        run_name = os.path.basename(os.path.normpath(run_dir))
    else:
        # Brax ids hold a '/' (and maybe a ':'); neither belongs in a directory name.
        env_name = config.env.replace("/", "-").replace(":", "-")
        stamp = int(time.time())
        if jax.process_count() > 1:  # one name for every process
            stamp = int(multihost_utils.broadcast_one_to_all(np.int32(stamp)))
        run_name = config.run_name or f"{env_name}__reinforce__{config.seed}__{stamp}"
        run_dir = os.path.join(config.out_dir, run_name)
        if os.path.isdir(run_dir) and os.listdir(run_dir):
            fail(f"run directory {run_dir} exists and is not empty; choose another --run-name, or --resume it")
        if jax.process_count() > 1:  # every process has checked before process 0 creates it
            multihost_utils.sync_global_devices("run directory checked")
        if lead:
            os.makedirs(run_dir, exist_ok=True)
            with open(os.path.join(run_dir, "config.json"), "w") as f:
                json.dump({"algo": "reinforce", **asdict(config), "resume": None}, f, indent=2)
    sweep = len(points) > 1
    point_dirs = [os.path.join(run_dir, point_label(p)) if sweep else run_dir for p in points]
    wandb_runs = None
    if config.track and lead:
        wandb_runs = [start_wandb(config, f"{run_name}/{point_label(p)}" if sweep else run_name, run_dir,
                                  group=(config.wandb_group or run_name) if sweep else config.wandb_group,
                                  values=p) for p in points]

    seeds = [config.seed + i for i in range(config.num_seeds)]
    num_epochs = num_iterations(config)
    chunk = num_epochs // config.num_chunks
    local = [i for index in sharding.addressable_devices_indices_map(keys.shape[:1]).values()
             for i in range(len(keys))[index[0]]]
    progress = Progress(config, points, local, wandb_runs)
    init, run = make_train_parts(config, log_fn=progress)
    run = over_agents(run, mesh, (0, 0, None))
    agent_ids = to_agents(np.arange(len(keys), dtype=np.int32), sharding)
    # From here on Ctrl-C or SIGTERM (during compile too) stop the run where the running chunk ends, resumable.
    stop = StopRequest()
    try:
        if lead:
            agents = f"{config.num_seeds} seeds x {len(points)} sweep points" if sweep else f"{len(keys)} agents"
            print(f"reinforce on {config.env}: {agents} x {config.total_timesteps} steps in {config.num_chunks} "
                  f"chunk(s) on {mesh.devices.size} device(s), run dir {run_dir}", flush=True)
        checkpoints = Checkpoints(run_dir, config.keep_checkpoints)
        done, history = 0, None
        t0 = time.perf_counter()
        if config.resume is not None:
            abstract_runner = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                                           jax.eval_shape(jax.vmap(init), keys, hparams))
            runner, history, done = checkpoints.restore(run_dir, "--resume", config, abstract_runner, True)
            if lead:
                print(f"resuming after epoch {done} of {num_epochs}")
        else:
            runner = init_agents(init, sharding, keys, hparams)
        compiled = run.lower(agent_ids, runner, jnp.arange(chunk)).compile()
        compile_s = time.perf_counter() - t0
        if lead:
            print(f"compiled in {compile_s:.1f} s")
            metrics_csvs = [MetricsCsv(os.path.join(d, "metrics.csv"), keep_iterations=done, make_dir=sweep)
                            for d in point_dirs]
        profile_dir = os.path.join(run_dir, "profile")
        progress.start, progress.start_steps = time.perf_counter(), done * config.num_envs * config.num_steps
        for start in range(done, num_epochs, chunk):
            traced = config.profile and start == done and lead
            with jax.profiler.trace(profile_dir, create_perfetto_trace=True) if traced else nullcontext():
                runner, metrics = compiled(agent_ids, runner, start + jnp.arange(chunk))
                metrics = gather(metrics)
            jax.effects_barrier()  # the chunk's progress lines are out before anything below
            if lead:
                for p, metrics_csv in enumerate(metrics_csvs):
                    metrics_csv.append(seeds, start, point_rows(metrics, p, config.num_seeds))
            if metrics["nonfinite"].any():
                stop_run(checkpoints, wandb_runs, nonfinite_message(names, start, metrics["nonfinite"], start), 1)
            history = metrics if history is None else jax.tree.map(
                lambda a, b: np.concatenate([a, b], axis=1), history, metrics)
            checkpoints.save(start + chunk, runner, history, config)
            signum = stop.signal or 0
            if jax.process_count() > 1:  # a signal to any process stops them all
                signum = int(np.max(multihost_utils.process_allgather(np.int32(signum))))
            if signum and start + chunk < num_epochs:
                message = (f"{signal.Signals(signum).name}: stopped after epoch {start + chunk} of {num_epochs}, "
                           f"metrics and checkpoint written; continue with: python reinforce.py --resume {run_dir}")
                stop_run(checkpoints, wandb_runs, message, 128 + signum)
    finally:
        stop.restore()
    train_s = time.perf_counter() - progress.start
    checkpoints.close()
    if config.profile and lead:
        print(f"profiler trace in {profile_dir}: open its *.trace.json.gz at https://ui.perfetto.dev "
              "(the trace adds overhead to train_s)")

    eval_keys = to_agents(np.asarray(jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)), sharding)
    eval_returns = gather(over_agents(make_evaluate(config), mesh, (0, 0))(eval_keys, runner)).mean(axis=1)
    if not lead:
        return
    env_steps = int(history["env_steps"][0, -1])
    sps = (env_steps - progress.start_steps) * len(keys) / train_s
    extra = {"resumed_after_epoch": done if config.resume is not None else None, "compile_s": compile_s,
             "train_s": train_s, "sps": sps, "num_devices": int(mesh.devices.size),
             "num_processes": jax.process_count()}
    print(f"\n{'=' * 72}\nreinforce on {config.env}: {len(keys)} agents, {env_steps} env steps each")
    print(f"compile {compile_s:.1f} s, train {train_s:.1f} s, {sps:.0f} env steps/s over all agents")
    summaries = []
    for p, point in enumerate(points):
        if sweep:
            print(f"-- point {p}: {point_label(point)}")
        rows = point_rows((history, eval_returns), p, config.num_seeds)
        summaries.append(write_point(point_dirs[p], config, seeds, *rows, {**extra, "sweep_point": point or None}))
    if sweep:
        ranking = sorted(range(len(points)), key=lambda p: -np.nan_to_num(nanmean(summaries[p]["final_return"]),
                                                                            nan=-np.inf))
        summary = {"algo": "reinforce", "env": config.env, "sweep": list(config.sweep), **extra,
                   "ranking": [{"rank": r + 1, "point": point_label(points[p]), "values": points[p],
                                "final_return_mean": nanmean(summaries[p]["final_return"]),
                                "eval_return_mean": nanmean(summaries[p]["eval_return"])}
                               for r, p in enumerate(ranking)]}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print("ranking by final return: " + "; ".join(
            f"{e['rank']}. {e['point']} ({e['final_return_mean']:.1f})" for e in summary["ranking"]))
    print(f"written to {run_dir}\n{'=' * 72}")
    for wandb_run, point_dir, point_summary in zip(wandb_runs or [None] * len(points), point_dirs, summaries,
                                                   strict=True):
        if wandb_run is not None:
            finish_wandb(wandb_run, point_summary, os.path.join(point_dir, "learning_curve.png"))


if __name__ == "__main__":
    main(tyro.cli(Config))
