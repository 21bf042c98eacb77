"""The update step alone (loss, gradient, Adam step): VPG and TD3 in JAX and in PyTorch with equal work, beside TD3
as td3.py and sbx run it, the rows taking turns.

Reproduces the comparison of a paper that timed only the update, not the env or the rollout, and found JAX
taking about 22% of PyTorch's time for VPG and 54% for TD3 (on their GPU); issue 72 adds TD3 at HalfCheetah's shapes,
td3.py's own iteration and a JAX peer. Here on the CPU:

    python benchmarks/studies/bench_update.py                 # 20 rounds x 50 updates, with torch.compile
    python benchmarks/studies/bench_update.py --algos td3 --shapes halfcheetah --peer-python ../peer-venv/bin/python
    python benchmarks/studies/bench_update.py --repeats 2 --iters 2 --vpg-batch 64 --td3-batch 16 --train-v-iters 2 \
        --td3-learning-starts 64 --no-compile --out-dir /tmp/update                # a smoke test

- One VPG update, as in reinforce.py (SpinningUp's VPG, CartPole shapes: obs 4, 2 actions, 64-64 tanh):
  ONE policy-gradient step (Adam 3e-4, loss -mean(log pi(a|s) * A)) and `--train-v-iters` full-batch value
  steps (Adam 1e-3, MSE) on a batch of `--vpg-batch` (4000: SpinningUp's epoch).
- One TD3 update, as in td3.py at the paper's replay ratio (256-256 ReLU, Adam 3e-4, a batch of `--td3-batch`, 256):
  one update of the twin critics (clipped double-Q target with target policy smoothing), and after every second
  (policy_delay) one of the actor with polyak averaging of the targets. `--shapes pendulum`: obs 3, action 1 in
  [-2, 2]; `--shapes halfcheetah`: obs 17, action 6 in [-1, 1].

Rows, TD3's at 2 x `--iters` updates per round:
- PyTorch eager, PyTorch `torch.compile`, JAX `jit` (a call per VPG update or TD3 policy_delay cycle) and JAX
  `jit + scan` (the round's calls in one `lax.scan`): this file's re-implementations, from the same numpy weights,
  batch and smoothing noise, with the same architectures and Adam settings. Each run checks that one update gives
  the same numbers on both sides and prints the largest difference.
- td3.py: its own `make_train_parts` iteration with the paper's recipe (`--num-envs 1 --update-every 1
  --updates-per-step 1 --batch-size 256 --hidden-size 256`, a 1M buffer), one agent, `jax.jit` of a `lax.scan` of
  the round's iterations, on `NullEnv`, an env of the same shapes that costs nothing to step (given as a user's env
  is: `envs.register`, docs/envs.md), once `--td3-learning-starts` random steps have filled the buffer. Each update
  comes with an env step, acting (the actor on one observation), storing and sampling.
- sbx 0.28.0's TD3 (`--peer-python`: a venv of requirements-peer.txt, never the repo's), in a process of its own that
  stays up through the rounds (`sbx_server`): its jitted `TD3._train` called as its `train()` calls it, one call per
  update (gradient_steps=1, the paper's setting, the losses read back after each call as its logger does) or one
  call for the round's updates (gradient_steps=2 x `--iters`: its `fori_loop`); and `train()` itself, which adds the
  sampling of SB3's replay buffer (holding `--td3-learning-starts` random transitions). Not quite the same work:
  sbx moves the targets after every critic update and its actor maximises the smaller of the two critics (the
  paper: after each actor update, and Q1).
- fp32 matmul, the reference: chained 256x256 @ 256x256 matmuls in one `jit + scan`, as many per update as match one
  TD3 update's FLOPs. A TD3 row's share of the machine's matmul throughput is its update FLOPs per second over this
  row's (sbx's rows counted at the paper's FLOPs).

TD3's FLOPs per update (`td3_update_flops`), matmuls only (2 per multiply-add; biases, activations and Adam add a few
percent): a dense layer n_in -> n_out at batch B costs 2 B n_in n_out forward, as much for its weights' gradient and
as much again for its input's (not needed at a first layer fed by data). At HalfCheetah's shapes a critic takes
23 x 256 + 256 x 256 + 256 x 1 = 71,680 multiply-adds per sample, the actor 17 x 256 + 256 x 256 + 256 x 6 = 71,424.
A critic update runs the target actor and both target critics forward and both critics forward and backward: 633,088
per sample, 324 MFLOP at B = 256. An actor update runs the actor forward, Q1 forward and back to the action, and the
actor backward: 353,280 per sample, 181 MFLOP. One update, with half an actor update: 415 MFLOP, twelve 256x256 @
256x256 matmuls (33.6 MFLOP each).

Every row is built and warmed up first (compilation excluded); then `--repeats` rounds each time every row once, the
rows in turn, so a drift in the machine's load falls on each alike; the median per row is reported. Writes
`<out-dir>/update.md` (the table, shapes, machine and versions) and `<out-dir>/update.png` (`update_halfcheetah.md`
and `.png` at `--shapes halfcheetah`). Needs PyTorch (pip install
-r requirements-bench.txt). Timings depend on the machine and its load; run on an idle machine.
"""

import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ----------------------------------------------------------------------------------------------------------
# The JAX peer, under the peer venv (`--peer-runner`): it has sbx and SB3 but neither scanrl nor tyro, so this part
# comes before the repo's imports and needs only the standard library besides them.


