"""TD3: Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods"), for continuous actions, with the replay buffer inside the train state.

Acting, storing, sampling and updating all run in one `jax.jit` (nested `lax.scan`s), and `jax.vmap` trains
`--num-seeds` agents, each with its own ring buffer, in the same compiled program:

    python td3.py --env Pendulum-v1 --num-seeds 4
    python td3.py --env brax/halfcheetah:mjx --total-timesteps 1000000 --num-envs 1 --updates-per-step 1 \
        --learning-starts 10000 --log-every 5000        # the paper's setting, on a GPU (README)

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per update phase and agent), learning_curve.png and
summary.json; with `--track`, a wandb run as well. All but the algorithm is the harness's (scanrl/harness/).
"""

from scanrl import harness

harness.prepare_jax(__name__)  # first: --help at once, XLA's flags (a device per core), a multi-process run

from dataclasses import dataclass
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from scanrl import blocks, envs


@dataclass(frozen=True)
class Config(harness.Flags):
    """TD3's fields; --seed, --num-seeds, --out-dir, ... are the flags every script shares (harness.Flags)."""

    env: str = "Pendulum-v1"
    """environment id with continuous actions: a gymnax id, brax/<task>[:<backend>], playground/<task> (see
    envs.list_envs()), or your own env as module:name (docs/envs.md)"""
    total_timesteps: int = 50_000
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
    learning_starts: int = 5_000
    """env steps (transitions) per agent of uniformly random actions before the first update"""
    update_every: int = 1
    """vector-env steps (each num_envs transitions) between update phases"""
    updates_per_step: float = 1.0
    """critic updates per transition (replay ratio; 1 as in the paper: at 0.25 some Pendulum seeds collapse late,
    see docs/learning.md); a phase runs update_every * num_envs * this"""
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


class Learner(NamedTuple):
    actor: TrainState
    critic: TrainState  # twin critics: every parameter has a leading axis of 2
    actor_target: Any
    critic_target: Any


class RunnerState(NamedTuple):
    learner: Learner
    buffer: blocks.ReplayBuffer
    env_state: Any
    obs: jax.Array
    rng: jax.Array
    env_steps: jax.Array  # int32: the agent's env steps so far, summed over its envs (random warm-up, first update)


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


