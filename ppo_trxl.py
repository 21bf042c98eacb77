"""PPO with a transformer's memory: ppo_rnn.py's PPO (Schulman et al. 2017) with its recurrent cell replaced by a
one-layer gated transformer-XL (GTrXL, Parisotto et al. 2020) that attends, at each step, over a window of the past
embeddings of the episode (transformer-XL's memory, Dai et al. 2019). Discrete and continuous actions.

    python ppo_trxl.py --env CartPole-v1-masked --num-seeds 4
    python ppo_trxl.py --env MemoryChain-bsuite

What memory adds to ppo.py, in the order it runs: the runner carries the window of embeddings (the memory) and
which envs start an episode; the window empties where an episode starts; the rollout keeps the memory it started
from and the update replays whole env sequences from it (minibatches are envs, not shuffled time steps: truncated
backprop through the rollout); a truncated episode bootstraps from its final observation seen with its own memory. The
harness evaluates the policy with its memory (envs.RecurrentPolicy). Writes what ppo.py writes; the run
directory, checkpoints, --resume, --eval, --gif, sweeps, devices and wandb are the harness's (scanrl.harness).
"""

from scanrl import harness

harness.prepare_jax(__name__)  # first: --help at once, XLA's flags (a device per core), a multi-process run

from dataclasses import dataclass
from typing import NamedTuple

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
    """PPO-TrXL's fields; --env, --total-timesteps, --seed, --num-seeds, --out-dir, ... are the flags every script
    shares (harness.Flags)."""

    env: str = "CartPole-v1-masked"
    """environment id (see envs.list_envs(); your own env as module:name, docs/envs.md); the -masked ones need
    memory"""
    total_timesteps: int = 1_000_000
    """env steps per agent"""
    log_every: int = 20
    """print progress (and log to wandb) every this many iterations (updates)"""
    # algorithm
    num_envs: int = 4
    """parallel envs per agent"""
    num_steps: int = 128
    """steps per env in each rollout (batch = num_envs * num_steps); also the length of backprop through time"""
    update_epochs: int = 4
    """passes over each rollout batch"""
    num_minibatches: int = 4
    """minibatches per epoch, each a group of whole env sequences; must divide num_envs"""
    learning_rate: float = 1e-3
    """Adam learning rate (ppo_rnn.py's)"""
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
    normalize: bool = True
    """running observation and reward normalisation (on by default, unlike ppo.py: the memory reads small changes
    between observations, a pole's angle in hundredths of a radian, only at unit scale)"""
    # network
    hidden_size: int = 64
    """width of the encoder layer and of the actor's and critic's hidden layers"""
    memory_length: int = 32
    """past embeddings of its episode each step attends to (the transformer-XL memory); MemoryChain needs its
    memory length + 1"""
    num_heads: int = 4
    """attention heads; must divide hidden_size"""
    activation: str = "tanh"
    """hidden activation: tanh or relu"""


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


class Gate(nn.Module):
    """GTrXL's GRU-type gate in place of a residual connection (Parisotto et al. 2020, eq. 9-12): r = s(W_r y +
    U_r x), z = s(W_z y + U_z x - b_g), h = tanh(W_g y + U_g (r * x)), out = (1 - z) * x + z * h. b_g > 0 starts
    it near the identity x, which is what lets the transformer learn RL from the start (their section 3)."""

    bias: float = 2.0

    @nn.compact
    def __call__(self, x, y):
        features = x.shape[-1]
        dense = lambda name: nn.Dense(features, use_bias=False, name=name)  # noqa: E731
        r = nn.sigmoid(dense("Wr")(y) + dense("Ur")(x))
        z = nn.sigmoid(dense("Wz")(y) + dense("Uz")(x) - self.bias)
        h = nn.tanh(dense("Wg")(y) + dense("Ug")(r * x))
        return (1.0 - z) * x + z * h