def sbx_server(spec):
    """sbx's TD3 at spec's shapes, its rows built and warmed up; then answers each row's name read from stdin with the
    seconds of spec["updates"] consecutive updates of that row, a JSON line each, until stdin closes."""
    import gymnasium as gym
    import numpy as np
    import torch  # SB3's replay buffer samples into torch tensors
    from bench_sac_peer import versions
    from sbx import TD3
    from sbx.common.type_aliases import ReplayBufferSamplesNp
    from stable_baselines3.common.logger import Logger

    answer, sys.stdout = sys.stdout, sys.stderr  # the libraries' prints go to stderr, the answers alone to stdout
    if spec["torch_threads"]:
        torch.set_num_threads(spec["torch_threads"])
    obs_dim, act_dim, batch_size, updates = spec["obs_dim"], spec["act_dim"], spec["batch_size"], spec["updates"]
    rng = np.random.default_rng(spec["seed"])

    class Spaces(gym.Env):  # only its spaces are used: no env step is timed
        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(-spec["bound"], spec["bound"], (act_dim,), np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros(obs_dim, np.float32), {}

        def step(self, action):
            return np.zeros(obs_dim, np.float32), 0.0, False, False, {}

    model = TD3("MlpPolicy", Spaces(), batch_size=batch_size, policy_kwargs=dict(net_arch=[256, 256]),
                seed=spec["seed"], device="cpu")
    model.set_logger(Logger(None, []))  # train() records its losses; learn() would have set one
    buffer, fill = model.replay_buffer, spec["fill"]  # SB3's buffer as after learning_starts random steps
    for name, size in (("observations", obs_dim), ("next_observations", obs_dim), ("actions", act_dim)):
        getattr(buffer, name)[:fill] = rng.uniform(-1, 1, (fill, 1, size))
    buffer.rewards[:fill] = rng.normal(size=(fill, 1))
    buffer.pos = fill

    def samples(rows):  # what train() hands _train: actions in [-1, 1], sbx's scaled space
        normal = lambda *shape: rng.normal(size=(rows, *shape)).astype(np.float32)  # noqa: E731
        return ReplayBufferSamplesNp(normal(obs_dim), rng.uniform(-1, 1, (rows, act_dim)).astype(np.float32),
                                     normal(obs_dim), (rng.random(rows) < 0.05).astype(np.float32), normal(),
                                     np.full(rows, model.gamma, np.float32))

    def train_call(gradient_steps, data):
        """TD3.train() after its sampling: one _train call, the losses read back (its logger's .item())."""
        policy = model.policy
        policy.qf_state, policy.actor_state, model.key, losses = model._train(
            model.tau, gradient_steps, data, model.policy_delay, (model._n_updates + 1) % model.policy_delay,
            model.target_policy_noise, model.target_noise_clip, policy.qf_state, policy.actor_state, model.key)
        model._n_updates += gradient_steps
        return [loss.item() for loss in losses]

    one, all_at_once = samples(batch_size), samples(batch_size * updates)
    rows = {
        "_train, gradient_steps=1 per call": lambda: [train_call(1, one) for _ in range(updates)],
        f"_train, gradient_steps={updates} in one call": lambda: train_call(updates, all_at_once),
        "train(), gradient_steps=1: + SB3 buffer sampling": lambda: [model.train(1, batch_size)
                                                                     for _ in range(updates)],
    }
    for run in rows.values():  # warm-up, not timed: _train compiles per gradient_steps and policy_delay_offset
        run()
    print(json.dumps({"rows": list(rows), "versions": versions(("sbx-rl", "stable-baselines3", "jax", "flax", "optax",
                                                                "torch"))}), file=answer, flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        rows[line.strip()]()
        print(json.dumps({"seconds": time.perf_counter() - start}), file=answer, flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["--peer-runner"]:
    sbx_server(json.loads(sys.argv[2]))
    sys.exit()

sys.path.insert(0, ROOT)
from scanrl import harness  # noqa: E402

harness.prepare_jax("bench_update")  # the scripts' XLA_FLAGS, before JAX makes its backend

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import tyro  # noqa: E402
from bench_sac_peer import machine  # noqa: E402
from gymnax.environments import environment, spaces  # noqa: E402

import td3  # noqa: E402
from scanrl import envs  # noqa: E402

if importlib.util.find_spec("torch") is not None:  # optional: main() says how to install it
    import torch


@dataclass(frozen=True)
class Args:
    repeats: int = 20
    """rounds, each timing every row once; the median per row is reported"""
    iters: int = 50
    """consecutive VPG updates, or TD3 policy_delay cycles (2 updates each), per row per round"""
    vpg_batch: int = 4000
    """transitions in the VPG batch (SpinningUp's default epoch)"""
    train_v_iters: int = 80
    """full-batch value-function steps in one VPG update"""
    td3_batch: int = 256
    """transitions per TD3 critic update"""
    shapes: Literal["pendulum", "halfcheetah"] = "pendulum"
    """TD3's observation and action sizes: Pendulum-v1's (3, 1 in [-2, 2]) or HalfCheetah's (17, 6 in [-1, 1])"""
    td3_learning_starts: int = 10_000
    """random env steps td3.py takes (and transitions in sbx's buffer) before the timed updates (the paper's 10,000)"""
    compile: bool = True
    """also time PyTorch with torch.compile (minutes of compilation on a CPU)"""
    torch_threads: int = 0
    """PyTorch's intra-op threads, here and in the peer (0: PyTorch's default, one per core; under other load its
    OpenMP threads wait on each other, and an update took 70x longer on 2 busy cores: pass 1 to check)"""
    peer_python: str | None = None
    """python of a venv of requirements-peer.txt, for sbx's TD3 rows; without it they are skipped"""
    algos: tuple[Literal["vpg", "td3"], ...] = ("vpg", "td3")
    """algorithms to time"""
    seed: int = 0
    """seed of the numpy weights and batches"""
    out_dir: str = "benchmarks/results"
    """directory of update.md and update.png"""


@dataclass(frozen=True)
class VPGConfig:
    obs_dim: int = 4
    num_actions: int = 2
    hidden_size: int = 64
    pi_lr: float = 3e-4
    vf_lr: float = 1e-3
    train_v_iters: int = 80
    batch_size: int = 4000


@dataclass(frozen=True)
class TD3Config:
    obs_dim: int = 3
    act_dim: int = 1
    action_bound: float = 2.0
    hidden_size: int = 256
    learning_rate: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    policy_delay: int = 2
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    batch_size: int = 256


SHAPES = {"pendulum": dict(obs_dim=3, act_dim=1, action_bound=2.0),
          "halfcheetah": dict(obs_dim=17, act_dim=6, action_bound=1.0)}


class VPGBatch(NamedTuple):
    obs: np.ndarray  # (batch, obs_dim)
    action: np.ndarray  # (batch,) int32
    advantage: np.ndarray  # (batch,)
    ret: np.ndarray  # (batch,) value target (reward-to-go)


class TD3Batch(NamedTuple):
    """One batch per critic update of the cycle: every array has a leading policy_delay axis."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    next_obs: np.ndarray
    noise: np.ndarray  # standard normal draws of the target policy smoothing, shaped like action


# ----------------------------------------------------------------------------------------------------------
# Weights and batches, built once in numpy. A network is a list of (kernel (in, out), bias (out,)) layers;
# TD3's twin critics have a leading axis of 2 on every array, as in td3.py.


def init_layers(rng, sizes, twins=None):
    """PyTorch's default Linear init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for kernel and bias."""
    lead = () if twins is None else (twins,)
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / np.sqrt(fan_in)
        kernel = rng.uniform(-bound, bound, lead + (fan_in, fan_out)).astype(np.float32)
        layers.append((kernel, rng.uniform(-bound, bound, lead + (fan_out,)).astype(np.float32)))
    return layers


def make_vpg_weights(cfg: VPGConfig, seed=0):
    rng = np.random.default_rng(seed)
    hidden = [cfg.hidden_size] * 2
    return {"pi": init_layers(rng, [cfg.obs_dim, *hidden, cfg.num_actions]),
            "v": init_layers(rng, [cfg.obs_dim, *hidden, 1])}


def make_vpg_batch(cfg: VPGConfig, seed=0):
    rng = np.random.default_rng(seed + 1)
    n = cfg.batch_size
    return VPGBatch(rng.normal(size=(n, cfg.obs_dim)).astype(np.float32),
                    rng.integers(0, cfg.num_actions, n).astype(np.int32),
                    rng.normal(size=n).astype(np.float32),
                    (10.0 * rng.normal(size=n)).astype(np.float32))


def make_td3_weights(cfg: TD3Config, seed=0):
    rng = np.random.default_rng(seed)
    hidden = [cfg.hidden_size] * 2
    actor = init_layers(rng, [cfg.obs_dim, *hidden, cfg.act_dim])
    critic = init_layers(rng, [cfg.obs_dim + cfg.act_dim, *hidden, 1], twins=2)
    copy = lambda layers: [(w.copy(), b.copy()) for w, b in layers]  # noqa: E731
    return {"actor": actor, "critic": critic, "actor_target": copy(actor), "critic_target": copy(critic)}


def make_td3_batch(cfg: TD3Config, seed=0):
    rng = np.random.default_rng(seed + 1)
    lead = (cfg.policy_delay, cfg.batch_size)
    normal = lambda *shape: rng.normal(size=lead + shape).astype(np.float32)  # noqa: E731
    action = rng.uniform(-cfg.action_bound, cfg.action_bound, lead + (cfg.act_dim,)).astype(np.float32)
    return TD3Batch(normal(cfg.obs_dim), action, normal(), (rng.random(lead) < 0.05).astype(np.float32),
                    normal(cfg.obs_dim), normal(cfg.act_dim))


# ----------------------------------------------------------------------------------------------------------
# JAX: the math of reinforce.py and td3.py on plain parameter lists (flax's Dense is x @ kernel + bias).


def mlp(layers, x, activation):
    for kernel, bias in layers[:-1]:
        x = activation(x @ kernel + bias)
    kernel, bias = layers[-1]
    return x @ kernel + bias


class VPGState(NamedTuple):
    pi: list
    v: list
    pi_opt: optax.OptState
    v_opt: optax.OptState


def make_vpg_jax(cfg: VPGConfig):
    """-> init(weights) -> VPGState, update(state, batch) -> (state, (loss_pi, loss_v per value step))."""
    pi_tx, v_tx = optax.adam(cfg.pi_lr), optax.adam(cfg.vf_lr)

    def pi_loss(pi, obs, action, advantage):
        log_prob = jnp.take_along_axis(jax.nn.log_softmax(mlp(pi, obs, jnp.tanh)), action[:, None], 1)[:, 0]
        return -(log_prob * advantage).mean()

    def v_loss(v, obs, ret):
        return ((mlp(v, obs, jnp.tanh)[:, 0] - ret) ** 2).mean()

    def init(weights):
        pi, v = jax.tree.map(jnp.asarray, (weights["pi"], weights["v"]))
        return VPGState(pi, v, pi_tx.init(pi), v_tx.init(v))

    def update(state, batch):
        loss_pi, grads = jax.value_and_grad(pi_loss)(state.pi, batch.obs, batch.action, batch.advantage)
        updates, pi_opt = pi_tx.update(grads, state.pi_opt)
        pi = optax.apply_updates(state.pi, updates)

        def _v_step(carry, _):
            v, v_opt = carry
            loss, grads = jax.value_and_grad(v_loss)(v, batch.obs, batch.ret)
            updates, v_opt = v_tx.update(grads, v_opt)
            return (optax.apply_updates(v, updates), v_opt), loss

        (v, v_opt), loss_v = jax.lax.scan(_v_step, (state.v, state.v_opt), None, cfg.train_v_iters)
        return VPGState(pi, v, pi_opt, v_opt), (loss_pi, loss_v)

    return init, update


class TD3State(NamedTuple):
    actor: list
    critic: list  # twin critics: every array has a leading axis of 2
    actor_target: list
    critic_target: list
    actor_opt: optax.OptState
    critic_opt: optax.OptState


def make_td3_jax(cfg: TD3Config):
    """-> init(weights) -> TD3State, update(state, batch) -> (state, (critic losses, actor loss))."""
    tx = optax.adam(cfg.learning_rate)
    low, high = -cfg.action_bound, cfg.action_bound
    half_range = (high - low) / 2

    def policy(actor, obs):
        return low + (jnp.tanh(mlp(actor, obs, jax.nn.relu)) + 1.0) * half_range

    def twin_q(critic, obs, action):
        x = jnp.concatenate([obs, action], axis=-1)
        return jax.vmap(lambda layers: mlp(layers, x, jax.nn.relu)[:, 0])(critic)

    def init(weights):
        w = jax.tree.map(jnp.asarray, weights)
        return TD3State(w["actor"], w["critic"], w["actor_target"], w["critic_target"], tx.init(w["actor"]),
                        tx.init(w["critic"]))

    def critic_step(state, batch):
        # Clipped double-Q target with target policy smoothing (Fujimoto et al. 2018, eqs. 10 and 14); it is
        # computed outside the loss, so no gradient flows into it.
        eps = jnp.clip(cfg.policy_noise * batch.noise, -cfg.noise_clip, cfg.noise_clip)
        next_action = jnp.clip(policy(state.actor_target, batch.next_obs) + eps * half_range, low, high)
        next_q = twin_q(state.critic_target, batch.next_obs, next_action).min(axis=0)
        target = batch.reward + cfg.gamma * (1.0 - batch.terminated) * next_q

        def loss_fn(critic):
            return ((twin_q(critic, batch.obs, batch.action) - target) ** 2).mean(axis=1).sum()

        loss, grads = jax.value_and_grad(loss_fn)(state.critic)
        updates, critic_opt = tx.update(grads, state.critic_opt)
        return state._replace(critic=optax.apply_updates(state.critic, updates), critic_opt=critic_opt), loss

    def actor_step(state, obs):
        q1 = jax.tree.map(lambda p: p[0], state.critic)

        def loss_fn(actor):
            x = jnp.concatenate([obs, policy(actor, obs)], axis=-1)
            return -mlp(q1, x, jax.nn.relu).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.actor)
        updates, actor_opt = tx.update(grads, state.actor_opt)
        actor = optax.apply_updates(state.actor, updates)
        polyak = lambda p, t: cfg.tau * p + (1.0 - cfg.tau) * t  # noqa: E731
        return state._replace(
            actor=actor, actor_opt=actor_opt,
            actor_target=jax.tree.map(polyak, actor, state.actor_target),
            critic_target=jax.tree.map(polyak, state.critic, state.critic_target),
        ), loss

    def update(state, batch):
        # One delayed-policy cycle (sec. 5.2): policy_delay critic updates, then the actor and the targets.
        critic_losses = []
        for i in range(cfg.policy_delay):
            state, loss = critic_step(state, jax.tree.map(lambda x: x[i], batch))  # noqa: B023
            critic_losses.append(loss)
        state, actor_loss = actor_step(state, batch.obs[-1])
        return state, (jnp.stack(critic_losses), actor_loss)

    return init, update


def vpg_jax(weights, batch: VPGBatch, cfg: VPGConfig):
    """One jitted VPG update -> (loss_pi, loss_v per value step, new {"pi", "v"} weights in numpy)."""
    init, update = make_vpg_jax(cfg)
    state, (loss_pi, loss_v) = jax.jit(update)(init(weights), jax.tree.map(jnp.asarray, batch))
    return float(loss_pi), np.asarray(loss_v), jax.tree.map(np.asarray, {"pi": state.pi, "v": state.v})


def td3_jax(weights, batch: TD3Batch, cfg: TD3Config):
    """One jitted TD3 cycle -> (critic losses, actor loss, new actor/critic/target weights in numpy)."""
    init, update = make_td3_jax(cfg)
    state, (critic_losses, actor_loss) = jax.jit(update)(init(weights), jax.tree.map(jnp.asarray, batch))
    names = ("actor", "critic", "actor_target", "critic_target")
    return np.asarray(critic_losses), float(actor_loss), {k: jax.tree.map(np.asarray, getattr(state, k)) for k in names}


def jax_runner(init, update, weights, batch, calls: int, scan: bool):
    """-> run() -> seconds of `calls` consecutive updates, blocking until done; the state carries over between runs."""
    state = init(weights)
    batch = jax.tree.map(jnp.asarray, batch)
    if scan:
        many = jax.jit(lambda s, b: jax.lax.scan(lambda s, _: (update(s, b)[0], None), s, None, calls)[0])
    else:
        one = jax.jit(update)

    def run():
        nonlocal state
        start = time.perf_counter()
        if scan:
            state = many(state, batch)
        else:
            for _ in range(calls):
                state, _ = one(state, batch)
        jax.block_until_ready(state)
        return time.perf_counter() - start

    return run


# ----------------------------------------------------------------------------------------------------------
# PyTorch: the same networks and steps, written as SpinningUp / CleanRL would.


def torch_mlp(layers, activation, out_activation=None):
    modules = []
    for kernel, bias in layers:
        linear = torch.nn.Linear(*kernel.shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.T)))
            linear.bias.copy_(torch.from_numpy(bias))
        modules += [linear, activation()]
    modules[-1:] = [out_activation()] if out_activation else []
    return torch.nn.Sequential(*modules)


