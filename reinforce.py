"""REINFORCE / vanilla policy gradient (Williams 1992) with a learned value baseline and GAE-lambda
advantages, as in OpenAI SpinningUp's VPG; discrete and continuous actions.

Each epoch collects `num_envs * num_steps` steps, takes ONE policy-gradient step and `train_v_iters`
full-batch value steps. The whole run is one `lax.scan` inside one `jax.jit`, and `jax.vmap` trains
`--num-seeds` agents at once in the same compiled program:

    python reinforce.py --env CartPole-v1 --num-seeds 4
    python reinforce.py --baseline none     # plain REINFORCE with discounted reward-to-go

Writes `<out-dir>/<run-name>/`: config.json, metrics.csv (one row per epoch and seed), learning_curve.png
and summary.json; with `--track`, a wandb run as well.
"""

import os

# XLA:CPU in jax 0.10 can hang on vmapped training with the concurrency-optimised scheduler (see README).
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

import csv
import json
import sys
import threading
import time
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Literal, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training.train_state import TrainState

import envs


@dataclass(frozen=True)
class Config:
    # experiment
    env: str = "CartPole-v1"
    """environment id: any gymnax id, or one of ours (see envs.list_envs())"""
    seed: int = 0
    """seed of agent 0; agent i uses seed + i, so any agent can be re-run alone with --seed"""
    num_seeds: int = 1
    """independent agents trained in parallel in one compiled program (vmapped)"""
    total_timesteps: int = 500_000
    """env steps per agent"""
    # algorithm
    num_envs: int = 8
    """parallel envs per agent"""
    num_steps: int = 64
    """steps per env in each epoch (steps per epoch = num_envs * num_steps)"""
    baseline: Literal["value", "none"] = "value"
    """value: learned V(s) baseline, GAE-lambda advantages (SpinningUp VPG); none: reward-to-go, no critic"""
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
    # evaluation and logging
    eval_episodes: int = 10
    """episodes of the deterministic final policy per agent"""
    track: bool = False
    """log to Weights & Biases"""
    wandb_project: str = "scanrl"
    """wandb project"""
    wandb_entity: str | None = None
    """wandb entity (team or user)"""
    wandb_group: str | None = None
    """wandb group"""
    out_dir: str = "runs"
    """parent directory of the run directory"""
    run_name: str | None = None
    """run directory name; default {env}__reinforce__{seed}__{unix time}"""
    log_every: int = 50
    """print progress (and log to wandb) every this many epochs"""
    profile: bool = False
    """write a JAX profiler trace of the training run to <run dir>/profile (Perfetto / TensorBoard); use a short run"""


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


def make_train(config: Config, log_fn=None):
    """Returns `train(rng) -> (runner_state, metrics)`, pure and jittable; metrics have a leading epoch axis.

    `log_fn(rng, epoch, metrics)`, if given, is called on the host every `log_every` epochs (once per
    agent when vmapped); it only reads values, so it cannot change the numbers a run produces.
    """
    steps_per_epoch = config.num_envs * config.num_steps
    num_epochs = config.total_timesteps // steps_per_epoch
    env, env_params = envs.make_vec(config.env, config.num_envs)
    actor, critic, discrete = make_networks(config, env, env_params)
    if use_normalization(config, discrete):
        env, env_params = envs.make_vec(
            config.env, config.num_envs, normalize_obs=True, normalize_reward=True, gamma=config.gamma
        )
    learn_value = config.baseline == "value"

    def train(rng):
        seed_key = rng
        rng, key_actor, key_critic, key_reset = jax.random.split(rng, 4)
        obs, env_state = env.reset(key_reset, env_params)
        actor_state = TrainState.create(
            apply_fn=actor.apply, params=actor.init(key_actor, obs[0]), tx=optax.adam(config.pi_lr)
        )
        critic_state = TrainState.create(
            apply_fn=critic.apply, params=critic.init(key_critic, obs[0]), tx=optax.adam(config.vf_lr)
        )

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

        def _epoch(runner, epoch):
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
                "env_steps": (epoch + 1) * steps_per_epoch,
                "episodes": episodes,
                # Mean over the episodes that ended in this epoch; NaN if none did.
                "episode_return": (traj.episode_return * traj.done).sum() / episodes,
                "episode_length": (traj.episode_length * traj.done).sum() / episodes,
                "loss/actor": actor_loss,
                "loss/critic": critic_loss,
                "entropy": entropy,
                "approx_kl": approx_kl,
            }
            if log_fn is not None:
                jax.lax.cond(
                    (epoch + 1) % config.log_every == 0,
                    lambda: jax.debug.callback(log_fn, seed_key, epoch, metrics),
                    lambda: None,
                )
            return RunnerState(actor_state, critic_state, env_state, obs, rng), metrics

        runner = RunnerState(actor_state, critic_state, env_state, obs, rng)
        return jax.lax.scan(_epoch, runner, jnp.arange(num_epochs))

    return train


