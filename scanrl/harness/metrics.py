"""What a run reports as it trains: metrics.csv (its rows appended as chunks end) and the progress lines, with each
sweep point's metrics for its wandb run. The run's record (`record.RunRecord`) writes them."""

import csv
import os
import time

import numpy as np

from scanrl.harness.aggregate import nanmean
from scanrl.harness.files import folder, open_append, open_regular, replaced

COUNTS = ("env_steps", "episodes", "updates")  # metrics that count something, written as integers


class MetricsCsv:
    """<run dir>/metrics.csv: a row per iteration (counted from 1, as checkpoints/<iterations done>) and agent, in
    iteration order whatever the chunking; appended once a chunk's checkpoint is committed (`RunRecord.chunk`)."""

    def __init__(self, path, keys, seeds, history=None, make_dir=False):
        """A new file (`files.replaced`) with its header, and the rows of `history` {key: (agents, iterations)}."""
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
                writer.writerow([seed, first + u + 1, *(c[i, u] for c in columns)])


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


class Progress:
    """The progress lines of a run (process 0): after each piece of a chunk, a line for each iteration due (every
    --log-every, and the last) over this process's agents, with the metrics of each `tracked` sweep point (a wandb
    run's)."""

    def __init__(self, config, points, agents, keys, last, start_steps=0, tracked=()):
        """`last`: the run's last iteration (its line is always shown); `start_steps`: env steps per agent already done
        (a resumed run). A line every --log-every iterations."""
        self.seed, self.num_seeds, self.points, self.keys = config.seed, config.num_seeds, points, keys
        self.tracked = tracked
        self.agents, self.period, self.last, self.start_steps = np.sort(agents), config.log_every, last, start_steps
        self.start = time.perf_counter()
        # Per agent, the return of its latest finished episodes: a line where none ended still shows where it is.
        self.latest = np.full(len(self.agents), np.nan)

    def show(self, start, count, rows) -> list:
        """`rows`: iterations start .. start + count - 1 over all agents; this process reads its own shards. Prints
        the lines due -> [(sweep point, its metrics for wandb, env steps)] of each line."""
        due = [i for i in range(count) if (start + i + 1) % self.period == 0 or start + i == self.last]
        # Rows of this process's agents, in ascending order; without a line due, the returns alone, carried forward.
        local = {k: np.concatenate([np.asarray(shard.data) for shard in
                                    sorted(v.addressable_shards, key=lambda shard: shard.index[0].start or 0)])
                 for k, v in rows.items() if due or k == "episode_return"}
        logs = []
        for i in range(count):
            returns = local["episode_return"][:, i].astype(float)
            self.latest = np.where(np.isnan(returns), self.latest, returns)
            if i in due:
                logs += self._emit(start + i, {**{k: v[:, i].astype(float) for k, v in local.items()},
                                               "episode_return": self.latest.copy()})
        return logs

    def _emit(self, iteration, metrics) -> list:
        agents, returns, env_steps = self.agents, metrics["episode_return"], int(metrics["env_steps"][0])
        sps = (env_steps - self.start_steps) * len(agents) / (time.perf_counter() - self.start)
        line = f"iteration {iteration + 1:6d}  env_steps {env_steps:10d}"
        if "updates" in metrics:
            line += f"  updates {int(metrics['updates'][0]):9d}"
        line += f"  sps {sps:10.0f}  " + ("no episode ended yet" if np.all(np.isnan(returns)) else
                                          f"return mean {np.nanmean(returns):8.2f}  min {np.nanmin(returns):8.2f}  "
                                          f"max {np.nanmax(returns):8.2f}")
        point = agents // self.num_seeds
        if len(self.points) > 1:
            line += "  by point: " + " ".join(f"{nanmean(returns[point == p]):.1f}" for p in range(len(self.points)))
        if len(agents) < len(self.points) * self.num_seeds:
            line += f"  ({plural(len(agents), 'agent')} of process 0)"
        print(line, flush=True)
        logs = []
        for p in self.tracked:
            mine = point == p
            if not mine.any():
                continue
            point_returns, none = returns[mine], np.all(np.isnan(returns[mine]))
            log = {"sps": sps * mine.sum() / len(agents),
                   **{f"{key}/mean": nanmean(metrics[key][mine]) for key in self.keys[1:]},
                   "episode_return/min": np.nan if none else np.nanmin(point_returns),
                   "episode_return/max": np.nan if none else np.nanmax(point_returns),
                   **{f"episode_return/seed_{self.seed + a % self.num_seeds}": float(r)
                      for a, r in zip(agents[mine], point_returns, strict=True)}}
            logs.append((p, log, env_steps))
        return logs


def plural(count, noun):
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
