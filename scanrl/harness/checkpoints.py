"""<run dir>/checkpoints/<iterations done>/, written with orbax after each chunk: every agent's whole state (networks,
optimizer, env states, replay buffers, RNG keys, hparams), the metrics so far (item "history": orbax reserves
"metrics") and {algo, env, iterations, config, checksums}. Saves are asynchronous: the next chunk trains meanwhile."""

import contextlib
import dataclasses
import itertools
import logging
import os
import stat
import sys
import zlib

import jax
import numpy as np
import orbax.checkpoint as ocp

from scanrl.harness.files import folder
from scanrl.harness.flags import ConfigError, escaped
from scanrl.harness.migrations import RENAMED_STATE

# What orbax says when the state it is asked to restore has other keys or leaves than the checkpoint: the script's
# state changed (a fork edited, an older version), not damage; older checkpoints of the run would say the same.
STRUCTURE_MISMATCH = ("Structure mismatch", "tree structures do not match", "not found in metadata_tree")


def quiet_abandoned_reads():
    """Installs (once) a sys.unraisablehook that drops what the reads orbax abandons when a damaged checkpoint fails
    raise after the fact (a tensorstore callback's "Event loop is closed", an orbax coroutine's error collected
    unawaited: each printed a traceback after the one-line warning); anything else goes to the hook before it."""
    previous = sys.unraisablehook
    if getattr(previous, "drops_abandoned_reads", False):
        return

    def hook(unraisable):
        code = getattr(unraisable.object, "cr_code", None)  # a coroutine's
        if unraisable.exc_type is RuntimeError and str(unraisable.exc_value) == "Event loop is closed" or \
                code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename:
            return
        previous(unraisable)

    hook.drops_abandoned_reads = True
    sys.unraisablehook = hook


class Checkpoints(contextlib.AbstractContextManager):
    """A run directory's checkpoints (`keep=None`: read-only); leaving it waits for the save in flight and closes the
    manager (no orbax thread outlives it), a failed write raising as OSError unless the run is already stopping."""

    def __init__(self, run_dir, keep=None):
        # orbax logs many absl lines per event (a read-only open, a failed write); the harness says one of its own.
        logging.getLogger("absl").setLevel(logging.CRITICAL)
        quiet_abandoned_reads()
        self.run_dir, self.folder = run_dir, os.path.join(run_dir, "checkpoints")
        if keep is not None:  # made by the run itself: a link planted at the name is refused, never written through
            folder(self.folder)
        # lightweight: orbax reads no step's files when it opens the folder (a FIFO planted in one would block it
        # there); each checkpoint read is checked first (`meta`)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=keep is not None, read_only=keep is None,
                                               lightweight_initialize=True)
        self.manager = ocp.CheckpointManager(os.path.abspath(self.folder), options=options)

    def __exit__(self, exc_type, *_):
        try:
            with self._writing():
                try:
                    self.manager.wait_until_finished()
                finally:
                    self.manager.close()  # it waits again, and raises a failed write again
        except OSError:
            if exc_type is None:
                raise

    def save(self, done, runner, history, name, config):
        """Starts writing checkpoint `done` in the background (OSError if this write or the one before failed). Its
        record holds a checksum of every array, so damage that still reads (flipped bytes) is found on restore."""
        runner = without_empty(runner)
        meta = {"algo": name, "env": config.env, "iterations": done, "config": dataclasses.asdict(config),
                "checksums": {"runner": checksums(runner), "history": checksums(history)}}
        items = {"runner": ocp.args.StandardSave(runner), "history": ocp.args.StandardSave(history)}
        with self._writing():
            self.manager.save(done, args=ocp.args.Composite(**items, meta=ocp.args.JsonSave(meta)))

    def wait(self):
        """Waits until the save in flight is committed; OSError if it failed."""
        with self._writing():
            self.manager.wait_until_finished()

    @contextlib.contextmanager
    def _writing(self):
        """Raises orbax's error (often a ValueError carrying a tensorstore status) as an OSError with a short cause,
        naming the checkpoints folder: a failure in the background may be the save before the one that reports it."""
        try:
            yield
        except (OSError, ValueError, RuntimeError) as error:
            text = str(error)
            causes = ("No space left on device", "Read-only file system", "Permission denied", "Disk quota exceeded",
                      "File too large")
            cause = next((c for c in causes if c in text), (text.splitlines() or [type(error).__name__])[0][:200])
            raise OSError(0, cause, self.folder) from None

    def meta(self, step) -> dict:
        """Checkpoint `step`'s record; ValueError, before orbax opens a file, where `not_written_by_orbax` says so."""
        if problem := not_written_by_orbax(os.path.join(self.folder, str(step))):
            raise ValueError(problem)
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta

    def restore(self, which, name, config, abstract_runner, with_history):
        """-> (runner, metrics so far or None, iterations done) of the newest checkpoint that can be read; a damaged
        newer one is reported (one line) and, on --resume, moved aside to <run dir>/damaged_checkpoints/. None if
        the run has no checkpoint yet; ConfigError if none can be read, or for one of another algorithm or env.
        `which`: the flag that named the run directory."""
        errors = []
        strays = [int(n) for n in (os.listdir(self.folder) if os.path.isdir(self.folder) else ()) if n.isdigit() and
                  not stat.S_ISDIR(os.lstat(os.path.join(self.folder, n)).st_mode)]  # orbax lists folders only
        if strays and which == "--resume":  # a save of that step would remove it first (a FIFO: blocking there)
            print(f"warning: {os.path.join(self.folder, str(strays[0]))} is not a folder of its own (a file, a link), "
                  "so not a checkpoint of this run: it is moved aside", flush=True)
            self._move_aside(strays)
        for step in sorted(self.manager.all_steps(), reverse=True):
            where = os.path.join(self.folder, str(step))
            try:
                meta = self.meta(step)
                if meta["algo"] != name or meta["env"] != config.env:
                    raise ConfigError(f"{which}: checkpoint {where} is of {escaped(meta['algo'])} on "
                                      f"{escaped(meta['env'])}, but the run is {name} on {config.env}; it does not "
                                      "belong to this run directory")
                if meta.get("iterations", step) != step:  # copied or renamed: it would resume at the wrong place
                    raise ValueError(f"its record says it was written after iteration {meta['iterations']}")
                check_shapes(which, where, abstract_runner)
                items = {"runner": ocp.args.StandardRestore(without_empty(abstract_runner))}
                if with_history:
                    items["history"] = ocp.args.StandardRestore()
                restored = self._restore(step, items)
                for item, expected in (meta.get("checksums") or {}).items():  # none in an older version's record
                    if item in items and expected is not None and checksums(getattr(restored, item)) != list(expected):
                        raise ValueError(f"its {item} arrays do not match the checksums recorded when it was written")
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

    def _restore(self, step, items):
        """orbax's restore of `items`; a runner from before a leaf was renamed (`migrations.RENAMED_STATE`) too."""
        try:
            return self.manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as error:
            if not any(sign in str(error) for sign in STRUCTURE_MISMATCH):
                raise
            abstract = ocp.tree.to_flat_dict(items["runner"].item)
            restored = self.manager.restore(step, args=ocp.args.Composite(**{**items,
                                                                             "runner": ocp.args.StandardRestore()}))
            held = {tuple(RENAMED_STATE.get(k, k) for k in path): x
                    for path, x in ocp.tree.to_flat_dict(restored.runner).items()}
            if held.keys() != abstract.keys():
                raise error from None
            runner = {path: jax.device_put(held[path], a.sharding) for path, a in abstract.items()}
            return ocp.args.Composite(**{**restored, "runner": ocp.tree.from_flat_dict(runner, items["runner"].item)})

    def _move_aside(self, steps):
        """Moves damaged checkpoints out of the manager's way (a later save writes those steps anew)."""
        aside = folder(os.path.join(self.run_dir, "damaged_checkpoints"))  # never a link planted at its name
        for step in steps:
            names = (os.path.join(aside, f"{step}.{n}" if n else str(step)) for n in itertools.count())
            target = next(t for t in names if not os.path.lexists(t))  # an earlier damaged copy of that step stays
            os.replace(os.path.join(self.folder, str(step)), target)
        self.manager.reload()


