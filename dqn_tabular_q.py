"""Q-learning: tabular Q-learning (Watkins 1989) when the env has a finite state space, DQN (Mnih et al. 2015;
optionally double DQN, van Hasselt et al. 2016) when it does not. (PQN, Q-learning without replay: pqn.py.)

The whole training run is one `lax.scan` inside one `jax.jit`, and `jax.vmap` trains `--num-seeds` agents at
once; the Q-table (or the Q-network, its target network and the replay buffer) lives in the scan carry:

    python dqn_tabular_q.py --env GridWorld-v0 --num-seeds 30
    python dqn_tabular_q.py --env CartPole-v1 --num-seeds 4

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv, learning_curve.png, summary.json and, on GridWorld-v0,
q_values.png (max_a Q per cell, greedy actions); with `--track`, a wandb run. The rest is the harness's
(scanrl/harness/).
"""

from scanrl import harness

harness.prepare_jax(__name__)  # first: --help at once, XLA's flags (a device per core), a multi-process run

from dataclasses import dataclass
from typing import Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from scanrl import blocks, envs
from scanrl.envs import gridworld


@dataclass(frozen=True)
class Config(harness.Flags):
    """The fields of both learners; --total-timesteps (500k), --seed, --num-seeds, --out-dir, ... are the flags
    every script shares (harness.Flags). Fields left None take the learner's default (in brackets) as the Config
    is made (`__post_init__`), so a Config is always resolved and config.json records the values used."""

    env: str = "GridWorld-v0"
    """environment id: a gymnax id, one of ours or an installed suite's (see envs.list_envs()), or your own env as
    module:name (docs/envs.md)"""
    log_every: int = 50
    """print progress (and log to wandb) every this many iterations"""
    agent: Literal["auto", "tabular", "dqn"] = "auto"
    """auto: a Q-table for the finite-state envs scanrl ships (GridWorld-v0, FrozenLake-misc), DQN otherwise; your own
    finite-state env: tabular"""
    # shared by the learners; None takes the learner's default, shown in brackets
    num_envs: int | None = None
    """parallel envs per agent [tabular 1: one env per agent, as in the classic setting; dqn 10]"""
    num_steps: int | None = None
    """steps per env in each iteration, one metrics row [tabular 1000; dqn 100]"""
    learning_rate: float | None = None
    """step size [tabular 0.1; dqn 2.5e-4, of --optimizer]"""
    gamma: float | None = None
    """discount factor [tabular 0.9; dqn 0.99]"""
    start_e: float | None = None
    """epsilon of the epsilon-greedy policy at the start [tabular 0.1; dqn 1.0]"""
    end_e: float | None = None
    """epsilon at the end of the decay [tabular 0.1, i.e. constant; dqn 0.05]"""
    exploration_fraction: float = 0.5
    """fraction of total-timesteps over which epsilon decays linearly from start-e to end-e"""
    # DQN only
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 over training (off, as CleanRL's and PureJaxRL's DQN: constant
    learned as well or better on CartPole-v1 and Acrobot-v1, 10 seeds)"""
    hidden_sizes: tuple[int, ...] = (120, 84)
    """widths of the Q-network's hidden layers (ReLU)"""
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
    optimizer: Literal["adam", "rmsprop"] = "adam"
    """adam, or rmsprop: centered RMSProp as in the Nature DQN and the MinAtar paper (decay 0.95, 0.01 added to the
    root; it learned MinAtar Asterix where Adam at the same step size did not)"""
    loss: Literal["mse", "huber"] = "mse"
    """TD loss: mean squared error or Huber (smooth L1)"""
    double_dqn: bool = False
    """double DQN target: the online network picks the next action, the target network values it"""

    def __post_init__(self):
        """Decides --agent auto (from the env's id: no env is made) and gives every field left None its learner's
        default (`AGENT_DEFAULTS`). A resolved config stays as it is, so `dataclasses.replace` (which runs this again)
        changes only what it names."""
        agent = self.agent if self.agent != "auto" else "tabular" if self.env in TABULAR_ENVS else "dqn"
        object.__setattr__(self, "agent", agent)  # frozen
        for name, value in AGENT_DEFAULTS[agent].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)