def make_evaluate(config: Config):
    """Returns `evaluate(rng, runner_state) -> (eval_episodes,)` returns of the deterministic policy
    (argmax / mean action) on fresh episodes, with training's observation statistics frozen."""
    env, env_params = envs.make_vec(config.env, config.eval_episodes)
    actor, _, discrete = make_networks(config, env, env_params)

    def evaluate(rng, runner):
        stats = envs.observation_stats(runner.env_state)

        def act(obs):
            if stats is not None:
                obs = envs.normalize_observation(stats, obs)
            return actor.apply(runner.actor_state.params, obs).mode()

        return envs.evaluate(env, env_params, act, rng, env_params.max_steps_in_episode)

    return evaluate


# ----------------------------------------------------------------------------------------------------------
# Checking the config, and everything written to the run directory.


def validate(config: Config) -> str | None:
    """Returns one line saying what is wrong with the config, or None if it can be trained."""
    for name in ("num_seeds", "total_timesteps", "num_envs", "num_steps", "train_v_iters", "hidden_size",
                 "eval_episodes", "log_every"):
        if getattr(config, name) <= 0:
            return f"--{name.replace('_', '-')} must be a positive integer, got {getattr(config, name)}"
    for name in ("pi_lr", "vf_lr"):
        if not getattr(config, name) > 0:
            return f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}"
    if not 0 <= config.gamma <= 1 or not 0 <= config.gae_lambda <= 1:
        return "--gamma and --gae-lambda must lie in [0, 1]"
    if config.activation not in ACTIVATIONS:
        return f"--activation {config.activation!r} is unknown; use one of {', '.join(ACTIVATIONS)}"
    try:
        env, env_params = envs.make(config.env)
        envs.is_discrete(env, env_params)
    except ValueError as error:
        return f"--env: {error}"
    steps_per_epoch = config.num_envs * config.num_steps
    if config.total_timesteps < steps_per_epoch:
        return (f"--total-timesteps {config.total_timesteps} is smaller than one epoch "
                f"(--num-envs x --num-steps = {steps_per_epoch}); raise it or shrink the epoch")
    return None


METRIC_KEYS = ("env_steps", "episodes", "episode_return", "episode_length",
               "loss/actor", "loss/critic", "entropy", "approx_kl")