def numpy_layers(net):
    return [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
            for m in net if isinstance(m, torch.nn.Linear)]


def build_vpg_torch(weights, batch: VPGBatch, cfg: VPGConfig, compile=False):
    """-> update() -> (loss_pi, loss_v per value step), get_weights() -> {"pi", "v"} in numpy."""
    pi, v = torch_mlp(weights["pi"], torch.nn.Tanh), torch_mlp(weights["v"], torch.nn.Tanh)
    pi_opt = torch.optim.Adam(pi.parameters(), lr=cfg.pi_lr)
    v_opt = torch.optim.Adam(v.parameters(), lr=cfg.vf_lr)
    obs, action, advantage, ret = (torch.from_numpy(x) for x in batch)
    action = action.long()[:, None]

    def pi_step():
        # log_softmax + gather: Categorical(logits).log_prob's math without its argument checks.
        log_prob = torch.log_softmax(pi(obs), dim=-1).gather(1, action)[:, 0]
        loss = -(log_prob * advantage).mean()
        pi_opt.zero_grad()
        loss.backward()
        pi_opt.step()
        return loss.detach()

    def v_step():
        loss = ((v(obs)[:, 0] - ret) ** 2).mean()
        v_opt.zero_grad()
        loss.backward()
        v_opt.step()
        return loss.detach()

    if compile:
        pi_step, v_step = torch.compile(pi_step), torch.compile(v_step)

    def update():
        loss_pi = pi_step()
        return loss_pi, torch.stack([v_step() for _ in range(cfg.train_v_iters)])

    return update, lambda: {"pi": numpy_layers(pi), "v": numpy_layers(v)}


