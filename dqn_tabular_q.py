"""Value-based control: tabular Q-learning (Watkins 1989) when the env has a finite state space, DQN (Mnih et
al. 2015; optionally double DQN, van Hasselt et al. 2016) when it does not.

The whole training run is one `lax.scan` inside one `jax.jit`, and `jax.vmap` trains `--num-seeds` agents at
once; the Q-table (or the Q-network, its target network and the replay buffer) lives in the scan carry:

    python dqn_tabular_q.py --env GridWorld-v0 --num-seeds 30
    python dqn_tabular_q.py --env CartPole-v1 --num-seeds 4

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per update and seed), learning_curve.png,
summary.json and, on GridWorld-v0, q_values.png (max_a Q per cell with the greedy actions); with `--track`,
a wandb run as well.
"""

import os

# XLA:CPU in jax 0.10 can hang on vmapped training with the concurrency-optimised scheduler (see README); added to
# any XLA_FLAGS the user sets (e.g. --xla_force_host_platform_device_count=N for N CPU devices).
if "concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_enable_concurrency_optimized_scheduler=false"]).strip()

import argparse
import csv
import dataclasses
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
from envs.gridworld import ACTION_NAMES, GridWorld  # noqa: E402
from envs.gridworld import EnvState as GridState  # noqa: E402


@dataclass(frozen=True)
class Config:
    # experiment
    env: str = "GridWorld-v0"
    """environment id: any gymnax id, or one of ours (see envs.list_envs())"""
    agent: Literal["auto", "tabular", "dqn"] = "auto"
    """auto: a Q-table for finite-state envs (GridWorld-v0, FrozenLake-misc), DQN otherwise"""
    seed: int = 0
    """seed of agent 0; agent i uses seed + i, so any agent can be re-run alone with --seed"""
    num_seeds: int = 1
    """independent agents trained in parallel in one compiled program (vmapped)"""
    total_timesteps: int = 500_000
    """env steps per agent (summed over its envs)"""
    # shared by both agents; None takes the agent's default, shown in brackets
    num_envs: int | None = None
    """parallel envs per agent [tabular 1: one env per agent, as in the classic setting; dqn 10]"""
    num_steps: int | None = None
    """steps per env in each update, one metrics row [tabular 1000; dqn 100]"""
    learning_rate: float | None = None
    """step size [tabular 0.1; dqn 2.5e-4, Adam]"""
    gamma: float | None = None
    """discount factor [tabular 0.9; dqn 0.99]"""
    start_e: float | None = None
    """epsilon of the epsilon-greedy policy at the start [tabular 0.1; dqn 1.0]"""
    end_e: float | None = None
    """epsilon at the end of the decay [tabular 0.1, i.e. constant; dqn 0.05]"""
    exploration_fraction: float = 0.5
    """fraction of total-timesteps over which epsilon decays linearly from start-e to end-e"""
    # DQN only
    buffer_size: int = 10_000
    """replay buffer capacity in transitions (a ring buffer per agent)"""
    batch_size: int = 128
    """transitions per gradient step, sampled uniformly from the buffer"""
    learning_starts: int = 10_000
    """env steps of warm-up (epsilon-greedy, no learning) before the first gradient step"""
    train_frequency: int = 10
    """env steps per gradient step (summed over envs)"""
    target_network_frequency: int = 500
    """env steps between target network updates"""
    tau: float = 1.0
    """target update rate: 1 copies the online network (hard update), below 1 averages into it (polyak)"""
    loss: Literal["mse", "huber"] = "mse"
    """TD loss: mean squared error or Huber (smooth L1)"""
    double_dqn: bool = False
    """double DQN target: the online network picks the next action, the target network values it"""
    anneal_lr: bool = True
    """anneal the DQN learning rate linearly, reaching 0 after total-timesteps / train-frequency gradient steps"""
    hidden_sizes: tuple[int, ...] = (120, 84)
    """widths of the Q-network's hidden layers (ReLU)"""
    # evaluation and logging
    eval_episodes: int = 10
    """episodes of the greedy final policy per agent"""
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
    """run directory name; default {env}__{tabular_q or dqn}__{seed}__{unix time}"""
    log_every: int = 50
    """print progress (and log to wandb) every this many updates"""
    profile: bool = False
    """write a JAX profiler trace of the first chunk of training to <run dir>/profile (Perfetto / TensorBoard)"""
    # chunks, checkpoints, resume and evaluation
    num_chunks: int = 1
    """train in this many equal chunks of updates (one compiled scan, run K times with the state handed on): after
    each, metrics.csv and a checkpoint are written, and Ctrl-C or SIGTERM stop the run there, resumable"""
    keep_checkpoints: int = 2
    """how many of the newest checkpoints <run dir>/checkpoints keeps"""
    resume: str | None = None
    """continue the run in this run directory from its last checkpoint, with its config (only logging flags may
    differ)"""
    eval: str | None = None
    """do not train: load the last checkpoint of this run directory and print the returns of its greedy policies
    over --eval-episodes episodes"""
    seed_index: int | None = None
    """with --eval: only the agent at this index of the run's seeds (0 is the run's --seed); default all"""
    gif: str | None = None
    """with --eval: also write one episode of the agent at --seed-index (default 0) to this path as an animated gif
    (envs gymnax can draw: classic control, MinAtar, bsuite Catch, misc)"""
    # scale out: sweeps, devices and processes
    sweep: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """field=v1,v2,...: train every value x every seed in one compiled program; repeat the flag for a grid
    (fields: learning_rate or lr, gamma, start_e, end_e, exploration_fraction; dqn also tau)"""
    num_devices: int | None = None
    """shard the agents over this many devices (default: as many as there are, or the most that divide the agents)"""
    coordinator_address: str | None = None
    """host:port of process 0 for a multi-process run (jax.distributed); every process gets the same flags"""
    num_processes: int = 1
    """processes of a multi-process run (one per host, or per GPU)"""
    process_id: int = 0
    """this process's index, 0 to --num-processes - 1; process 0 writes the run directory and wandb"""


