"""REINFORCE / vanilla policy gradient (Williams 1992) with a learned value baseline and GAE-lambda
advantages, as in OpenAI SpinningUp's VPG; discrete and continuous actions.

Each epoch collects `num_envs * num_steps` steps, takes ONE policy-gradient step and `train_v_iters`
full-batch value steps. The whole run is one `lax.scan` inside one `jax.jit`, and `jax.vmap` trains
`--num-seeds` agents at once in the same compiled program:

    python reinforce.py --env CartPole-v1 --num-seeds 4
    python reinforce.py --baseline none     # plain REINFORCE with discounted reward-to-go

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per iteration, an epoch, and agent),
learning_curve.png and summary.json; with `--track`, a wandb run as well. All but the algorithm is the harness's
(scanrl/harness/).
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
    """VPG's fields; --env (CartPole-v1), --total-timesteps (500k), --seed, --num-seeds, --out-dir, ... are the
    flags every script shares (harness.Flags)."""

    log_every: int = 50
    """print progress (and log to wandb) every this many iterations (epochs)"""
    # algorithm
    num_envs: int = 8
    """parallel envs per agent"""
    num_steps: int = 64
    """steps per env in each epoch (steps per epoch = num_envs * num_steps)"""
    baseline: Literal["value", "none"] = "value"
    """value: learned V(s) baseline, GAE-lambda advantages (SpinningUp VPG); none: discounted reward-to-go, no
    critic, cut (not bootstrapped) at each epoch's end, so not the complete-episode returns of textbook REINFORCE"""
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


def use_normalization(config: Config, discrete: bool) -> bool:
    return config.normalize == "on" or (config.normalize == "auto" and not discrete)


def make_networks(config: Config, env, env_params):
    discrete = envs.is_discrete(env, env_params)
    space = env.action_space(env_params)
    action_dim = space.n if discrete else int(np.prod(space.shape))
    actor = Actor(action_dim, discrete, config.hidden_size, config.activation, config.log_std_init)
    critic = Critic(config.hidden_size, config.activation)
    return actor, critic, discrete


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in an iteration of the training scan (an epoch): a rollout of num_envs x num_steps."""
    return config.num_envs * config.num_steps


def make_train_parts(config: Config):
    """VPG for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
    (runner, metrics)`, one iteration, an epoch: a rollout of every env, its advantages, one policy-gradient step
    and `train_v_iters` value steps."""
    steps_per_epoch = steps_per_iteration(config)
    env, env_params = envs.make_vec(config.env, config.num_envs)
    actor, critic, discrete = make_networks(config, env, env_params)
    if use_normalization(config, discrete):
        env, env_params = envs.make_vec(
            config.env, config.num_envs, normalize_obs=True, normalize_reward=True, gamma=config.gamma
        )
    learn_value = config.baseline == "value"
    # optax.flatten: the optimizer on one flat vector, a few large ops per step instead of a few per parameter array
    # (XLA:CPU pays per op), and the same numbers on one device or several.
    actor_tx = optax.flatten(optax.adam(config.pi_lr))
    critic_tx = optax.flatten(optax.adam(config.vf_lr))

    def init(rng):
        rng, key_actor, key_critic, key_reset = jax.random.split(rng, 4)
        obs, env_state = env.reset(key_reset, env_params)
        actor_state = TrainState.create(apply_fn=actor.apply, params=actor.init(key_actor, obs[0]), tx=actor_tx)
        critic_state = TrainState.create(apply_fn=critic.apply, params=critic.init(key_critic, obs[0]), tx=critic_tx)
        return RunnerState(actor_state, critic_state, env_state, obs, rng)

    def update(runner):
        def _env_step(runner, _):
            actor_state, critic_state, env_state, obs, rng = runner
            rng, key_action, key_step = jax.random.split(rng, 3)
            action = actor.apply(actor_state.params, obs).sample(seed=key_action)
            next_obs, env_state, reward, terminated, truncated, info = env.step(
                key_step, env_state, action, env_params
            )
            transition = Transition(
                obs, action, reward, terminated.astype(jnp.float32), info["episode_done"].astype(jnp.float32),
                info["final_observation"], info["episode_return"], info["episode_length"],
            )
            return RunnerState(actor_state, critic_state, env_state, next_obs, rng), transition

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

        runner, traj = jax.lax.scan(_env_step, runner, None, config.num_steps)
        actor_state, critic_state, env_state, obs, rng = runner
        if learn_value:
            # V(obs) and V(next obs) in one batched pass each, outside the rollout scan.
            values = critic.apply(critic_state.params, traj.obs)
            next_values = critic.apply(critic_state.params, traj.next_obs)
            advantages, _ = calculate_gae(
                traj.reward, values, next_values, traj.terminated, traj.done, config.gamma, config.gae_lambda
            )
            targets = reward_to_go(traj.reward, next_values, traj.terminated, traj.done, config.gamma)
        else:
            # Plain REINFORCE: weight log pi by the reward-to-go itself, cut (not bootstrapped) at the epoch end.
            no_values = jnp.zeros_like(traj.reward)
            advantages = targets = reward_to_go(traj.reward, no_values, traj.terminated, traj.done, config.gamma)
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
            "episodes": episodes,
            # Mean over the episodes that ended in this epoch; NaN if none did.
            "episode_return": (traj.episode_return * traj.done).sum() / episodes,
            "episode_length": (traj.episode_length * traj.done).sum() / episodes,
            "loss/actor": actor_loss,
            "loss/critic": critic_loss,  # NaN by design without a learned baseline
            "entropy": entropy,
            "approx_kl": approx_kl,
        }
        return RunnerState(actor_state, critic_state, env_state, obs, rng), metrics

    return init, update


def make_train(config: Config):
    """`train(rng) -> (runner, metrics)`: one agent's whole run, pure and jittable; metrics have an iteration (epoch)
    axis. The command line runs this scan, chunk by chunk."""
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
        return actor.apply(runner.actor_state.params, obs)

    return (lambda obs: pi(obs).mode()) if key is None else blocks.sampling_policy(pi, key)


def validate(config: Config):
    """Raises ValueError for what VPG cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "num_steps", "train_v_iters", "hidden_size", "pi_lr", "vf_lr"),
                    unit=("gamma", "gae_lambda"))
    if config.activation not in ACTIVATIONS:
        raise ValueError(f"--activation {config.activation!r} is unknown; use one of "
                         f"{', '.join(ACTIVATIONS)}")
    rollout = steps_per_iteration(config)
    if config.total_timesteps < rollout:
        raise ValueError(f"--total-timesteps {config.total_timesteps} is smaller than one rollout "
                         f"(--num-envs x --num-steps = {rollout}); raise it or shrink the rollout")


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
