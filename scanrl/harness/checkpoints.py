"""<run dir>/checkpoints/<iterations done>/, written with orbax after each chunk: every agent's whole state (networks,
optimizer, env states, replay buffers, RNG keys, hparams), the metrics so far (item "history": orbax reserves
"metrics") and {algo, env, iterations, config}. Saves are asynchronous: the next chunk trains while the files are
written."""

import csv
import dataclasses
import itertools
import logging
import os
import zlib

import jax
import numpy as np
import orbax.checkpoint as ocp

from scanrl.harness.files import folder
from scanrl.harness.flags import ConfigError

# What orbax says when the state it is asked to restore has other keys or leaves than the checkpoint: the script's
# state changed (a fork edited, an older version), not damage; older checkpoints of the run would say the same.
STRUCTURE_MISMATCH = ("Structure mismatch", "tree structures do not match", "not found in metadata_tree")


class Checkpoints:
    """The checkpoints of one run directory; `keep=None` opens it read-only (--eval). A context manager: leaving
    it waits for the save in flight."""

    def __init__(self, run_dir, keep=None):
        # orbax reports through absl's logger, many lines per event (a read-only open, a failed write); the harness
        # says what matters in one line of its own.
        logging.getLogger("absl").setLevel(logging.CRITICAL)
        self.run_dir = run_dir
        self.manager = ocp.CheckpointManager(
            os.path.abspath(os.path.join(run_dir, "checkpoints")),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=keep is not None, read_only=keep is None),
        )

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        """Waits for the save in flight (its failure raises as OSError, unless the run is already stopping) and
        closes the manager, so no orbax thread outlives it."""
        try:
            self.wait()
        except OSError:
            if exc_type is None:
                raise
        finally:
            try:
                self.manager.close()  # it waits again, and raises a failed write again
            except (OSError, ValueError, RuntimeError) as error:
                if exc_type is None:
                    raise self._write_error(error) from None

    def save(self, done, runner, history, name, config):
        """Starts writing checkpoint `done` in the background; a failed write (this one's or the one before's)
        raises OSError naming the checkpoint and the cause. Its record holds a checksum of every array, so damage
        that still reads (flipped bytes) is found on restore."""
        runner = without_empty(runner)
        meta = {"algo": name, "env": config.env, "iterations": done, "config": dataclasses.asdict(config),
                "checksums": {"runner": checksums(runner), "history": checksums(history)}}
        try:
            self.manager.save(done, args=ocp.args.Composite(
                runner=ocp.args.StandardSave(runner), history=ocp.args.StandardSave(history),
                meta=ocp.args.JsonSave(meta),
            ))
        except (OSError, ValueError, RuntimeError) as error:
            raise self._write_error(error) from None

    def wait(self):
        """Waits until the save in flight is committed; OSError if it failed."""
        try:
            self.manager.wait_until_finished()
        except (OSError, ValueError, RuntimeError) as error:
            raise self._write_error(error) from None

    def _write_error(self, error):
        """orbax's error (often a ValueError carrying a tensorstore status) as an OSError with a short cause. It
        names the checkpoints folder: a failure in the background may be the save before the one that reports it."""
        text = str(error)
        causes = ("No space left on device", "Read-only file system", "Permission denied", "Disk quota exceeded")
        cause = next((c for c in causes if c in text), (text.splitlines() or [type(error).__name__])[0][:200])
        return OSError(0, cause, os.path.join(self.run_dir, "checkpoints"))

    def restore(self, which, name, config, abstract_runner, with_history):
        """-> (runner, metrics so far or None, iterations done) of the newest checkpoint that can be read; a damaged
        newer one is reported (one line) and, on --resume, moved aside to <run dir>/damaged_checkpoints/. None if
        the run has no checkpoint yet; ConfigError if none can be read, or for one of another algorithm or env.
        `which`: the flag that named the run directory."""
        errors = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            where = os.path.join(self.run_dir, "checkpoints", str(step))
            try:
                meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
                if meta["algo"] != name or meta["env"] != config.env:
                    raise ConfigError(f"{which}: checkpoint {where} is of {meta['algo']} on {meta['env']}, but the run "
                                      f"is {name} on {config.env}; it does not belong to this run directory")
                check_shapes(which, where, abstract_runner)
                items = {"runner": ocp.args.StandardRestore(without_empty(abstract_runner))}
                if with_history:
                    items["history"] = ocp.args.StandardRestore()
                restored = self.manager.restore(step, args=ocp.args.Composite(**items))
                verify(meta, restored, with_history)
            except ConfigError:
                raise
            except Exception as error:  # noqa: BLE001 - orbax and tensorstore raise bare Exceptions for damaged files
                if any(sign in str(error) for sign in STRUCTURE_MISMATCH):
                    raise ConfigError(f"{which}: checkpoint {where} holds an agent state of another structure than "
                                      f"this version of the script makes (it changed since the run was written, or "
                                      "the run is an older scanrl's); use the version that wrote it, or start a new "
                                      "run") from None
                # tensorstore's first line ends in "See full TensorStore details: <bound method pybind11...>"
                first = (str(error).strip().splitlines() or [""])[0].split(" See full TensorStore details")[0]
                errors.append(f"checkpoint {where} cannot be read ({type(error).__name__}: {first[:200]}); it is "
                              "damaged or incomplete")
                print(f"warning: {errors[-1]}; trying an older one", flush=True)
                continue
            if errors and which == "--resume":
                self._move_aside([s for s in self.manager.all_steps() if s > step])
            history = jax.tree.map(np.asarray, dict(restored.history)) if with_history else None
            return with_empty(abstract_runner, restored.runner), history, step
        if errors:
            raise ConfigError(f"{which}: {errors[0]}, and no older checkpoint can be read either")
        return None

    def _move_aside(self, steps):
        """Moves damaged checkpoints out of the manager's way (a later save writes those steps anew)."""
        aside = folder(os.path.join(self.run_dir, "damaged_checkpoints"))  # never a link planted at its name
        for step in steps:
            target = os.path.join(aside, str(step))
            for n in itertools.count(1):  # an earlier damaged copy of that step stays
                if not os.path.lexists(target):
                    break
                target = os.path.join(aside, f"{step}.{n}")
            os.replace(os.path.join(self.run_dir, "checkpoints", str(step)), target)
        self.manager.reload()


