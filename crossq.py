"""CrossQ: SAC without target networks, its critics batch-normalised (Bhatt et al. 2024, "CrossQ: Batch Normalization
in Deep Reinforcement Learning for Greater Sample Efficiency and Simplicity"), for continuous actions, with the
replay buffer inside the train state.

What changes from SAC (sac.py): the critics and the actor normalise their inputs and hidden layers with batch
renormalisation (Ioffe 2017); the critics have no target copies: (s, a) and (s', a') go through the critics in one
forward pass, so one set of batch statistics covers both, and the target is the next half of that pass, its
gradient stopped; the actor updates once every `policy_delay` critic updates; Adam with beta1 0.5 for the actor
and critics; the temperature as in the authors' code (sbx): a loss linear in log alpha, Adam's defaults. Acting,
evaluation and the actor's loss use the running statistics, never the batch's: an action never depends on the rest
of its batch. The statistics live in the train state (per seed, checkpointed, resumed).

    python crossq.py --env Pendulum-v1 --num-seeds 4
    python crossq.py --env mujoco/HalfCheetah-v5 --total-timesteps 100000 --num-envs 1 --learning-starts 10000 \\
        --log-every 5000 --num-seeds 6          # the MuJoCo records' recipe (docs/learning.md)

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
    """CrossQ's fields; --seed, --num-seeds, --out-dir, ... are the flags every script shares (harness.Flags)."""

    env: str = "Pendulum-v1"
    """environment id with continuous actions: a gymnax id, mujoco/<Task>-v5, brax/<task>[:<backend>],
    playground/<task> (see envs.list_envs()), or your own env as module:name (docs/envs.md)"""
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
    """critic updates per transition (replay ratio; 1 as in the paper); a phase runs update_every * num_envs * this"""
    learning_rate: float = 1e-3
    """Adam learning rate of actor, critics and temperature (the paper's)"""
    adam_beta1: float = 0.5
    """Adam's first-moment decay for the actor and critics (the paper's 0.5; the temperature's Adam keeps 0.9)"""
    policy_delay: int = 3
    """critic updates per actor and temperature update (the paper's 3)"""
    gamma: float = 0.99
    """discount factor"""
    init_alpha: float = 1.0
    """the temperature alpha at the start (stable-baselines3's 'auto' starts at 1)"""
    target_entropy_scale: float = 1.0
    """the temperature is tuned towards a policy entropy of -target_entropy_scale x |A|"""
    # network
    hidden_size: int = 256
    """width of the actor's two ReLU hidden layers"""
    critic_width: int = 256
    """width of each critic's two ReLU hidden layers (the paper's 2,048; 256: the width whose 6 x 100k MuJoCo
    records fit a sitting of a 2-core CPU, docs/learning.md)"""
    renorm_momentum: float = 0.99
    """batch renormalisation: the running statistics keep this fraction of their value at each training pass and
    take the rest from the batch's (the paper's 0.99)"""
    renorm_warmup: int = 100_000
    """training passes of a layer with plain batch normalisation before the renormalisation's corrections start"""


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # the actor's log std is clipped to this range (the authors' code, sbx)
RENORM_R_MAX, RENORM_D_MAX, RENORM_EPSILON = 3.0, 5.0, 1e-3  # the corrections' bounds (Ioffe 2017), variance floor


class BatchRenorm(nn.Module):
    """Batch renormalisation (Ioffe 2017): with `train`, the batch is normalised by its own statistics, corrected
    after `warmup` passes towards the running ones (r, d: gradients stopped, clipped), and the running statistics
    move towards the batch's; otherwise (acting, evaluating, the critics inside the actor's loss) by the running
    statistics alone, so an output never depends on the rest of its batch."""

    momentum: float
    warmup: int

    @nn.compact
    def __call__(self, x, train: bool):
        features = x.shape[-1]
        mean = self.variable("batch_stats", "mean", jnp.zeros, (features,))
        var = self.variable("batch_stats", "var", jnp.ones, (features,))
        passes = self.variable("batch_stats", "passes", lambda: jnp.int32(0))
        gamma = self.param("scale", nn.initializers.ones, (features,))
        beta = self.param("bias", nn.initializers.zeros, (features,))
        if train and not self.is_initializing():
            # One pass over x for both moments (as flax's BatchNorm: E[x^2] - E[x]^2, floored at 0).
            batch_mean = x.mean(axis=0)
            batch_var = jnp.maximum((x * x).mean(axis=0) - batch_mean * batch_mean, 0.0)
            std, running_std = jnp.sqrt(batch_var + RENORM_EPSILON), jnp.sqrt(var.value + RENORM_EPSILON)
            warm = passes.value >= self.warmup
            r = jnp.where(warm, jnp.clip(std / running_std, 1 / RENORM_R_MAX, RENORM_R_MAX), 1.0)
            d = jnp.where(warm, jnp.clip((batch_mean - mean.value) / running_std, -RENORM_D_MAX, RENORM_D_MAX), 0.0)
            # gamma ((x - mean) / std r + d) + beta as one per-feature affine: fewer passes over x (docs/speed.md)
            scale = gamma * jax.lax.stop_gradient(r) / std
            shift = beta + gamma * jax.lax.stop_gradient(d) - batch_mean * scale
            mean.value = self.momentum * mean.value + (1 - self.momentum) * batch_mean
            var.value = self.momentum * var.value + (1 - self.momentum) * batch_var
            passes.value = passes.value + 1
        else:
            scale = gamma / jnp.sqrt(var.value + RENORM_EPSILON)
            shift = beta - mean.value * scale
        return x * scale + shift