def build_td3_torch(weights, batch: TD3Batch, cfg: TD3Config, compile=False):
    """-> update() -> (critic losses, actor loss), get_weights() -> actor/critic/target weights in numpy."""
    relu, tanh = torch.nn.ReLU, torch.nn.Tanh
    twin = lambda layers, i: [(w[i], b[i]) for w, b in layers]  # noqa: E731
    actor, actor_target = (torch_mlp(weights[k], relu, tanh) for k in ("actor", "actor_target"))
    critics = [torch_mlp(twin(weights["critic"], i), relu) for i in range(2)]
    critic_targets = [torch_mlp(twin(weights["critic_target"], i), relu) for i in range(2)]
    for net in (actor_target, *critic_targets):
        net.requires_grad_(False)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.learning_rate)
    critic_opt = torch.optim.Adam([p for q in critics for p in q.parameters()], lr=cfg.learning_rate)
    low, high = -cfg.action_bound, cfg.action_bound
    half_range = (high - low) / 2
    data = TD3Batch(*(torch.from_numpy(x) for x in batch))
    pairs = list(zip((actor, *critics), (actor_target, *critic_targets), strict=True))

    def policy(net, obs):
        return low + (net(obs) + 1.0) * half_range

    def q_value(net, obs, action):
        return net(torch.cat([obs, action], dim=-1))[:, 0]

    def critic_step(obs, action, reward, terminated, next_obs, noise):
        with torch.no_grad():
            eps = (cfg.policy_noise * noise).clamp(-cfg.noise_clip, cfg.noise_clip)
            next_action = (policy(actor_target, next_obs) + eps * half_range).clamp(low, high)
            next_q = torch.minimum(*(q_value(q, next_obs, next_action) for q in critic_targets))
            target = reward + cfg.gamma * (1.0 - terminated) * next_q
        loss = sum(((q_value(q, obs, action) - target) ** 2).mean() for q in critics)
        critic_opt.zero_grad()
        loss.backward()
        critic_opt.step()
        return loss.detach()

    def actor_step(obs):
        loss = -q_value(critics[0], obs, policy(actor, obs)).mean()
        actor_opt.zero_grad()
        # Gradients for the actor only, as jax.grad gives: the critics' weight gradients are not computed
        # (SpinningUp freezes the Q-networks for the same reason).
        loss.backward(inputs=list(actor.parameters()))
        actor_opt.step()
        with torch.no_grad():
            for net, target in pairs:
                for p, t in zip(net.parameters(), target.parameters(), strict=True):
                    t.mul_(1.0 - cfg.tau).add_(p, alpha=cfg.tau)
        return loss.detach()

    if compile:
        critic_step, actor_step = torch.compile(critic_step), torch.compile(actor_step)

    def update():
        critic_losses = [critic_step(*(x[i] for x in data)) for i in range(cfg.policy_delay)]
        return torch.stack(critic_losses), actor_step(data.obs[-1])

    def get_weights():
        def stacked(nets):  # the twins back onto a leading axis of 2
            layers = zip(*map(numpy_layers, nets), strict=True)
            return [tuple(map(np.stack, zip(*twins, strict=True))) for twins in layers]

        return {"actor": numpy_layers(actor), "actor_target": numpy_layers(actor_target),
                "critic": stacked(critics), "critic_target": stacked(critic_targets)}

    return update, get_weights


