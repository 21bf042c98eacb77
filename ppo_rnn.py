"""PPO with memory: ppo.py's clipped objective and GAE (Schulman et al. 2017) with a memory between an MLP encoder
and the actor and critic heads (PureJaxRL's ppo_rnn), for tasks one observation cannot solve: CartPole without its
velocities, MemoryChain, partially observable suites. Discrete and continuous actions. The memory (--cell): a GRU
(the default), an LSTM, a linear recurrent unit (LRU, Orvieto et al. 2023) or a gated transformer-XL (GTrXL).

    python ppo_rnn.py --env CartPole-v1-masked --num-seeds 4
    python ppo_rnn.py --env MemoryChain-bsuite --cell lru
    python ppo_rnn.py --env MemoryChain-bsuite --cell gtrxl --memory-length 8

What memory adds to ppo.py, in the order it runs: the runner carries the cell's memory (one array) and which envs
start an episode; the memory resets to zeros where an episode starts; the rollout keeps the memory it started from and
the update replays whole env sequences from it (minibatches are envs, not shuffled time steps: truncated backprop
through the rollout); a truncated episode bootstraps from its final observation seen with its own memory. The
harness evaluates the policy with its memory (envs.RecurrentPolicy) and does everything else, as for ppo.py.
"""

from scanrl import harness

harness.prepare_jax(__name__)  # first: --help at once, XLA's flags (a device per core), a multi-process run

