"""scanrl: single-file JAX reinforcement-learning scripts, and the package they run on.

    scanrl.harness  everything around an algorithm, written once: flags, run directory, metrics, checkpoints,
                    resume, signals, sweeps, devices and processes, wandb, plots, evaluation (`harness.main`)
    scanrl.envs     the env stack: gymnax ids, scanrl's envs, the optional suites, a user's own env; wrappers

A script (ppo.py, ...) imports `from scanrl import harness` first (its `harness.prepare_jax(__name__)` sets XLA's
flags before JAX makes a backend), then `from scanrl import envs`. Importing `scanrl` itself imports neither.
"""

__version__ = "0.2.0"
