"""TD3: Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods"), for continuous actions, with the replay buffer inside the train state.

Acting, storing, sampling and updating all run in one `jax.jit` (nested `lax.scan`s), and `jax.vmap` trains
`--num-seeds` agents, each with its own ring buffer, in the same compiled program:

    python td3.py --env Pendulum-v1 --num-seeds 4
    python td3.py --env brax/halfcheetah:mjx --total-timesteps 1000000 --num-envs 1 --updates-per-step 1 \
        --learning-starts 10000 --log-every 5000        # the paper's setting, on a GPU (README)

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per `--log-every` env steps and seed),
learning_curve.png and summary.json; with `--track`, a wandb run as well.
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
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import tyro
from flax import struct
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
    env: str = "Pendulum-v1"
    """environment id with continuous actions: a gymnax id, or brax/<task>[:<backend>] (see envs.list_envs())"""
    seed: int = 0
    """seed of agent 0; agent i uses seed + i, so any agent can be re-run alone with --seed"""
    num_seeds: int = 1
    """independent agents trained in parallel in one compiled program (vmapped)"""
    total_timesteps: int = 50_000
    """env steps (transitions) per agent, summed over its envs"""
    # algorithm
    num_envs: int = 8
    """parallel envs per agent; each env step writes num_envs transitions into the agent's buffer"""
    buffer_size: int = 1_000_000
    """replay buffer capacity in transitions (allocated: at most total_timesteps)"""
    batch_size: int = 256
    """transitions per gradient update, sampled uniformly from the buffer"""
    learning_starts: int = 5_000
    """env steps (transitions) per agent of uniformly random actions before the first update"""
    update_every: int = 1
    """vector-env steps (each num_envs transitions) between update phases"""
    updates_per_step: float = 0.25
    """critic updates per transition (replay ratio; the paper: 1); a phase runs update_every * num_envs * this"""
    learning_rate: float = 3e-4
    """Adam learning rate of actor and critics"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """target networks move this fraction towards the online ones at each actor update"""
    policy_delay: int = 2
    """critic updates per actor (and target) update"""
    exploration_noise: float = 0.1
    """std of the Gaussian action noise while acting, in units of half the action range"""
    policy_noise: float = 0.2
    """std of the target policy smoothing noise, in units of half the action range"""
    noise_clip: float = 0.5
    """the smoothing noise is clipped to +-noise_clip, in units of half the action range"""
    # network
    hidden_size: int = 256
    """width of the two ReLU hidden layers of actor and critics"""
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
    """run directory name; default {env}__td3__{seed}__{unix time}"""
    log_every: int = 1000
    """env steps per agent per metrics row; each row is printed (and logged to wandb)"""
    profile: bool = False
    """write a JAX profiler trace of the first chunk of training to <run dir>/profile (Perfetto / TensorBoard)"""
    # chunks, checkpoints, resume and evaluation
    num_chunks: int = 1
    """train in this many equal chunks of metrics rows (one compiled scan, run K times with the state handed on): after
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
    (fields: learning_rate or lr, gamma, tau, exploration_noise, policy_noise, noise_clip)"""
    num_devices: int | None = None
    """shard the agents over this many devices (default: as many as there are, or the most that divide the agents)"""
    coordinator_address: str | None = None
    """host:port of process 0 for a multi-process run (jax.distributed); every process gets the same flags"""
    num_processes: int = 1
    """processes of a multi-process run (one per host, or per GPU)"""
    process_id: int = 0
    """this process's index, 0 to --num-processes - 1; process 0 writes the run directory and wandb"""


class Actor(nn.Module):
    """mu(s) in [-1, 1]^action_dim; `policy` in `make_networks` scales it to the env's action bounds."""

    action_dim: int
    hidden_size: int

    @nn.compact
    def __call__(self, obs):
        x = nn.relu(nn.Dense(self.hidden_size)(obs))
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        return nn.tanh(nn.Dense(self.action_dim)(x))