import functools
from collections.abc import Callable
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
    """PPO-RNN's fields; --env, --total-timesteps, --seed, --num-seeds, --out-dir, ... are the flags every script
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
    """Adam learning rate (PureJaxRL's ppo_rnn: 2.5e-4; 1e-3 learns the masked CartPole in a third of the steps)"""
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
    """running observation and reward normalisation (on by default, unlike ppo.py: the GRU reads small changes
    between observations, a pole's angle in hundredths of a radian, only at unit scale)"""
    # network
    hidden_size: int = 64
    """width of the encoder layer and of the actor's and critic's hidden layers"""
    cell: Literal["gru", "lstm", "lru", "gtrxl"] = "gru"
    """the memory: gru, lstm, lru (a linear recurrent unit, one parallel scan in time) or gtrxl (a gated transformer-XL
    over a window of past steps); each cell is its own program: compare them as separate runs"""
    cell_size: int = 64
    """size of the cell: the GRU's or LSTM's units, the LRU's complex state, the GTrXL's width (projected to)"""
    memory_length: int = 32
    """gtrxl only: past steps of its episode each step attends to; MemoryChain needs its memory length + 1"""
    num_heads: int = 4
    """gtrxl only: attention heads; must divide --cell-size"""
    activation: str = "tanh"
    """hidden activation: tanh or relu"""


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


class Cell(nn.Module):
    """Every memory (--cell) as the network and the PPO body see it: `initial_memory(num_envs)` (zeros, one array per
    env) and `sequence(memory, x, start)` over `x` (time, envs, features), zeroed where `start` is set -> (memory, out
    per step). A one-step cell's `__call__(memory, (x_t, start_t))` runs alone to act, scanned over time to replay."""

    size: int  # --cell-size
    memory_length: int = 32  # gtrxl's window
    num_heads: int = 4  # gtrxl's heads

    def initial_memory(self, num_envs: int):
        return jnp.zeros((num_envs, 2 * self.size))  # two states side by side (LSTM: cell and hidden; LRU: Re and Im)

    def sequence(self, memory, x, start):
        if x.shape[0] == 1:  # one step (acting): the cell alone, no loop
            memory, y = self(memory, (x[0], start[0]))
            return memory, y[None]
        scan = nn.scan(lambda cell, memory, step: cell(memory, step), variable_broadcast="params",
                       split_rngs={"params": False})
        return scan(self, memory, (x, start))


class ResetGRU(Cell):
    """One step of flax.linen's GRU cell, its memory zeros where `start` is set (before an episode's first step)."""

    def initial_memory(self, num_envs: int):
        return jnp.zeros((num_envs, self.size))

    @nn.compact
    def __call__(self, memory, step):
        inputs, start = step
        memory = jnp.where(start[:, None], 0.0, memory)
        return nn.GRUCell(features=self.size)(memory, inputs)


class ResetLSTM(Cell):
    """One step of flax.linen's LSTM cell (Hochreiter & Schmidhuber 1997), reset like ResetGRU; its memory is the cell
    and hidden states side by side (2 x size)."""

    @nn.compact
    def __call__(self, memory, step):
        inputs, start = step
        memory = jnp.where(start[:, None], 0.0, memory)
        (c, h), y = nn.OptimizedLSTMCell(features=self.size)((memory[:, :self.size], memory[:, self.size:]), inputs)
        return jnp.concatenate([c, h], axis=-1), y


def reset_linear_recurrence(a, b, start, memory):
    """h_t = a_t * h_{t-1} + b_t along axis 0 (time) from h_{-1} = `memory`, with h_{t-1} taken as zeros where
    `start[t]` is set, as one `jax.lax.associative_scan` (log-depth in time). A start sets its a_t to 0; composing
    affine maps, (a1, b1) then (a2, b2) = (a1 a2, a2 b1 + b2), is associative whatever the a's, so such an element
    forgets everything before it. Returns every h_t (time, ...)."""
    a = jnp.where(start[..., None], 0.0, a)
    b = b.at[0].add(a[0] * memory)  # h_{-1} folded into the first element

    def compose(earlier, later):
        a1, b1 = earlier
        a2, b2 = later
        return a1 * a2, a2 * b1 + b2

    return jax.lax.associative_scan(compose, (a, b))[1]


class LRU(Cell):
    """The Linear Recurrent Unit (Orvieto et al. 2023, "Resurrecting Recurrent Neural Networks for Long Sequences"):
    a diagonal complex linear recurrence h_t = lambda * h_{t-1} + gamma * (B x_t), read out as y_t = Re(C h_t) +
    D * x_t. Linear in h, so a whole sequence is one associative scan (reset_linear_recurrence); |lambda| < 1 by
    construction (lambda = exp(-exp(nu_log) + i exp(theta_log)), their eq. 6), initialised uniformly on a ring
    r_min <= |lambda| <= r_max (their section 3.3) and each input normalised by gamma = sqrt(1 - |lambda|^2) (their
    eq. 7). Its memory is Re(h) and Im(h) side by side (2 x size); why not S5: docs/scripts/ppo_rnn.md."""

    r_min: float = 0.0
    r_max: float = 0.99  # long memories: MemoryChain asks for tens of steps (their long-range tasks use 0.9-0.999)

    def sequence(self, memory, x, start):  # one step or a sequence alike: the associative scan of its length
        return self(memory, x, start)

    @nn.compact
    def __call__(self, memory, x, start):
        features = x.shape[-1]

        def ring(key, shape):  # nu_log and theta_log of lambdas uniform on the ring (Orvieto et al., lemma 3.2)
            k1, k2 = jax.random.split(key)
            u1, u2 = jax.random.uniform(k1, shape), jax.random.uniform(k2, shape)
            nu = -0.5 * jnp.log(u1 * (self.r_max ** 2 - self.r_min ** 2) + self.r_min ** 2)
            return jnp.stack([jnp.log(nu), jnp.log(u2 * 2 * jnp.pi)])

        nu_log, theta_log = self.param("nu_theta_log", ring, (self.size,))
        lam = jnp.exp(-jnp.exp(nu_log) + 1j * jnp.exp(theta_log))
        gamma = jnp.sqrt(1 - jnp.abs(lam) ** 2)
        normal = nn.initializers.normal
        b_re = self.param("B_re", normal(1 / np.sqrt(2 * features)), (features, self.size))
        b_im = self.param("B_im", normal(1 / np.sqrt(2 * features)), (features, self.size))
        c_re = self.param("C_re", normal(1 / np.sqrt(self.size)), (self.size, features))
        c_im = self.param("C_im", normal(1 / np.sqrt(self.size)), (self.size, features))
        d = self.param("D", normal(1.0), (features,))
        h0 = memory[:, :self.size] + 1j * memory[:, self.size:]
        bx = gamma * (x @ b_re + 1j * (x @ b_im))
        h = reset_linear_recurrence(jnp.broadcast_to(lam, bx.shape), bx, start, h0)
        y = (h.real @ c_re - h.imag @ c_im) + d * x  # Re(C h) with C = c_re + i c_im, as x @ C^T
        return jnp.concatenate([h[-1].real, h[-1].imag], axis=-1), nn.gelu(y)


class Gate(nn.Module):
    """GTrXL's GRU-type gate in place of a residual (Parisotto et al. 2020, eq. 9-12); its bias b_g > 0 starts it near
    the identity, which lets the transformer learn RL from the start (their section 3)."""

    bias: float = 2.0

    @nn.compact
    def __call__(self, x, y):
        dense = lambda name: nn.Dense(x.shape[-1], use_bias=False, name=name)  # noqa: E731
        r = nn.sigmoid(dense("Wr")(y) + dense("Ur")(x))
        z = nn.sigmoid(dense("Wz")(y) + dense("Uz")(x) - self.bias)
        h = nn.tanh(dense("Wg")(y) + dense("Ug")(r * x))
        return (1.0 - z) * x + z * h


class GatedTransformerStep(Cell):
    """One step of a one-layer gated transformer-XL (GTrXL, Parisotto et al. 2020), `size` wide: the embedding attends
    to itself and its episode's last `memory_length` steps (Dai et al. 2019), a learned bias per head and age on the
    logits; layer norm before attention and the MLP, a gate after each. Its memory keeps each past step's key and value
    (exact: a key depends on its step alone), (envs, memory_length, 2 x size + 1), newest last, the last channel 1
    where a slot holds a step of this episode; an episode start empties it."""

    def initial_memory(self, num_envs: int):
        return jnp.zeros((num_envs, self.memory_length, 2 * self.size + 1))

    @nn.compact
    def __call__(self, memory, step):
        e, start = step
        if e.shape[-1] != self.size:
            e = nn.Dense(self.size, name="embed")(e)
        features, head = self.size, self.size // self.num_heads
        memory = jnp.where(start[:, None, None], 0.0, memory)
        q, k, v = jnp.split(nn.Dense(3 * features, name="qkv")(nn.LayerNorm()(e)), 3, axis=-1)
        keys = jnp.concatenate([memory[..., :features], k[:, None]], axis=1)  # oldest first, the current step last
        values = jnp.concatenate([memory[..., features:-1], v[:, None]], axis=1)
        valid = jnp.concatenate([memory[..., -1] > 0, jnp.ones((e.shape[0], 1), bool)], axis=1)
        split = lambda x: x.reshape(x.shape[:-1] + (self.num_heads, head))  # noqa: E731
        logits = jnp.einsum("ehd,ethd->eht", split(q), split(keys)) / np.sqrt(head)
        logits += self.param("age_bias", nn.initializers.zeros, (self.num_heads, self.memory_length + 1))
        weights = jax.nn.softmax(jnp.where(valid[:, None], logits, -1e9), axis=-1)
        attended = nn.Dense(features, name="out")(jnp.einsum("eht,ethd->ehd", weights, split(values)).reshape(e.shape))
        x = Gate()(e, nn.relu(attended))
        x = Gate()(x, nn.relu(nn.Dense(features)(nn.relu(nn.Dense(features)(nn.LayerNorm()(x))))))
        newest = jnp.concatenate([k, v, jnp.ones_like(e[:, :1])], axis=-1)[:, None]
        return jnp.concatenate([memory[:, 1:], newest], axis=1), x


CELLS = {"gru": ResetGRU, "lstm": ResetLSTM, "lru": LRU, "gtrxl": GatedTransformerStep}


def make_cell(config: Config, name=None) -> Cell:
    return CELLS[config.cell](config.cell_size, config.memory_length, config.num_heads, name=name)


def initial_memory(config: Config, num_envs: int):
    return make_cell(config).initial_memory(num_envs)


class ActorCriticRNN(nn.Module):
    action_dim: int
    discrete: bool
    hidden_size: int
    activation: str
    cell: Callable  # `make_cell`'s, given its parameters' name (the cell's: "gru", ..., so saved runs still load)

    @nn.compact
    def __call__(self, memory, obs, start):
        """`memory` (the cell's `initial_memory`) before the sequence, `obs` (time, envs, obs_dim), `start` (time,
        envs) -> (memory after it, the policy's parameters per step: (logits,) or (mean, std), the value per step)."""
        act = ACTIVATIONS[self.activation]
        x = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(obs))
        memory, x = self.cell().sequence(memory, x, start)
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


