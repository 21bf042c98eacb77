"""SAC: Soft Actor-Critic with a learned temperature (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications"), for continuous actions, with the replay buffer inside the train state.

Acting, storing, sampling and updating all run in one `jax.jit` (nested `lax.scan`s), and `jax.vmap` trains
`--num-seeds` agents, each with its own ring buffer, in the same compiled program:

    python sac.py --env Pendulum-v1 --num-seeds 4
    python sac.py --env Pendulum-v1 --num-envs 16 --batch-size 1024 --updates-per-step 0.25   # the parallel recipe

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per update phase and agent), learning_curve.png and
summary.json; with `--track`, a wandb run as well. All but the algorithm is the harness's (scanrl/harness/).
"""

from scanrl import harness

harness.prepare_jax(__name__)  # first: --help at once, XLA's flags (a device per core), a multi-process run

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from scanrl import blocks, envs


@dataclass(frozen=True)
class Config(harness.Flags):
    """SAC's fields; --seed, --num-seeds, --out-dir, ... are the flags every script shares (harness.Flags)."""

    env: str = "Pendulum-v1"
    """environment id with continuous actions: a gymnax id, brax/<task>[:<backend>], playground/<task> (see
    envs.list_envs()), or your own env as module:name (docs/envs.md)"""
    total_timesteps: int = 20_000
    """env steps (transitions) per agent, summed over its envs"""
    log_every: int = 125
    """print progress (and log to wandb) every this many iterations (update phases: num_envs x update_every env
    steps each, so 1,000 env steps at the defaults)"""
    # algorithm
    num_envs: int = 8
    """parallel envs per agent; each env step writes num_envs transitions into the agent's buffer"""
    buffer_size: int = 1_000_000
    """replay buffer capacity in transitions (allocated: at most total_timesteps)"""
    batch_size: int = 256
    """transitions per gradient update, sampled uniformly from the buffer"""
    learning_starts: int = 1_000
    """env steps (transitions) per agent of uniformly random actions before the first update"""
    update_every: int = 1
    """vector-env steps (each num_envs transitions) between update phases"""
    updates_per_step: float = 1.0
    """gradient updates per transition (replay ratio; 1 as in the paper); a phase runs update_every * num_envs *
    this"""
    learning_rate: float = 1e-3
    """Adam learning rate of actor, critics and temperature (rl-baselines3-zoo's for Pendulum; the paper's 3e-4)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """target critics move this fraction towards the online ones at each update"""
    init_alpha: float = 1.0
    """the temperature alpha at the start (stable-baselines3's 'auto' starts at 1)"""
    target_entropy_scale: float = 1.0
    """the temperature is tuned towards a policy entropy of -target_entropy_scale x |A| (the paper's -|A| at 1),
    the entropy of the squashed action in [-1, 1]^|A|"""
    # network
    hidden_size: int = 256
    """width of the two ReLU hidden layers of actor and critics"""
    layer_norm: bool = False
    """a LayerNorm after each hidden Dense layer of the critics"""


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's sac_continuous_action: log std squashed into this range by tanh


class Actor(nn.Module):
    """pi(.|s): the mean and log std of a Gaussian over pre-squash actions u; a = tanh(u) in [-1, 1]^action_dim."""

    action_dim: int
    hidden_size: int

    @nn.compact
    def __call__(self, obs):
        x = nn.relu(nn.Dense(self.hidden_size)(obs))
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        mean = nn.Dense(self.action_dim)(x)
        log_std = nn.tanh(nn.Dense(self.action_dim)(x))
        return mean, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)


class Critic(nn.Module):
    """Q(s, a). SAC's twin critics are two parameter sets of this module stacked on a leading axis."""

    hidden_size: int
    layer_norm: bool

    @nn.compact
    def __call__(self, obs, action):
        x = jnp.concatenate([obs, action], axis=-1)
        for _ in range(2):
            x = nn.Dense(self.hidden_size)(x)
            x = nn.relu(nn.LayerNorm()(x) if self.layer_norm else x)
        return nn.Dense(1)(x).squeeze(-1)


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    next_obs: jax.Array  # the true next observation, also where the episode was truncated and auto-reset


class Learner(NamedTuple):
    actor: TrainState
    critic: TrainState  # twin critics: every parameter has a leading axis of 2
    temperature: TrainState  # {"log_alpha": a scalar} (a TrainState: the harness checks it for NaN)
    critic_target: Any