AGENT_DEFAULTS = {
    "tabular": dict(num_envs=1, num_steps=1000, learning_rate=0.1, gamma=0.9, start_e=0.1, end_e=0.1),
    "dqn": dict(num_envs=10, num_steps=100, learning_rate=2.5e-4, gamma=0.99, start_e=1.0, end_e=0.05),
}


def resolve(config: Config) -> Config:
    """The config with `agent` decided and every None replaced by that agent's default. Call after
    `validate` (auto needs a known env)."""
    agent = config.agent
    if agent == "auto":
        env, env_params = envs.make(config.env)
        agent = "tabular" if envs.num_states(env, env_params) is not None else "dqn"
    unset = {k: v for k, v in AGENT_DEFAULTS[agent].items() if getattr(config, k) is None}
    return dataclasses.replace(config, agent=agent, **unset)


# Config fields that enter the jitted code as arrays, one value per agent: --sweep may vary them in one program.
# Per agent: tau only moves DQN's target network; the tabular agent has none.
SWEEPABLE = {
    "tabular": ("learning_rate", "gamma", "start_e", "end_e", "exploration_fraction"),
    "dqn": ("learning_rate", "gamma", "start_e", "end_e", "exploration_fraction", "tau"),
}
SWEEP_ALIASES = {"lr": "learning_rate"}


def default_hparams(config: Config) -> dict:
    """The SWEEPABLE fields of a resolved `config`, as float32 arrays: an agent's hyperparameters when no sweep
    sets them."""
    return {k: jnp.float32(getattr(config, k)) for k in SWEEPABLE[config.agent]}


def linear_epsilon(config: Config, hp, env_steps):
    """Epsilon after `env_steps` env steps: linear from start_e to end_e, then flat (`hp`: the agent's
    hyperparameters, as in `default_hparams`)."""
    decay_steps = jnp.maximum(1.0, hp["exploration_fraction"] * config.total_timesteps)
    frac = jnp.clip(env_steps / decay_steps, 0.0, 1.0)
    return hp["start_e"] + frac * (hp["end_e"] - hp["start_e"])


def finite_state_env(config: Config):
    """`make_vec` env, its params and `index(obs batch) -> int32 states` for the table."""
    env, env_params = envs.make_vec(config.env, config.num_envs)
    return env, env_params, jax.vmap(lambda obs: envs.state_index(env, env_params, obs))


def epsilon_greedy_with_random_ties(q, bits, epsilon):
    """Epsilon-greedy actions for a batch of Q rows `q` (n, num_actions) from one uint32 `bits` per row.

    The low 16 bits decide exploration (probability epsilon, to 1/65536); the high 16 bits pick uniformly
    among the candidates: the tied greedy actions, or every action when exploring. A plain argmax would
    always pick action 0 on a zero-initialised table. One word of randomness per step keeps the PRNG, the
    most expensive part of a tabular step on CPU, small.
    """
    explore = (bits & 0xFFFF) < (epsilon * 65536.0).astype(jnp.uint32)
    candidates = (q == q.max(-1, keepdims=True)) | explore[:, None]
    count = candidates.sum(-1, dtype=jnp.uint32)
    k = ((bits >> 16) * count) >> 16  # uniform in [0, count)
    kth_candidate = candidates & (jnp.cumsum(candidates, -1, dtype=jnp.uint32) == (k + 1)[:, None])
    return jnp.argmax(kth_candidate, -1).astype(jnp.int32)


def episode_metrics(env_state_start, env_state_end, episodes, reward_sum, num_steps):
    """Mean return and length of the episodes that ended during an update, from two per-env counters
    carried through the step scan (episodes ended, rewards collected) and the running episode sums that
    `EpisodeStatistics` keeps in the env state: each step adds its reward and 1 to the running sums and an
    episode's end moves them to the ended ones, so ended = collected + running at start - running at end.
    (Carrying fewer values through the scan keeps its body one fast XLA:CPU loop.)"""
    ended_return = reward_sum + env_state_start.episode_return - env_state_end.episode_return
    ended_length = num_steps + env_state_start.episode_length - env_state_end.episode_length
    total = episodes.sum()
    return {
        "episodes": total,
        # Means over the episodes that ended in this update; NaN if none did.
        "episode_return": ended_return.sum() / total,
        "episode_length": ended_length.sum() / total,
    }


def q_learning_update(q_table, states, actions, targets, lr):
    """Q(s,a) += lr * (target - Q(s,a)) for a batch of transitions, one per env. Envs that visit the same
    (s, a) in the same step share one update with their mean TD error: summing them would multiply the step
    size by their number (and diverge with many envs). With one env this is the textbook update."""
    td_errors = targets - q_table[states, actions]
    pairs = states * q_table.shape[1] + actions
    visits = (pairs[:, None] == pairs[None, :]).sum(-1)
    return q_table.at[states, actions].add(lr * td_errors / visits)


def all_finite(tree):
    """True if no leaf of `tree` holds a NaN or an infinity."""
    return jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(tree)]))


class TabularState(NamedTuple):
    q_table: jax.Array
    env_state: object
    state: jax.Array  # index of the current observation
    rng: jax.Array
    hparams: dict  # this agent's values of the SWEEPABLE fields, as arrays (a sweep gives each agent its own)


