"""The update step alone (loss, gradient, Adam step), in JAX and in PyTorch: VPG and TD3 with equal work.

Reproduces the comparison of a paper that timed only the update, not the env or the rollout, and found JAX
taking about 22% of PyTorch's time for VPG and 54% for TD3 (on their GPU). Here on the CPU:

    python benchmarks/studies/bench_update.py                 # 20 repeats x 50 updates, with torch.compile
    python benchmarks/studies/bench_update.py --no-compile    # PyTorch eager only (torch.compile is slow to compile)
    python benchmarks/studies/bench_update.py --repeats 2 --iters 2 --vpg-batch 64 --td3-batch 16 --train-v-iters 2 \
        --no-compile --out-dir /tmp/update                # a smoke test

- One VPG update, as in reinforce.py (SpinningUp's VPG, CartPole shapes: obs 4, 2 actions, 64-64 tanh):
  ONE policy-gradient step (Adam 3e-4, loss -mean(log pi(a|s) * A)) and `--train-v-iters` full-batch value
  steps (Adam 1e-3, MSE) on a batch of `--vpg-batch` (4000: SpinningUp's epoch).
- One TD3 update, as in td3.py (Pendulum shapes: obs 3, action 1, bound 2, 256-256 ReLU): one policy_delay
  cycle = 2 critic updates (clipped double-Q target with target policy smoothing) + 1 actor update + polyak
  averaging of the targets, on batches of `--td3-batch` (256).

Both frameworks start from the same numpy weights, batch and smoothing noise, with the same architectures
and Adam settings; one update gave the same numbers on both sides when this was measured (a test checked it; it
left CI with the study, which is not rerun there).
Rows: PyTorch eager, PyTorch `torch.compile`, JAX `jit` (one call per update) and JAX `jit + scan` (the
`--iters` updates in one `lax.scan`, as scanrl's scripts run). Each row is warmed up once (compilation
excluded), then timed `--repeats` times over `--iters` consecutive updates; the median is reported.
Writes `<out-dir>/update.md` (the table) and `<out-dir>/update.png`. Needs PyTorch
(pip install -r requirements-bench.txt). Timings depend on the machine and its load; run on an idle machine.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scanrl import harness  # noqa: E402

harness.prepare_jax("bench_update")  # the scripts' XLA_FLAGS, before JAX makes its backend

import datetime  # noqa: E402
import importlib.util  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Literal, NamedTuple  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import tyro  # noqa: E402

if importlib.util.find_spec("torch") is not None:  # optional: main() says how to install it
    import torch


@dataclass(frozen=True)
class Args:
    repeats: int = 20
    """timed repeats per row; the median is reported"""
    iters: int = 50
    """consecutive updates per timed repeat"""
    vpg_batch: int = 4000
    """transitions in the VPG batch (SpinningUp's default epoch)"""
    train_v_iters: int = 80
    """full-batch value-function steps in one VPG update"""
    td3_batch: int = 256
    """transitions per TD3 critic update"""
    compile: bool = True
    """also time PyTorch with torch.compile (minutes of compilation on a CPU)"""
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


def jax_runner(init, update, weights, batch, iters: int, scan: bool):
    """-> run(): `iters` consecutive updates, blocking until done; the state carries over between runs."""
    state = init(weights)
    batch = jax.tree.map(jnp.asarray, batch)
    if scan:
        many = jax.jit(lambda s, b: jax.lax.scan(lambda s, _: (update(s, b)[0], None), s, None, iters)[0])
    else:
        one = jax.jit(update)

    def run():
        nonlocal state
        if scan:
            state = many(state, batch)
        else:
            for _ in range(iters):
                state, _ = one(state, batch)
        jax.block_until_ready(state)

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


def torch_runner(update, iters: int):
    def run():
        for _ in range(iters):
            update()

    return run


# ----------------------------------------------------------------------------------------------------------
# Timing and output.


class Row(NamedTuple):
    algo: str
    framework: str
    mode: str
    ms: float | None  # median ms per update; None if the row failed
    error: str = ""


def median_ms_per_update(run, repeats: int, iters: int) -> float:
    run()  # warm-up, not timed: compilation, Adam's state allocation, caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times)) / iters


def one_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".replace("|", "/")[:200]


def time_algo(name, init, update, build_torch, weights, batch, args: Args):
    """The rows of one algorithm: PyTorch eager, torch.compile (unless --no-compile), JAX jit, JAX jit + scan."""
    rows = [Row(name, "PyTorch", "eager",
                median_ms_per_update(torch_runner(build_torch(weights, batch)[0], args.iters), args.repeats,
                                     args.iters))]
    print_row(rows[-1], rows[0].ms)
    if args.compile:
        try:
            run = torch_runner(build_torch(weights, batch, compile=True)[0], args.iters)
            rows.append(Row(name, "PyTorch", "torch.compile", median_ms_per_update(run, args.repeats, args.iters)))
        except Exception as error:  # noqa: BLE001 - any compiler failure becomes a row, the benchmark goes on
            rows.append(Row(name, "PyTorch", "torch.compile", None, one_line(error)))
        print_row(rows[-1], rows[0].ms)
    for scan in (False, True):
        run = jax_runner(init, update, weights, batch, args.iters, scan)
        rows.append(Row(name, "JAX", "jit + scan" if scan else "jit",
                        median_ms_per_update(run, args.repeats, args.iters)))
        print_row(rows[-1], rows[0].ms)
    return rows


TABLE_HEAD = ("| algo | framework | mode | median ms per update | time / PyTorch eager |\n"
              "|---|---|---|---:|---:|")


def format_row(row: Row, eager_ms: float) -> str:
    if row.ms is None:
        return f"| {row.algo} | {row.framework} | {row.mode} | failed: {row.error} | |"
    return f"| {row.algo} | {row.framework} | {row.mode} | {row.ms:.3f} | {row.ms / eager_ms:.3g} |"


def print_row(row: Row, eager_ms: float):
    print(format_row(row, eager_ms), flush=True)


def plot_rows(path, rows, titles):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algos = list(dict.fromkeys(r.algo for r in rows))
    fig, axes = plt.subplots(1, len(algos), figsize=(5.5 * len(algos), 3.8), squeeze=False)
    for ax, algo in zip(axes[0], algos, strict=True):
        done = [r for r in rows if r.algo == algo and r.ms is not None]
        x = np.arange(len(done))
        ax.bar(x, [r.ms for r in done], color=["tab:orange" if r.framework == "PyTorch" else "tab:blue" for r in done])
        ax.set_xticks(x, [f"{r.framework}\n{r.mode}" for r in done], fontsize=8)
        for i, r in enumerate(done):
            ax.text(i, r.ms, f"{r.ms:.2f}", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("ms per update (median)")
        ax.set_title(titles[algo], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(args: Args):
    if importlib.util.find_spec("torch") is None:
        print("error: PyTorch is needed for this benchmark: pip install -r requirements-bench.txt", file=sys.stderr)
        sys.exit(2)
    for name in ("repeats", "iters", "vpg_batch", "train_v_iters", "td3_batch"):
        if getattr(args, name) <= 0:
            print(f"error: --{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}",
                  file=sys.stderr)
            sys.exit(2)
    vpg_cfg = VPGConfig(train_v_iters=args.train_v_iters, batch_size=args.vpg_batch)
    td3_cfg = TD3Config(batch_size=args.td3_batch)
    titles = {
        "VPG": f"VPG: 1 pi step + {vpg_cfg.train_v_iters} v steps, batch {vpg_cfg.batch_size}, 64-64 tanh",
        "TD3": f"TD3: {td3_cfg.policy_delay} critic + 1 actor step + polyak, batch {td3_cfg.batch_size}, 256-256 ReLU",
    }
    header = (f"{datetime.datetime.now():%Y-%m-%d %H:%M}, jax {jax.__version__} ({jax.default_backend()}), "
              f"torch {torch.__version__} ({torch.get_num_threads()} threads), {os.cpu_count()} CPUs; "
              f"median of {args.repeats} repeats x {args.iters} updates, warm-up excluded")
    print(header)
    print("; ".join(titles.values()) + "\n")
    print(TABLE_HEAD)
    rows = []
    if "vpg" in args.algos:
        init, update = make_vpg_jax(vpg_cfg)
        build = lambda w, b, compile=False: build_vpg_torch(w, b, vpg_cfg, compile)  # noqa: E731
        rows += time_algo("VPG", init, update, build, make_vpg_weights(vpg_cfg, args.seed),
                          make_vpg_batch(vpg_cfg, args.seed), args)
    if "td3" in args.algos:
        init, update = make_td3_jax(td3_cfg)
        build = lambda w, b, compile=False: build_td3_torch(w, b, td3_cfg, compile)  # noqa: E731
        rows += time_algo("TD3", init, update, build, make_td3_weights(td3_cfg, args.seed),
                          make_td3_batch(td3_cfg, args.seed), args)

    os.makedirs(args.out_dir, exist_ok=True)
    eager = {r.algo: r.ms for r in rows if r.mode == "eager"}
    lines = [header, "", *(f"- {t}" for t in titles.values()), "", TABLE_HEAD,
             *(format_row(r, eager[r.algo]) for r in rows)]
    with open(os.path.join(args.out_dir, "update.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot_rows(os.path.join(args.out_dir, "update.png"), rows, {a: titles[a] for a in eager})
    print(f"\nwritten to {os.path.join(args.out_dir, 'update.md')} and update.png")


if __name__ == "__main__":
    main(tyro.cli(Args))