def vpg_torch(weights, batch: VPGBatch, cfg: VPGConfig, compile=False):
    """One PyTorch VPG update -> (loss_pi, loss_v per value step, new {"pi", "v"} weights in numpy)."""
    update, get_weights = build_vpg_torch(weights, batch, cfg, compile)
    loss_pi, loss_v = update()
    return float(loss_pi), loss_v.numpy(), get_weights()


def td3_torch(weights, batch: TD3Batch, cfg: TD3Config, compile=False):
    """One PyTorch TD3 cycle -> (critic losses, actor loss, new actor/critic/target weights in numpy)."""
    update, get_weights = build_td3_torch(weights, batch, cfg, compile)
    critic_losses, actor_loss = update()
    return critic_losses.numpy(), float(actor_loss), get_weights()


# ----------------------------------------------------------------------------------------------------------
# td3.py's own iteration, and the machine's matmul throughput.


class NullEnv(environment.Environment):
    """A continuous-control task's sizes that cost nothing to step: the observation a fixed function of the step
    count, the reward -mean(a^2), no termination; gymnax's time limit ends an episode after 1,000 steps."""

    def __init__(self, obs_dim: int, act_dim: int, action_bound: float):
        self.obs_dim, self.act_dim, self.action_bound = obs_dim, act_dim, action_bound

    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=1000)

    def observe(self, time):  # varied and of order 1: no zeros or denormals to speed up or slow down the matmuls
        return jnp.cos(0.01 * time * jnp.arange(1, self.obs_dim + 1))

    def reset_env(self, key, params):
        return self.observe(0), environment.EnvState(time=0)

    def step_env(self, key, state, action, params):
        time = state.time + 1
        return self.observe(time), environment.EnvState(time=time), -jnp.mean(action**2), jnp.bool_(False), {}

    def action_space(self, params):
        return spaces.Box(-self.action_bound, self.action_bound, (self.act_dim,), jnp.float32)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (self.obs_dim,), jnp.float32)