class GatedTransformerStep(nn.Module):
    """One step of a one-layer gated transformer-XL (GTrXL, Parisotto et al. 2020) over a window of the episode's past:
    the current embedding attends to itself and the last `memory_length` steps of its episode (transformer-XL's
    memory, Dai et al. 2019), with a learned bias per head and age on the attention logits (a relative position, as
    Dai et al.'s, in its simplest form); layer norm before attention and the MLP, a gate after each.

    The memory holds each past step's key and value, not its embedding: a key is a function of its step alone, so
    keeping it is exact (gradients still flow to the step that made it) and each step projects one token instead of
    the whole window. Shape (envs, memory_length, 2 x features + 1), newest last; the last channel is 1 where a slot
    holds a step of this episode; an episode start empties it."""

    memory_length: int
    num_heads: int

    @nn.compact
    def __call__(self, memory, step):
        e, start = step
        envs_, features = e.shape
        head = features // self.num_heads
        memory = jnp.where(start[:, None, None], 0.0, memory)
        normed = nn.LayerNorm()(e)
        q, k, v = jnp.split(nn.Dense(3 * features, name="qkv")(normed), 3, axis=-1)
        keys = jnp.concatenate([memory[..., :features], k[:, None]], axis=1)  # oldest first, the current step last
        values = jnp.concatenate([memory[..., features:-1], v[:, None]], axis=1)
        valid = jnp.concatenate([memory[..., -1] > 0, jnp.ones((envs_, 1), bool)], axis=1)
        split = lambda x: x.reshape(x.shape[:-1] + (self.num_heads, head))  # noqa: E731
        logits = jnp.einsum("ehd,ethd->eht", split(q), split(keys)) / np.sqrt(head)
        logits += self.param("age_bias", nn.initializers.zeros, (self.num_heads, self.memory_length + 1))
        weights = jax.nn.softmax(jnp.where(valid[:, None], logits, -1e9), axis=-1)
        attended = nn.Dense(features, name="out")(jnp.einsum("eht,ethd->ehd", weights, split(values)).reshape(e.shape))
        x = Gate()(e, nn.relu(attended))
        y = nn.Dense(features)(nn.relu(nn.Dense(features)(nn.LayerNorm()(x))))
        x = Gate()(x, nn.relu(y))
        newest = jnp.concatenate([k, v, jnp.ones_like(e[:, :1])], axis=-1)[:, None]
        return jnp.concatenate([memory[:, 1:], newest], axis=1), x


class ActorCriticTrXL(nn.Module):
    action_dim: int
    discrete: bool
    hidden_size: int
    memory_length: int
    num_heads: int
    activation: str

    @nn.compact
    def __call__(self, memory, obs, start):
        """`memory` (envs, memory_length, 2 x hidden_size + 1) before the sequence, `obs` (time, envs, obs_dim),
        `start` (time, envs) -> (memory after it, the policy's parameters per step: (logits,) or (mean, std), the
        value per step). A sequence is the step scanned over time: each step's window holds the keys and values that
        these parameters make, so the update's gradient flows through the memory as through a GRU's."""
        act = ACTIVATIONS[self.activation]
        x = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(obs))
        scanned = nn.scan(GatedTransformerStep, variable_broadcast="params", split_rngs={"params": False})
        memory, x = scanned(self.memory_length, self.num_heads, name="trxl")(memory, (x, start))
        actor = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        # A small last layer keeps the initial policy close to uniform / zero-mean (Andrychowicz et al. 2021).
        out = nn.Dense(self.action_dim, kernel_init=nn.initializers.orthogonal(0.01))(actor)
        if self.discrete:
            pi = (out,)
        else:
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
            pi = (out, jnp.broadcast_to(jnp.exp(log_std), out.shape))
        critic = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(critic).squeeze(-1)
        return memory, pi, value


def initial_memory(config, num_envs: int):
    """An empty window: no step of the episode yet."""
    return jnp.zeros((num_envs, config.memory_length, 2 * config.hidden_size + 1))


def distribution(pi, discrete: bool):
    """The policy from its parameters: a categorical over logits, or a diagonal Gaussian."""
    return distrax.Categorical(*pi) if discrete else distrax.MultivariateNormalDiag(*pi)


class Transition(NamedTuple):
    obs: jax.Array
    start: jax.Array  # obs is the first observation of an episode: the memory was reset before it
    action: jax.Array
    pi: tuple  # the parameters of the acting policy's distribution: (logits,) or (mean, std)
    value: jax.Array
    memory: jax.Array  # the memory after seeing obs: its next observation is seen from here
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
    start: jax.Array
    memory: jax.Array
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


def sample_with_noise(pi, noise, discrete: bool):
    """A sample of the policy with parameters `pi` from pre-drawn noise: Gumbel-max for a categorical, loc + scale *
    eps for a Gaussian (the same distributions as sampling them)."""
    return jnp.argmax(pi[0] + noise, axis=-1) if discrete else pi[0] + pi[1] * noise