def write_metrics_csv(path, rows):
    """Writes rows of (seed, epoch, metrics dict) to `path` atomically."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "epoch", *METRIC_KEYS])
        for seed, epoch, metrics in rows:
            writer.writerow([seed, epoch, *(metrics[k] for k in METRIC_KEYS)])
    os.replace(tmp, path)


class Progress:
    """Host side of the logging callback: gathers one epoch's metrics from every agent, then prints a line,
    appends the rows to metrics.csv and logs to wandb. Training never waits on it beyond the call itself."""

    def __init__(self, config: Config, seed_keys, run_dir, wandb_run):
        self.config = config
        self.seed_of = {tuple(np.asarray(k).tolist()): config.seed + i for i, k in enumerate(seed_keys)}
        self.run_dir = run_dir
        self.wandb_run = wandb_run
        self.pending = {}
        self.rows = []
        self.lock = threading.Lock()
        self.start = time.perf_counter()

    def __call__(self, seed_key, epoch, metrics):
        seed = self.seed_of[tuple(np.asarray(seed_key).tolist())]
        epoch = int(epoch)
        with self.lock:
            got = self.pending.setdefault(epoch, {})
            got[seed] = {k: float(v) for k, v in metrics.items()}
            if len(got) < len(self.seed_of):
                return
            del self.pending[epoch]
            self._emit(epoch, got)

    def _emit(self, epoch, by_seed):
        seeds = sorted(by_seed)
        returns = np.array([by_seed[s]["episode_return"] for s in seeds])
        env_steps = int(by_seed[seeds[0]]["env_steps"])
        sps = env_steps * len(seeds) / (time.perf_counter() - self.start)
        if np.all(np.isnan(returns)):
            ret = "no episode ended"
        else:
            ret = (f"return mean {np.nanmean(returns):8.2f}  min {np.nanmin(returns):8.2f}  "
                   f"max {np.nanmax(returns):8.2f}")
        print(f"epoch {epoch + 1:6d}  env_steps {env_steps:10d}  sps {sps:10.0f}  {ret}", flush=True)
        self.rows += [(s, epoch, by_seed[s]) for s in seeds]
        write_metrics_csv(os.path.join(self.run_dir, "metrics.csv"), self.rows)
        if self.wandb_run is not None:
            log = {"sps": sps}
            for key in METRIC_KEYS[1:]:
                values = np.array([by_seed[s][key] for s in seeds])
                log[f"{key}/mean"] = np.nanmean(values) if not np.all(np.isnan(values)) else np.nan
            log["episode_return/min"] = np.nanmin(returns) if not np.all(np.isnan(returns)) else np.nan
            log["episode_return/max"] = np.nanmax(returns) if not np.all(np.isnan(returns)) else np.nan
            log.update({f"episode_return/seed_{s}": by_seed[s]["episode_return"] for s in seeds})
            safe_wandb(self.wandb_run.log, log, step=env_steps)


def safe_wandb(fn, *args, **kwargs):
    """Calls a wandb function; a wandb failure becomes a one-line warning, never a stopped run."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - wandb may raise anything; training must go on
        print(f"warning: wandb: {type(error).__name__}: {error}", file=sys.stderr)
        return None


def start_wandb(config: Config, run_name, run_dir):
    try:
        import wandb

        return wandb.init(
            project=config.wandb_project, entity=config.wandb_entity, group=config.wandb_group,
            name=run_name, config=asdict(config), dir=run_dir,
        )
    except Exception as error:  # noqa: BLE001
        print(f"warning: wandb could not start ({type(error).__name__}: {error}); "
              "training goes on with local files only", file=sys.stderr)
        return None


def finish_wandb(wandb_run, summary, curve_path):
    def _finish():
        import wandb

        wandb_run.log({"learning_curve": wandb.Image(curve_path)})
        wandb_run.summary.update(summary)
        wandb_run.finish()

    safe_wandb(_finish)