def make_networks(config: Config, env, env_params):
    """The actor, the critic module, and functions mu(params, obs) in env units and Q_1, Q_1..2 of twin params."""
    low, high = blocks.action_bounds(env, env_params)
    actor = Actor(low.shape[0], config.hidden_size)
    critic = Critic(config.hidden_size)

    def policy(params, obs):
        return low + (actor.apply(params, obs) + 1.0) * (high - low) / 2

    def twin_q(params, obs, action):
        return jax.vmap(critic.apply, in_axes=(0, None, None))(params, obs, action)

    def q1(params, obs, action):
        return critic.apply(jax.tree.map(lambda p: p[0], params), obs, action)

    return actor, critic, policy, twin_q, q1


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in one iteration, an update phase: update_every steps of each of its num_envs envs."""
    return config.num_envs * config.update_every


def make_train_parts(config: Config):
    """TD3 for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
    (runner, metrics)`, one update phase."""
    steps_per_phase = steps_per_iteration(config)
    updates_per_phase = round(config.updates_per_step * steps_per_phase)
    # A multiple of num_envs, so no write wraps (blocks.ReplayBuffer.add), and no larger than the transitions a run
    # produces.
    capacity = min(config.buffer_size, config.total_timesteps // steps_per_phase * steps_per_phase)
    capacity = -(-capacity // config.num_envs) * config.num_envs
    env, env_params = envs.make_vec(config.env, config.num_envs)
    low, high = blocks.action_bounds(env, env_params)
    half_range = (high - low) / 2
    actor, critic, policy, twin_q, q1 = make_networks(config, env, env_params)

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

        learner = Learner(train_state(actor_params), train_state(critic_params), actor_params, critic_params)
        zeros = jnp.zeros(config.num_envs)
        example = Transition(obs, jnp.zeros((config.num_envs,) + low.shape), zeros, zeros, obs)
        buffer = blocks.ReplayBuffer.create(capacity, example)
        return RunnerState(learner, buffer, env_state, obs, rng, jnp.int32(0))

    def update(runner):
        """One phase: `update_every` steps of every env, then `updates_per_phase` updates once the buffer has
        received learning_starts transitions (the phase that reaches them updates too)."""

        def _env_step(runner, _):
            # Uniform random actions for the first learning_starts env steps (the paper's start_timesteps),
            # then mu(s) plus Gaussian exploration noise.
            learner, buffer, env_state, obs, rng, env_steps = runner
            rng, key_random, key_noise, key_step = jax.random.split(rng, 4)
            random_action = jax.random.uniform(key_random, (config.num_envs,) + low.shape, minval=low, maxval=high)
            noise = config.exploration_noise * half_range * jax.random.normal(key_noise, random_action.shape)
            explore_action = jnp.clip(policy(learner.actor.params, obs) + noise, low, high)
            action = jnp.where(env_steps < config.learning_starts, random_action, explore_action)
            next_obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            # s' is the true next obs also where a time limit truncated the episode (and the env auto-reset),
            # and only termination is stored: truncated transitions keep their bootstrap.
            transition = Transition(obs, action, reward, terminated.astype(jnp.float32), info["final_observation"])
            runner = RunnerState(learner, buffer.add(transition), env_state, next_obs, rng,
                                 env_steps + config.num_envs)
            return runner, (info["episode_done"], info["episode_return"], info["episode_length"])

        def _update_critics(learner, batch, key):
            target = td3_target(
                key, batch.next_obs, batch.reward, batch.terminated,
                lambda o: policy(learner.actor_target, o), lambda o, a: twin_q(learner.critic_target, o, a),
                low, high, config.gamma, config.policy_noise, config.noise_clip,
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
                optax.incremental_update(actor_state.params, learner.actor_target, config.tau),
                optax.incremental_update(learner.critic.params, learner.critic_target, config.tau),
            ), loss

        def _update(buffer, carry):
            # `buffer`: the phase's, after its env steps (not carried through the updates: it does not change).
            learner, rng = carry
            rng, key_sample, key_noise = jax.random.split(rng, 3)
            batch = buffer.sample(key_sample, config.batch_size)
            learner, critic_loss, q_value = _update_critics(learner, batch, key_noise)
            # Delayed policy updates (Fujimoto et al. 2018, sec. 5.2): the critic's step counts updates from the
            # first one, as the paper's delay counter does.
            learner, actor_loss = blocks.run_if(
                learner.critic.step % config.policy_delay == 0,
                lambda learner: _update_actor_and_targets(learner, batch.obs), learner, nan,
            )
            return (learner, rng), (critic_loss, actor_loss, q_value)

        runner, (done, episode_return, episode_length) = jax.lax.scan(_env_step, runner, None, config.update_every)
        learner, buffer, env_state, obs, rng, env_steps = runner

        def _updates(carry):
            # The phase's updates -> their means (nanmean: the actor's loss over the updates that made one).
            carry, outputs = jax.lax.scan(lambda carry, _: _update(buffer, carry), carry, None, updates_per_phase)
            return carry, jax.tree.map(jnp.nanmean, outputs)

        # Before learning_starts no update runs, and no loss is reported (NaN).
        (learner, rng), (critic_loss, actor_loss, q_value) = blocks.run_if(
            env_steps >= config.learning_starts, _updates, (learner, rng), (nan,) * 3)
        episodes = done.sum()
        metrics = {
            "updates": learner.critic.step,
            "episodes": episodes,
            # Mean over the episodes that ended in this phase; NaN if none did (likewise the losses: NaN in a phase
            # without updates, and the actor's in one without an actor update).
            "episode_return": (episode_return * done).sum() / episodes,
            "episode_length": (episode_length * done).sum() / episodes,
            "loss/critic": critic_loss,
            "loss/actor": actor_loss,
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


def deterministic_policy(config: Config, runner):
    """`act(obs batch) -> actions`: one agent's deterministic actor mu(s)."""
    env, env_params = envs.make_vec(config.env, 1)
    _, _, policy, _, _ = make_networks(config, env, env_params)
    return lambda obs: policy(runner.learner.actor.params, obs)


def validate(config: Config):
    """Raises ValueError for what TD3 cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "buffer_size", "batch_size", "update_every", "policy_delay",
                                      "hidden_size", "learning_rate", "updates_per_step", "tau"),
                    unit=("gamma", "tau"),
                    nonnegative=("learning_starts", "exploration_noise", "policy_noise", "noise_clip"))
    env, env_params = envs.make(config.env)
    if envs.is_discrete(env, env_params):
        raise ValueError(f"--env {config.env} has discrete actions; TD3 needs a continuous (Box) action "
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
    policy=deterministic_policy, validate=validate,
)


def main(config: Config | None = None):
    """Trains a new run from the command line (or `config`), or resumes or evaluates one (harness.main)."""
    harness.main(ALGORITHM, config)


if __name__ == "__main__":
    main()