def make_tabular_train(config: Config, log_fn=None):
    """Q-learning, one table per agent: Q(s,a) += lr * (r + gamma * max_a' Q(s',a') - Q(s,a)), no bootstrap
    past a terminal state (a truncated episode bootstraps from its true last state). -> (init, run), as
    `make_train_parts`."""
    env, env_params, index = finite_state_env(config)
    num_states = envs.num_states(env, env_params)
    num_actions = env.action_space(env_params).n
    steps_per_update = config.num_envs * config.num_steps

    def init(rng, hparams=None):
        hparams = default_hparams(config) if hparams is None else hparams
        rng, key_reset = jax.random.split(rng)
        obs, env_state = env.reset(key_reset, env_params)
        return TabularState(jnp.zeros((num_states, num_actions), jnp.float32), env_state, index(obs), rng, hparams)

    def run(agent, runner, updates):
        hp = runner.hparams  # this agent's hyperparameters (arrays, constant over training)

        def _env_step(carry, step_input):
            q_table, env_state, state, episodes, reward_sum, epsilon = carry
            bits, key_step = step_input
            action = epsilon_greedy_with_random_ties(q_table[state], bits, epsilon)
            obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            next_state = index(info["final_observation"])  # the true next state, also at an auto-reset
            target = reward + hp["gamma"] * (1.0 - terminated) * q_table[next_state].max(-1)
            q_table = q_learning_update(q_table, state, action, target, hp["learning_rate"])
            episodes, reward_sum = episodes + info["episode_done"], reward_sum + reward
            return (q_table, env_state, index(obs), episodes, reward_sum, epsilon), None

        def _update_step(runner, update):
            q_table, env_state, state, rng, hparams = runner
            rng, key_bits, key_steps = jax.random.split(rng, 3)
            # The randomness of the whole update in two batched calls, outside the step scan. Env step keys
            # are dead code (and compiled away) for deterministic envs such as GridWorld-v0.
            bits = jax.random.bits(key_bits, (config.num_steps, config.num_envs), jnp.uint32)
            step_keys = jax.random.split(key_steps, config.num_steps)
            epsilon = linear_epsilon(config, hp, update * steps_per_update)
            counters = jnp.zeros(config.num_envs, jnp.int32), jnp.zeros(config.num_envs, jnp.float32)
            (q_table, env_state_end, state, episodes, reward_sum, _), _ = jax.lax.scan(
                _env_step, (q_table, env_state, state, *counters, epsilon), (bits, step_keys)
            )
            metrics = {
                "env_steps": (update + 1) * steps_per_update,
                **episode_metrics(env_state, env_state_end, episodes, reward_sum, config.num_steps),
                "epsilon": epsilon,
                "nonfinite": ~all_finite(q_table),  # checked by the host after each chunk
            }
            if log_fn is not None:
                jax.lax.cond(
                    (update + 1) % config.log_every == 0,
                    lambda: jax.debug.callback(log_fn, agent, update, metrics),
                    lambda: None,
                )
            return TabularState(q_table, env_state_end, state, rng, hparams), metrics

        return jax.lax.scan(_update_step, runner, updates)

    return init, run


# ----------------------------------------------------------------------------------------------------------
# DQN


class QNetwork(nn.Module):
    num_actions: int
    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, obs):
        x = obs.astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.num_actions)(x)