def final_returns(metrics):
    """Per seed: mean return of the episodes that ended in the last 10% of epochs."""
    num_epochs = metrics["episodes"].shape[1]
    tail = slice(num_epochs - max(1, num_epochs // 10), None)
    episodes = metrics["episodes"][:, tail]
    total = np.nansum(metrics["episode_return"][:, tail] * episodes, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / episodes.sum(axis=1)


def plot_learning_curve(path, metrics, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = metrics["env_steps"][0]
    returns = metrics["episode_return"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no episode ended yet
        mean, low, high = np.nanmean(returns, 0), np.nanmin(returns, 0), np.nanmax(returns, 0)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, label=f"mean over {returns.shape[0]} seeds")
    ax.fill_between(steps, low, high, alpha=0.25, label="min to max")
    ax.set_xlabel("env steps per agent")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def to_json(x):
    x = np.asarray(x)
    return [None if np.isnan(v) else float(v) for v in x.ravel()]


def main(config: Config):
    error = validate(config)
    if error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    # Brax ids hold a '/' (and maybe a ':'); neither belongs in a directory name.
    env_name = config.env.replace("/", "-").replace(":", "-")
    run_name = config.run_name or f"{env_name}__reinforce__{config.seed}__{int(time.time())}"
    run_dir = os.path.join(config.out_dir, run_name)
    if os.path.isdir(run_dir) and os.listdir(run_dir):
        print(f"error: run directory {run_dir} exists and is not empty; choose another --run-name",
              file=sys.stderr)
        sys.exit(2)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({"algo": "reinforce", **asdict(config)}, f, indent=2)
    wandb_run = start_wandb(config, run_name, run_dir) if config.track else None

    seeds = [config.seed + i for i in range(config.num_seeds)]
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    progress = Progress(config, keys, run_dir, wandb_run)
    train = jax.jit(jax.vmap(make_train(config, log_fn=progress)))
    print(f"reinforce on {config.env}: {config.num_seeds} agents x {config.total_timesteps} steps, run dir {run_dir}")
    t0 = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - t0
    print(f"compiled in {compile_s:.1f} s")
    profile_dir = os.path.join(run_dir, "profile")
    profiler = jax.profiler.trace(profile_dir, create_perfetto_trace=True) if config.profile else nullcontext()
    progress.start = time.perf_counter()
    with profiler:
        runner, metrics = jax.block_until_ready(compiled(keys))
    train_s = time.perf_counter() - progress.start
    if config.profile:
        print(f"profiler trace in {profile_dir}: open its *.trace.json.gz at https://ui.perfetto.dev "
              "(the trace adds overhead to train_s)")

    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    eval_returns = np.asarray(jax.jit(jax.vmap(make_evaluate(config)))(eval_keys, runner)).mean(axis=1)

    metrics = jax.tree.map(np.asarray, metrics)
    num_epochs = metrics["env_steps"].shape[1]
    rows = [(s, e, {k: metrics[k][i, e] for k in METRIC_KEYS}) for i, s in enumerate(seeds)
            for e in range(num_epochs)]
    write_metrics_csv(os.path.join(run_dir, "metrics.csv"), rows)
    plot_learning_curve(os.path.join(run_dir, "learning_curve.png"), metrics, f"reinforce on {config.env}")
    env_steps = int(metrics["env_steps"][0, -1])
    final = final_returns(metrics)
    summary = {
        "algo": "reinforce",
        "env": config.env,
        "num_seeds": config.num_seeds,
        "seeds": seeds,
        "total_timesteps": config.total_timesteps,
        "env_steps": env_steps,
        "compile_s": compile_s,
        "train_s": train_s,
        "sps": env_steps * config.num_seeds / train_s,
        "final_return": to_json(final),
        "eval_return": to_json(eval_returns),
    }
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"\n{'=' * 72}\nreinforce on {config.env}: {config.num_seeds} agents, {env_steps} env steps each")
    print(f"compile {compile_s:.1f} s, train {train_s:.1f} s, {summary['sps']:.0f} env steps/s over all agents")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no episode ended in a short run: the mean is NaN
        print(f"final return (last 10% of training): mean {np.nanmean(final):.2f}, per seed "
              + " ".join(f"{r:.1f}" for r in final))
    print(f"eval return (deterministic policy):  mean {eval_returns.mean():.2f}, per seed "
          + " ".join(f"{r:.1f}" for r in eval_returns))
    print(f"written to {run_dir}\n{'=' * 72}")
    if wandb_run is not None:
        finish_wandb(wandb_run, summary, os.path.join(run_dir, "learning_curve.png"))


if __name__ == "__main__":
    main(tyro.cli(Config))