def td3_script_runner(cfg: TD3Config, args: Args, updates: int):
    """-> run() -> seconds of `updates` iterations of td3.py's own `update` (one env step and one update each) in one
    jitted scan, one agent, after td3.py's random first `--td3-learning-starts` steps."""
    env_id = f"NullEnv-{cfg.obs_dim}x{cfg.act_dim}-v0"
    envs.register(env_id, lambda: NullEnv(cfg.obs_dim, cfg.act_dim, cfg.action_bound))
    config = td3.Config(env=env_id, seed=args.seed, num_envs=1, update_every=1, updates_per_step=1,
                        batch_size=cfg.batch_size, hidden_size=cfg.hidden_size,
                        learning_starts=args.td3_learning_starts,
                        buffer_size=1_000_000, total_timesteps=1_000_000)  # the paper's buffer: 1M transitions
    td3.validate(config)
    init, update = td3.make_train_parts(config)
    # Donated: the runner, its buffer too, is updated in place between calls, as within one long scan.
    many = jax.jit(lambda runner: jax.lax.scan(lambda r, _: (update(r)[0], None), runner, None, updates)[0],
                   donate_argnums=0)
    runner = jax.jit(init)(jax.random.PRNGKey(args.seed))
    while int(runner.env_steps) < config.learning_starts:  # random actions, no update: they fill the buffer
        runner = many(runner)
    return carried(many, runner)


def td3_update_flops(cfg: TD3Config) -> float:
    """Matmul FLOPs of one TD3 update: a critic update, and 1 / policy_delay of an actor update (the docstring's
    count)."""
    h = cfg.hidden_size
    critic = [(cfg.obs_dim + cfg.act_dim, h), (h, h), (h, 1)]
    actor = [(cfg.obs_dim, h), (h, h), (h, cfg.act_dim)]
    forward = lambda layers: sum(n_in * n_out for n_in, n_out in layers)  # noqa: E731 - multiply-adds per sample
    backward = lambda layers: 2 * forward(layers) - forward(layers[:1])  # noqa: E731 - weights', inputs' gradients
    critic_update = forward(actor) + 2 * forward(critic) + 2 * (forward(critic) + backward(critic))
    actor_update = forward(actor) + 2 * forward(critic) + backward(actor)  # Q1 forward and back to the action
    return 2.0 * cfg.batch_size * (critic_update + actor_update / cfg.policy_delay)


def matmul_runner(matmuls: int, size: int, calls: int, seed: int):
    """-> run() -> seconds of `calls` chains of `matmuls` fp32 (size x size) @ (size x size) matmuls, a jitted scan."""
    rng = np.random.default_rng(seed)
    # Orthogonal: the chain keeps its scale, no overflow or denormals.
    w = jnp.asarray(np.linalg.qr(rng.normal(size=(size, size)))[0], jnp.float32)
    x = jnp.asarray(rng.normal(size=(size, size)), jnp.float32)

    def chain(x, _):
        for _ in range(matmuls):
            x = x @ w
        return x, None

    return carried(jax.jit(lambda x: jax.lax.scan(chain, x, None, calls)[0]), x)


def carried(many, state):
    """-> run() -> seconds of one call of the jitted `many` on the state the last call returned, blocking."""
    def run():
        nonlocal state
        start = time.perf_counter()
        state = jax.block_until_ready(many(state))
        return time.perf_counter() - start

    return run


# ----------------------------------------------------------------------------------------------------------
# The peer's rows: sbx_server in the peer venv, asked for one row at a time.