class Critic(nn.Module):
    """Q(s, a). TD3's twin critics are two parameter sets of this module stacked on a leading axis."""

    hidden_size: int

    @nn.compact
    def __call__(self, obs, action):
        x = jnp.concatenate([obs, action], axis=-1)
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        return nn.Dense(1)(x).squeeze(-1)


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    next_obs: jax.Array  # the true next observation, also where the episode was truncated and auto-reset


@struct.dataclass
class ReplayBuffer:
    """A fixed-size ring buffer of transitions: a plain pytree, so it lives in the train state and vmaps."""

    data: Transition  # arrays with a leading capacity axis
    pos: jax.Array  # next row to write
    size: jax.Array  # rows filled so far

    @classmethod
    def create(cls, capacity: int, example: Transition):
        data = jax.tree.map(lambda x: jnp.zeros((capacity,) + x.shape[1:], x.dtype), example)
        return cls(data, jnp.int32(0), jnp.int32(0))

    def add(self, batch: Transition):
        """Writes a batch of transitions (leading axis n); the capacity is a multiple of n, so no write wraps."""
        n = jax.tree.leaves(batch)[0].shape[0]
        capacity = jax.tree.leaves(self.data)[0].shape[0]
        data = jax.tree.map(lambda d, x: jax.lax.dynamic_update_slice_in_dim(d, x, self.pos, 0), self.data, batch)
        return ReplayBuffer(data, (self.pos + n) % capacity, jnp.minimum(self.size + n, capacity))

    def sample(self, key, batch_size: int) -> Transition:
        """Uniformly, with replacement, from the filled rows."""
        index = jax.random.randint(key, (batch_size,), 0, self.size)
        return jax.tree.map(lambda x: x[index], self.data)


class Learner(NamedTuple):
    actor: TrainState
    critic: TrainState  # twin critics: every parameter has a leading axis of 2
    actor_target: Any
    critic_target: Any


class RunnerState(NamedTuple):
    learner: Learner
    buffer: ReplayBuffer
    env_state: Any
    obs: jax.Array
    rng: jax.Array
    hparams: dict  # this agent's values of the SWEEPABLE fields, as arrays (a sweep gives each agent its own)


# Config fields that enter the jitted code as arrays, one value per agent: --sweep may vary them in one program.
SWEEPABLE = ("learning_rate", "gamma", "tau", "exploration_noise", "policy_noise", "noise_clip")
SWEEP_ALIASES = {"lr": "learning_rate"}


def td3_target(key, next_obs, reward, terminated, target_policy, target_twin_q, low, high, gamma, policy_noise,
               noise_clip):
    """Clipped double-Q target with target policy smoothing (Fujimoto et al. 2018, eqs. 10 and 14):
    y = r + gamma (1 - terminated) min_i Q'_i(s', a'),  a' = clip(mu'(s') + clip(eps, -c, c), low, high),
    eps ~ N(0, sigma^2), with sigma = policy_noise and c = noise_clip in units of half the action range.
    Only termination cuts the bootstrap: a truncated transition keeps its true s'."""
    half_range = (high - low) / 2
    next_action = target_policy(next_obs)
    eps = jnp.clip(policy_noise * jax.random.normal(key, next_action.shape), -noise_clip, noise_clip)
    next_action = jnp.clip(next_action + eps * half_range, low, high)
    next_q = target_twin_q(next_obs, next_action).min(axis=0)
    return reward + gamma * (1.0 - terminated) * next_q


def all_finite(tree):
    """True if no leaf of `tree` holds a NaN or an infinity."""
    return jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(tree)]))


def polyak(params, target_params, tau):
    """theta' <- tau theta + (1 - tau) theta': the target moves a small step towards the online network."""
    return jax.tree.map(lambda p, t: tau * p + (1.0 - tau) * t, params, target_params)


