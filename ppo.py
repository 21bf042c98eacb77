"""PPO with the clipped objective and GAE (Schulman et al. 2017), discrete and continuous actions.

The whole training run (rollout, advantages, update epochs) is one `lax.scan` inside one `jax.jit`, and
`jax.vmap` trains `--num-seeds` agents at once in the same compiled program:

    python ppo.py --env CartPole-v1 --num-seeds 30
    python ppo.py --num-seeds 8 --sweep lr=1e-3,3e-4 --sweep ent_coef=0,0.01   # 4 x 8 agents, one program

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per update and agent), learning_curve.png and
summary.json; with `--track`, a wandb run as well. All but the algorithm (the flags every script shares, the run
directory, checkpoints and --resume, --eval, sweeps, devices and processes, wandb) is the harness's (scanrl.harness).
"""

from scanrl import harness

harness.prepare_jax(__name__)  # first: --help at once, XLA's flags (a device per core), a multi-process run

from dataclasses import dataclass
from typing import Literal, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState

from scanrl import blocks, envs


@dataclass(frozen=True)
class Config(harness.Flags):
    """PPO's fields; --env (CartPole-v1), --total-timesteps (500k), --seed, --num-seeds, --out-dir, ... are the
    flags every script shares (harness.Flags)."""

    log_every: int = 20
    """print progress (and log to wandb) every this many iterations (updates)"""
    # algorithm
    num_envs: int = 4
    """parallel envs per agent"""
    num_steps: int = 128
    """steps per env in each rollout (batch = num_envs * num_steps)"""
    update_epochs: int = 4
    """passes over each rollout batch"""
    num_minibatches: int = 4
    """minibatches per epoch; must divide num_envs * num_steps"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    clip_coef: float = 0.2
    """PPO ratio clipping epsilon (also clips the value update)"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    normalize: Literal["auto", "on", "off"] = "auto"
    """running observation and reward normalisation; auto: on for continuous actions, off for discrete"""
    # network
    hidden_size: int = 64
    """width of the two hidden layers of actor and critic"""
    activation: str = "tanh"
    """hidden activation: tanh or relu"""


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


class Actor(nn.Module):
    action_dim: int
    discrete: bool
    hidden_size: int
    activation: str

    @nn.compact
    def __call__(self, obs):
        act = ACTIVATIONS[self.activation]
        x = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(obs))
        x = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        # A small last layer keeps the initial policy close to uniform / zero-mean (Andrychowicz et al. 2021).
        out = nn.Dense(self.action_dim, kernel_init=nn.initializers.orthogonal(0.01))(x)
        if self.discrete:
            return distrax.Categorical(logits=out)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return distrax.MultivariateNormalDiag(out, jnp.exp(log_std))


class Critic(nn.Module):
    hidden_size: int
    activation: str

    @nn.compact
    def __call__(self, obs):
        act = ACTIVATIONS[self.activation]
        x = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(obs))
        x = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(x).squeeze(-1)


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    pi: tuple  # the parameters of the acting policy's distribution: (logits,) or (mean, std)
    reward: jax.Array
    terminated: jax.Array
    done: jax.Array
    next_obs: jax.Array  # the true next observation, also at an auto-reset
    episode_return: jax.Array
    episode_length: jax.Array


class RunnerState(NamedTuple):
    train_state: TrainState
    env_state: object
    obs: jax.Array
    rng: jax.Array


def calculate_gae(rewards, values, next_values, terminated, dones, gamma, gae_lambda):
    """GAE-lambda along axis 0 (time). Bootstraps from V(next obs) unless the episode terminated; the
    recursion stops at every episode end, terminated or truncated (time limits are not failures)."""
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    decay = gamma * gae_lambda * (1.0 - dones)

    def _backward(advantage, step):
        delta, decay_t = step
        advantage = delta + decay_t * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(_backward, jnp.zeros_like(deltas[0]), (deltas, decay), reverse=True)
    return advantages, advantages + values


def draw_noise(key, shape, discrete: bool):
    """Noise for `sample_with_noise`: standard Gumbel for a categorical policy, standard normal for a Gaussian."""
    return jax.random.gumbel(key, shape) if discrete else jax.random.normal(key, shape)


def sample_with_noise(pi, noise):
    """A sample of `pi` from pre-drawn noise: Gumbel-max for a categorical, loc + scale * eps for a Gaussian
    (the same distributions as `pi.sample`)."""
    if isinstance(pi, distrax.Categorical):
        return jnp.argmax(pi.logits + noise, axis=-1)
    return pi.loc + pi.scale_diag * noise


