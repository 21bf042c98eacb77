"""The run directory, written by process 0 only: <out-dir>/<run-name>/ claimed by a new run (config.json written first,
exclusively) or taken over by --resume, owned (`files.RunLock`) to the run's end; its points' folders, metrics.csv."""

import contextlib
import csv
import dataclasses
import json
import os
import shutil
import time

import jax
import numpy as np

from scanrl.harness.agents import broadcast
from scanrl.harness.files import RunLock, foreign_folder, open_regular, replaced
from scanrl.harness.flags import ConfigError, point_label
from scanrl.harness.metrics import MetricsCsv


class RunDirectory:
    """<out-dir>/<run-name>/ of a new or resumed run and its sweep points' directories."""

    def __init__(self, name, config, points, lead):
        """`name`: the algorithm's (its runs' names and config.json's "algo")."""
        self.name, self.config, self.points, self.lead = name, config, points, lead
        os.umask(os.umask(0) | 0o022)  # what the run makes (on the way to its directory too) is no one else's to write
        if config.resume is not None:
            self.path = config.resume  # its real path (`resume.resumed`)
            self.run_name = os.path.basename(os.path.normpath(self.path))
            if lead and (foreign := foreign_folder(self.path)):
                raise ConfigError(f"--resume: the run directory {self.path} {foreign}; a run writes only in a folder "
                                  "of its own that no one else can write in")
        else:
            # Brax ids hold '/' and ':'. The suffix parts jobs started in the same second; all take process 0's name.
            env_name = config.env.replace("/", "-").replace(":", "-")
            stamp, suffix = broadcast(int(time.time())), broadcast(int.from_bytes(os.urandom(3), "big"))
            self.run_name = config.run_name or f"{env_name}__{self.name}__{config.seed}__{stamp}_{suffix:06x}"
            self.path = os.path.join(config.out_dir, self.run_name)
            claimed = claim_run_directory(self.path, {"algo": self.name, **dataclasses.asdict(config),
                                                      "resume": None}) if lead else ""
            if broadcast(len(claimed)):  # process 0 could not claim it: every process stops
                raise ConfigError(claimed or f"run directory {self.path} could not be claimed by process 0")
        self.lock = RunLock(self.path, "--resume" if config.resume is not None else "the new run") if lead else None
        self.sweep = len(points) > 1
        self.labels = [point_label(p) for p in points]  # the points' names, and a sweep's folders
        self.point_dirs = [os.path.join(self.path, label) if self.sweep else self.path for label in self.labels]

    def release(self):
        if self.lock is not None:
            self.lock.release()

    def give_up(self):
        """A new run that cannot start (it does not fit in memory) leaves no directory (its own: `RunLock.check`)."""
        if self.lead and self.config.resume is None:
            with contextlib.suppress(OSError):
                self.lock.check()
                self.release()
                shutil.rmtree(self.path, ignore_errors=True)

    def open_metrics(self, keys, history=None):
        """Starts each point's metrics.csv; a resumed run's is rebuilt from `history` (its checkpoint's metrics),
        whatever state the file was left in, its columns in the file's order (an earlier version's may differ)."""
        paths = [os.path.join(d, "metrics.csv") for d in self.point_dirs]
        self.metrics_csvs = [MetricsCsv(path, keys if history is None else columns_kept(path, keys), self.seeds(),
                                        None if history is None else point_rows(history, p, self.config.num_seeds),
                                        make_dir=self.sweep) for p, path in enumerate(paths)]

    def seeds(self):
        return [self.config.seed + i for i in range(self.config.num_seeds)]

    def append_metrics(self, first, metrics):
        for p, metrics_csv in enumerate(self.metrics_csvs):
            metrics_csv.append(first, point_rows(metrics, p, self.config.num_seeds))


def point_rows(tree, p, num_seeds):
    """Sweep point p's rows (its agents) of every array."""
    return jax.tree.map(lambda x: x[p * num_seeds:(p + 1) * num_seeds], tree)


def columns_kept(path, keys) -> tuple:
    """`keys` in the order of metrics.csv's header at `path` where it has these columns (a run an earlier version
    wrote keeps its order when resumed), else `keys`, saying which columns change."""
    try:
        with open_regular(path, newline="") as f:  # a FIFO planted there is not waited on
            header = next(csv.reader(f), [])[2:]  # after seed, iteration
    except (OSError, csv.Error, UnicodeDecodeError):
        return tuple(keys)
    if sorted(header) == sorted(keys):
        return tuple(header)
    if header:
        print(f"note: {path} is written again with this version's columns ({', '.join(keys)}); it had "
              f"{', '.join(header)}")
    return tuple(keys)


def claim_run_directory(path, config_json) -> str:
    """Creates the run directory `path` (or takes an empty one) and its config.json, exclusively: of two runs started
    at once with one name, one gets it. -> "" if claimed, else the error line."""
    if not os.path.lexists(path) and (foreign := foreign_folder(path)):  # a folder above it others can rename in
        return f"run directory {path} {foreign}"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # the out dir: a link the user named is theirs
        try:
            os.mkdir(path, 0o755)  # no one else may write in it (`foreign_folder`), whatever the umask
        except FileExistsError:
            if os.path.islink(path):  # planted in a shared out dir, a link would lead the run anywhere
                return f"run directory {path} is a link, and a run never writes through one; choose another --run-name"
            if os.listdir(path):
                raise
            if foreign := foreign_folder(path):  # an empty folder someone else made: not taken
                return f"run directory {path} {foreign}; a new run takes only an empty folder of its own; choose " \
                       "another --run-name"
        if os.path.islink(path):  # made a link between our mkdir and now
            raise FileExistsError
        with open(os.path.join(path, "config.json"), "x") as f:  # "x": fails if another run created it first
            json.dump(config_json, f, indent=2)
    except FileExistsError:
        return f"run directory {path} exists and is not empty; choose another --run-name, or --resume it"
    except OSError as error:
        return f"cannot create the run directory {path}: {error.strerror}; choose another --out-dir"
    return ""


def write_json(path, value):
    """`value` as JSON at `path` (through `files.replaced`), NaN and infinities as null (strict parsers refuse NaN)."""
    with replaced(path) as f:
        json.dump(json_safe(value), f, indent=2, allow_nan=False)


def json_safe(value):
    """`value` with every non-finite float (numpy's too) as None, numpy scalars as Python numbers, arrays as lists."""
    if isinstance(value, np.ndarray | np.generic):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return None if isinstance(value, float) and not np.isfinite(value) else value