def start_sbx(args: Args, cfg: TD3Config, updates: int, flops: float):
    """Starts sbx_server in a process of `--peer-python`, which stays up through the rounds (it ends when its stdin
    closes, at the latest when this process does) -> rows() -> (sbx's rows, the peer venv's versions), which waits
    until the server has built and compiled them."""
    spec = dict(obs_dim=cfg.obs_dim, act_dim=cfg.act_dim, bound=cfg.action_bound, batch_size=cfg.batch_size,
                updates=updates, fill=args.td3_learning_starts, torch_threads=args.torch_threads, seed=args.seed)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # no accelerator probe; XLA_FLAGS as ours (harness.prepare_jax)
    try:
        process = subprocess.Popen([args.peer_python, os.path.abspath(__file__), "--peer-runner", json.dumps(spec)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    except OSError as error:
        failed = [Row("TD3", "JAX, sbx", "every row", 0, flops, None, one_line(error))]
        return lambda: (failed, {})

    def answer():
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the sbx process ({args.peer_python}) exited {process.wait()}: its error is above")
        return json.loads(line)

    def timed(mode):
        def run():
            process.stdin.write(mode + "\n")
            process.stdin.flush()
            return answer()["seconds"]

        return run

    def rows():
        try:
            hello = answer()
        except RuntimeError as error:
            return [Row("TD3", "JAX, sbx", "every row", 0, flops, None, one_line(error))], {}
        return [Row("TD3", "JAX, sbx", mode, updates, flops, timed(mode)) for mode in hello["rows"]], hello["versions"]

    return rows


# ----------------------------------------------------------------------------------------------------------
# Rows, timing and output.


class Row(NamedTuple):
    algo: str
    framework: str
    mode: str
    updates: int  # updates per call of `run`
    flops: float  # matmul FLOPs per update (TD3), 0 where not counted
    run: Callable[[], float] | None  # -> seconds of `updates` consecutive updates; None if the row failed
    error: str = ""
    ms: float | None = None  # median ms per update, once timed


def calls_of(fn, calls: int):
    """-> run() -> seconds of `calls` calls of fn (PyTorch's updates: synchronous on the CPU)."""
    def run():
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - start

    return run


def one_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".replace("|", "/")[:200]


def built(algo, framework, mode, make, updates, flops=0.0) -> Row:
    """The row of `make() -> run`, warmed up once (compilation, Adam's state, caches: never timed). A row that fails
    (torch.compile's compiler, say) is reported as failed, and the benchmark goes on."""
    try:
        run = make()
        run()
    except Exception as error:  # noqa: BLE001 - any failure becomes a row
        print(f"{algo} {framework} {mode}: failed: {one_line(error)}", flush=True)
        return Row(algo, framework, mode, updates, flops, None, one_line(error))
    return Row(algo, framework, mode, updates, flops, run)


def framework_rows(algo, jax_parts, build_torch, weights, batch, per_call: int, args: Args, flops=0.0) -> list[Row]:
    """The re-implementations' rows: PyTorch eager, torch.compile (unless --no-compile), JAX jit, JAX jit + scan;
    `per_call`: updates per call of their update (TD3's is a policy_delay cycle)."""
    init, update = jax_parts
    updates = args.iters * per_call
    modes = {"eager": lambda: calls_of(build_torch(weights, batch)[0], args.iters)}
    if args.compile:
        modes["torch.compile"] = lambda: calls_of(build_torch(weights, batch, compile=True)[0], args.iters)
    rows = [built(algo, "PyTorch", mode, make, updates, flops) for mode, make in modes.items()]
    return rows + [built(algo, "JAX", "jit + scan" if scan else "jit",
                         lambda scan=scan: jax_runner(init, update, weights, batch, args.iters, scan), updates, flops)
                   for scan in (False, True)]


def time_in_turn(rows: list[Row], repeats: int) -> list[Row]:
    """`repeats` rounds, each timing every row once, the rows in turn -> the rows with their median ms per update."""
    seconds = {i: [] for i, row in enumerate(rows) if row.run}
    errors = {}
    print("rows: " + "; ".join(f"{n} {rows[i].algo} {rows[i].framework} {rows[i].mode}"
                               for n, i in enumerate(seconds, 1)), flush=True)
    for round_ in range(1, repeats + 1):
        for i in seconds:
            if i in errors:
                continue
            try:
                seconds[i].append(rows[i].run())
            except RuntimeError as error:  # the peer's process ended: its rows fail, the others go on
                errors[i] = one_line(error)
        print(f"round {round_} of {repeats}, ms per update: " + "  ".join(
            f"{n} {1000 * s[-1] / rows[i].updates:.2f}" for n, (i, s) in enumerate(seconds.items(), 1)
            if i not in errors), flush=True)
    timed = []
    for i, row in enumerate(rows):
        if i in seconds and i not in errors:
            row = row._replace(ms=1000 * float(np.median(seconds[i])) / row.updates)
        timed.append(row._replace(run=None, error=row.error or errors.get(i, "")))
    return timed


MATMUL = "fp32 matmul"  # the reference row's framework

TABLE_HEAD = ("| algo | framework | mode | median ms per update | updates/s | time / PyTorch eager | share of fp32 "
              "matmul throughput |\n|---|---|---|---:|---:|---:|---:|")


def format_row(row: Row, eager: Row | None, reference: Row | None) -> str:
    if row.ms is None:
        return f"| {row.algo} | {row.framework} | {row.mode} | failed: {row.error} | | | |"
    ratio = f"{row.ms / eager.ms:.3g}" if eager and eager.ms else ""
    share = (f"{row.flops / row.ms / (reference.flops / reference.ms):.0%}" if row.flops and reference and
             reference.ms else "")
    return f"| {row.algo} | {row.framework} | {row.mode} | {row.ms:.3f} | {1000 / row.ms:,.0f} | {ratio} | {share} |"


def plot_rows(path, rows, titles):
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"PyTorch": "tab:orange", "JAX": "tab:blue", "JAX, td3.py": "tab:green", "JAX, sbx": "tab:purple"}
    algos = list(dict.fromkeys(r.algo for r in rows))
    bars = max(sum(r.algo == a for r in rows) for a in algos)
    fig, axes = plt.subplots(1, len(algos), figsize=(max(5.5, 1.1 * bars) * len(algos), 4.2), squeeze=False)
    for ax, algo in zip(axes[0], algos, strict=True):
        done = [r for r in rows if r.algo == algo and r.ms is not None]
        x = np.arange(len(done))
        ax.bar(x, [r.ms for r in done], color=[colors.get(r.framework, "tab:gray") for r in done])
        ax.set_xticks(x, [textwrap.fill(f"{r.framework}: {r.mode}", 22) for r in done], fontsize=6)
        for i, r in enumerate(done):
            ax.text(i, r.ms, f"{r.ms:.2f}", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("ms per update (median)")
        ax.set_title(titles[algo], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def largest_difference(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def vpg_rows(cfg: VPGConfig, args: Args) -> tuple[list[Row], list[str]]:
    """VPG's rows, the re-implementations' -> (rows, notes)."""
    weights, batch = make_vpg_weights(cfg, args.seed), make_vpg_batch(cfg, args.seed)
    same = largest_difference(vpg_jax(weights, batch, cfg), vpg_torch(weights, batch, cfg))
    build = lambda w, b, compile=False: build_vpg_torch(w, b, cfg, compile)  # noqa: E731
    return framework_rows("VPG", make_vpg_jax(cfg), build, weights, batch, 1, args), [
        f"- VPG: one update from the same weights and batch, largest |JAX - PyTorch| over the losses and new weights: "
        f"{same:.2g}."]


def td3_rows(cfg: TD3Config, args: Args) -> tuple[list[Row], dict, list[str]]:
    """TD3's rows: the re-implementations, td3.py, the matmul reference and sbx's -> (rows, the peer venv's
    versions, notes)."""
    updates, flops = args.iters * cfg.policy_delay, td3_update_flops(cfg)
    # The peer first: its process builds and compiles its rows while this one builds the others.
    sbx_rows = start_sbx(args, cfg, updates, flops) if args.peer_python else lambda: ([], {})
    weights, batch = make_td3_weights(cfg, args.seed), make_td3_batch(cfg, args.seed)
    same = largest_difference(td3_jax(weights, batch, cfg), td3_torch(weights, batch, cfg))
    notes = [f"- TD3: one policy_delay cycle from the same weights and batch, largest |JAX - PyTorch| over the losses "
             f"and new weights: {same:.2g}. {flops / 1e6:.0f} MFLOP of matmuls per update (the study's docstring "
             "counts them)."]
    if not args.peer_python:
        notes.append("- sbx's TD3 rows skipped: no `--peer-python` (a venv of requirements-peer.txt).")
    build = lambda w, b, compile=False: build_td3_torch(w, b, cfg, compile)  # noqa: E731
    rows = framework_rows("TD3", make_td3_jax(cfg), build, weights, batch, cfg.policy_delay, args, flops)
    rows.append(built("TD3", "JAX, td3.py", "its iteration: update + acting, env step, buffer add and sampling",
                      lambda: td3_script_runner(cfg, args, updates), updates, flops))
    h = cfg.hidden_size
    matmuls = max(1, round(flops / (2 * h**3)))
    rows.append(built("TD3", MATMUL, f"{matmuls} chained {h}x{h} @ {h}x{h} per update (reference)",
                      lambda: matmul_runner(matmuls, h, updates, args.seed), updates, 2.0 * matmuls * h**3))
    peer_rows, peer = sbx_rows()
    return rows + peer_rows, peer, notes


def main(args: Args):
    if importlib.util.find_spec("torch") is None:
        print("error: PyTorch is needed for this benchmark: pip install -r requirements-bench.txt", file=sys.stderr)
        sys.exit(2)
    for name in ("repeats", "iters", "vpg_batch", "train_v_iters", "td3_batch", "td3_learning_starts"):  # > 0
        if getattr(args, name) <= 0:
            print(f"error: --{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}",
                  file=sys.stderr)
            sys.exit(2)
    if args.torch_threads < 0:
        print(f"error: --torch-threads must be 0 (PyTorch's default) or more, got {args.torch_threads}",
              file=sys.stderr)
        sys.exit(2)
    vpg_cfg = VPGConfig(train_v_iters=args.train_v_iters, batch_size=args.vpg_batch)
    td3_cfg = TD3Config(batch_size=args.td3_batch, **SHAPES[args.shapes])
    titles = {
        "VPG": f"VPG: 1 pi step + {vpg_cfg.train_v_iters} v steps, batch {vpg_cfg.batch_size}, 64-64 tanh",
        "TD3": f"TD3 at {args.shapes}'s shapes (obs {td3_cfg.obs_dim}, action {td3_cfg.act_dim} in "
               f"[-{td3_cfg.action_bound:g}, {td3_cfg.action_bound:g}]): a critic step per update, an actor step and "
               f"polyak every {td3_cfg.policy_delay}, batch {td3_cfg.batch_size}, 256-256 ReLU",
    }
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    rows, peer, notes = [], {}, []
    if "vpg" in args.algos:
        rows, notes = vpg_rows(vpg_cfg, args)
    if "td3" in args.algos:
        more, peer, more_notes = td3_rows(td3_cfg, args)
        rows, notes = rows + more, notes + more_notes
    print(*notes, sep="\n")
    rows = time_in_turn(rows, args.repeats)

    eager = {r.algo: r for r in rows if r.mode == "eager"}
    reference = next((r for r in rows if r.framework == MATMUL), None)
    header = (f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {machine(peer or {'sbx': 'not run'})}; torch "
              f"{torch.__version__} ({torch.get_num_threads()} threads), jax backend {jax.default_backend()}, "
              f"XLA_FLAGS `{os.environ.get('XLA_FLAGS', '')}`")
    method = (f"Median of {args.repeats} rounds, each timing every row once, the rows in turn: {args.iters} VPG "
              f"updates or {args.iters * td3_cfg.policy_delay} TD3 updates per row per round; compilation and "
              "warm-up excluded.")
    if reference and reference.ms:
        notes.append(f"- The machine's fp32 matmul throughput, {reference.mode}: "
                     f"{reference.flops / reference.ms / 1e6:.1f} GFLOP/s.")
    lines = [header, "", method, "", *(f"- {t}" for a, t in titles.items() if a in eager), *notes, "", TABLE_HEAD,
             *(format_row(r, eager.get(r.algo), reference) for r in rows)]
    print("", *lines[2:], sep="\n")
    os.makedirs(args.out_dir, exist_ok=True)
    name = os.path.join(args.out_dir, "update" if args.shapes == "pendulum" else f"update_{args.shapes}")
    with open(f"{name}.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot_rows(f"{name}.png", rows, titles)
    print(f"\nwritten to {name}.md and {name}.png")


if __name__ == "__main__":
    main(tyro.cli(Args))