def check_shapes(which, where, abstract_runner):
    """ConfigError naming the first array whose shape or dtype in checkpoint `where` differs from the agent state
    this version of the script makes (a fork widened a layer, or config.json's sizes were edited): compared before
    restoring, so an intact checkpoint is never called damaged. A checkpoint whose arrays cannot be listed is left
    to the restore (which finds it damaged)."""
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            stored = checkpointer.metadata(os.path.join(where, "runner")).item_metadata.tree
        stored = ocp.tree.to_flat_dict(stored, sep=".")
    except Exception:  # noqa: BLE001 - a damaged checkpoint: the restore reports it
        return
    wanted = {k: v for k, v in ocp.tree.to_flat_dict(without_empty(abstract_runner), sep=".").items()
              if v is not None}
    for name, array in wanted.items():
        held = stored.get(name)
        if held is not None and (tuple(held.shape), np.dtype(held.dtype)) != (tuple(array.shape),
                                                                              np.dtype(array.dtype)):
            raise ConfigError(f"{which}: checkpoint {where} holds {name} of shape {tuple(held.shape)} "
                              f"({np.dtype(held.dtype)}), but this version of the script and the run's config make it "
                              f"{tuple(array.shape)} ({np.dtype(array.dtype)}): the script or config.json changed "
                              "since the run was written; use the version and config that wrote it, or start a new run")


def without_empty(tree):
    """`tree` with its zero-size arrays (a MuJoCo model's unused fields) as None: orbax cannot write them."""
    return jax.tree.map(lambda x: None if x.size == 0 else x, tree)


def with_empty(abstract, restored):
    """The restored tree with `abstract`'s zero-size arrays put back where `without_empty` left None."""
    return jax.tree.map(lambda a, x: jax.device_put(np.zeros(a.shape, a.dtype), a.sharding) if x is None else x,
                        abstract, restored, is_leaf=lambda x: x is None)


def checksums(tree) -> list[int] | None:
    """CRC-32 of every array of `tree` (its bytes, in leaf order); None in a multi-process run (no process holds
    every agent's arrays)."""
    if jax.process_count() > 1:
        return None
    return [zlib.crc32(np.ascontiguousarray(np.asarray(x)).view(np.uint8)) for x in jax.tree.leaves(tree)]


def verify(meta, restored, with_history):
    """ValueError unless the restored arrays have the checksums the checkpoint's record holds (a checkpoint of a
    version that wrote none is taken as it is)."""
    recorded = meta.get("checksums") or {}
    for item in ("runner", "history") if with_history else ("runner",):
        expected = recorded.get(item)
        if expected is not None and checksums(getattr(restored, item)) != list(expected):
            raise ValueError(f"its {item} arrays do not match the checksums recorded when it was written")


def recorded_iterations(run_dir) -> int:
    """The most iterations any metrics.csv of the run (its own, or its sweep points') records; 0 if none."""
    paths = [os.path.join(run_dir, "metrics.csv")] + [os.path.join(run_dir, d, "metrics.csv") for d in
                                                      sorted(os.listdir(run_dir)) if "=" in d]
    most = 0
    for path in paths:
        try:
            with open(path, newline="") as f:
                for row in csv.reader(f):
                    if len(row) > 1 and row[1].isdigit():
                        most = max(most, int(row[1]))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
    return most


def require_checkpoints_for_progress(run_dir, script):
    """--resume: ConfigError where the run recorded progress (rows in metrics.csv) but checkpoints/ holds no
    checkpoint to go on from (deleted, moved, not a folder): starting again would replace what was recorded. A run
    killed before its first checkpoint recorded no rows either, and starts again."""
    folder = os.path.join(run_dir, "checkpoints")
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise ConfigError(f"--resume: {folder} is not a folder; move it away (and put back the run's checkpoints/ "
                          "if you have them), then resume")
    if os.path.isdir(folder) and any(name.isdigit() for name in os.listdir(folder)):
        return
    done = recorded_iterations(run_dir)
    if done:
        missing = "holds no checkpoint" if os.path.isdir(folder) else "is missing"
        raise ConfigError(f"--resume: {folder} {missing}, but metrics.csv records {done} iterations: starting again "
                          f"would discard them; put back its checkpoints, or train a new run (python {script} "
                          "without --resume)")


def trained_config(run_dir):
    """-> (the newest checkpoint with a readable record, the config it was trained with, as JSON); None if the run
    has none. --resume holds config.json to it."""
    folder = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(folder):
        return None
    try:
        with Checkpoints(run_dir) as checkpoints:
            for step in sorted(checkpoints.manager.all_steps(), reverse=True):
                try:
                    meta = checkpoints.manager.restore(step, args=ocp.args.Composite(
                        meta=ocp.args.JsonRestore())).meta
                    return os.path.join(folder, str(step)), dict(meta["config"])
                except Exception:  # noqa: BLE001 - a damaged record: the restore reports it, and tries an older one
                    continue
    except Exception:  # noqa: BLE001 - an unreadable folder: the restore reports it
        return None
    return None
