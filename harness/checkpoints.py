"""<run dir>/checkpoints/<iterations done>/, written with orbax after each chunk: every agent's whole state (networks,
optimizer, env states, replay buffers, RNG keys, hparams), the metrics so far (item "history": orbax reserves
"metrics") and {algo, env, iterations, config}. Saves are asynchronous: the next chunk trains while the files are
written."""

import dataclasses
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from harness.flags import ConfigError


class Checkpoints:
    """The checkpoints of one run directory; `keep=None` opens it read-only (--eval). A context manager: leaving
    it waits for the save in flight."""

    def __init__(self, run_dir, keep=None):
        self.run_dir = run_dir
        self.manager = ocp.CheckpointManager(
            os.path.abspath(os.path.join(run_dir, "checkpoints")),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=keep is not None, read_only=keep is None),
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.manager.wait_until_finished()
        self.manager.close()

    def save(self, done, runner, history, name, config):
        meta = {"algo": name, "env": config.env, "iterations": done, "config": dataclasses.asdict(config)}
        self.manager.save(done, args=ocp.args.Composite(
            runner=ocp.args.StandardSave(runner), history=ocp.args.StandardSave(history),
            meta=ocp.args.JsonSave(meta),
        ))

    def restore(self, which, name, config, abstract_runner, with_history):
        """-> (runner, metrics so far or None, iterations done) of the newest checkpoint; ConfigError for a missing
        or damaged one, or one of another algorithm or env. `which`: the flag that named the run directory."""
        step = self.manager.latest_step()
        if step is None:
            raise ConfigError(f"{which}: {self.run_dir} has no checkpoint in checkpoints/; was it started before "
                              "checkpoints existed, or killed before its first chunk ended?")
        where = os.path.join(self.run_dir, "checkpoints", str(step))
        try:
            meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
            if meta["algo"] != name or meta["env"] != config.env:
                raise ConfigError(f"{which}: checkpoint {where} is of {meta['algo']} on {meta['env']}, but the run is "
                                  f"{name} on {config.env}; it does not belong to this run directory")
            items = {"runner": ocp.args.StandardRestore(abstract_runner)}
            if with_history:
                items["history"] = ocp.args.StandardRestore()
            restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"{which}: checkpoint {where} cannot be read ({type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''}); it is damaged or incomplete"
                              ) from None
        history = jax.tree.map(np.asarray, dict(restored.history)) if with_history else None
        return restored.runner, history, step