class Actor(nn.Module):
    """pi(.|s): the mean and log std of a Gaussian over pre-squash actions u; a = tanh(u) in [-1, 1]^action_dim.
    Batch renormalisation on the input and after each hidden layer."""

    action_dim: int
    hidden_size: int
    momentum: float
    warmup: int

    @nn.compact
    def __call__(self, obs, train: bool = False):
        x = BatchRenorm(self.momentum, self.warmup)(obs, train)
        for _ in range(2):
            x = BatchRenorm(self.momentum, self.warmup)(nn.relu(nn.Dense(self.hidden_size)(x)), train)
        return nn.Dense(self.action_dim)(x), jnp.clip(nn.Dense(self.action_dim)(x), LOG_STD_MIN, LOG_STD_MAX)


class Critic(nn.Module):
    """Q(s, a), batch-renormalised as the actor. The twin critics are two variable sets stacked on a leading axis."""

    width: int
    momentum: float
    warmup: int

    @nn.compact
    def __call__(self, obs, action, train: bool = False):
        x = BatchRenorm(self.momentum, self.warmup)(jnp.concatenate([obs, action], axis=-1), train)
        for _ in range(2):
            x = BatchRenorm(self.momentum, self.warmup)(nn.relu(nn.Dense(self.width)(x)), train)
        return nn.Dense(1)(x).squeeze(-1)


class NormalizedTrainState(TrainState):
    """A TrainState with the batch statistics its network normalises by (not trained by the optimizer; the harness
    checks them for NaN with the rest)."""

    batch_stats: Any


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    next_obs: jax.Array  # the true next observation, also where the episode was truncated and auto-reset


class Learner(NamedTuple):
    actor: NormalizedTrainState
    critic: NormalizedTrainState  # twin critics: every parameter and statistic has a leading axis of 2
    temperature: TrainState  # {"log_alpha": a scalar}


class RunnerState(NamedTuple):
    learner: Learner
    buffer: blocks.ReplayBuffer
    env_state: Any
    obs: jax.Array
    rng: jax.Array
    env_steps: jax.Array  # int32: the agent's env steps so far, summed over its envs (random warm-up, first update)