@struct.dataclass
class ReplayBuffer:
    """A fixed-size ring buffer of transitions; `size` slots are filled, `position` is the next one written."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    terminated: jax.Array
    position: jax.Array
    size: jax.Array

    @classmethod
    def create(cls, capacity: int, obs_shape):
        def zeros(*shape):
            return jnp.zeros((capacity, *shape), jnp.float32)

        return cls(zeros(*obs_shape), jnp.zeros(capacity, jnp.int32), zeros(), zeros(*obs_shape), zeros(),
                   jnp.int32(0), jnp.int32(0))

    @property
    def capacity(self) -> int:
        return self.action.shape[0]

    def add(self, obs, action, reward, next_obs, terminated):
        """Writes a batch of n transitions (n <= capacity) after the newest, wrapping round to slot 0."""
        n = action.shape[0]
        slots = (self.position + jnp.arange(n)) % self.capacity
        return self.replace(
            obs=self.obs.at[slots].set(obs),
            action=self.action.at[slots].set(action),
            reward=self.reward.at[slots].set(reward),
            next_obs=self.next_obs.at[slots].set(next_obs),
            terminated=self.terminated.at[slots].set(terminated),
            position=(self.position + n) % self.capacity,
            size=jnp.minimum(self.size + n, self.capacity),
        )

    def sample(self, key, batch_size: int):
        """`batch_size` transitions drawn uniformly (with replacement) from the filled slots."""
        slots = jax.random.randint(key, (batch_size,), 0, self.size)
        return (self.obs[slots], self.action[slots], self.reward[slots], self.next_obs[slots],
                self.terminated[slots])


class DQNState(NamedTuple):
    """Everything a DQN agent carries from one env step to the next."""

    train_state: TrainState
    target_params: dict
    buffer: ReplayBuffer
    env_state: object
    obs: jax.Array
    rng: jax.Array
    hparams: dict  # this agent's values of the SWEEPABLE fields, as arrays (a sweep gives each agent its own)


def make_dqn_train(config: Config, log_fn=None):
    """DQN: epsilon-greedy acting in `num_envs` envs, every transition into a replay buffer, a gradient step on
    a uniform minibatch every `train_frequency` env steps after the warm-up, a target network updated every
    `target_network_frequency` env steps. -> (init, run), as `make_train_parts`."""
    env, env_params = envs.make_vec(config.env, config.num_envs)
    num_actions = env.action_space(env_params).n
    network = QNetwork(num_actions, config.hidden_sizes)
    steps_per_update = config.num_envs * config.num_steps
    # Per vectorized step of num_envs env steps: `gradient_steps` steps every `steps_per_train` vector steps.
    gradient_steps = max(1, config.num_envs // config.train_frequency)
    steps_per_train = max(1, config.train_frequency // config.num_envs)
    anneal = optax.identity()
    if config.anneal_lr:
        anneal = optax.scale_by_schedule(
            optax.linear_schedule(1.0, 0.0, config.total_timesteps // config.train_frequency))

    def make_optimizer(learning_rate):
        return optax.chain(optax.adam(learning_rate), anneal)

    # inject_hyperparams keeps the learning rate in the optimizer state, as an array: each agent of a sweep carries
    # its own. optax.flatten runs Adam on one flat vector: a few large ops per step instead of a few per parameter
    # array, and (XLA:CPU, jax 0.10) the same bits on any number of devices, which per-array ops fused into the
    # sharded program did not give (params drifted by float rounding on 2 devices).
    tx = optax.flatten(optax.inject_hyperparams(make_optimizer)(learning_rate=config.learning_rate))
    td_loss = optax.huber_loss if config.loss == "huber" else optax.squared_error

    def init(rng, hparams=None):
        hparams = default_hparams(config) if hparams is None else hparams
        rng, key_init, key_reset = jax.random.split(rng, 3)
        obs, env_state = env.reset(key_reset, env_params)
        params = network.init(key_init, obs[0])
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        opt_state = train_state.opt_state
        injected = {k: jnp.asarray(hparams[k], jnp.float32) for k in opt_state.hyperparams}
        train_state = train_state.replace(opt_state=opt_state._replace(hyperparams=injected))
        buffer = ReplayBuffer.create(config.buffer_size, obs.shape[1:])
        return DQNState(train_state, train_state.params, buffer, env_state, obs, rng, hparams)

    def run(agent, state, updates):
        hp = state.hparams  # this agent's hyperparameters (arrays, constant over training)

        def _loss_fn(params, target_params, batch):
            obs, action, reward, next_obs, terminated = batch
            next_q_target = network.apply(target_params, next_obs)
            if config.double_dqn:
                next_action = jnp.argmax(network.apply(params, next_obs), -1)
                next_q = jnp.take_along_axis(next_q_target, next_action[:, None], -1).squeeze(-1)
            else:
                next_q = next_q_target.max(-1)
            # No bootstrap past a terminal state; a time-limit truncation bootstraps from the true last obs.
            target = jax.lax.stop_gradient(reward + hp["gamma"] * (1.0 - terminated) * next_q)
            q = jnp.take_along_axis(network.apply(params, obs), action[:, None], -1).squeeze(-1)
            return td_loss(q, target).mean(), q.mean()

        def _gradient_step(carry, key):
            train_state, target_params, buffer = carry
            batch = buffer.sample(key, config.batch_size)
            (loss, q_mean), grads = jax.value_and_grad(_loss_fn, has_aux=True)(
                train_state.params, target_params, batch
            )
            return (train_state.apply_gradients(grads=grads), target_params, buffer), (loss, q_mean)

        def _learn(train_state, target_params, buffer, key):
            keys = jax.random.split(key, gradient_steps)
            (train_state, _, _), (loss, q_mean) = jax.lax.scan(
                _gradient_step, (train_state, target_params, buffer), keys
            )
            return train_state, jnp.stack([loss.sum(), q_mean.sum(), jnp.float32(gradient_steps)])

        def _step(runner, step):
            """One vectorized env step (num_envs transitions into the buffer), then learning when due."""
            dqn_state, episodes, reward_sum, learn_sums = runner
            train_state, target_params, buffer, env_state, obs, rng, hparams = dqn_state
            rng, key_explore, key_action, key_step, key_learn = jax.random.split(rng, 5)
            env_steps = (step + 1) * config.num_envs
            epsilon = linear_epsilon(config, hp, step * config.num_envs)
            greedy = jnp.argmax(network.apply(train_state.params, obs), -1)
            random_action = jax.random.randint(key_action, greedy.shape, 0, num_actions)
            action = jnp.where(jax.random.uniform(key_explore, greedy.shape) < epsilon, random_action, greedy)
            next_obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            buffer = buffer.add(obs, action, reward, info["final_observation"], terminated.astype(jnp.float32))
            # `step` comes unbatched from the scan's xs, so under vmap these conds stay real branches.
            train_state, learned = jax.lax.cond(
                jnp.logical_and(env_steps >= config.learning_starts, (step + 1) % steps_per_train == 0),
                _learn,
                lambda train_state, *_: (train_state, jnp.zeros(3, jnp.float32)),
                train_state, target_params, buffer, key_learn,
            )
            target_params = jax.lax.cond(
                env_steps // config.target_network_frequency
                > (env_steps - config.num_envs) // config.target_network_frequency,
                lambda: optax.incremental_update(train_state.params, target_params, hp["tau"]),
                lambda: target_params,
            )
            state = DQNState(train_state, target_params, buffer, env_state, next_obs, rng, hparams)
            episodes, reward_sum = episodes + info["episode_done"], reward_sum + reward
            return (state, episodes, reward_sum, learn_sums + learned), None

        def _update_step(state, update):
            counters = jnp.zeros(config.num_envs, jnp.int32), jnp.zeros(config.num_envs, jnp.float32)
            steps = update * config.num_steps + jnp.arange(config.num_steps)
            (state_end, episodes, reward_sum, (loss_sum, q_sum, count)), _ = jax.lax.scan(
                _step, (state, *counters, jnp.zeros(3, jnp.float32)), steps
            )
            metrics = {
                "env_steps": (update + 1) * steps_per_update,
                **episode_metrics(state.env_state, state_end.env_state, episodes, reward_sum, config.num_steps),
                "epsilon": linear_epsilon(config, hp, update * steps_per_update),
                "loss/td": loss_sum / count,  # NaN before learning starts
                "q_value": q_sum / count,
                # Checked by the host after each chunk: no sync here (loss/td is NaN by design before learning).
                "nonfinite": ~all_finite((state_end.train_state, state_end.target_params)),
            }
            if log_fn is not None:
                jax.lax.cond(
                    (update + 1) % config.log_every == 0,
                    lambda: jax.debug.callback(log_fn, agent, update, metrics),
                    lambda: None,
                )
            return state_end, metrics

        return jax.lax.scan(_update_step, state, updates)

    return init, run


def make_train(config: Config, log_fn=None):
    """Returns `train(rng) -> (learner, metrics)`, pure and jittable, for a resolved config; metrics have a
    leading update axis; the learner is the Q-table (tabular) or the final `DQNState`.

    `log_fn(agent, update, metrics)`, if given, is called on the host every `log_every` updates (once per
    agent when vmapped); it only reads values, so it cannot change the numbers a run produces.
    """
    init, run = make_train_parts(config, log_fn)

    def train(rng):
        runner, metrics = run(rng, init(rng), jnp.arange(num_iterations(config)))
        return learner_of(config, runner), metrics

    return train


def num_iterations(config: Config) -> int:
    """Iterations of the training scan: here, updates (num_steps steps of every env, one metrics row each)."""
    return config.total_timesteps // (config.num_envs * config.num_steps)


def make_train_parts(config: Config, log_fn=None):
    """`train` in two pure, jittable parts for a resolved config: `init(rng, hparams=None) -> runner_state`
    (hparams: a dict of this agent's SWEEPABLE values; default the config's) and `run(agent, runner_state, updates)
    -> (runner_state, metrics)`, which runs the updates numbered `updates` (a 1-D array) in one `lax.scan`; `agent`
    only labels the calls of `log_fn`. Chunked training calls `run` on consecutive slices of `arange(num_updates)`: the
    same compiled scan body, so any chunking gives the numbers of one call over all of them, bit for bit
    (`train(rng)`, compiled as one fused program, agrees with them to float rounding)."""
    if config.agent == "tabular":
        return make_tabular_train(config, log_fn)
    return make_dqn_train(config, log_fn)


def learner_of(config: Config, runner):
    """What evaluation needs of a runner state: the Q-table (tabular) or the `DQNState`."""
    return runner.q_table if config.agent == "tabular" else runner


def greedy_q_function(config: Config, learner):
    """`q(obs batch) -> (batch, num_actions)` of the trained learner."""
    env, env_params = envs.make(config.env)
    if config.agent == "tabular":
        return lambda obs: learner[jax.vmap(lambda o: envs.state_index(env, env_params, o))(obs)]
    network = QNetwork(env.action_space(env_params).n, config.hidden_sizes)
    return lambda obs: network.apply(learner.train_state.params, obs)


def greedy_policy(config: Config, learner):
    """`act(obs batch) -> actions`: the greedy policy of one trained learner."""
    q = greedy_q_function(config, learner)
    return lambda obs: jnp.argmax(q(obs), -1)


def make_evaluate(config: Config):
    """Returns `evaluate(rng, learner) -> (eval_episodes,)` returns of the greedy policy on fresh episodes."""
    env, env_params = envs.make_vec(config.env, config.eval_episodes)

    def evaluate(rng, learner):
        return envs.evaluate(env, env_params, greedy_policy(config, learner), rng, env_params.max_steps_in_episode)

    return evaluate


def greedy_path_length(env: GridWorld, env_params, q_table):
    """Steps the greedy policy (argmax, first of ties) takes from the start cell to the goal on GridWorld;
    -1 if it does not arrive within the time limit."""

    def _step(carry, _):
        state, steps, arrived = carry
        action = jnp.argmax(q_table[state.row * env.cols + state.col])
        _, state, _, terminated, _ = env.step_env(None, state, action, env_params)
        steps = jnp.where(arrived, steps, steps + 1)
        return (state, steps, jnp.logical_or(arrived, terminated)), None

    start = GridState(time=jnp.int32(0), row=jnp.int32(env.start[0]), col=jnp.int32(env.start[1]))
    (_, steps, arrived), _ = jax.lax.scan(_step, (start, jnp.int32(0), jnp.bool_(False)), None,
                                     env_params.max_steps_in_episode)
    return jnp.where(arrived, steps, -1)


# ----------------------------------------------------------------------------------------------------------
# Checking the config, and everything written to the run directory.


def validate(config: Config) -> str | None:
    """Returns one line saying what is wrong with the config, or None if it can be trained."""
    for name in ("num_seeds", "total_timesteps", "num_envs", "num_steps", "buffer_size", "batch_size",
                 "train_frequency", "target_network_frequency", "eval_episodes", "log_every", "num_chunks",
                 "keep_checkpoints"):
        value = getattr(config, name)
        if value is not None and value <= 0:
            return f"--{name.replace('_', '-')} must be a positive integer, got {value}"
    if config.learning_starts < 0:
        return f"--learning-starts must be >= 0, got {config.learning_starts}"
    if config.learning_rate is not None and config.learning_rate <= 0:
        return f"--learning-rate must be positive, got {config.learning_rate}"
    for name in ("gamma", "start_e", "end_e", "exploration_fraction", "tau"):
        value = getattr(config, name)
        if value is not None and not 0 <= value <= 1:
            return f"--{name.replace('_', '-')} must lie in [0, 1], got {value}"
    if config.tau == 0:
        return "--tau 0 would never update the target network"
    if any(size <= 0 for size in config.hidden_sizes):
        return f"--hidden-sizes must be positive integers, got {config.hidden_sizes}"
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
    if not discrete:
        return (f"--env {config.env} has continuous actions; Q-learning and DQN need a discrete action space "
                "(try td3.py or ppo.py)")
    if config.agent == "tabular" and envs.num_states(env, env_params) is None:
        return (f"--agent tabular needs a finite-state env (GridWorld-v0, FrozenLake-misc); {config.env} "
                "has continuous observations: use --agent dqn or auto")
    config = resolve(config)
    try:
        points = sweep_points(config)
    except ValueError as error:
        return str(error)
    if len(points) > 1:
        for point in points:  # every value must be valid on its own
            error = validate(Config(**{**asdict(config), **point, "sweep": ()}))
            if error:
                return f"--sweep {point_label(point)}: {error}"
    steps_per_update = config.num_envs * config.num_steps
    if config.total_timesteps < steps_per_update:
        return (f"--total-timesteps {config.total_timesteps} is smaller than one update "
                f"(--num-envs x --num-steps = {steps_per_update})")
    if config.agent == "dqn":
        if config.train_frequency % config.num_envs and config.num_envs % config.train_frequency:
            return (f"--train-frequency {config.train_frequency} and --num-envs {config.num_envs}: one must "
                    "divide the other (gradient steps come every train-frequency env steps)")
        if config.buffer_size < max(config.batch_size, config.num_envs):
            return (f"--buffer-size {config.buffer_size} must hold at least one batch (--batch-size "
                    f"{config.batch_size}) and one step of every env (--num-envs {config.num_envs})")
    num_updates = num_iterations(config)
    if num_updates % config.num_chunks:
        divisors = [d for d in range(1, min(num_updates, 1000) + 1) if num_updates % d == 0]
        return (f"--num-chunks {config.num_chunks} does not divide the {num_updates} updates (--total-timesteps // "
                f"(--num-envs x --num-steps)); use one of {', '.join(map(str, divisors))}")
    return None


METRIC_KEYS = {
    "tabular": ("env_steps", "episodes", "episode_return", "episode_length", "epsilon", "nonfinite"),
    "dqn": ("env_steps", "episodes", "episode_return", "episode_length", "epsilon", "loss/td", "q_value",
            "nonfinite"),
}


def algo_name(config: Config) -> str:
    """tabular_q or dqn, for a resolved config: the run directory's and the checkpoint's name of the algorithm."""
    return "tabular_q" if config.agent == "tabular" else "dqn"


class MetricsCsv:
    """<run dir>/metrics.csv, one row per update and agent, appended as each chunk ends: a killed run loses at
    most the chunk it was in. Rows go update by update, so any chunking writes the same file."""

    def __init__(self, path, keys, keep_iterations=0, make_dir=False):
        self.path, self.keys = path, keys
        if make_dir:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        kept = []
        if keep_iterations and os.path.exists(path):
            # Resuming: rows past the checkpoint (written before a crash cut its save short) go, the rest stay as
            # written.
            with open(path, newline="") as f:
                kept = [row for row in list(csv.reader(f))[1:] if int(row[1]) < keep_iterations]
        with open(f"{path}.tmp", "w", newline="") as f:
            csv.writer(f).writerows([["seed", "update", *keys], *kept])
        os.replace(f"{path}.tmp", path)

    def append(self, seeds, first, metrics):
        with open(self.path, "a", newline="") as f:
            writer = csv.writer(f)
            for u in range(metrics["env_steps"].shape[1]):
                for i, seed in enumerate(seeds):
                    writer.writerow([seed, first + u, *(metrics[k][i, u] for k in self.keys)])


class Progress:
    """Host side of the logging callback: gathers one update's metrics from every agent this process trains, then
    prints a line (process 0) and logs each sweep point to its wandb run. Training never waits on it beyond the
    call itself."""

    def __init__(self, config: Config, points, agents, wandb_runs):
        self.keys = METRIC_KEYS[config.agent]
        self.seed, self.num_seeds, self.points = config.seed, config.num_seeds, points
        self.agents = set(agents)  # the agent indices this process trains
        self.wandb_runs = wandb_runs  # one per sweep point, or None
        self.pending = {}
        self.lock = threading.Lock()
        self.start = time.perf_counter()
        self.start_steps = 0  # env steps per agent already done when `start` was taken (a resumed run)

    def __call__(self, agent, update, metrics):
        agent, update = int(agent), int(update)
        with self.lock:
            got = self.pending.setdefault(update, {})
            got[agent] = {k: float(v) for k, v in metrics.items()}
            if len(got) < len(self.agents):
                return
            del self.pending[update]
        if jax.process_index() == 0:
            self._emit(update, got)

    def _emit(self, update, by_agent):
        agents = sorted(by_agent)
        returns = np.array([by_agent[a]["episode_return"] for a in agents])
        env_steps = int(by_agent[agents[0]]["env_steps"])
        sps = (env_steps - self.start_steps) * len(agents) / (time.perf_counter() - self.start)
        line = f"update {update + 1:6d}  env_steps {env_steps:10d}  sps {sps:10.0f}  {describe_returns(returns)}"
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
            for key in self.keys[1:]:
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
        meta = {"algo": algo_name(config), "env": config.env, "iterations": done, "config": asdict(config)}
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
            if meta["algo"] != algo_name(config) or meta["env"] != config.env:
                fail(f"{flag}: checkpoint {where} is of {meta['algo']} on {meta['env']}, but the run is "
                     f"{algo_name(config)} on {config.env}; it does not belong to this run directory")
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
    """The config.json of a tabular_q or dqn run directory, as a dict; a clear exit-2 error otherwise."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isdir(run_dir):
        fail(f"{flag}: no run directory {run_dir}")
    try:
        with open(path) as f:
            saved = json.load(f)
        algo = saved.pop("algo")
        if algo in ("tabular_q", "dqn"):
            # JSON has no tuples: hidden_sizes comes back a list.
            return {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()
                    if k in Config.__dataclass_fields__}
    except (OSError, ValueError, KeyError, AttributeError):
        fail(f"{flag}: {path} is missing or unreadable; is {run_dir} a run directory of dqn_tabular_q.py?")
    fail(f"{flag}: {run_dir} is a run of {algo}, not of tabular_q or dqn; use that script")


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
    kept = f"the last good checkpoint is at update {last_good}" if last_good else "no checkpoint was written"
    return (f"error: non-finite loss or parameters in seed(s) {bad}, first at update {first + iterations.min()} "
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
    """The grid of --sweep values for a resolved config, one dict {field: value} per point (one empty point without
    --sweep); the last --sweep flag varies fastest. A bad spec raises ValueError with one line saying what to do."""
    sweepable = SWEEPABLE[config.agent]
    fields, grids = [], []
    for spec in config.sweep:
        name, sep, values = spec.partition("=")
        name = SWEEP_ALIASES.get(name.strip().replace("-", "_"), name.strip().replace("-", "_"))
        if not sep or not name or not values.strip():
            raise ValueError(f"--sweep {spec!r} is malformed; write field=v1,v2,... (e.g. --sweep lr=0.1,0.5)")
        if name in ("seed", "num_seeds"):
            raise ValueError(f"--sweep {name}: seeds are vmapped already; use --seed and --num-seeds")
        if name not in Config.__dataclass_fields__:
            raise ValueError(f"--sweep {spec!r}: {algo_name(config)} has no field {name!r}; sweepable: "
                             f"{', '.join(sweepable)}")
        if name not in sweepable and any(name in agent_fields for agent_fields in SWEEPABLE.values()):
            raise ValueError(f"--sweep {name}: the {config.agent} agent does not use it; sweepable for "
                             f"{algo_name(config)}: {', '.join(sweepable)}")
        if name not in sweepable:
            raise ValueError(f"--sweep {name}: it changes array shapes or the compiled program, so one program "
                             f"cannot vary it; run one job per value (sweepable: {', '.join(sweepable)})")
        if name in fields:
            raise ValueError(f"--sweep {name} is given twice; list all its values in one flag")
        try:
            parsed = [float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"--sweep {spec!r}: the values must be numbers separated by commas, "
                             "e.g. --sweep lr=0.1,0.5") from None
        if len(set(parsed)) < len(parsed):
            raise ValueError(f"--sweep {spec!r} repeats a value")
        fields.append(name)
        grids.append(parsed)
    return [dict(zip(fields, values, strict=True)) for values in itertools.product(*grids)]


def point_label(point: dict) -> str:
    """`learning_rate=0.1,gamma=0.9`: a sweep point's name, also its directory in the run directory."""
    return ",".join(f"{k}={v:g}" for k, v in point.items())


def agent_layout(config: Config, points):
    """Agents point-major: agent p * num_seeds + s trains sweep point p with seed config.seed + s, so every point
    sees the seeds a run without --sweep would. -> (keys, hparams {field: (agents,)}, names), numpy."""
    keys = np.tile(np.asarray(seed_keys(config)), (len(points), 1))
    hparams = {k: np.array([p.get(k, getattr(config, k)) for p in points for _ in range(config.num_seeds)],
                           np.float32) for k in SWEEPABLE[config.agent]}
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
    the orthogonal initialiser's QR decompositions on two host devices at once (ppo.py; kept here alike)."""
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
    """--eval: the greedy policies of a saved run, on the same episodes as its summary's eval_return
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
    learner = learner_of(run_config, runner)
    returns = np.asarray(jax.jit(jax.vmap(make_evaluate(run_config)))(eval_keys, learner))
    indices = range(len(keys)) if config.seed_index is None else [config.seed_index]
    print(f"{algo_name(run_config)} on {run_config.env}, checkpoint after {done} updates: greedy policy, "
          f"{episodes} episodes per agent")
    for i in indices:
        print(f"seed {names[i]} (index {i}): mean {returns[i].mean():.2f}  returns "
              + " ".join(f"{r:.1f}" for r in returns[i]))
    if len(indices) > 1:
        print(f"mean over agents: {returns.mean():.2f}")
    if config.gif is not None:
        index = config.seed_index or 0
        agent = jax.tree.map(lambda x: x[index], learner)
        act = greedy_policy(run_config, agent)
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


def finish_wandb(wandb_run, summary, image_paths):
    def _finish():
        import wandb

        wandb_run.log({os.path.splitext(os.path.basename(p))[0]: wandb.Image(p) for p in image_paths})
        wandb_run.summary.update(summary)
        wandb_run.finish()

    safe_wandb(_finish)


def final_returns(metrics):
    """Per seed: mean return of the episodes that ended in the last 10% of updates."""
    num_updates = metrics["episodes"].shape[1]
    tail = slice(num_updates - max(1, num_updates // 10), None)
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


def plot_q_grid(path, env: GridWorld, q_tables, title):
    """The grid coloured by max_a Q (mean over agents) with the greedy action of the mean table in each cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q = np.asarray(q_tables).mean(0).reshape(env.rows, env.cols, -1)
    fig, ax = plt.subplots(figsize=(1 + 0.6 * env.cols, 0.6 * env.rows + 0.8))
    image = ax.imshow(q.max(-1), cmap="viridis")
    fig.colorbar(image, ax=ax, label="max_a Q(s, a)")
    arrows = {"right": (0.3, 0), "down": (0, 0.3), "left": (-0.3, 0), "up": (0, -0.3)}
    for row in range(env.rows):
        for col in range(env.cols):
            if (row, col) == env.goal:
                ax.text(col, row, "G", ha="center", va="center", color="white", fontweight="bold")
                continue
            dx, dy = arrows[ACTION_NAMES[int(np.argmax(q[row, col]))]]
            ax.arrow(col - dx / 2, row - dy / 2, dx, dy, head_width=0.15, length_includes_head=True,
                     color="white")
    ax.add_patch(plt.Rectangle((env.start[1] - 0.5, env.start[0] - 0.5), 1, 1, fill=False, color="red", lw=2))
    ax.set_xticks(range(env.cols))
    ax.set_yticks(range(env.rows))
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def to_json(x):
    x = np.asarray(x)
    return [None if np.isnan(v) else float(v) for v in x.ravel()]


def write_point(point_dir, config: Config, seeds, metrics, eval_returns, q_tables, path_lengths, extra):
    """learning_curve.png, summary.json and (tabular on GridWorld: `q_tables` and `path_lengths` given)
    q_values.png of one sweep point (the whole run without --sweep) -> (the summary, the images written)."""
    algo = algo_name(config)
    images = [os.path.join(point_dir, "learning_curve.png")]
    plot_learning_curve(images[0], metrics, f"{algo} on {config.env}")
    env_steps = int(metrics["env_steps"][0, -1])
    final = final_returns(metrics)
    summary = {"algo": algo, "env": config.env, "num_seeds": config.num_seeds, "seeds": seeds,
               "total_timesteps": config.total_timesteps, "env_steps": env_steps, **extra,
               "final_return": to_json(final), "eval_return": to_json(eval_returns)}
    if path_lengths is not None:
        summary["greedy_path_length"] = [None if n < 0 else int(n) for n in path_lengths]
        images.append(os.path.join(point_dir, "q_values.png"))
        plot_q_grid(images[-1], envs.make(config.env)[0], q_tables,
                    f"tabular Q on {config.env}, mean of {config.num_seeds} agents")
    with open(os.path.join(point_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"final return (last 10% of training): mean {nanmean(final):.2f}, per seed "
          + " ".join(f"{r:.1f}" for r in final))
    print(f"eval return (greedy policy):         mean {eval_returns.mean():.2f}, per seed "
          + " ".join(f"{r:.1f}" for r in eval_returns))
    if "greedy_path_length" in summary:
        print("greedy path length from the start: "
              + " ".join("-" if n is None else str(n) for n in summary["greedy_path_length"]))
    return summary, images


def main(config: Config):
    if config.eval is not None:
        evaluate_run(config)
        return
    if config.resume is not None:
        config = resumed_config(config)
    error = validate(config)
    if error:
        fail(error)
    config = resolve(config)
    algo = algo_name(config)
    points = sweep_points(config)
    keys, hparams, names = agent_layout(config, points)
    mesh = Mesh(np.array(choose_devices(config, len(keys))), ("agents",))
    sharding = NamedSharding(mesh, PartitionSpec("agents"))
    lead = jax.process_index() == 0  # process 0 writes the run directory and wandb
    if config.resume is not None:
        run_dir = config.resume
        run_name = os.path.basename(os.path.normpath(run_dir))
    else:
        stamp = int(time.time())
        if jax.process_count() > 1:  # one name for every process
            stamp = int(multihost_utils.broadcast_one_to_all(np.int32(stamp)))
        run_name = config.run_name or f"{config.env}__{algo}__{config.seed}__{stamp}"
        run_dir = os.path.join(config.out_dir, run_name)
        if os.path.isdir(run_dir) and os.listdir(run_dir):
            fail(f"run directory {run_dir} exists and is not empty; choose another --run-name, or --resume it")
        if jax.process_count() > 1:  # every process has checked before process 0 creates it
            multihost_utils.sync_global_devices("run directory checked")
        if lead:
            os.makedirs(run_dir, exist_ok=True)
            with open(os.path.join(run_dir, "config.json"), "w") as f:
                json.dump({"algo": algo, **asdict(config), "resume": None}, f, indent=2)
    sweep = len(points) > 1
    point_dirs = [os.path.join(run_dir, point_label(p)) if sweep else run_dir for p in points]
    wandb_runs = None
    if config.track and lead:
        wandb_runs = [start_wandb(config, f"{run_name}/{point_label(p)}" if sweep else run_name, run_dir,
                                  group=(config.wandb_group or run_name) if sweep else config.wandb_group,
                                  values=p) for p in points]

    seeds = [config.seed + i for i in range(config.num_seeds)]
    num_updates = num_iterations(config)
    chunk = num_updates // config.num_chunks
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
            print(f"{algo} on {config.env}: {agents} x {config.total_timesteps} steps ({config.num_envs} envs each) "
                  f"in {config.num_chunks} chunk(s) on {mesh.devices.size} device(s), run dir {run_dir}", flush=True)
        checkpoints = Checkpoints(run_dir, config.keep_checkpoints)
        done, history = 0, None
        t0 = time.perf_counter()
        if config.resume is not None:
            abstract_runner = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                                           jax.eval_shape(jax.vmap(init), keys, hparams))
            runner, history, done = checkpoints.restore(run_dir, "--resume", config, abstract_runner, True)
            if lead:
                print(f"resuming after update {done} of {num_updates}")
        else:
            runner = init_agents(init, sharding, keys, hparams)
        compiled = run.lower(agent_ids, runner, jnp.arange(chunk)).compile()
        compile_s = time.perf_counter() - t0
        if lead:
            print(f"compiled in {compile_s:.1f} s")
            metric_keys = METRIC_KEYS[config.agent]
            metrics_csvs = [MetricsCsv(os.path.join(d, "metrics.csv"), metric_keys, keep_iterations=done,
                                       make_dir=sweep) for d in point_dirs]
        profile_dir = os.path.join(run_dir, "profile")
        progress.start, progress.start_steps = time.perf_counter(), done * config.num_envs * config.num_steps
        for start in range(done, num_updates, chunk):
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
            if signum and start + chunk < num_updates:
                message = (f"{signal.Signals(signum).name}: stopped after update {start + chunk} of {num_updates}, "
                           f"metrics and checkpoint written; continue with: python dqn_tabular_q.py --resume "
                           f"{run_dir}")
                stop_run(checkpoints, wandb_runs, message, 128 + signum)
    finally:
        stop.restore()
    train_s = time.perf_counter() - progress.start
    checkpoints.close()
    if config.profile and lead:
        print(f"profiler trace in {profile_dir}: open its *.trace.json.gz at https://ui.perfetto.dev "
              "(the trace adds overhead to train_s)")

    learner = learner_of(config, runner)
    eval_keys = to_agents(np.asarray(jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)), sharding)
    eval_returns = gather(over_agents(make_evaluate(config), mesh, (0, 0))(eval_keys, learner)).mean(axis=1)
    q_tables = path_lengths = None
    base_env, base_params = envs.make(config.env)
    if config.agent == "tabular" and isinstance(base_env, GridWorld):
        q_tables = gather(learner)
        path_lengths = gather(over_agents(lambda q: greedy_path_length(base_env, base_params, q), mesh, (0,))(
            learner))
    if not lead:
        return
    env_steps = int(history["env_steps"][0, -1])
    sps = (env_steps - progress.start_steps) * len(keys) / train_s
    extra = {"resumed_after_update": done if config.resume is not None else None, "compile_s": compile_s,
             "train_s": train_s, "sps": sps, "num_devices": int(mesh.devices.size),
             "num_processes": jax.process_count()}
    print(f"\n{'=' * 72}\n{algo} on {config.env}: {len(keys)} agents, {env_steps} env steps each")
    print(f"compile {compile_s:.1f} s, train {train_s:.1f} s, {sps:.0f} env steps/s over all agents")
    summaries, images = [], []
    for p, point in enumerate(points):
        if sweep:
            print(f"-- point {p}: {point_label(point)}")
        rows = point_rows((history, eval_returns, q_tables, path_lengths), p, config.num_seeds)
        summary, point_images = write_point(point_dirs[p], config, seeds, *rows,
                                            {**extra, "sweep_point": point or None})
        summaries.append(summary)
        images.append(point_images)
    if sweep:
        ranking = sorted(range(len(points)), key=lambda p: -np.nan_to_num(nanmean(summaries[p]["final_return"]),
                                                                            nan=-np.inf))
        summary = {"algo": algo, "env": config.env, "sweep": list(config.sweep), **extra,
                   "ranking": [{"rank": r + 1, "point": point_label(points[p]), "values": points[p],
                                "final_return_mean": nanmean(summaries[p]["final_return"]),
                                "eval_return_mean": nanmean(summaries[p]["eval_return"])}
                               for r, p in enumerate(ranking)]}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print("ranking by final return: " + "; ".join(
            f"{e['rank']}. {e['point']} ({e['final_return_mean']:.1f})" for e in summary["ranking"]))
    print(f"written to {run_dir}\n{'=' * 72}")
    for wandb_run, point_summary, point_images in zip(wandb_runs or [None] * len(points), summaries, images,
                                                      strict=True):
        if wandb_run is not None:
            finish_wandb(wandb_run, point_summary, point_images)


if __name__ == "__main__":
    main(tyro.cli(Config))