# The finite-state envs scanrl ships (`envs.num_states` is not None): --agent auto gives them a Q-table.
TABULAR_ENVS = ("GridWorld-v0", "FrozenLake-misc")
AGENT_DEFAULTS = {
    "tabular": dict(num_envs=1, num_steps=1000, learning_rate=0.1, gamma=0.9, start_e=0.1, end_e=0.1),
    "dqn": dict(num_envs=10, num_steps=100, learning_rate=2.5e-4, gamma=0.99, start_e=1.0, end_e=0.05),
}


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in one iteration: num_steps steps of every env (and their learning)."""
    return config.num_envs * config.num_steps


def linear_epsilon(config: Config, env_steps):
    """Epsilon after `env_steps` env steps: linear from start_e to end_e, then flat. A constant one (start_e ==
    end_e, neither swept) reads no exploration_fraction, so a sweep of it is refused rather than training alike."""
    if isinstance(config.start_e, float) and isinstance(config.end_e, float) and config.start_e == config.end_e:
        return jnp.full(jnp.shape(env_steps), config.start_e, jnp.float32)
    decay_steps = jnp.maximum(1.0, config.exploration_fraction * config.total_timesteps)
    frac = jnp.clip(env_steps / decay_steps, 0.0, 1.0)
    return config.start_e + frac * (config.end_e - config.start_e)


def q_learning_update(q_table, states, actions, targets, lr):
    """Q(s,a) += lr * (target - Q(s,a)) for a batch of transitions, one per env. Envs that visit the same
    (s, a) in the same step share one update with their mean TD error: summing them would multiply the step
    size by their number (and diverge with many envs). With one env this is the textbook update."""
    td_errors = targets - q_table[states, actions]
    pairs = states * q_table.shape[1] + actions
    visits = (pairs[:, None] == pairs[None, :]).sum(-1)
    return q_table.at[states, actions].add(lr * td_errors / visits)


class TabularState(NamedTuple):
    q_table: jax.Array
    env_state: object
    state: jax.Array  # index of the current observation
    rng: jax.Array
    env_steps: jax.Array  # env steps so far (int32): the epsilon schedule reads it


def make_tabular_train(config: Config):
    """Q-learning, one table per agent: Q(s,a) += lr * (r + gamma * max_a' Q(s',a') - Q(s,a)), no bootstrap
    past a terminal state (a truncated episode bootstraps from its true last state). -> (init, update), as
    `make_train_parts`."""
    env, env_params = envs.make_vec(config.env, config.num_envs)
    index = jax.vmap(lambda obs: envs.state_index(env, env_params, obs))  # observations -> rows of the table
    num_states = envs.num_states(env, env_params)
    num_actions = env.action_space(env_params).n

    def init(rng):
        rng, key_reset = jax.random.split(rng)
        obs, env_state = env.reset(key_reset, env_params)
        return TabularState(jnp.zeros((num_states, num_actions), jnp.float32), env_state, index(obs), rng,
                            jnp.int32(0))

    def update(runner):
        def _env_step(carry, step_input):
            q_table, env_state, state, episodes, reward_sum, epsilon = carry
            bits, key_step = step_input
            action = blocks.epsilon_greedy(q_table[state], bits, epsilon)
            obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            next_state = index(info["final_observation"])  # the true next state, also at an auto-reset
            target = reward + config.gamma * (1.0 - terminated) * q_table[next_state].max(-1)
            q_table = q_learning_update(q_table, state, action, target, config.learning_rate)
            episodes, reward_sum = episodes + info["episode_done"], reward_sum + reward
            return (q_table, env_state, index(obs), episodes, reward_sum, epsilon), None

        q_table, env_state, state, rng, env_steps = runner
        rng, key_bits, key_steps = jax.random.split(rng, 3)
        # The randomness of the whole iteration in two batched calls, outside the step scan. Env step keys are
        # dead code (and compiled away) for deterministic envs such as GridWorld-v0.
        bits = jax.random.bits(key_bits, (config.num_steps, config.num_envs), jnp.uint32)
        step_keys = jax.random.split(key_steps, config.num_steps)
        epsilon = linear_epsilon(config, env_steps)
        counters = jnp.zeros(config.num_envs, jnp.int32), jnp.zeros(config.num_envs, jnp.float32)
        (q_table, env_state_end, state, episodes, reward_sum, _), _ = jax.lax.scan(
            _env_step, (q_table, env_state, state, *counters, epsilon), (bits, step_keys)
        )
        metrics = {
            **blocks.ended_episodes(env_state, env_state_end, episodes, reward_sum, config.num_steps),
            "epsilon": epsilon,
        }
        runner = TabularState(q_table, env_state_end, state, rng, env_steps + config.num_envs * config.num_steps)
        return runner, metrics

    return init, update


# DQN ------------------------------------------------------------------------------------------------------


class QNetwork(nn.Module):
    """An MLP from observations to one Q-value per action."""

    num_actions: int
    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, obs):
        x = obs.astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.num_actions)(x)


class DQNState(NamedTuple):
    """Everything a DQN agent carries from one env step to the next."""

    train_state: TrainState
    target_params: dict
    buffer: blocks.ReplayBuffer  # a ring of (obs, action, reward, next_obs, terminated)
    env_state: object
    obs: jax.Array
    rng: jax.Array
    env_steps: jax.Array  # env steps so far (int32): epsilon, the warm-up and the target updates read it


def dqn_optimizer(config: Config):
    """--optimizer at --learning-rate (annealed to 0 with --anneal-lr)."""
    anneal = optax.identity()
    if config.anneal_lr:
        anneal = optax.scale_by_schedule(
            optax.linear_schedule(1.0, 0.0, config.total_timesteps // config.train_frequency))
    if config.optimizer == "rmsprop":  # PyTorch's RMSprop(alpha=0.95, eps=0.01, centered=True), as the papers'
        optimizer = optax.rmsprop(config.learning_rate, decay=0.95, eps=0.01, eps_in_sqrt=False, centered=True)
    else:
        optimizer = optax.adam(config.learning_rate)
    # optax.flatten: the optimizer on one flat vector, a few large ops per step instead of a few per parameter array
    # (XLA:CPU pays per op), and the same numbers on one device or several.
    return optax.flatten(optax.chain(optimizer, anneal))


def make_dqn_train(config: Config):
    """DQN: epsilon-greedy acting in `num_envs` envs, every transition into a replay buffer, a gradient step on
    a uniform minibatch every `train_frequency` env steps after the warm-up, a target network updated every
    `target_network_frequency` env steps. -> (init, update), as `make_train_parts`."""
    env, env_params = envs.make_vec(config.env, config.num_envs)
    num_actions = env.action_space(env_params).n
    network = QNetwork(num_actions, config.hidden_sizes)
    # Per vectorized step of num_envs env steps: `gradient_steps` steps every `steps_per_train` vector steps.
    gradient_steps = max(1, config.num_envs // config.train_frequency)
    steps_per_train = max(1, config.train_frequency // config.num_envs)
    tx = dqn_optimizer(config)
    td_loss = optax.huber_loss if config.loss == "huber" else optax.squared_error

    def init(rng):
        rng, key_init, key_reset = jax.random.split(rng, 3)
        obs, env_state = env.reset(key_reset, env_params)
        params = network.init(key_init, obs[0])
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        # Observations are stored as the env gives them (MinAtar's bool grids: a quarter of float32's bytes).
        zeros = jnp.zeros(config.num_envs, jnp.float32)
        buffer = blocks.ReplayBuffer.create(config.buffer_size, (obs, zeros.astype(jnp.int32), zeros, obs, zeros))
        return DQNState(train_state, train_state.params, buffer, env_state, obs, rng, jnp.int32(0))

    def update(runner):
        def _loss_fn(params, target_params, batch):
            obs, action, reward, next_obs, terminated = batch
            next_q_target = network.apply(target_params, next_obs)
            if config.double_dqn:
                next_action = jnp.argmax(network.apply(params, next_obs), -1)
                next_q = jnp.take_along_axis(next_q_target, next_action[:, None], -1).squeeze(-1)
            else:
                next_q = next_q_target.max(-1)
            # No bootstrap past a terminal state; a time-limit truncation bootstraps from the true last obs.
            target = jax.lax.stop_gradient(reward + config.gamma * (1.0 - terminated) * next_q)
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

        def _step(carry, _):
            """One vectorized env step (num_envs transitions into the buffer), then learning when due."""
            dqn_state, episodes, reward_sum, learn_sums = carry
            train_state, target_params, buffer, env_state, obs, rng, env_steps = dqn_state
            rng, key_explore, key_action, key_step, key_learn = jax.random.split(rng, 5)
            epsilon = linear_epsilon(config, env_steps)
            greedy = jnp.argmax(network.apply(train_state.params, obs), -1)
            random_action = jax.random.randint(key_action, greedy.shape, 0, num_actions)
            action = jnp.where(jax.random.uniform(key_explore, greedy.shape) < epsilon, random_action, greedy)
            next_obs, env_state, reward, terminated, _, info = env.step(key_step, env_state, action, env_params)
            buffer = buffer.add((obs, action, reward.astype(jnp.float32), info["final_observation"],
                                 terminated.astype(jnp.float32)))
            env_steps = env_steps + config.num_envs
            # blocks.run_if, not lax.cond: under vmap the agents' counters are batched, and a cond would run both
            # branches for every agent; the agents learn (and update their targets) at the same steps.
            train_state, learned = blocks.run_if(
                jnp.logical_and(env_steps >= config.learning_starts,
                                env_steps // config.num_envs % steps_per_train == 0),
                lambda train_state: _learn(train_state, target_params, buffer, key_learn),
                train_state, jnp.zeros(3, jnp.float32),
            )
            target_params, _ = blocks.run_if(
                env_steps // config.target_network_frequency
                > (env_steps - config.num_envs) // config.target_network_frequency,
                lambda target_params: (optax.incremental_update(train_state.params, target_params, config.tau), ()),
                target_params, (),
            )
            state = DQNState(train_state, target_params, buffer, env_state, next_obs, rng, env_steps)
            episodes, reward_sum = episodes + info["episode_done"], reward_sum + reward
            return (state, episodes, reward_sum, learn_sums + learned), None

        counters = jnp.zeros(config.num_envs, jnp.int32), jnp.zeros(config.num_envs, jnp.float32)
        (runner_end, episodes, reward_sum, (loss_sum, q_sum, count)), _ = jax.lax.scan(
            _step, (runner, *counters, jnp.zeros(3, jnp.float32)), None, config.num_steps
        )
        metrics = {
            **blocks.ended_episodes(runner.env_state, runner_end.env_state, episodes, reward_sum, config.num_steps),
            "epsilon": linear_epsilon(config, runner.env_steps),
            "loss/td": loss_sum / count,  # NaN before learning starts
            "q_value": q_sum / count,
        }
        return runner_end, metrics

    return init, update


def make_train_parts(config: Config):
    """The config's learner for one agent as `(init, update)`, pure and jittable: `init(rng)` makes a
    `TabularState` or a `DQNState`, `update(runner) -> (runner, metrics)` runs one iteration (see
    harness.Algorithm)."""
    return (make_tabular_train if config.agent == "tabular" else make_dqn_train)(config)


def make_train(config: Config):
    """`train(rng) -> (runner, metrics)`: one agent's whole run, pure and jittable; metrics have an iteration axis.
    Exactly the scan the command line runs, chunk by chunk."""
    init, update = make_train_parts(config)
    iterations = config.total_timesteps // steps_per_iteration(config)
    return lambda rng: jax.lax.scan(lambda runner, _: update(runner), init(rng), None, iterations)


def greedy_policy(config: Config, runner):
    """`act(obs batch) -> actions`: one agent's greedy policy (argmax of its Q-table or online Q-network, the first
    of tied actions)."""
    env, env_params = envs.make(config.env)
    if config.agent == "tabular":
        return lambda obs: jnp.argmax(runner.q_table[jax.vmap(lambda o: envs.state_index(env, env_params, o))(obs)],
                                      -1)
    network = QNetwork(env.action_space(env_params).n, config.hidden_sizes)
    return lambda obs: jnp.argmax(network.apply(runner.train_state.params, obs), -1)


def write_outputs(config: Config, runner):
    """On GridWorld, for a sweep point's tabular agents (`runner`: their runners stacked on a leading axis):
    q_values.png and each agent's greedy path length (summary.json's greedy_path_length). -> (summary fields,
    {file name: matplotlib figure}, saved by the harness in the point's directory); ({}, {}) elsewhere."""
    env, env_params = envs.make(config.env)
    if config.agent != "tabular" or not isinstance(env, gridworld.GridWorld):
        return {}, {}
    q_tables = runner.q_table
    lengths = jax.vmap(lambda q_table: gridworld.greedy_path_length(env, env_params, q_table))(q_tables)
    stats = {"q_table": q_tables, "greedy_path_length": jax.device_get(lengths)}
    return gridworld.q_value_outputs(env, stats, f"tabular Q on {config.env}, mean of {len(q_tables)} agents")


def validate(config: Config):
    """Raises ValueError for what the config's learner cannot train (the harness checks the shared flags
    and --env)."""
    harness.require(config, positive=("num_envs", "num_steps", "learning_rate", "buffer_size", "batch_size",
                                      "train_frequency", "target_network_frequency", "tau"),
                    unit=("gamma", "start_e", "end_e", "exploration_fraction", "tau"),
                    nonnegative=("learning_starts",))
    if not all(size > 0 for size in config.hidden_sizes):
        raise ValueError(f"--hidden-sizes must be positive integers, got {config.hidden_sizes}")
    env, env_params = envs.make(config.env)
    if not envs.is_discrete(env, env_params):
        raise ValueError(f"--env {config.env} has continuous actions; Q-learning and DQN need a discrete "
                         "action space (try td3.py or ppo.py)")
    if config.agent == "tabular" and envs.num_states(env, env_params) is None:
        raise ValueError(f"--agent tabular needs a finite-state env (GridWorld-v0, FrozenLake-misc); "
                         f"{config.env} has continuous observations: use --agent dqn or auto")
    if config.total_timesteps < steps_per_iteration(config):
        raise ValueError(f"--total-timesteps {config.total_timesteps} is smaller than one iteration "
                         f"(--num-envs x --num-steps = {steps_per_iteration(config)})")
    if config.agent == "dqn":
        steps = steps_per_iteration(config)
        if config.learning_starts >= config.total_timesteps // steps * steps:
            raise ValueError(f"--learning-starts {config.learning_starts} leaves no steps to learn in "
                             f"--total-timesteps {config.total_timesteps}")
        if config.train_frequency % config.num_envs and config.num_envs % config.train_frequency:
            raise ValueError(f"--train-frequency {config.train_frequency} and --num-envs {config.num_envs}: "
                             "one must divide the other (gradient steps come every train-frequency env "
                             "steps)")
        if config.buffer_size < max(config.batch_size, config.num_envs):
            raise ValueError(f"--buffer-size {config.buffer_size} must hold at least one batch (--batch-size "
                             f"{config.batch_size}) and one step of every env (--num-envs {config.num_envs})")


# The hand-off to the harness: a fork keeps it (its runs take the fork's file name).
ALGORITHM = harness.Algorithm(
    config=Config, make_train_parts=make_train_parts, steps_per_iteration=steps_per_iteration,
    policy=greedy_policy, validate=validate,
    write_outputs=write_outputs,
)


def main(config: Config | None = None):
    """Trains a new run from the command line (or `config`), or resumes or evaluates one (harness.main)."""
    harness.main(ALGORITHM, config)


if __name__ == "__main__":
    main()