class RunnerState(NamedTuple):
    learner: Learner
    buffer: blocks.ReplayBuffer
    env_state: Any
    obs: jax.Array
    rng: jax.Array
    env_steps: jax.Array  # int32: the agent's env steps so far, summed over its envs (random warm-up, first update)


def squashed_sample(key, mean, log_std):
    """a = tanh(u), u ~ N(mean, std^2), and log pi(a|s) with the change of variables of the squash (Haarnoja et al.
    2018, appendix C): log pi(a|s) = log N(u) - sum_i log(1 - tanh(u_i)^2), where log(1 - tanh(u)^2) is written
    2 (log 2 - u - softplus(-2u)), which stays finite where tanh(u) rounds to +-1."""
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    log_normal = -0.5 * ((u - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), (log_normal - log_det).sum(-1)


def soft_target(next_q, next_log_prob, reward, terminated, alpha, gamma):
    """The soft Bellman target (Haarnoja et al. 2018, eqs. 2-3, with the clipped double Q of sec. 5):
    y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')),  a' ~ pi(.|s'), for twin `next_q`
    (2, batch). Only termination cuts the bootstrap: a truncated transition keeps its true s'."""
    return reward + gamma * (1.0 - terminated) * (next_q.min(axis=0) - alpha * next_log_prob)


def temperature_loss(log_alpha, log_prob, target_entropy):
    """J = E[-log alpha (log pi(a|s) + H_target)]: eq. 18 as stable-baselines3 and sbx write it, linear in log alpha,
    so its gradient does not shrink with alpha. alpha grows while the policy's entropy -log pi is below the target and
    shrinks while it is above. `log_prob` is a constant here (stop_gradient at the call)."""
    return -(log_alpha * (log_prob + target_entropy)).mean()


def alpha_of(learner):
    return jnp.exp(learner.temperature.params["log_alpha"])


def make_networks(config: Config, env, env_params):
    """The actor and critic modules, `scale` from [-1, 1] to the env's action bounds, and Q_1..2 of twin params."""
    low, high = blocks.action_bounds(env, env_params)
    actor = Actor(low.shape[0], config.hidden_size)
    critic = Critic(config.hidden_size, config.layer_norm)

    def scale(squashed):
        return low + (squashed + 1.0) * (high - low) / 2

    def twin_q(params, obs, action):
        return jax.vmap(critic.apply, in_axes=(0, None, None))(params, obs, action)

    return actor, critic, scale, twin_q


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in one iteration, an update phase: update_every steps of each of its num_envs envs."""
    return config.num_envs * config.update_every


def make_train_parts(config: Config):
    """SAC for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
    (runner, metrics)`, one update phase."""
    steps_per_phase = steps_per_iteration(config)
    updates_per_phase = round(config.updates_per_step * steps_per_phase)
    # A multiple of num_envs, so no write wraps (blocks.ReplayBuffer.add), and no larger than the transitions a run
    # produces.
    capacity = min(config.buffer_size, config.total_timesteps // steps_per_phase * steps_per_phase)
    capacity = -(-capacity // config.num_envs) * config.num_envs
    env, env_params = envs.make_vec(config.env, config.num_envs)
    low, high = blocks.action_bounds(env, env_params)
    actor, critic, scale, twin_q = make_networks(config, env, env_params)
    target_entropy = -config.target_entropy_scale * low.shape[0]

    # optax.flatten: the optimizer on one flat vector, a few large ops per step instead of a few per parameter array
    # (XLA:CPU pays per op), and the same numbers on one device or several.
    tx = optax.flatten(optax.adam(config.learning_rate))
    nan = jnp.float32(jnp.nan)

    def init(rng):
        rng, key_actor, key_critic, key_reset = jax.random.split(rng, 4)
        obs, env_state = env.reset(key_reset, env_params)
        actor_params = actor.init(key_actor, obs[0])
        critic_params = jax.vmap(critic.init, in_axes=(0, None, None))(
            jax.random.split(key_critic, 2), obs[0], low
        )

        def train_state(params):
            return TrainState.create(apply_fn=None, params=params, tx=tx)

        temperature = {"log_alpha": jnp.log(jnp.asarray(config.init_alpha, jnp.float32))}
        learner = Learner(train_state(actor_params), train_state(critic_params), train_state(temperature),
                          critic_params)
        zeros = jnp.zeros(config.num_envs)
        example = Transition(obs, jnp.zeros((config.num_envs,) + low.shape), zeros, zeros, obs)
        buffer = blocks.ReplayBuffer.create(capacity, example)
        return RunnerState(learner, buffer, env_state, obs, rng, jnp.int32(0))

    def sample_action(actor_params, obs, key):
        """a ~ pi(.|s) in env units, and log pi(a|s) of its squashed form in [-1, 1]^|A|."""
        squashed, log_prob = squashed_sample(key, *actor.apply(actor_params, obs))
        return scale(squashed), log_prob

    def update(runner):
        """One phase: `update_every` steps of every env, then `updates_per_phase` updates once the buffer has
        received learning_starts transitions (the phase that reaches them updates too)."""

        def _env_step(runner, _):
            # Uniform random actions for the first learning_starts env steps, then samples of the policy.
            learner, buffer, env_state, obs, rng, env_steps = runner
            rng, key_random, key_policy, key_step = jax.random.split(rng, 4)
            random_action = jax.random.uniform(key_random, (config.num_envs,) + low.shape, minval=low, maxval=high)
            policy_action, _ = sample_action(learner.actor.params, obs, key_policy)
            action = jnp.where(env_steps < config.learning_starts, random_action, policy_action)
            next_obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            # s' is the true next obs also where a time limit truncated the episode (and the env auto-reset),
            # and only termination is stored: truncated transitions keep their bootstrap.
            transition = Transition(obs, action, reward, terminated.astype(jnp.float32), info["final_observation"])
            runner = RunnerState(learner, buffer.add(transition), env_state, next_obs, rng,
                                 env_steps + config.num_envs)
            return runner, (info["episode_done"], info["episode_return"], info["episode_length"])

        def _update_critics(learner, batch, key):
            # The target's a' is sampled from the current policy, with the current temperature (eq. 3).
            alpha = alpha_of(learner)
            next_action, next_log_prob = sample_action(learner.actor.params, batch.next_obs, key)
            next_q = twin_q(learner.critic_target, batch.next_obs, next_action)
            target = soft_target(next_q, next_log_prob, batch.reward, batch.terminated, alpha, config.gamma)

            def _loss_fn(params):  # J_Q = E[1/2 (Q_i(s, a) - y)^2] (eq. 5), summed over the twins
                q = twin_q(params, batch.obs, batch.action)
                return 0.5 * ((q - target) ** 2).mean(axis=1).sum(), q[0].mean()

            (loss, q_value), grads = jax.value_and_grad(_loss_fn, has_aux=True)(learner.critic.params)
            return learner._replace(critic=learner.critic.apply_gradients(grads=grads)), loss, q_value

        def _update_actor(learner, obs, key):
            # J_pi = E[alpha log pi(a|s) - min_i Q_i(s, a)], a = f(eps; s) reparameterised (eqs. 7, 11-13).
            alpha = alpha_of(learner)

            def _loss_fn(params):
                action, log_prob = sample_action(params, obs, key)
                q = twin_q(learner.critic.params, obs, action).min(axis=0)
                return (alpha * log_prob - q).mean(), log_prob

            (loss, log_prob), grads = jax.value_and_grad(_loss_fn, has_aux=True)(learner.actor.params)
            return learner._replace(actor=learner.actor.apply_gradients(grads=grads)), loss, log_prob

        def _update_temperature(learner, log_prob):
            # log pi of the policy before its step, as a constant: only alpha moves here.
            loss, grads = jax.value_and_grad(
                lambda params: temperature_loss(params["log_alpha"], jax.lax.stop_gradient(log_prob), target_entropy)
            )(learner.temperature.params)
            return learner._replace(temperature=learner.temperature.apply_gradients(grads=grads)), loss

        def _update(buffer, carry):
            # `buffer`: the phase's, after its env steps (not carried through the updates: it does not change).
            # The paper's Algorithm 1, one gradient step: critics, actor, temperature, then the targets.
            learner, rng = carry
            rng, key_sample, key_target, key_actor = jax.random.split(rng, 4)
            batch = buffer.sample(key_sample, config.batch_size)
            learner, critic_loss, q_value = _update_critics(learner, batch, key_target)
            learner, actor_loss, log_prob = _update_actor(learner, batch.obs, key_actor)
            learner, alpha_loss = _update_temperature(learner, log_prob)
            critic_target = optax.incremental_update(learner.critic.params, learner.critic_target, config.tau)
            learner = learner._replace(critic_target=critic_target)
            return (learner, rng), (critic_loss, actor_loss, alpha_loss, -log_prob.mean(), q_value)

        runner, (done, episode_return, episode_length) = jax.lax.scan(_env_step, runner, None, config.update_every)
        learner, buffer, env_state, obs, rng, env_steps = runner

        def _updates(carry):
            # The phase's updates -> their means (nanmean: the actor's loss over the updates that made one).
            carry, outputs = jax.lax.scan(lambda carry, _: _update(buffer, carry), carry, None, updates_per_phase)
            return carry, jax.tree.map(jnp.nanmean, outputs)

        # Before learning_starts no update runs, and no loss is reported (NaN).
        (learner, rng), (critic_loss, actor_loss, alpha_loss, entropy, q_value) = blocks.run_if(
            env_steps >= config.learning_starts, _updates, (learner, rng), (nan,) * 5)
        episodes = done.sum()
        metrics = {
            "updates": learner.critic.step,
            "episodes": episodes,
            # Mean over the episodes that ended in this phase; NaN if none did (likewise the losses: NaN in a phase
            # without updates).
            "episode_return": (episode_return * done).sum() / episodes,
            "episode_length": (episode_length * done).sum() / episodes,
            "loss/critic": critic_loss,
            "loss/actor": actor_loss,
            "loss/alpha": alpha_loss,
            "alpha": alpha_of(learner),
            # -log pi(a|s) of the squashed actions of the updates' batches: what the temperature steers.
            "entropy": entropy,
            "q_value": q_value,
        }
        return RunnerState(learner, buffer, env_state, obs, rng, env_steps), metrics

    return init, update


def make_train(config: Config):
    """`train(rng) -> (runner, metrics)`: one agent's whole run, pure and jittable; metrics have an iteration axis.
    Exactly the scan the command line runs, chunk by chunk."""
    init, update = make_train_parts(config)
    iterations = config.total_timesteps // steps_per_iteration(config)
    return lambda rng: jax.lax.scan(lambda runner, _: update(runner), init(rng), None, iterations)


def policy(config: Config, runner, key=None):
    """`act(obs batch) -> actions`: one agent's mean action, tanh(mu(s)) in env units (the paper's evaluation); with a
    `key`, the policy training acts with, each action sampled from pi(.|s) (--eval --eval-sampled)."""
    env, env_params = envs.make_vec(config.env, 1)
    actor, _, scale, _ = make_networks(config, env, env_params)
    if key is None:
        return lambda obs: scale(jnp.tanh(actor.apply(runner.learner.actor.params, obs)[0]))
    low, high = blocks.action_bounds(env, env_params)
    squash = distrax.Chain([distrax.ScalarAffine(shift=(low + high) / 2, scale=(high - low) / 2), distrax.Tanh()])

    def distribution(obs):
        mean, log_std = actor.apply(runner.learner.actor.params, obs)
        return distrax.Transformed(distrax.MultivariateNormalDiag(mean, jnp.exp(log_std)), distrax.Block(squash, 1))

    return blocks.sampling_policy(distribution, key)


def validate(config: Config):
    """Raises ValueError for what SAC cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "buffer_size", "batch_size", "update_every", "hidden_size",
                                      "learning_rate", "updates_per_step", "tau", "init_alpha"),
                    unit=("gamma", "tau"), nonnegative=("learning_starts",))
    env, env_params = envs.make(config.env)
    if envs.is_discrete(env, env_params):
        raise ValueError(f"--env {config.env} has discrete actions; SAC needs a continuous (Box) action "
                         "space")
    steps_per_phase = steps_per_iteration(config)
    updates = config.updates_per_step * steps_per_phase
    if abs(updates - round(updates)) > 1e-9 or not 1 <= round(updates) <= 2**31 - 1:  # an int32-counted scan's length
        raise ValueError(f"--updates-per-step {config.updates_per_step} x --update-every x --num-envs = "
                         f"{updates:g} updates per phase; it must be a whole number, 1 or more, at most "
                         "2,147,483,647 (2**31 - 1)")
    if config.total_timesteps < steps_per_phase:
        raise ValueError(f"--total-timesteps {config.total_timesteps} is smaller than one update phase "
                         f"(--num-envs x --update-every = {steps_per_phase}); raise it or shrink the phase")
    if config.learning_starts >= config.total_timesteps // steps_per_phase * steps_per_phase:
        raise ValueError(f"--learning-starts {config.learning_starts} leaves no steps to learn in "
                         f"--total-timesteps {config.total_timesteps}")


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
