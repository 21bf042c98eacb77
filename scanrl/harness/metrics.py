"""What a run reports as it trains: metrics.csv (its rows appended as chunks end) and the progress lines, with each
sweep point's metrics to its wandb run."""

import csv
import os
import time

import numpy as np

from scanrl.harness.files import folder, open_append, replaced
from scanrl.harness.tracking import safe_wandb

COUNTS = ("env_steps", "episodes", "updates")  # metrics that count something, written as integers


class MetricsCsv:
    """<run dir>/metrics.csv, one row per iteration and agent, appended as chunks end, once each one's checkpoint
    is committed (harness.train.train_chunks): rows on disk never run ahead of a checkpoint. Rows go iteration by
    iteration, so any chunking writes the same file. Its `iteration` counts from 1, as the progress lines and the
    checkpoints (checkpoints/<iterations done>) do."""

    def __init__(self, path, keys, seeds, history=None, make_dir=False):
        """A new file with its header, and with the rows of `history` {key: (agents, iterations)} when resuming;
        written to a temporary name and renamed, so a kill leaves the old file or the new one."""
        self.path, self.keys, self.seeds = path, keys, seeds
        if make_dir:  # a sweep point's folder (a link planted at its name is refused)
            folder(os.path.dirname(path))
        with replaced(path, newline="") as f:
            csv.writer(f).writerow(["seed", "iteration", *keys])
            if history is not None:
                self._write_rows(f, 0, history)

    def append(self, first, metrics):
        """Rows for iterations first, first + 1, ... of `metrics` {key: (agents, iterations)}, one agent per seed."""
        with open_append(self.path, newline="") as f:  # a link planted at its name is refused
            self._write_rows(f, first, metrics)

    def _write_rows(self, f, first, metrics):
        writer = csv.writer(f)
        # Counts are written as integers whatever dtype a script keeps them in (ppo's episodes are float32 means).
        columns = [np.asarray(metrics[k]).astype(np.int64) if k in COUNTS else metrics[k] for k in self.keys]
        for u in range(metrics["env_steps"].shape[1]):
            for i, seed in enumerate(self.seeds):
                writer.writerow([seed, first + u + 1, *(c[i, u] for c in columns)])  # iterations done, 1 to N


def describe_returns(returns):
    """Of each agent's latest finished episodes (the progress lines carry them forward)."""
    if np.all(np.isnan(returns)):
        return "no episode ended yet"
    return (f"return mean {np.nanmean(returns):8.2f}  min {np.nanmin(returns):8.2f}  "
            f"max {np.nanmax(returns):8.2f}")


class Progress:
    """The progress lines of a run (process 0): after each piece of a chunk, a line for each iteration due (every
    `period`) over the agents of this process, and each sweep point's metrics to its wandb run."""

    def __init__(self, config, points, agents, wandb_runs, keys, period):
        self.seed, self.num_seeds, self.points, self.keys = config.seed, config.num_seeds, points, keys
        self.agents = np.sort(agents)  # the agents this process trains
        self.period = period
        self.last = None  # the run's last iteration: always shown (and logged), whatever the period
        self.wandb_runs = wandb_runs  # one per sweep point, or none
        self.start = time.perf_counter()
        self.start_steps = 0  # env steps per agent already done when `start` was taken (a resumed run)
        # Per agent, the return of its latest finished episodes: a line where none ended still shows where it is.
        self.latest = np.full(len(self.agents), np.nan)

    def show(self, start, count, rows):
        """`rows`: the metrics of iterations start .. start + count - 1 (and unused rows after), as arrays over all
        agents split over the devices; this process reads its own shards (waiting for them)."""
        due = [i for i in range(count) if (start + i + 1) % self.period == 0 or start + i == self.last]
        if not due:
            return
        local = {k: np.concatenate([np.asarray(shard.data) for shard in
                                    sorted(v.addressable_shards, key=lambda shard: shard.index[0].start or 0)])
                 for k, v in rows.items()}  # rows of this process's agents, in ascending order
        returns = local["episode_return"][:, :count].astype(float)
        done = 0
        for i in due:
            for u in range(done, i + 1):
                self.latest = np.where(np.isnan(returns[:, u]), self.latest, returns[:, u])
            done = i + 1
            metrics = {k: v[:, i].astype(float) for k, v in local.items()}
            self._emit(start + i, self.agents, {**metrics, "episode_return": self.latest.copy()})
        for u in range(done, count):
            self.latest = np.where(np.isnan(returns[:, u]), self.latest, returns[:, u])

    def _emit(self, iteration, agents, metrics):
        returns = metrics["episode_return"]
        env_steps = int(metrics["env_steps"][0])
        sps = (env_steps - self.start_steps) * len(agents) / (time.perf_counter() - self.start)
        line = f"iteration {iteration + 1:6d}  env_steps {env_steps:10d}"
        if "updates" in metrics:
            line += f"  updates {int(metrics['updates'][0]):9d}"
        line += f"  sps {sps:10.0f}  {describe_returns(returns)}"
        point = agents // self.num_seeds
        if len(self.points) > 1:
            line += "  by point: " + " ".join(f"{nanmean(returns[point == p]):.1f}" for p in range(len(self.points)))
        if len(agents) < len(self.points) * self.num_seeds:
            line += f"  ({plural(len(agents), 'agent')} of process 0)"
        print(line, flush=True)
        for p, wandb_run in enumerate(self.wandb_runs):
            mine = point == p
            if wandb_run is None or not mine.any():
                continue
            log = {"sps": sps * mine.sum() / len(agents)}
            for key in self.keys[1:]:
                log[f"{key}/mean"] = nanmean(metrics[key][mine])
            point_returns = returns[mine]
            log["episode_return/min"] = np.nan if np.all(np.isnan(point_returns)) else np.nanmin(point_returns)
            log["episode_return/max"] = np.nan if np.all(np.isnan(point_returns)) else np.nanmax(point_returns)
            log.update({f"episode_return/seed_{self.seed + a % self.num_seeds}": float(r)
                        for a, r in zip(agents[mine], point_returns, strict=True)})
            safe_wandb(wandb_run.log, log, step=env_steps)


def nanmean(values):
    """Mean of the non-NaN values; NaN (without a warning) if there are none."""
    values = np.asarray(values, dtype=float)
    return np.nan if np.all(np.isnan(values)) else float(np.nanmean(values))


def to_json(x):
    return [None if np.isnan(v) else float(v) for v in np.asarray(x, dtype=float).ravel()]


def plural(count, noun):
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
