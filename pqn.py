"""PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning"): Q(lambda) over rollouts of many
parallel envs, with a LayerNorm Q-network and neither replay buffer nor target network.

The whole training run is one `lax.scan` inside one `jax.jit`, and `jax.vmap` trains `--num-seeds` agents at once
in the same compiled program:

    python pqn.py --env CartPole-v1 --num-seeds 30
    python pqn.py --env Acrobot-v1 --num-seeds 8 --sweep q_lambda=0.5,0.8

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per iteration and agent), learning_curve.png and
summary.json; with `--track`, a wandb run as well. All but the algorithm is the harness's (scanrl/harness/).
"""

from scanrl import harness

harness.prepare_jax(__name__)  # first: --help at once, XLA's flags (a device per core), a multi-process run

import functools
from dataclasses import dataclass
from typing import Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from scanrl import blocks, envs


@dataclass(frozen=True)
class Config(harness.Flags):
    """PQN's fields; --env (CartPole-v1), --total-timesteps (500k), --seed, --num-seeds, --out-dir, ... are the flags
    every script shares (harness.Flags)."""

    log_every: int = 50
    """print progress (and log to wandb) every this many iterations"""
    # algorithm (defaults: purejaxql's CartPole configuration)
    num_envs: int = 32
    """parallel envs per agent"""
    num_steps: int = 64
    """steps per env in each rollout (batch = num_envs * num_steps)"""
    update_epochs: int = 4
    """passes over each rollout"""
    num_minibatches: int = 16
    """minibatches per pass; they must divide num-envs x num-steps"""
    learning_rate: float = 5e-4
    """RAdam step size"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over training"""
    max_grad_norm: float = 10.0
    """gradients are clipped to this global norm"""
    gamma: float = 0.99
    """discount factor"""
    q_lambda: float = 0.8
    """lambda of the Q(lambda) targets: 0 is the one-step target, 1 the Monte Carlo return"""
    start_e: float = 1.0
    """epsilon of the epsilon-greedy policy at the start"""
    end_e: float = 0.05
    """epsilon at the end of the decay"""
    exploration_fraction: float = 0.2
    """fraction of total-timesteps over which epsilon decays linearly from start-e to end-e"""
    loss: Literal["mse", "huber"] = "mse"
    """TD loss: mean squared error or Huber (smooth L1)"""
    # network
    hidden_sizes: tuple[int, ...] = (120, 84)
    """widths of the Q-network's hidden layers (a LayerNorm before each ReLU)"""


class QNetwork(nn.Module):
    """An MLP from observations to one Q-value per action, a LayerNorm before each hidden ReLU: PQN's stabiliser in
    place of a target network (Gallici et al. 2024, section 4)."""

    num_actions: int
    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, obs):
        x = obs.astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.relu(nn.LayerNorm()(nn.Dense(size)(x)))
        return nn.Dense(self.num_actions)(x)


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    max_q: jax.Array  # max_a Q(obs, a) with the parameters that acted
    reward: jax.Array
    terminated: jax.Array  # the episode ended in a terminal state: nothing to bootstrap from
    done: jax.Array  # the episode ended (terminated or truncated): the next step's obs starts a new one
    next_obs: jax.Array  # the true next observation, also where the env reset (info["final_observation"])


class RunnerState(NamedTuple):
    train_state: TrainState
    env_state: object
    obs: jax.Array
    env_steps: jax.Array  # int32 scalar: env steps so far, which the epsilon schedule reads
    rng: jax.Array


def linear_epsilon(config: Config, env_steps):
    """Epsilon after `env_steps` env steps: linear from start_e to end_e, then flat. A constant one (start_e ==
    end_e, neither swept) reads no exploration_fraction, so a sweep of it is refused rather than training alike."""
    if isinstance(config.start_e, float) and isinstance(config.end_e, float) and config.start_e == config.end_e:
        return jnp.full(jnp.shape(env_steps), config.start_e, jnp.float32)
    decay_steps = jnp.maximum(1.0, config.exploration_fraction * config.total_timesteps)
    frac = jnp.clip(env_steps / decay_steps, 0.0, 1.0)
    return config.start_e + frac * (config.end_e - config.start_e)