def sample_with_noise(pi, noise):
    """A sample of `pi` from pre-drawn noise: Gumbel-max for a categorical, loc + scale * eps for a Gaussian
    (the same distributions as `pi.sample`)."""
    if isinstance(pi, distrax.Categorical):
        return jnp.argmax(pi.logits + noise, axis=-1)
    return pi.loc + pi.scale_diag * noise


def make_network(config: Config, env, env_params):
    discrete = envs.is_discrete(env, env_params)
    space = env.action_space(env_params)
    action_dim = space.n if discrete else int(np.prod(space.shape))
    network = ActorCriticRNN(action_dim, discrete, config.hidden_size, config.activation,
                             functools.partial(make_cell, config, config.cell))
    return network, discrete, action_dim


def steps_per_iteration(config: Config) -> int:
    """Env steps of one agent in an iteration of the training scan (an update): a rollout of num_envs x num_steps."""
    return config.num_envs * config.num_steps


def make_train_parts(config: Config):
    """PPO-RNN for one agent as `(init, update)`, pure and jittable: `init(rng) -> runner` and `update(runner) ->
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
    # optax.flatten: the optimizer on one flat vector, a few large ops per step instead of a few per parameter array
    # (XLA:CPU pays per op), and the same numbers on one device or several.
    tx = optax.flatten(optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate, eps=1e-5), anneal))

    def init(rng):
        rng, key_network, key_reset = jax.random.split(rng, 3)
        obs, env_state = env.reset(key_reset, env_params)
        memory, start = initial_memory(config, config.num_envs), jnp.ones(config.num_envs, bool)
        params = network.init(key_network, memory, obs[None], start[None])
        return RunnerState(TrainState.create(apply_fn=None, params=params, tx=tx), env_state, obs, start, memory,
                           rng)

    def _env_step(runner, noise):
        train_state, env_state, obs, start, memory, rng = runner
        action_noise, env_keys = noise
        # One step of the sequence: the time axis has length 1.
        memory, pi, value = network.apply(train_state.params, memory, obs[None], start[None])
        pi, value = jax.tree.map(lambda x: x[0], (pi, value))
        action = sample_with_noise(distribution(pi, discrete), action_noise)
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
    """Raises ValueError for what PPO-RNN cannot train (the harness checks the shared flags and --env)."""
    harness.require(config, positive=("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size",
                                      "cell_size", "memory_length", "num_heads", "learning_rate", "clip_coef",
                                      "max_grad_norm"),
                    unit=("gamma", "gae_lambda"), nonnegative=("vf_coef", "ent_coef"))  # < 0 would ascend the loss
    if config.cell not in CELLS:
        raise ValueError(f"--cell {config.cell!r} is unknown; use one of {', '.join(CELLS)}")
    if config.cell == "gtrxl" and config.cell_size % config.num_heads:
        raise ValueError(f"--num-heads {config.num_heads} does not divide --cell-size {config.cell_size}: each of "
                         "gtrxl's heads attends over an equal share of its width")
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