def squashed_sample(key, mean, log_std):
    """a = tanh(u), u ~ N(mean, std^2), and log pi(a|s) with the squash's change of variables (as sac.py)."""
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    log_normal = -0.5 * ((u - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), (log_normal - log_det).sum(-1)


def crossq_loss(q, reward, terminated, next_log_prob, alpha, gamma):
    """The critics' loss on one joint pass (Bhatt et al. 2024, eq. 4): `q` (2, 2 x batch) holds Q_i(s, a) in its first
    half and Q_i(s', a') in its second; y = r + gamma (1 - terminated) (min_i Q_i(s', a') - alpha log pi(a'|s')),
    its gradient stopped (there is no target network to hold it still). J_Q = sum_i E[1/2 (Q_i(s, a) - y)^2]."""
    q, next_q = jnp.split(q, 2, axis=1)
    target = reward + gamma * (1.0 - terminated) * (next_q.min(axis=0) - alpha * next_log_prob)
    return 0.5 * ((q - jax.lax.stop_gradient(target)) ** 2).mean(axis=1).sum(), q[0].mean()


def make_networks(config: Config, env, env_params):
    """The actor and critic modules, `scale` from [-1, 1] to the env's action bounds, and Q_1..2 of twin
    variables (with `train`, also their updated batch statistics)."""
    low, high = blocks.action_bounds(env, env_params)
    actor = Actor(low.shape[0], config.hidden_size, config.renorm_momentum, config.renorm_warmup)
    critic = Critic(config.critic_width, config.renorm_momentum, config.renorm_warmup)

    def scale(squashed):
        return low + (squashed + 1.0) * (high - low) / 2

    def twin_q(variables, obs, action, train=False):
        def one(variables):
            if not train:
                return critic.apply(variables, obs, action)
            q, updates = critic.apply(variables, obs, action, train=True, mutable=["batch_stats"])
            return q, updates["batch_stats"]

        return jax.vmap(one)(variables)

    return actor, critic, scale, twin_q


def variables(state: NormalizedTrainState, params=None):
    return {"params": state.params if params is None else params, "batch_stats": state.batch_stats}


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in one iteration, an update phase: update_every steps of each of its num_envs envs."""
    return config.num_envs * config.update_every


def make_train_parts(config: Config):
    """CrossQ for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
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
    tx = optax.flatten(optax.adam(config.learning_rate, b1=config.adam_beta1))
    temperature_tx = optax.flatten(optax.adam(config.learning_rate))
    nan = jnp.float32(jnp.nan)

    def init(rng):
        rng, key_actor, key_critic, key_reset = jax.random.split(rng, 4)
        obs, env_state = env.reset(key_reset, env_params)
        actor_vars = actor.init(key_actor, obs)
        critic_vars = jax.vmap(critic.init, in_axes=(0, None, None))(jax.random.split(key_critic, 2), obs,
                                                                     jnp.zeros((config.num_envs,) + low.shape))

        def train_state(v):
            return NormalizedTrainState.create(apply_fn=None, params=v["params"], tx=tx, batch_stats=v["batch_stats"])

        temperature = {"log_alpha": jnp.log(jnp.asarray(config.init_alpha, jnp.float32))}
        learner = Learner(train_state(actor_vars), train_state(critic_vars),
                          TrainState.create(apply_fn=None, params=temperature, tx=temperature_tx))
        zeros = jnp.zeros(config.num_envs)
        example = Transition(obs, jnp.zeros((config.num_envs,) + low.shape), zeros, zeros, obs)
        buffer = blocks.ReplayBuffer.create(capacity, example)
        return RunnerState(learner, buffer, env_state, obs, rng, jnp.int32(0))

    def sample_action(actor_vars, obs, key):
        """a ~ pi(.|s) in env units and log pi(a|s), by the running statistics (no batch's)."""
        squashed, log_prob = squashed_sample(key, *actor.apply(actor_vars, obs))
        return scale(squashed), log_prob

    def update(runner):
        """One phase: `update_every` steps of every env, then `updates_per_phase` critic updates (and an actor and
        temperature update every `policy_delay`) once the buffer has received learning_starts transitions."""

        def _env_step(runner, _):
            # Uniform random actions for the first learning_starts env steps, then samples of the policy.
            learner, buffer, env_state, obs, rng, env_steps = runner
            rng, key_random, key_policy, key_step = jax.random.split(rng, 4)
            random_action = jax.random.uniform(key_random, (config.num_envs,) + low.shape, minval=low, maxval=high)
            policy_action, _ = sample_action(variables(learner.actor), obs, key_policy)
            action = jnp.where(env_steps < config.learning_starts, random_action, policy_action)
            next_obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            # s' is the true next obs also where a time limit truncated the episode (and the env auto-reset),
            # and only termination is stored: truncated transitions keep their bootstrap.
            transition = Transition(obs, action, reward, terminated.astype(jnp.float32), info["final_observation"])
            runner = RunnerState(learner, buffer.add(transition), env_state, next_obs, rng,
                                 env_steps + config.num_envs)
            return runner, (info["episode_done"], info["episode_return"], info["episode_length"])

        def _update_critics(learner, batch, key):
            # a' ~ pi(.|s') by the actor's running statistics; (s, a) and (s', a') in one pass (sec. 3.2), so the
            # batch statistics are those of both halves.
            alpha = jnp.exp(learner.temperature.params["log_alpha"])
            next_action, next_log_prob = sample_action(variables(learner.actor), batch.next_obs, key)
            obs = jnp.concatenate([batch.obs, batch.next_obs])
            action = jnp.concatenate([batch.action, next_action])

            def _loss_fn(params):
                q, stats = twin_q(variables(learner.critic, params), obs, action, train=True)
                loss, q_value = crossq_loss(q, batch.reward, batch.terminated, next_log_prob, alpha, config.gamma)
                return loss, (q_value, stats)

            (loss, (q_value, stats)), grads = jax.value_and_grad(_loss_fn, has_aux=True)(learner.critic.params)
            critic = learner.critic.apply_gradients(grads=grads).replace(batch_stats=stats)
            return learner._replace(critic=critic), loss, q_value

        def _update_actor_and_temperature(learner, obs, key):
            # J_pi = E[alpha log pi(a|s) - min_i Q_i(s, a)] (as SAC), the actor's statistics updated by its pass,
            # the critics read by their running statistics; then J(log alpha) = log alpha (H - target), H = E[-log pi]
            # (sbx's form: its gradient does not shrink with alpha, as that of alpha (H - target) does).
            alpha = jnp.exp(learner.temperature.params["log_alpha"])

            def _loss_fn(params):
                (mean, log_std), updates = actor.apply(variables(learner.actor, params), obs, train=True,
                                                       mutable=["batch_stats"])
                action, log_prob = squashed_sample(key, mean, log_std)
                q = twin_q(variables(learner.critic), obs, scale(action)).min(axis=0)
                return (alpha * log_prob - q).mean(), (log_prob, updates["batch_stats"])

            (loss, (log_prob, stats)), grads = jax.value_and_grad(_loss_fn, has_aux=True)(learner.actor.params)
            actor_state = learner.actor.apply_gradients(grads=grads).replace(batch_stats=stats)
            alpha_loss, alpha_grads = jax.value_and_grad(
                lambda p: -(p["log_alpha"] * (jax.lax.stop_gradient(log_prob) + target_entropy)).mean()
            )(learner.temperature.params)
            temperature = learner.temperature.apply_gradients(grads=alpha_grads)
            return learner._replace(actor=actor_state, temperature=temperature), (loss, alpha_loss, -log_prob.mean())

        def _update(buffer, carry):
            # `buffer`: the phase's, after its env steps (not carried through the updates: it does not change).
            learner, rng = carry
            rng, key_sample, key_target, key_actor = jax.random.split(rng, 4)
            batch = buffer.sample(key_sample, config.batch_size)
            learner, critic_loss, q_value = _update_critics(learner, batch, key_target)
            # The delay counts critic updates from the first one, as td3.py's.
            learner, (actor_loss, alpha_loss, entropy) = blocks.run_if(
                learner.critic.step % config.policy_delay == 0,
                lambda learner: _update_actor_and_temperature(learner, batch.obs, key_actor), learner,
                (nan, nan, nan))
            return (learner, rng), (critic_loss, actor_loss, alpha_loss, entropy, q_value)

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
            # without updates, and the actor's and temperature's in one without an actor update).
            "episode_return": (episode_return * done).sum() / episodes,
            "episode_length": (episode_length * done).sum() / episodes,
            "loss/critic": critic_loss,
            "loss/actor": actor_loss,
            "loss/alpha": alpha_loss,
            "alpha": jnp.exp(learner.temperature.params["log_alpha"]),
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
    """`act(obs batch) -> actions`: one agent's mean action, tanh(mu(s)) in env units, by the actor's running
    statistics; with a `key`, the policy training acts with, each action sampled from pi(.|s) (--eval-sampled)."""
    env, env_params = envs.make_vec(config.env, 1)
    actor, _, scale, _ = make_networks(config, env, env_params)
    actor_vars = variables(runner.learner.actor)
    if key is None:
        return lambda obs: scale(jnp.tanh(actor.apply(actor_vars, obs)[0]))
    low, high = blocks.action_bounds(env, env_params)
    squash = distrax.Chain([distrax.ScalarAffine(shift=(low + high) / 2, scale=(high - low) / 2), distrax.Tanh()])

    def distribution(obs):
        mean, log_std = actor.apply(actor_vars, obs)
        return distrax.Transformed(distrax.MultivariateNormalDiag(mean, jnp.exp(log_std)), distrax.Block(squash, 1))

    return blocks.sampling_policy(distribution, key)


def validate(config: Config):
    """Raises ValueError for what CrossQ cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "buffer_size", "update_every", "hidden_size", "critic_width",
                                      "learning_rate", "updates_per_step", "init_alpha", "policy_delay"),
                    unit=("gamma", "adam_beta1", "renorm_momentum"), nonnegative=("learning_starts", "renorm_warmup"))
    if config.batch_size < 2:  # a batch's variance needs two samples
        raise ValueError(f"--batch-size must be 2 or more for batch renormalisation, got {config.batch_size}")
    if not 0 < config.renorm_momentum < 1 or config.adam_beta1 == 1:
        raise ValueError(f"--renorm-momentum must lie strictly between 0 and 1 (got {config.renorm_momentum}) and "
                         f"--adam-beta1 below 1 (got {config.adam_beta1})")
    env, env_params = envs.make(config.env)
    if envs.is_discrete(env, env_params):
        raise ValueError(f"--env {config.env} has discrete actions; CrossQ needs a continuous (Box) action space")
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