def action_bounds(env, env_params):
    space = env.action_space(env_params)
    low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), space.shape)
    high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), space.shape)
    return low, high


def make_networks(config: Config, env, env_params):
    """The actor, the critic module, and functions mu(params, obs) in env units and Q_1, Q_1..2 of twin params."""
    low, high = action_bounds(env, env_params)
    actor = Actor(low.shape[0], config.hidden_size)
    critic = Critic(config.hidden_size)

    def policy(params, obs):
        return low + (actor.apply(params, obs) + 1.0) * (high - low) / 2

    def twin_q(params, obs, action):
        return jax.vmap(critic.apply, in_axes=(0, None, None))(params, obs, action)

    def q1(params, obs, action):
        return critic.apply(jax.tree.map(lambda p: p[0], params), obs, action)

    return actor, critic, policy, twin_q, q1


def derived_sizes(config: Config):
    """Sizes fixed by the config: env steps per update phase, updates per phase, phases per metrics row,
    rows, and the buffer capacity (a multiple of num_envs, no larger than the transitions a run produces)."""
    steps_per_phase = config.num_envs * config.update_every
    updates_per_phase = round(config.updates_per_step * steps_per_phase)
    num_rows = config.total_timesteps // config.log_every
    capacity = min(config.buffer_size, num_rows * config.log_every)
    capacity = -(-capacity // config.num_envs) * config.num_envs
    return steps_per_phase, updates_per_phase, config.log_every // steps_per_phase, num_rows, capacity


def make_train(config: Config, log_fn=None):
    """Returns `train(rng) -> (runner_state, metrics)`, pure and jittable; metrics have a leading row axis
    (one row per `log_every` env steps).

    `log_fn(agent, row, metrics)`, if given, is called on the host after every row (once per agent when
    vmapped); it only reads values, so it cannot change the numbers a run produces.
    """
    init, run = make_train_parts(config, log_fn)

    def train(rng):
        return run(rng, init(rng), jnp.arange(num_iterations(config)))

    return train


def num_iterations(config: Config) -> int:
    """Iterations of the training scan: here, metrics rows (log_every env steps and their updates each)."""
    return derived_sizes(config)[3]


def default_hparams(config: Config) -> dict:
    """The SWEEPABLE fields of `config`, as float32 arrays: an agent's hyperparameters when no sweep sets them."""
    return {k: jnp.float32(getattr(config, k)) for k in SWEEPABLE}


def make_train_parts(config: Config, log_fn=None):
    """`train` in two pure, jittable parts: `init(rng, hparams=None) -> runner_state` (hparams: a dict of this
    agent's SWEEPABLE values; default the config's) and `run(agent, runner_state, rows) -> (runner_state,
    metrics)`, which runs the rows numbered `rows` (a 1-D array) in one `lax.scan`; `agent` only labels the calls
    of `log_fn`. Chunked training calls `run` on consecutive slices of `arange(num_rows)`: the same compiled
    scan body, so any chunking gives the numbers of one call over all of them, bit for bit (`train(rng)`, compiled
    as one fused program, agrees with them to float rounding)."""
    steps_per_phase, updates_per_phase, phases_per_row, num_rows, capacity = derived_sizes(config)
    env, env_params = envs.make_vec(config.env, config.num_envs)
    low, high = action_bounds(env, env_params)
    half_range = (high - low) / 2
    actor, critic, policy, twin_q, q1 = make_networks(config, env, env_params)

    def make_optimizer(learning_rate):
        return optax.adam(learning_rate)

    # inject_hyperparams keeps the learning rate in the optimizer state, as an array: each agent of a sweep carries
    # its own (only it: adam's other arguments stay Python constants, as before). optax.flatten runs adam on one
    # flat vector per network, as in ppo: fewer, larger ops, and the same numbers whether the agents share one
    # device or are split over several (per parameter array, XLA rewrote adam's bias correction differently in the
    # sharded program: last-bit differences in the losses).
    tx = optax.flatten(optax.inject_hyperparams(make_optimizer)(learning_rate=config.learning_rate))
    nan = jnp.float32(jnp.nan)
    # Updates start in the phase whose env steps fill the buffer to learning_starts transitions.
    first_update_phase = max(-(-config.learning_starts // steps_per_phase) - 1, 0)

    def init(rng, hparams=None):
        hparams = default_hparams(config) if hparams is None else hparams
        rng, key_actor, key_critic, key_reset = jax.random.split(rng, 4)
        obs, env_state = env.reset(key_reset, env_params)
        actor_params = actor.init(key_actor, obs[0])
        critic_params = jax.vmap(critic.init, in_axes=(0, None, None))(
            jax.random.split(key_critic, 2), obs[0], low
        )

        def train_state(params):
            state = TrainState.create(apply_fn=None, params=params, tx=tx)
            injected = {k: jnp.asarray(hparams[k], jnp.float32) for k in state.opt_state.hyperparams}
            return state.replace(opt_state=state.opt_state._replace(hyperparams=injected))

        learner = Learner(train_state(actor_params), train_state(critic_params), actor_params, critic_params)
        zeros = jnp.zeros(config.num_envs)
        buffer = ReplayBuffer.create(capacity, Transition(obs, jnp.zeros((config.num_envs,) + low.shape), zeros,
                                                          zeros, obs))
        return RunnerState(learner, buffer, env_state, obs, rng, hparams)

    def run(agent, runner, rows):
        hp = runner.hparams  # this agent's hyperparameters (arrays, constant over training)

        def _env_step(runner, step):
            # Uniform random actions for the first learning_starts env steps (the paper's start_timesteps),
            # then mu(s) plus Gaussian exploration noise. `step` counts steps of one env.
            learner, buffer, env_state, obs, rng, hparams = runner
            rng, key_random, key_noise, key_step = jax.random.split(rng, 4)
            random_action = jax.random.uniform(key_random, (config.num_envs,) + low.shape, minval=low, maxval=high)
            noise = hp["exploration_noise"] * half_range * jax.random.normal(key_noise, random_action.shape)
            explore_action = jnp.clip(policy(learner.actor.params, obs) + noise, low, high)
            action = jnp.where(step * config.num_envs < config.learning_starts, random_action, explore_action)
            next_obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            # s' is the true next obs also where a time limit truncated the episode (and the env auto-reset),
            # and only termination is stored: truncated transitions keep their bootstrap.
            transition = Transition(obs, action, reward, terminated.astype(jnp.float32), info["final_observation"])
            runner = RunnerState(learner, buffer.add(transition), env_state, next_obs, rng, hparams)
            return runner, (info["episode_done"], info["episode_return"], info["episode_length"])

        def _update_critics(learner, batch, key):
            target = td3_target(
                key, batch.next_obs, batch.reward, batch.terminated,
                lambda o: policy(learner.actor_target, o), lambda o, a: twin_q(learner.critic_target, o, a),
                low, high, hp["gamma"], hp["policy_noise"], hp["noise_clip"],
            )

            def _loss_fn(params):
                q = twin_q(params, batch.obs, batch.action)
                return ((q - target) ** 2).mean(axis=1).sum(), q[0].mean()

            (loss, q_value), grads = jax.value_and_grad(_loss_fn, has_aux=True)(learner.critic.params)
            return learner._replace(critic=learner.critic.apply_gradients(grads=grads)), loss, q_value

        def _update_actor_and_targets(learner, obs):
            def _loss_fn(params):
                return -q1(learner.critic.params, obs, policy(params, obs)).mean()

            loss, grads = jax.value_and_grad(_loss_fn)(learner.actor.params)
            actor_state = learner.actor.apply_gradients(grads=grads)
            return Learner(
                actor_state,
                learner.critic,
                polyak(actor_state.params, learner.actor_target, hp["tau"]),
                polyak(learner.critic.params, learner.critic_target, hp["tau"]),
            ), loss

        def _update(carry, update):
            learner, buffer, rng = carry
            rng, key_sample, key_noise = jax.random.split(rng, 3)
            batch = buffer.sample(key_sample, config.batch_size)
            learner, critic_loss, q_value = _update_critics(learner, batch, key_noise)
            # Delayed policy updates (Fujimoto et al. 2018, sec. 5.2). `update` is the same for every agent, so
            # under vmap this stays a real branch: the actor's forward and backward pass run only when taken.
            learner, actor_loss = jax.lax.cond(
                (update + 1) % config.policy_delay == 0,
                _update_actor_and_targets,
                lambda learner, _: (learner, nan),
                learner, batch.obs,
            )
            return (learner, buffer, rng), (critic_loss, actor_loss, q_value)

        def _phase(runner, phase):
            """`update_every` env steps, then `updates_per_phase` updates once the buffer holds learning_starts."""
            steps = phase * config.update_every + jnp.arange(config.update_every)
            runner, episodes = jax.lax.scan(_env_step, runner, steps)
            learner, buffer, env_state, obs, rng, hparams = runner
            # Counts updates from the first one, as the paper's delay counter does.
            updates = (phase - first_update_phase) * updates_per_phase + jnp.arange(updates_per_phase)
            (learner, _, rng), losses = jax.lax.cond(
                phase >= first_update_phase,
                lambda carry: jax.lax.scan(_update, carry, updates),
                lambda carry: (carry, (jnp.full(updates_per_phase, nan),) * 3),
                (learner, buffer, rng),
            )
            return RunnerState(learner, buffer, env_state, obs, rng, hparams), (episodes, losses)

        def _row(runner, row):
            phases = row * phases_per_row + jnp.arange(phases_per_row)
            runner, ((done, episode_return, episode_length), (critic_loss, actor_loss, q_value)) = jax.lax.scan(
                _phase, runner, phases
            )
            episodes = done.sum()
            metrics = {
                "env_steps": (row + 1) * config.log_every,
                "updates": jnp.maximum(phases[-1] - first_update_phase + 1, 0) * updates_per_phase,
                "episodes": episodes,
                # Mean over the episodes that ended in this row; NaN if none did (likewise the losses).
                "episode_return": (episode_return * done).sum() / episodes,
                "episode_length": (episode_length * done).sum() / episodes,
                "loss/critic": jnp.nanmean(critic_loss),
                "loss/actor": jnp.nanmean(actor_loss),
                "q_value": jnp.nanmean(q_value),
                # Checked by the host after each chunk: no sync here. (The losses are NaN by design in phases
                # without updates; the parameters are what a divergence breaks.)
                "nonfinite": ~all_finite(runner.learner),
            }
            if log_fn is not None:
                jax.debug.callback(log_fn, agent, row, metrics)
            return runner, metrics

        return jax.lax.scan(_row, runner, rows)

    return init, run


def deterministic_policy(config: Config, runner):
    """`act(obs batch) -> actions`: one agent's deterministic actor mu(s)."""
    env, env_params = envs.make_vec(config.env, 1)
    _, _, policy, _, _ = make_networks(config, env, env_params)
    return lambda obs: policy(runner.learner.actor.params, obs)


def make_evaluate(config: Config):
    """Returns `evaluate(rng, runner_state) -> (eval_episodes,)` returns of the deterministic actor mu(s) on
    fresh episodes."""
    env, env_params = envs.make_vec(config.env, config.eval_episodes)

    def evaluate(rng, runner):
        return envs.evaluate(env, env_params, deterministic_policy(config, runner), rng,
                             env_params.max_steps_in_episode)

    return evaluate


# ----------------------------------------------------------------------------------------------------------
# Checking the config, and everything written to the run directory.


def validate(config: Config) -> str | None:
    """Returns one line saying what is wrong with the config, or None if it can be trained."""
    for name in ("num_seeds", "total_timesteps", "num_envs", "buffer_size", "batch_size", "update_every",
                 "policy_delay", "hidden_size", "eval_episodes", "log_every", "num_chunks", "keep_checkpoints"):
        if getattr(config, name) <= 0:
            return f"--{name.replace('_', '-')} must be a positive integer, got {getattr(config, name)}"
    if config.learning_starts < 0:
        return f"--learning-starts must be 0 or more, got {config.learning_starts}"
    if config.learning_rate <= 0 or config.updates_per_step <= 0:
        return "--learning-rate and --updates-per-step must be positive"
    if not 0 <= config.gamma <= 1 or not 0 < config.tau <= 1:
        return "--gamma must lie in [0, 1] and --tau in (0, 1]"
    if min(config.exploration_noise, config.policy_noise, config.noise_clip) < 0:
        return "--exploration-noise, --policy-noise and --noise-clip must be 0 or more"
    if config.num_devices is not None and config.num_devices <= 0:
        return f"--num-devices must be a positive integer, got {config.num_devices}"
    if not 0 <= config.process_id < config.num_processes:
        return (f"--process-id {config.process_id} must lie in 0 to --num-processes - 1 "
                f"({config.num_processes - 1})")
    try:
        env, env_params = envs.make(config.env)
        discrete = envs.is_discrete(env, env_params)
    except ValueError as error:
        return f"--env: {error}"
    if discrete:
        return f"--env {config.env} has discrete actions; TD3 needs a continuous (Box) action space"
    try:
        points = sweep_points(config)
    except ValueError as error:
        return str(error)
    if len(points) > 1:
        for point in points:  # every value must be valid on its own
            error = validate(Config(**{**asdict(config), **point, "sweep": ()}))
            if error:
                return f"--sweep {point_label(point)}: {error}"
    steps_per_phase = config.num_envs * config.update_every
    updates = config.updates_per_step * steps_per_phase
    if abs(updates - round(updates)) > 1e-9:
        return (f"--updates-per-step {config.updates_per_step} x --update-every x --num-envs = {updates:g} "
                "updates per phase; it must be a whole number")
    if config.log_every % steps_per_phase:
        return (f"--log-every {config.log_every} must be a multiple of --num-envs x --update-every "
                f"= {steps_per_phase}")
    if config.total_timesteps < config.log_every:
        return f"--total-timesteps {config.total_timesteps} is smaller than --log-every {config.log_every}"
    if config.learning_starts >= config.total_timesteps // config.log_every * config.log_every:
        return (f"--learning-starts {config.learning_starts} leaves no steps to learn in "
                f"--total-timesteps {config.total_timesteps}")
    num_rows = config.total_timesteps // config.log_every
    if num_rows % config.num_chunks:
        divisors = [d for d in range(1, min(num_rows, 1000) + 1) if num_rows % d == 0]
        return (f"--num-chunks {config.num_chunks} does not divide the {num_rows} metrics rows (--total-timesteps // "
                f"--log-every); use one of {', '.join(map(str, divisors))}")
    return None


METRIC_KEYS = ("env_steps", "updates", "episodes", "episode_return", "episode_length",
               "loss/actor", "loss/critic", "q_value", "nonfinite")


class MetricsCsv:
    """<run dir>/metrics.csv, one row per metrics row (log_every env steps) and agent, appended as each chunk
    ends: a killed run loses at most the chunk it was in. Rows go row by row, so any chunking writes the same
    file."""

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
            csv.writer(f).writerows([["seed", "row", *METRIC_KEYS], *kept])
        os.replace(f"{path}.tmp", path)

    def append(self, seeds, first, metrics):
        with open(self.path, "a", newline="") as f:
            writer = csv.writer(f)
            for u in range(metrics["env_steps"].shape[1]):
                for i, seed in enumerate(seeds):
                    writer.writerow([seed, first + u, *(metrics[k][i, u] for k in METRIC_KEYS)])


class Progress:
    """Host side of the logging callback: gathers one row's metrics from every agent this process trains, then
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

    def __call__(self, agent, row, metrics):
        agent, row = int(agent), int(row)
        with self.lock:
            got = self.pending.setdefault(row, {})
            got[agent] = {k: float(v) for k, v in metrics.items()}
            if len(got) < len(self.agents):
                return
            del self.pending[row]
        if jax.process_index() == 0:
            self._emit(row, got)

    def _emit(self, row, by_agent):
        agents = sorted(by_agent)
        returns = np.array([by_agent[a]["episode_return"] for a in agents])
        env_steps = int(by_agent[agents[0]]["env_steps"])
        updates = int(by_agent[agents[0]]["updates"])
        sps = (env_steps - self.start_steps) * len(agents) / (time.perf_counter() - self.start)
        line = f"env_steps {env_steps:10d}  updates {updates:9d}  sps {sps:8.0f}  {describe_returns(returns)}"
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
        meta = {"algo": "td3", "env": config.env, "iterations": done, "config": asdict(config)}
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
            if meta["algo"] != "td3" or meta["env"] != config.env:
                fail(f"{flag}: checkpoint {where} is of {meta['algo']} on {meta['env']}, but the run is td3 on "
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
# (log_every is not one here: it sets the rows the training scan runs.)
RUN_FLAGS = ("track", "wandb_project", "wandb_entity", "wandb_group", "out_dir", "run_name", "profile",
             "keep_checkpoints", "resume", "eval", "seed_index", "eval_episodes",
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
        if algo == "td3":
            return {k: v for k, v in saved.items() if k in Config.__dataclass_fields__}
    except (OSError, ValueError, KeyError, AttributeError):
        fail(f"{flag}: {path} is missing or unreadable; is {run_dir} a run directory of td3.py?")
    fail(f"{flag}: {run_dir} is a run of {algo}, not of td3; use that script")


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
    kept = f"the last good checkpoint is at row {last_good}" if last_good else "no checkpoint was written"
    return (f"error: non-finite loss or parameters in seed(s) {bad}, first at row {first + iterations.min()} "
            f"(metrics.csv's numbering); training stopped, {kept}. Lower --learning-rate")


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
            raise ValueError(f"--sweep {spec!r}: td3 has no field {name!r}; sweepable: {', '.join(SWEEPABLE)}")
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
    """`learning_rate=0.001,tau=0.01`: a sweep point's name, also its directory in the run directory."""
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
    assembled into arrays split over the agents. One after the other, as in ppo.py: XLA:CPU (jax 0.10.2) deadlocked
    running orthogonal initialisers' QR decompositions on two host devices at once (td3's initialisers have none,
    but every script initialises alike)."""
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
    print(f"td3 on {run_config.env}, checkpoint after {done} rows: deterministic policy, "
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
    """Per seed: mean return of the episodes that ended in the last 10% of rows."""
    num_rows = metrics["episodes"].shape[1]
    tail = slice(num_rows - max(1, num_rows // 10), None)
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
    plot_learning_curve(os.path.join(point_dir, "learning_curve.png"), metrics, f"td3 on {config.env}")
    env_steps = int(metrics["env_steps"][0, -1])
    updates = int(metrics["updates"][0, -1])
    final = final_returns(metrics)
    summary = {"algo": "td3", "env": config.env, "num_seeds": config.num_seeds, "seeds": seeds,
               "total_timesteps": config.total_timesteps, "env_steps": env_steps, "updates": updates, **extra,
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
        run_name = config.run_name or f"{env_name}__td3__{config.seed}__{stamp}"
        run_dir = os.path.join(config.out_dir, run_name)
        if os.path.isdir(run_dir) and os.listdir(run_dir):
            fail(f"run directory {run_dir} exists and is not empty; choose another --run-name, or --resume it")
        if jax.process_count() > 1:  # every process has checked before process 0 creates it
            multihost_utils.sync_global_devices("run directory checked")
        if lead:
            os.makedirs(run_dir, exist_ok=True)
            with open(os.path.join(run_dir, "config.json"), "w") as f:
                json.dump({"algo": "td3", **asdict(config), "resume": None}, f, indent=2)
    sweep = len(points) > 1
    point_dirs = [os.path.join(run_dir, point_label(p)) if sweep else run_dir for p in points]
    wandb_runs = None
    if config.track and lead:
        wandb_runs = [start_wandb(config, f"{run_name}/{point_label(p)}" if sweep else run_name, run_dir,
                                  group=(config.wandb_group or run_name) if sweep else config.wandb_group,
                                  values=p) for p in points]

    seeds = [config.seed + i for i in range(config.num_seeds)]
    num_rows = num_iterations(config)
    chunk = num_rows // config.num_chunks
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
            print(f"td3 on {config.env}: {agents} x {config.total_timesteps} steps in {config.num_chunks} chunk(s) "
                  f"on {mesh.devices.size} device(s), run dir {run_dir}", flush=True)
        checkpoints = Checkpoints(run_dir, config.keep_checkpoints)
        done, history = 0, None
        t0 = time.perf_counter()
        if config.resume is not None:
            abstract_runner = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                                           jax.eval_shape(jax.vmap(init), keys, hparams))
            runner, history, done = checkpoints.restore(run_dir, "--resume", config, abstract_runner, True)
            if lead:
                print(f"resuming after row {done} of {num_rows}")
        else:
            runner = init_agents(init, sharding, keys, hparams)
        compiled = run.lower(agent_ids, runner, jnp.arange(chunk)).compile()
        compile_s = time.perf_counter() - t0
        if lead:
            print(f"compiled in {compile_s:.1f} s")
            metrics_csvs = [MetricsCsv(os.path.join(d, "metrics.csv"), keep_iterations=done, make_dir=sweep)
                            for d in point_dirs]
        profile_dir = os.path.join(run_dir, "profile")
        progress.start, progress.start_steps = time.perf_counter(), done * config.log_every
        for start in range(done, num_rows, chunk):
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
            if signum and start + chunk < num_rows:
                message = (f"{signal.Signals(signum).name}: stopped after row {start + chunk} of {num_rows}, "
                           f"metrics and checkpoint written; continue with: python td3.py --resume {run_dir}")
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
    updates = int(history["updates"][0, -1])
    sps = (env_steps - progress.start_steps) * len(keys) / train_s
    updates_per_s = (updates - int(history["updates"][0, done - 1]) if done else updates) * len(keys) / train_s
    extra = {"resumed_after_row": done if config.resume is not None else None, "compile_s": compile_s,
             "train_s": train_s, "sps": sps, "updates_per_s": updates_per_s, "num_devices": int(mesh.devices.size),
             "num_processes": jax.process_count()}
    print(f"\n{'=' * 72}\ntd3 on {config.env}: {len(keys)} agents, {env_steps} env steps and {updates} updates "
          "each")
    print(f"compile {compile_s:.1f} s, train {train_s:.1f} s, {sps:.0f} env steps/s and {updates_per_s:.0f} "
          "updates/s over all agents")
    summaries = []
    for p, point in enumerate(points):
        if sweep:
            print(f"-- point {p}: {point_label(point)}")
        rows = point_rows((history, eval_returns), p, config.num_seeds)
        summaries.append(write_point(point_dirs[p], config, seeds, *rows, {**extra, "sweep_point": point or None}))
    if sweep:
        ranking = sorted(range(len(points)), key=lambda p: -np.nan_to_num(nanmean(summaries[p]["final_return"]),
                                                                            nan=-np.inf))
        summary = {"algo": "td3", "env": config.env, "sweep": list(config.sweep), **extra,
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
