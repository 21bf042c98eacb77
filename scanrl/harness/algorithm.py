"""`Algorithm`: everything the harness knows of an algorithm script, handed over in one object."""

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _no_checks(config):
    return None


def _as_is(config):
    return config


@dataclass(frozen=True)
class Algorithm:
    """An algorithm as a script hands it to `harness.main`.

    What the harness asks of `make_train_parts(config, log_fn=None) -> (init, run)`, both pure and jittable for
    one agent (the harness vmaps them over agents and splits the agents over devices):
    - `init(rng) -> runner`: the agent's whole state (networks, optimizer, env state, buffers, RNG key);
    - `run(agent, runner, iterations) -> (runner, metrics)`: one `lax.scan` over the 1-D int array `iterations`
      (its numbers, so any chunking of `arange(num_iterations(config))` gives the numbers of one call); each
      metric has one value per iteration: `env_steps` (so far, per agent), `episodes` (ended in the iteration),
      `episode_return` (their mean, NaN if none ended), `nonfinite` (see `harness.all_finite`), optionally
      `updates` (gradient updates so far) and anything else named in `metric_keys`. `run` calls
      `harness.report(log_fn, agent, iteration, metrics, every=config.log_every)` in each iteration, for users of
      `make_train`; the harness passes no `log_fn` (a program with host callbacks cannot go into JAX's compilation
      cache) and prints the progress lines between the pieces of a chunk (see `log_period`).

    Sweeps: the harness calls `make_train_parts` once per agent inside the compiled program, with a config whose
    swept fields hold that agent's values (traced scalars), so `config.learning_rate` anywhere in the script is the
    agent's own. A field that fixes a shape, a loop length or a Python branch cannot be swept: the harness says so
    in one line, as it does for a swept field the compiled program never reads.
    """

    config: type
    """the script's `Config`: a frozen dataclass subclassing `harness.Flags`"""
    make_train_parts: Callable
    """see above"""
    num_iterations: Callable[[Any], int]
    """iterations of the training scan for a config"""
    policy: Callable
    """`(config, runner) -> policy`: one agent's deterministic policy, `act(obs batch) -> action batch`, or, for a
    policy with memory, an `envs.RecurrentPolicy` (its initial memory and `step(memory, obs, start) -> (memory,
    action)`): the final evaluation, --eval and --gif carry its memory through each episode"""
    metric_keys: tuple[str, ...] | Callable[[Any], tuple[str, ...]]
    """metrics.csv's columns after `seed` and `iteration`, in order: `env_steps` first, `nonfinite` last"""
    name: str | None = None
    """the algorithm's name in run names, config.json, checkpoints and messages; None (the default): the script's
    file name without .py, so a copy of ppo.py saved as ppo_kl.py is "ppo_kl" and its runs are its own"""
    sampled_policy: Callable | None = None
    """`(config, runner, key) -> policy`: the policy training acts with, each action sampled from the agent's
    distribution with randomness from `key` (an `envs.RecurrentPolicy`, e.g. `blocks.sampling_policy`), for --eval
    --eval-sampled; None where the script's policy is deterministic (greedy Q-values, TD3's actor)"""
    validate: Callable[[Any], None] = _no_checks
    """raises `ConfigError` for a config this algorithm cannot train (the shared flags are checked already)"""
    resolve: Callable[[Any], Any] = _as_is
    """the config as it trains, with defaults that depend on other fields filled in; runs before `validate`"""
    result_flags: tuple[str, ...] = ()
    """shared flags this algorithm computes with (td3: log_every sets its metrics rows), so --resume keeps them"""
    nonfinite_hint: str = "lower --learning-rate"
    """what to change when training diverges"""
    chunk_steps: int | Callable[[Any], int] = 3_000_000
    """env steps (all agents together) that take about 30 s on a 2-core CPU on the default env, or a function of
    the config: the default --num-chunks makes chunks of about this size, so Ctrl-C or SIGTERM stop a default run
    within about a minute, its checkpoint written"""
    size_flags: tuple[str, ...] = ()
    """the fields (besides --num-seeds) that set the memory a run needs, named when a run does not fit"""
    log_period: Callable[[Any], int] | None = None
    """iterations between progress lines (and wandb logs) for a config; None: `config.log_every`"""
    final_stats: Callable | None = None
    """`(config, runner) -> {name: array}` of one agent at the end of training (jittable), for `write_stats`"""
    write_stats: Callable | None = None
    """`(config, point_dir, stats) -> (summary fields, image paths)`: extra outputs of a sweep point's agents"""

    def __post_init__(self):
        if self.name is None:  # frozen: set once, here
            object.__setattr__(self, "name", os.path.splitext(self.script)[0])

    @property
    def script(self) -> str:
        """The script's file name ("ppo.py"), for messages."""
        module = sys.modules[self.make_train_parts.__module__]
        return os.path.basename(getattr(module, "__file__", None) or f"{module.__name__}.py")

    def metric_keys_of(self, config) -> tuple[str, ...]:
        return self.metric_keys(config) if callable(self.metric_keys) else self.metric_keys

    def chunk_steps_of(self, config) -> int:
        return self.chunk_steps(config) if callable(self.chunk_steps) else self.chunk_steps

    def log_period_of(self, config) -> int:
        return self.log_period(config) if self.log_period is not None else config.log_every
