"""`Algorithm`: everything the harness knows of an algorithm script, handed over in one object."""

import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scanrl.harness.flags import ConfigError

# The metrics the harness reads from `update`'s dict, and what each holds (the `Algorithm` docstring says more).
REQUIRED_METRICS = {"episode_return": "the mean return of the episodes that ended in the iteration, NaN if none did",
                    "episodes": "how many episodes ended in the iteration (the final return weighs by it)"}


@dataclass(frozen=True)
class Algorithm:
    """An algorithm as a script hands it to `harness.main`.

    What the harness asks of `make_train_parts(config) -> (init, update)`, both pure and jittable for one agent (the
    harness vmaps them over agents and splits the agents over devices), PureJaxRL's shape:
    - `init(rng) -> runner`: the agent's whole state (networks, optimizer, env state, buffers, RNG key, counters);
    - `update(runner) -> (runner, metrics)`: one iteration (a rollout and its update epochs, or one update phase).
      `metrics` is a dict of scalars, metrics.csv's columns in the order the dict gives them. It must hold
      REQUIRED_METRICS (`episode_return`, `episodes`) and may hold `episode_length` (plotted), `updates` (gradient
      updates so far, for updates/s) and whatever else the script reports. The harness adds `env_steps`
      (`steps_per_iteration` per iteration) and `nonfinite`. A dict without a key it needs, or with one it adds, is
      refused in one line naming `update`'s line when the program is traced, before anything trains.

    What the harness finds in the runner by type, so a fork keeps the types: each flax `TrainState` (`nonfinite`: a
    NaN or an infinity in its params or optimizer state; in any float of a runner that holds none), and the
    `NormalizeObservation` wrapper's statistics in the env state (`envs.normalized_policy`: the evaluation feeds the
    policy observations normalised as training saw them, the statistics frozen).

    The command line runs `lax.scan` of `update`, as a script's `make_train` does, in pieces of a fixed length with
    the run's metrics and checkpoints written between them; a run has total_timesteps // steps_per_iteration(config)
    iterations.

    Sweeps: the harness calls `make_train_parts` once per agent inside the compiled program, with a config whose
    swept fields hold that agent's values (traced scalars), so `config.learning_rate` anywhere in the script is the
    agent's own. A field that fixes a shape, a loop length or a Python branch cannot be swept: the harness says so
    in one line, as it does for a swept field the compiled program never reads."""

    config: type
    """the script's `Config`: a frozen dataclass subclassing `harness.Flags`"""
    make_train_parts: Callable
    """see above"""
    steps_per_iteration: Callable[[Any], int]
    """env steps of one agent in one iteration, for a config"""
    policy: Callable
    """`(config, runner) -> policy`: one agent's deterministic policy, `act(obs batch) -> action batch`, or, for a
    policy with memory, an `envs.RecurrentPolicy` (its initial memory and `step(memory, obs, start) -> (memory,
    action)`): the final evaluation, --eval and --gif carry its memory through each episode. A policy that also takes
    `key` gives with it the policy training acts with, each action sampled with randomness from `key`
    (`blocks.sampling_policy`), for --eval-sampled; one without is deterministic (greedy Q-values, TD3's actor)"""
    validate: Callable[[Any], None] = lambda config: None
    """raises `ValueError` (one line naming the flag and what to do) for a config this algorithm cannot train (the
    shared flags are checked already); the harness prints it as `error: <message>` and exits 2"""
    write_outputs: Callable | None = None
    """`(config, runner) -> (summary fields, {file name: matplotlib figure})`: extra outputs of a sweep point, from its
    agents' final runners (numpy, stacked on a leading agent axis), the figures saved in its directory; None: none"""

    @property
    def script(self) -> str:
        """The script's file name ("ppo.py"), for messages."""
        module = sys.modules[self.make_train_parts.__module__]
        return os.path.basename(getattr(module, "__file__", None) or f"{module.__name__}.py")

    @property
    def name(self) -> str:
        """The algorithm's name in run names, config.json, checkpoints and messages: the script's file name without
        .py, so a copy of ppo.py saved as ppo_kl.py is "ppo_kl" and its runs are its own."""
        return os.path.splitext(self.script)[0]

    def check(self, config):
        """`validate(config)`, its ValueError a `ConfigError`."""
        try:
            self.validate(config)
        except ValueError as error:
            raise error if isinstance(error, ConfigError) else ConfigError(str(error)) from None

    def num_iterations(self, config) -> int:
        return config.total_timesteps // self.steps_per_iteration(config)

    @property
    def samples(self) -> bool:
        """Whether the policy can act as training does (it takes a `key`): --eval-sampled."""
        return "key" in inspect.signature(self.policy).parameters