def make_network(config: Config, env, env_params):
    discrete = envs.is_discrete(env, env_params)
    space = env.action_space(env_params)
    action_dim = space.n if discrete else int(np.prod(space.shape))
    network = ActorCriticTrXL(action_dim, discrete, config.hidden_size, config.memory_length, config.num_heads,
                              config.activation)
    return network, discrete, action_dim


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in an iteration of the training scan (an update): a rollout of num_envs x num_steps."""
    return config.num_envs * config.num_steps


def make_train_parts(config: Config):
    """PPO-TrXL for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
    (runner, metrics)`, one iteration: a rollout of every env with its memory, its advantages, and the update
    epochs over whole env sequences."""
    envs_per_minibatch = config.num_envs // config.num_minibatches
    num_updates = config.total_timesteps // steps_per_iteration(config)  # iterations of the run
    env, env_params = envs.make_vec(config.env, config.num_envs)
    network, discrete, action_dim = make_network(config, env, env_params)
    if config.normalize:
        env, env_params = envs.make_vec(
            config.env, config.num_envs, normalize_obs=True, normalize_reward=True, gamma=config.gamma
        )
    anneal = optax.identity()
    if config.anneal_lr:
        anneal = optax.scale_by_schedule(
            optax.linear_schedule(1.0, 0.0, num_updates * config.update_epochs * config.num_minibatches))
    tx = optax.flatten(optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate, eps=1e-5), anneal))

    def init(rng):
        rng, key_network, key_reset = jax.random.split(rng, 3)
        obs, env_state = env.reset(key_reset, env_params)
        memory = initial_memory(config, config.num_envs)
        start = jnp.ones(config.num_envs, bool)
        params = network.init(key_network, memory, obs[None], start[None])
        return RunnerState(TrainState.create(apply_fn=None, params=params, tx=tx), env_state, obs, start, memory,
                           rng)

    def _env_step(runner, noise):
        train_state, env_state, obs, start, memory, rng = runner
        action_noise, env_keys = noise
        # One step of the sequence: the time axis has length 1.
        memory, pi, value = network.apply(train_state.params, memory, obs[None], start[None])
        pi, value = jax.tree.map(lambda x: x[0], (pi, value))
        action = sample_with_noise(pi, action_noise, discrete)
        next_obs, env_state, reward, terminated, truncated, info = env.step(
            env_keys, env_state, action, env_params
        )
        transition = Transition(
            obs, start, action, pi, value, memory, reward, terminated.astype(jnp.float32),
            info["episode_done"].astype(jnp.float32), info["final_observation"], info["episode_return"],
            info["episode_length"],
        )
        return RunnerState(train_state, env_state, next_obs, info["episode_done"], memory, rng), transition

    def _loss_fn(params, batch):
        initial_memory, obs, start, action, old_log_prob, old_value, advantage, target = batch
        # The minibatch's env sequences replayed from the memory their rollout started with.
        _, pi, value = network.apply(params, initial_memory, obs, start)
        pi = distribution(pi, discrete)
        log_prob = pi.log_prob(action)
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
        train_state, (initial_memory, sequences), rng = carry
        rng, key_perm = jax.random.split(rng)
        # Minibatches of whole env sequences: the envs shuffled, the time axis kept in order.
        permutation = blocks.permutation(key_perm, config.num_envs)
        initial_memories = initial_memory[permutation].reshape(
            (config.num_minibatches, envs_per_minibatch) + initial_memory.shape[1:])
        minibatches = jax.tree.map(
            lambda x: jnp.swapaxes(x[:, permutation].reshape(
                (x.shape[0], config.num_minibatches, envs_per_minibatch) + x.shape[2:]), 0, 1), sequences)
        train_state, stats = jax.lax.scan(_update_minibatch, train_state, (initial_memories, *minibatches))
        return (train_state, (initial_memory, sequences), rng), stats

    def update(runner):
        # The rollout's randomness in two batched draws before the scan instead of small ones at every
        # step: on CPU each random draw inside the scan body is a loop of its own (threefry's rounds).
        rng, key_noise, key_env = jax.random.split(runner.rng, 3)
        noise = (
            draw_noise(key_noise, (config.num_steps, config.num_envs, action_dim), discrete),
            jax.random.split(key_env, (config.num_steps, config.num_envs)),
        )
        initial_memory = runner.memory
        runner, traj = jax.lax.scan(_env_step, runner._replace(rng=rng), noise)
        train_state, env_state, obs, start, memory, rng = runner
        params = train_state.params

        def value_fn(obs, memory):  # V of observations each seen after its own memory, as the next step sees it
            return network.apply(params, memory, obs[None], jnp.zeros(obs.shape[:1], bool)[None])[2][0]

        # V(next obs) from the values shifted, and one network step on the truncations' final observations from
        # the memory of their episode's last step (the memory resets only when the next episode starts).
        next_values = blocks.next_obs_values(value_fn, traj.value, traj.done, traj.terminated, traj.next_obs, obs,
                                             env_params, memory=traj.memory)
        log_probs = distribution(traj.pi, discrete).log_prob(traj.action)
        advantages, targets = calculate_gae(
            traj.reward, traj.value, next_values, traj.terminated, traj.done, config.gamma, config.gae_lambda
        )
        sequences = (traj.obs, traj.start, traj.action, log_probs, traj.value, advantages, targets)
        (train_state, _, rng), stats = jax.lax.scan(
            _update_epoch, (train_state, (initial_memory, sequences), rng), None, config.update_epochs
        )
        episodes = traj.done.sum()
        metrics = {
            "episodes": episodes,
            # Mean over the episodes that ended in this rollout; NaN if none did.
            "episode_return": (traj.episode_return * traj.done).sum() / episodes,
            "episode_length": (traj.episode_length * traj.done).sum() / episodes,
            **jax.tree.map(jnp.mean, stats),
        }
        return RunnerState(train_state, env_state, obs, start, memory, rng), metrics

    return init, update


def make_train(config: Config):
    """`train(rng) -> (runner, metrics)`: one agent's whole run, pure and jittable; metrics have an iteration axis.
    The command line runs this scan, chunk by chunk."""
    init, update = make_train_parts(config)
    iterations = config.total_timesteps // steps_per_iteration(config)
    return lambda rng: jax.lax.scan(lambda runner, _: update(runner), init(rng), None, iterations)


def policy_step(config: Config, runner):
    """`step(memory, obs, start) -> (memory, distribution)`: one agent's recurrent policy on a batch of observations
    (the harness feeds it observations normalised as in training, the runner's statistics frozen)."""
    env, env_params = envs.make_vec(config.env, 1)
    network, discrete, _ = make_network(config, env, env_params)

    def step(memory, obs, start):
        memory, pi, _ = network.apply(runner.train_state.params, memory, obs[None], start[None])
        return memory, distribution(jax.tree.map(lambda x: x[0], pi), discrete)

    return step


def policy(config: Config, runner, key=None):
    """One agent's deterministic policy (argmax / mean action) with its memory, as an `envs.RecurrentPolicy`; with a
    `key`, the policy training acts with (--eval --eval-sampled): its memory is the cell's and a PRNG key, each
    action sampled from the policy's distribution."""
    pi = policy_step(config, runner)

    def act(memory, obs, start):
        memory, dist = pi(memory, obs, start)
        return memory, dist.mode()

    def sample(memory, obs, start):
        hidden, key = memory
        key, key_action = jax.random.split(key)
        hidden, dist = pi(hidden, obs, start)
        return (hidden, key), dist.sample(seed=key_action)

    if key is None:
        return envs.RecurrentPolicy(lambda num_envs: initial_memory(config, num_envs), act)
    return envs.RecurrentPolicy(lambda num_envs: (initial_memory(config, num_envs), key), sample)


def validate(config: Config):
    """Raises ValueError for what PPO-TrXL cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size",
                                      "memory_length", "num_heads", "learning_rate", "clip_coef", "max_grad_norm"),
                    unit=("gamma", "gae_lambda"), nonnegative=("vf_coef", "ent_coef"))  # < 0 would ascend the loss
    if config.hidden_size % config.num_heads:
        raise ValueError(f"--num-heads {config.num_heads} does not divide --hidden-size "
                         f"{config.hidden_size}: each head attends over an equal share of the embedding")
    if config.activation not in ACTIVATIONS:
        raise ValueError(f"--activation {config.activation!r} is unknown; use one of "
                         f"{', '.join(ACTIVATIONS)}")
    if config.num_envs % config.num_minibatches:
        raise ValueError(f"--num-minibatches {config.num_minibatches} does not divide --num-envs "
                         f"{config.num_envs}: a minibatch is a group of whole env sequences; use a divisor "
                         f"of {config.num_envs}")
    rollout = steps_per_iteration(config)
    if config.total_timesteps < rollout:
        raise ValueError(f"--total-timesteps {config.total_timesteps} is smaller than one rollout (--num-envs "
                         f"x --num-steps = {rollout}); raise it or shrink the rollout")


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