def q_lambda_targets(reward, terminated, done, next_value, gamma, q_lambda):
    """Peng's Q(lambda) returns over a rollout (time first): G_t = r_t + gamma * (1 - terminated_t) *
    ((1 - lambda) * V_t + lambda * G_{t+1}), with V_t = max_a Q(s_{t+1}, a) of the true next observation. Where an
    episode ended at t (or the rollout does), G_{t+1} belongs to another episode and V_t stands alone: a truncated
    episode bootstraps from its last observation, a terminated one from 0."""

    def _step(next_return, step):
        reward, terminated, done, next_value = step
        blend = next_value + q_lambda * (1.0 - done) * (next_return - next_value)
        target = reward + gamma * (1.0 - terminated) * blend
        return target, target

    _, targets = jax.lax.scan(_step, next_value[-1], (reward, terminated, done, next_value), reverse=True)
    return targets


def make_network(config: Config, env, env_params):
    return QNetwork(env.action_space(env_params).n, config.hidden_sizes)


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in an iteration of the training scan: num_steps steps of every env (then learning)."""
    return config.num_envs * config.num_steps


def make_train_parts(config: Config):
    """PQN for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
    (runner, metrics)`, one iteration: `num_envs` envs step `num_steps` times epsilon-greedily; Q(lambda) targets
    over the rollout; then `update_epochs` passes of `num_minibatches` gradient steps of the TD loss (RAdam,
    clipped gradients) on it."""
    env, env_params = envs.make_vec(config.env, config.num_envs)
    network = make_network(config, env, env_params)
    batch_size = steps_per_iteration(config)
    minibatch_size = batch_size // config.num_minibatches
    num_updates = config.total_timesteps // steps_per_iteration(config)  # iterations of the run
    anneal = optax.identity()
    if config.anneal_lr:
        anneal = optax.scale_by_schedule(optax.linear_schedule(
            1.0, 0.0, num_updates * config.update_epochs * config.num_minibatches))
    # optax.flatten: the optimizer on one flat vector, a few large ops per step instead of a few per parameter array
    # (XLA:CPU pays per op), and the same numbers on one device or several.
    tx = optax.flatten(optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.radam(config.learning_rate), anneal))
    td_loss = optax.huber_loss if config.loss == "huber" else optax.squared_error

    def init(rng):
        rng, key_init, key_reset = jax.random.split(rng, 3)
        obs, env_state = env.reset(key_reset, env_params)
        params = network.init(key_init, obs[0])
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        return RunnerState(train_state, env_state, obs, jnp.zeros((), jnp.int32), rng)

    def update(runner):
        def _env_step(carry, step_input):
            params, env_state, obs, episodes, reward_sum, epsilon = carry
            bits, key_step = step_input
            q = network.apply(params, obs)
            action = blocks.epsilon_greedy(q, bits, epsilon)
            next_obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            transition = Transition(obs, action, q.max(-1), reward, terminated.astype(jnp.float32),
                                    info["episode_done"].astype(jnp.float32), info["final_observation"])
            episodes, reward_sum = episodes + info["episode_done"], reward_sum + reward
            return (params, env_state, next_obs, episodes, reward_sum, epsilon), transition

        def _loss_fn(params, obs, action, target):
            q = jnp.take_along_axis(network.apply(params, obs), action[:, None], -1).squeeze(-1)
            return td_loss(q, target).mean(), q.mean()

        def _update_minibatch(train_state, minibatch):
            (loss, q_mean), grads = jax.value_and_grad(_loss_fn, has_aux=True)(train_state.params, *minibatch)
            return train_state.apply_gradients(grads=grads), (loss, q_mean)

        def _update_epoch(batch, train_state, key):
            order = blocks.permutation(key, batch_size)
            minibatches = jax.tree.map(lambda x: x[order].reshape(config.num_minibatches, minibatch_size,
                                                                  *x.shape[1:]), batch)
            return jax.lax.scan(_update_minibatch, train_state, minibatches)

        train_state, env_state, obs, env_steps, rng = runner
        # The rollout's randomness in two batched draws before the scan: on CPU each draw inside the scan body
        # is a loop of its own. One uint32 per step decides exploration and breaks ties (blocks.epsilon_greedy).
        rng, key_bits, key_steps, key_epochs = jax.random.split(rng, 4)
        bits = jax.random.bits(key_bits, (config.num_steps, config.num_envs), jnp.uint32)
        step_keys = jax.random.split(key_steps, config.num_steps)
        epsilon = linear_epsilon(config, env_steps)  # one epsilon for the whole rollout, from the steps before it
        counters = jnp.zeros(config.num_envs, jnp.int32), jnp.zeros(config.num_envs, jnp.float32)
        (_, env_state_end, obs, episodes, reward_sum, _), batch = jax.lax.scan(
            _env_step, (train_state.params, env_state, obs, *counters, epsilon), (bits, step_keys))
        # max_a Q of every true next observation, with the parameters that acted: the rollout's own, shifted,
        # and a pass over the truncations' final observations only.
        next_value = blocks.next_obs_values(lambda x: network.apply(train_state.params, x).max(-1), batch.max_q,
                                          batch.done, batch.terminated, batch.next_obs, obs, env_params)
        targets = q_lambda_targets(batch.reward, batch.terminated, batch.done, next_value, config.gamma,
                                   config.q_lambda)
        flat = jax.tree.map(lambda x: x.reshape(batch_size, *x.shape[2:]), (batch.obs, batch.action, targets))
        train_state, (loss, q_mean) = jax.lax.scan(
            functools.partial(_update_epoch, flat), train_state, jax.random.split(key_epochs, config.update_epochs))
        metrics = {
            **blocks.ended_episodes(env_state, env_state_end, episodes, reward_sum, config.num_steps),
            "epsilon": epsilon,
            "loss/td": loss.mean(),
            "q_value": q_mean.mean(),
        }
        return RunnerState(train_state, env_state_end, obs, env_steps + batch_size, rng), metrics

    return init, update


def make_train(config: Config):
    """`train(rng) -> (runner, metrics)`: one agent's whole run, pure and jittable; metrics have an iteration axis.
    The command line runs this scan, chunk by chunk."""
    init, update = make_train_parts(config)
    iterations = config.total_timesteps // steps_per_iteration(config)
    return lambda rng: jax.lax.scan(lambda runner, _: update(runner), init(rng), None, iterations)


def greedy_policy(config: Config, runner):
    """`act(obs batch) -> actions`: one agent's greedy policy (argmax, the first of tied actions)."""
    env, env_params = envs.make(config.env)
    network = make_network(config, env, env_params)
    return lambda obs: jnp.argmax(network.apply(runner.train_state.params, obs), -1)


def validate(config: Config):
    """Raises ValueError for what PQN cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "num_steps", "learning_rate", "update_epochs", "num_minibatches",
                                      "max_grad_norm"),
                    unit=("gamma", "start_e", "end_e", "exploration_fraction", "q_lambda"))
    if not all(size > 0 for size in config.hidden_sizes):
        raise ValueError(f"--hidden-sizes must be positive integers, got {config.hidden_sizes}")
    env, env_params = envs.make(config.env)
    if not envs.is_discrete(env, env_params):
        raise ValueError(f"--env {config.env} has continuous actions; PQN needs a discrete action space "
                         "(try td3.py or ppo.py)")
    rollout = steps_per_iteration(config)
    if config.total_timesteps < rollout:
        raise ValueError(f"--total-timesteps {config.total_timesteps} is smaller than one rollout "
                         f"(--num-envs x --num-steps = {rollout}); raise it or shrink the rollout")
    if rollout % config.num_minibatches:
        raise ValueError(f"--num-minibatches {config.num_minibatches} does not divide the rollout "
                         f"(--num-envs x --num-steps = {rollout}); use a divisor of {rollout}")


# The hand-off to the harness: a fork keeps it (its runs take the fork's file name).
ALGORITHM = harness.Algorithm(
    config=Config, make_train_parts=make_train_parts, steps_per_iteration=steps_per_iteration,
    policy=greedy_policy, validate=validate,
)


def main(config: Config | None = None):
    """Trains a new run from the command line (or `config`), or resumes or evaluates one (harness.main)."""
    harness.main(ALGORITHM, config)


if __name__ == "__main__":
    main()