def not_written_by_orbax(step_folder) -> str | None:
    """What in a checkpoint's folder orbax never writes (a link, a FIFO, a device: one would be followed out of the
    run, or block or never end the read), or None. Checked before any of its files is opened."""
    if not stat.S_ISDIR(mode := os.lstat(step_folder).st_mode):  # a link: perhaps to another run's checkpoint
        return f"{step_folder} is {'a link' if stat.S_ISLNK(mode) else 'not a folder'}"
    for parent, names, files in os.walk(step_folder):
        for name in names + files:
            mode = os.lstat(os.path.join(parent, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = "a link" if stat.S_ISLNK(mode) else "neither a file nor a folder"
                return f"{os.path.join(parent, name)} is {kind}"
    return None


def check_shapes(which, where, abstract_runner):
    """ConfigError naming the first array whose shape or dtype in checkpoint `where` differs from the agent state this
    version of the script makes. Compared before restoring, so an intact checkpoint is never called damaged."""
    try:
        with ocp.StandardCheckpointer() as checker:
            stored = ocp.tree.to_flat_dict(checker.metadata(os.path.join(where, "runner")).item_metadata.tree, sep=".")
    except Exception:  # noqa: BLE001 - a damaged checkpoint: the restore reports it
        return
    for name, array in ocp.tree.to_flat_dict(without_empty(abstract_runner), sep=".").items():
        if array is None or (held := stored.get(name)) is None:
            continue
        (have, had), (want, wanted) = ((tuple(a.shape), np.dtype(a.dtype)) for a in (held, array))
        if (have, had) != (want, wanted):
            raise ConfigError(f"{which}: checkpoint {where} holds {name} of shape {have} ({had}), but this version of "
                              f"the script and the run's config make it {want} ({wanted}): the script or config.json "
                              "changed since the run was written; use the version and config that wrote it, or start "
                              "a new run")


def without_empty(tree):
    """`tree` with its zero-size arrays (a MuJoCo model's unused fields) as None: orbax cannot write them."""
    return jax.tree.map(lambda x: None if x.size == 0 else x, tree)


def with_empty(abstract, restored):
    """The restored tree with `abstract`'s zero-size arrays put back where `without_empty` left None (a None the
    state holds itself, as Craftax's, stays None)."""
    return jax.tree.map(lambda a, x: x if a is None or x is not None else
                        jax.device_put(np.zeros(a.shape, a.dtype), a.sharding),
                        abstract, restored, is_leaf=lambda x: x is None)


def checksums(tree) -> list[int] | None:
    """CRC-32 of every array of `tree`, in leaf order; None with several processes (none holds them all)."""
    return None if jax.process_count() > 1 else [zlib.crc32(np.ascontiguousarray(np.asarray(x)).view(np.uint8))
                                                 for x in jax.tree.leaves(tree)]