def use_normalization(config: Config, discrete: bool) -> bool:
    return config.normalize == "on" or (config.normalize == "auto" and not discrete)


def make_networks(config: Config, env, env_params):
    discrete = envs.is_discrete(env, env_params)
    space = env.action_space(env_params)
    action_dim = space.n if discrete else int(np.prod(space.shape))
    actor = Actor(action_dim, discrete, config.hidden_size, config.activation)
    critic = Critic(config.hidden_size, config.activation)
    return actor, critic, discrete, action_dim


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in an iteration of the training scan (an update): a rollout of num_envs x num_steps."""
    return config.num_envs * config.num_steps


def make_train_parts(config: Config):
    """PPO for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
    (runner, metrics)`, one iteration: a rollout of every env, its advantages, and the update epochs."""
    batch_size = config.num_envs * config.num_steps
    minibatch_size = batch_size // config.num_minibatches
    num_updates = config.total_timesteps // steps_per_iteration(config)  # iterations of the run
    env, env_params = envs.make_vec(config.env, config.num_envs)
    actor, critic, discrete, action_dim = make_networks(config, env, env_params)
    if use_normalization(config, discrete):
        env, env_params = envs.make_vec(
            config.env, config.num_envs, normalize_obs=True, normalize_reward=True, gamma=config.gamma
        )
    anneal = optax.identity()
    if config.anneal_lr:
        anneal = optax.scale_by_schedule(
            optax.linear_schedule(1.0, 0.0, num_updates * config.update_epochs * config.num_minibatches))

    # optax.flatten: the optimizer on one flat vector, a few large ops per step instead of a few per parameter array
    # (XLA:CPU pays per op), and the same numbers on one device or several.
    tx = optax.flatten(optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate, eps=1e-5), anneal))

    def init(rng):
        rng, key_actor, key_critic, key_reset = jax.random.split(rng, 4)
        obs, env_state = env.reset(key_reset, env_params)
        params = {"actor": actor.init(key_actor, obs[0]), "critic": critic.init(key_critic, obs[0])}
        return RunnerState(TrainState.create(apply_fn=None, params=params, tx=tx), env_state, obs, rng)

    def _env_step(runner, noise):
        train_state, env_state, obs, rng = runner
        action_noise, env_keys = noise
        pi = actor.apply(train_state.params["actor"], obs)
        action = sample_with_noise(pi, action_noise)
        next_obs, env_state, reward, terminated, truncated, info = env.step(
            env_keys, env_state, action, env_params
        )
        transition = Transition(
            obs, action, (pi.logits,) if discrete else (pi.loc, pi.scale_diag), reward,
            terminated.astype(jnp.float32), info["episode_done"].astype(jnp.float32), info["final_observation"],
            info["episode_return"], info["episode_length"],
        )
        return RunnerState(train_state, env_state, next_obs, rng), transition

    def _loss_fn(params, batch):
        obs, action, old_log_prob, old_value, advantage, target = batch
        pi = actor.apply(params["actor"], obs)
        log_prob = pi.log_prob(action)
        value = critic.apply(params["critic"], obs)
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        log_ratio = log_prob - old_log_prob
        ratio = jnp.exp(log_ratio)
        clipped_ratio = jnp.clip(ratio, 1.0 - config.clip_coef, 1.0 + config.clip_coef)
        actor_loss = -jnp.minimum(ratio * advantage, clipped_ratio * advantage).mean()
        value_clipped = old_value + jnp.clip(value - old_value, -config.clip_coef, config.clip_coef)
        critic_loss = 0.5 * jnp.maximum((value - target) ** 2, (value_clipped - target) ** 2).mean()
        entropy = pi.entropy().mean()
        loss = actor_loss + config.vf_coef * critic_loss - config.ent_coef * entropy
        stats = {
            "loss/actor": actor_loss,
            "loss/critic": critic_loss,
            "entropy": entropy,
            "approx_kl": ((ratio - 1.0) - log_ratio).mean(),  # Schulman's low-variance KL estimator
            "clip_frac": (jnp.abs(ratio - 1.0) > config.clip_coef).mean(),
        }
        return loss, stats

    def _update_minibatch(train_state, minibatch):
        grads, stats = jax.grad(_loss_fn, has_aux=True)(train_state.params, minibatch)
        return train_state.apply_gradients(grads=grads), stats

    def _update_epoch(carry, _):
        train_state, batch, rng = carry
        rng, key_perm = jax.random.split(rng)
        permutation = blocks.permutation(key_perm, batch_size)
        minibatches = jax.tree.map(
            lambda x: x[permutation].reshape((config.num_minibatches, minibatch_size) + x.shape[1:]), batch
        )
        train_state, stats = jax.lax.scan(_update_minibatch, train_state, minibatches)
        return (train_state, batch, rng), stats

    def update(runner):
        # The rollout's randomness in two batched draws before the scan instead of small ones at every
        # step: on CPU each random draw inside the scan body is a loop of its own (threefry's rounds).
        rng, key_noise, key_env = jax.random.split(runner.rng, 3)
        noise = (
            draw_noise(key_noise, (config.num_steps, config.num_envs, action_dim), discrete),
            jax.random.split(key_env, (config.num_steps, config.num_envs)),
        )
        runner, traj = jax.lax.scan(_env_step, runner._replace(rng=rng), noise)
        train_state, env_state, obs, rng = runner
        # Values in one batched pass, outside the rollout scan (fewer, larger ops than step by step); the old
        # log-probs from the distributions the rollout acted with, no second actor pass.
        params = train_state.params
        values = critic.apply(params["critic"], traj.obs)
        # V(next obs) from the values shifted, evaluating the critic on the truncations' final observations only
        next_values = blocks.next_obs_values(lambda x: critic.apply(params["critic"], x), values, traj.done,
                                           traj.terminated, traj.next_obs, obs, env_params)
        old_pi = distrax.Categorical(*traj.pi) if discrete else distrax.MultivariateNormalDiag(*traj.pi)
        log_probs = old_pi.log_prob(traj.action)
        advantages, targets = calculate_gae(
            traj.reward, values, next_values, traj.terminated, traj.done, config.gamma, config.gae_lambda
        )
        batch = (traj.obs, traj.action, log_probs, values, advantages, targets)
        batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
        (train_state, _, rng), stats = jax.lax.scan(
            _update_epoch, (train_state, batch, rng), None, config.update_epochs
        )
        episodes = traj.done.sum()
        metrics = {
            "episodes": episodes,
            # Mean over the episodes that ended in this rollout; NaN if none did.
            "episode_return": (traj.episode_return * traj.done).sum() / episodes,
            "episode_length": (traj.episode_length * traj.done).sum() / episodes,
            **jax.tree.map(jnp.mean, stats),
        }
        return RunnerState(train_state, env_state, obs, rng), metrics

    return init, update


def make_train(config: Config):
    """`train(rng) -> (runner, metrics)`: one agent's whole run, pure and jittable; metrics have an iteration axis.
    The command line runs this scan, chunk by chunk."""
    init, update = make_train_parts(config)
    iterations = config.total_timesteps // steps_per_iteration(config)
    return lambda rng: jax.lax.scan(lambda runner, _: update(runner), init(rng), None, iterations)


def policy(config: Config, runner, key=None):
    """`act(obs batch) -> actions`: one agent's deterministic policy (argmax / mean action); with a `key`, the policy
    training acts with, each action sampled from the actor (--eval --eval-sampled). The harness feeds it observations
    normalised as in training (the runner's statistics, frozen)."""
    env, env_params = envs.make_vec(config.env, 1)
    actor = make_networks(config, env, env_params)[0]

    def pi(obs):
        return actor.apply(runner.train_state.params["actor"], obs)

    return (lambda obs: pi(obs).mode()) if key is None else blocks.sampling_policy(pi, key)


def validate(config: Config):
    """Raises ValueError for what PPO cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size",
                                      "learning_rate", "clip_coef", "max_grad_norm"),
                    unit=("gamma", "gae_lambda"), nonnegative=("vf_coef", "ent_coef"))  # < 0 would ascend the term
    if config.activation not in ACTIVATIONS:
        raise ValueError(f"--activation {config.activation!r} is unknown; use one of "
                         f"{', '.join(ACTIVATIONS)}")
    rollout = steps_per_iteration(config)
    if config.total_timesteps < rollout:
        raise ValueError(f"--total-timesteps {config.total_timesteps} is smaller than one rollout (--num-envs "
                         f"x --num-steps = {rollout}); raise it or shrink the rollout")
    if rollout % config.num_minibatches:
        raise ValueError(f"--num-minibatches {config.num_minibatches} does not divide the rollout (--num-envs "
                         f"x --num-steps = {rollout}); use a divisor of {rollout}")


# The hand-off to the harness: a fork keeps it (its runs take the fork's file name).
ALGORITHM = harness.Algorithm(
    config=Config, make_train_parts=make_train_parts, steps_per_iteration=steps_per_iteration,
    policy=policy, validate=validate,
)


def main(config: Config | None = None):
    """Trains a new run from the command line (or `config`), or resumes or evaluates one (harness.main)."""
    harness.main(ALGORITHM, config)


if __name__ == "__main__":
    main()
