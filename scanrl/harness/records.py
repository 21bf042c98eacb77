"""The run directory and what a run writes there: config.json before compiling, metrics.csv as chunks end,
progress lines (and wandb's live metrics) while training, learning_curve.png and summary.json at the end; with
--sweep, one sub-directory per point. Only process 0 writes."""

import csv
import dataclasses
import json
import os
import shutil
import time

import numpy as np

from scanrl.harness import aggregate
from scanrl.harness.files import RunLock, folder, open_append, replaced, save_figure
from scanrl.harness.flags import ConfigError
from scanrl.harness.scale import broadcast, point_label, point_rows
from scanrl.harness.tracking import finish_wandb, safe_wandb, start_wandb


def nanmean(values):
    """Mean of the non-NaN values; NaN (without a warning) if there are none."""
    values = np.asarray(values, dtype=float)
    return np.nan if np.all(np.isnan(values)) else float(np.nanmean(values))


def to_json(x):
    return [None if np.isnan(v) else float(v) for v in np.asarray(x, dtype=float).ravel()]


class RunDirectory:
    """<out-dir>/<run-name>/ of a new run (claimed, config.json written) or of a resumed one, its sweep points'
    directories and their wandb runs."""

    def __init__(self, algorithm, config, points, lead):
        self.name, self.config, self.points, self.lead = algorithm.name, config, points, lead
        if config.resume is not None:
            self.path = os.path.realpath(config.resume)  # reached through a link, as it is: its files' folder is none
            self.run_name = os.path.basename(os.path.normpath(self.path))
        else:
            # Brax ids hold a '/' (and maybe a ':'); neither belongs in a directory name. The random suffix keeps
            # the default names of jobs started in the same second apart; every process gets process 0's name.
            env_name = config.env.replace("/", "-").replace(":", "-")
            stamp, suffix = broadcast(int(time.time())), broadcast(int.from_bytes(os.urandom(3), "big"))
            self.run_name = config.run_name or f"{env_name}__{self.name}__{config.seed}__{stamp}_{suffix:06x}"
            self.path = os.path.join(config.out_dir, self.run_name)
            claimed = claim_run_directory(self.path, {"algo": self.name, **dataclasses.asdict(config),
                                                      "resume": None}) if lead else ""
            if broadcast(len(claimed)):  # process 0 could not claim it: every process stops
                raise ConfigError(claimed or f"run directory {self.path} could not be claimed by process 0")
            # Owned from here to the end of the run (a --resume of it meanwhile is refused); --resume's own lock is
            # taken by `harness.main` before it reads the run's config.
            self.lock = RunLock(self.path, "the new run") if lead else None
        self.sweep = len(points) > 1
        self.point_dirs = [os.path.join(self.path, point_label(p)) if self.sweep else self.path for p in points]
        self.wandb_runs = []

    lock = None

    def release(self):
        """Gives up the ownership of a new run's directory (the end of the run)."""
        if self.lock is not None:
            self.lock.release()

    def give_up(self):
        """A new run that cannot go on before it started (it does not fit in memory): its directory goes."""
        if self.lead and self.config.resume is None:
            self.release()
            shutil.rmtree(self.path, ignore_errors=True)

    def start_wandb(self):
        """One wandb run per sweep point (--track, process 0); once one could not start, the others do not try
        (and wait) again."""
        config = self.config
        if not (config.track and self.lead):
            return
        for p in self.points:
            if self.wandb_runs and self.wandb_runs[-1] is None:
                self.wandb_runs.append(None)
                continue
            self.wandb_runs.append(start_wandb(
                config, f"{self.run_name}/{point_label(p)}" if self.sweep else self.run_name, self.path,
                (config.wandb_group or self.run_name) if self.sweep else config.wandb_group, p))

    def open_metrics(self, keys, history=None):
        """Starts each point's metrics.csv; a resumed run's is rebuilt from `history`, the metrics its checkpoint
        holds, whatever state the file was left in (cut short, deleted, holding rows past the checkpoint)."""
        self.metrics_csvs = [MetricsCsv(os.path.join(d, "metrics.csv"), keys, self.seeds(),
                                        None if history is None else point_rows(history, p, self.config.num_seeds),
                                        make_dir=self.sweep)
                             for p, d in enumerate(self.point_dirs)]

    def seeds(self):
        return [self.config.seed + i for i in range(self.config.num_seeds)]

    def append_metrics(self, first, metrics):
        for p, metrics_csv in enumerate(self.metrics_csvs):
            metrics_csv.append(first, point_rows(metrics, p, self.config.num_seeds))

    def finish_wandb(self, summaries=None, images=None, exit_code=0):
        for p, wandb_run in enumerate(self.wandb_runs):
            summary = summaries and summaries[p]
            finish_wandb(wandb_run, summary, images[p] if images else (), exit_code,
                         step=summary.get("env_steps") if summary else None)

    def write_summaries(self, algorithm, history, eval_returns, runner, extra):
        """Per point: learning_curve.png, summary.json and the algorithm's own outputs (`write_outputs`, from the
        point's agents' rows of `runner`, on the host); with --sweep the run's summary.json ranks the points.
        Prints the report and ends the wandb runs."""
        config, seeds = self.config, [self.config.seed + i for i in range(self.config.num_seeds)]
        summaries, images = [], []
        title = f"{self.name} on {config.env}"
        if self.sweep:  # every point's plot on the same axes, so they compare at a glance
            print("plotting the learning curves of every point", flush=True)
            curves = [carried_returns(point_rows(history, p, config.num_seeds)) for p in range(len(self.points))]
            ylim = shared_ylim([c for c in curves if c is not None])
            plot_sweep(os.path.join(self.path, "learning_curves.png"), history["env_steps"][0], curves,
                       [point_label(p) for p in self.points], f"{title}: {len(self.points)} sweep points",
                       config.num_seeds)
        else:
            ylim = None
        for p, point in enumerate(self.points):
            if self.sweep:
                print(f"-- point {p}: {point_label(point)}")
            metrics, returns = point_rows((history, eval_returns), p, config.num_seeds)
            point_dir = self.point_dirs[p]
            images.append([plot_learning_curve(os.path.join(point_dir, "learning_curve.png"), metrics,
                                               f"{title}, {point_label(point)}" if self.sweep else title, ylim)])
            final, fallback = final_returns(metrics, with_fallback=True)
            summary = {"algo": self.name, "env": config.env, "num_seeds": config.num_seeds, "seeds": seeds,
                       "total_timesteps": config.total_timesteps, "env_steps": int(metrics["env_steps"][0, -1]),
                       **extra, "sweep_point": point or None,
                       # a count a swept field may change (td3's learning_starts): the point's own
                       **({"updates": int(metrics["updates"][0, -1])} if "updates" in metrics else {}),
                       "final_return": to_json(final), "eval_return": to_json(returns),
                       # over seeds, as rliable reports them: IQM with its 95% stratified-bootstrap interval
                       "eval_return_iqm": aggregate.summarize(returns),
                       "final_return_iqm": aggregate.summarize(final)}
            if self.sweep:  # a point that diverged while the others trained on (harness.run.check_divergence)
                bad = np.asarray(metrics["nonfinite"], bool).any(axis=0)
                summary["diverged_at_iteration"] = int(np.argmax(bad)) + 1 if bad.any() else None
                if bad.any():
                    print(f"diverged at iteration {summary['diverged_at_iteration']}: its returns are not ranked")
            print(f"final return (last 10% of training): mean {nanmean(final):.2f}, per seed "
                  + " ".join(f"{r:.1f}" for r in final))
            if fallback.any():
                late = [seeds[i] for i in np.flatnonzero(fallback)]
                print(f"  (no episode ended in the last 10% for seed(s) {', '.join(map(str, late))}: their last "
                      "finished episodes count instead)" if np.isfinite(final[fallback]).any() else
                      "  (no episode ended in this run: no final return; train for longer)")
            iqm = summary["eval_return_iqm"]
            iqm = f"IQM {iqm['iqm']:.2f} [{iqm['ci'][0]:.2f}, {iqm['ci'][1]:.2f}], " if iqm["n"] else ""
            print(f"eval return (deterministic policy):  mean {returns.mean():.2f}, {iqm}per seed "
                  + " ".join(f"{r:.1f}" for r in returns))
            if algorithm.write_outputs is not None:
                fields, more_images = algorithm.write_outputs(config, point_dir,
                                                              point_rows(runner, p, config.num_seeds))
                summary.update(fields)
                images[-1] += more_images
            write_json(os.path.join(point_dir, "summary.json"), summary)
            summaries.append(summary)
        if self.sweep:
            # The deterministic policy's return on fresh episodes is what a point delivers; the training return
            # (exploring, and averaged over the last 10%) ranks only where no point has an eval return.
            by = "eval_return" if any(np.isfinite(nanmean(s["eval_return"])) for s in summaries) else "final_return"
            means = [np.nan if s["diverged_at_iteration"] else nanmean(s[by]) for s in summaries]
            ranking = sorted(range(len(self.points)), key=lambda p: -np.nan_to_num(means[p], nan=-np.inf))
            write_json(os.path.join(self.path, "summary.json"), {
                "algo": self.name, "env": config.env, "sweep": list(config.sweep), **extra,
                "ranked_by": f"{by}_mean",
                "ranking": [{"rank": r + 1, "point": point_label(self.points[p]), "values": self.points[p],
                             "final_return_mean": nanmean(summaries[p]["final_return"]),
                             "eval_return_mean": nanmean(summaries[p]["eval_return"]),
                             "diverged_at_iteration": summaries[p]["diverged_at_iteration"]}
                            for r, p in enumerate(ranking)]})
            described = ("eval return (deterministic policy, mean over seeds)" if by == "eval_return"
                         else "final return (last 10% of training, mean over seeds)")
            print(f"ranking by {described}: " + "; ".join(
                f"{r + 1}. {point_label(self.points[p])} "
                f"({'diverged' if summaries[p]['diverged_at_iteration'] else f'{means[p]:.1f}'})"
                for r, p in enumerate(ranking)))
            print(f"all points on one plot: {os.path.join(self.path, 'learning_curves.png')}")
        print(f"written to {self.path}\n{'=' * 72}")
        self.finish_wandb(summaries, images)


def claim_run_directory(path, config_json) -> str:
    """Creates the run directory `path` (an existing empty one will do) and its config.json, exclusively: of two
    runs started at once with one name, exactly one gets it. -> "" if claimed, else the error line."""
    try:
        os.makedirs(path, exist_ok=True)
        if os.listdir(path):
            raise FileExistsError
        with open(os.path.join(path, "config.json"), "x") as f:  # "x": fails if another run created it first
            json.dump(config_json, f, indent=2)
    except FileExistsError:
        return f"run directory {path} exists and is not empty; choose another --run-name, or --resume it"
    except OSError as error:
        return f"cannot create the run directory {path}: {error.strerror}; choose another --out-dir"
    return ""


def write_json(path, value):
    """Written to a temporary name and renamed: a kill or a full disk leaves the old file or the new one. NaN and
    infinities are written as null: JSON has no such numbers (a literal NaN makes the file unreadable to strict
    parsers)."""
    with replaced(path) as f:
        json.dump(json_safe(value), f, indent=2, allow_nan=False)


def json_safe(value):
    """`value` with every non-finite float (numpy's too) as None, numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


COUNTS = ("env_steps", "episodes", "updates")  # metrics that count something, written as integers


def plural(count, noun):
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class MetricsCsv:
    """<run dir>/metrics.csv, one row per iteration and agent, appended as chunks end, once each one's checkpoint
    is committed (harness.run.train_chunks): rows on disk never run ahead of a checkpoint. Rows go iteration by
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


def final_returns(metrics, with_fallback=False):
    """Per agent: mean return of the episodes that ended in the last 10% of iterations. An agent none of whose
    episodes ended there (long episodes, a short run) gets its last finished episodes' return instead, NaN if it
    finished none; `with_fallback` -> (returns, which agents fell back)."""
    num_iterations = metrics["episodes"].shape[1]
    tail = slice(num_iterations - max(1, num_iterations // 10), None)
    episodes = np.nan_to_num(np.asarray(metrics["episodes"][:, tail], dtype=float))
    total = np.nansum(metrics["episode_return"][:, tail] * episodes, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        final = total / episodes.sum(axis=1)
    fallback = episodes.sum(axis=1) == 0
    if fallback.any():
        final = np.where(fallback, carry_forward(metrics["episode_return"])[:, -1], final)
    return (final, fallback) if with_fallback else final


def carry_forward(values):
    """(agents, iterations) with NaN where nothing was measured -> each row's last measured value so far (NaN
    before its first)."""
    values = np.asarray(values, dtype=float)
    index = np.where(np.isnan(values), 0, np.arange(values.shape[1]))
    np.maximum.accumulate(index, axis=1, out=index)
    return np.take_along_axis(values, index, axis=1)


def carried_returns(metrics, key="episode_return"):
    """Per agent and iteration, the return of its latest finished episodes (carried forward from the iteration
    they ended in), restricted to the agents with any; None if no agent finished an episode."""
    carried = carry_forward(metrics[key])
    covered = ~np.all(np.isnan(carried), axis=1)
    return carried[covered] if covered.any() else None


def mean_band(carried):
    """-> (first iteration every agent of `carried` has a value, then from there on: the mean over agents, the
    half-width of its 95% confidence interval (Student's t over the agents), min and max)."""
    start = int(np.argmax(~np.isnan(carried).any(axis=0)))
    tail, n = carried[:, start:], len(carried)
    half = np.zeros(tail.shape[1])
    if n > 1:
        from scipy.stats import t

        half = t.ppf(0.975, n - 1) * tail.std(0, ddof=1) / np.sqrt(n)
    return start, tail.mean(0), half, tail.min(0), tail.max(0)


def shared_ylim(curves):
    """One y-range for every sweep point's plot, with a margin; None if no point has a finished episode."""
    if not curves:
        return None
    low, high = min(np.nanmin(c) for c in curves), max(np.nanmax(c) for c in curves)
    margin = 0.05 * (high - low) or max(1.0, 0.05 * abs(high))
    return low - margin, high + margin


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_carried(ax, steps, carried, label, num_agents, color=None, full=True):
    """The mean over agents of their carried-forward curves, the 95% interval of that mean and (`full`) the
    min-max range; each agent's own curve too where there are few. -> the mean's line."""
    start, mean, half, low, high = mean_band(carried)
    covered, x = len(carried), steps[start:]
    if full and 1 < covered <= 10:
        for row in carried:
            ax.plot(steps, row, color="0.6", linewidth=0.6, alpha=0.6, drawstyle="steps-post")
        ax.plot([], [], color="0.6", linewidth=0.6, label="each seed")
    over = plural(covered, "seed") + (f" of {num_agents} (the others finished no episode)" if covered < num_agents
                                      else "")
    # Steps, not slopes: a carried value holds until the next episode ends.
    (line,) = ax.plot(x, mean, color=color, linewidth=2 if full else 1.5, drawstyle="steps-post",
                      label=f"{label}mean over {over}" if covered > 1 else f"{label}{over}")
    if covered > 1:
        ax.fill_between(x, np.maximum(mean - half, low), np.minimum(mean + half, high), color=line.get_color(),
                        alpha=0.3, step="post",
                        label=f"{label}95% interval of the mean" if full else None)
        if full:
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.1, step="post",
                            label="min to max over seeds")
    return line


def _no_episodes(ax, steps):
    ax.text(0.5, 0.5, f"no episode ended in {int(steps[-1]):,} env steps:\ntrain for longer to see a curve",
            transform=ax.transAxes, ha="center", va="center")
    ax.set_xlim(0, max(1, int(steps[-1])))


CARRIED_NOTE = "each seed's value at a step: that of its latest finished episodes"


def plot_learning_curve(path, metrics, title, ylim=None):
    """Episode return against env steps: each seed's return carried forward from its latest finished episodes
    (so a row where none of its episodes ended is no gap), the mean over the seeds that finished any and their
    min-max band. A second panel shows the episode length where it tells something the return does not (a
    constant-reward goal env, GridWorld-v0). -> path."""
    plt = _pyplot()
    steps = np.asarray(metrics["env_steps"][0], dtype=float)
    returns = carried_returns(metrics)
    lengths = carried_returns(metrics, "episode_length") if "episode_length" in metrics else None
    with_length = (lengths is not None and returns is not None and np.nanmax(lengths) > np.nanmin(lengths)
                   and not np.allclose(lengths, returns, equal_nan=True))
    fig, axes = plt.subplots(2 if with_length else 1, 1, figsize=(7, 6.5 if with_length else 4), sharex=True,
                             squeeze=False)
    ax = axes[0, 0]
    if returns is None:
        _no_episodes(ax, steps)
    else:
        _plot_carried(ax, steps, returns, "", len(metrics["episode_return"]))
        ax.legend(loc="best", fontsize=8)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_ylabel("episode return")
    ax.set_title(title)
    if with_length:
        _plot_carried(axes[1, 0], steps, lengths, "", len(metrics["episode_return"]))
        axes[1, 0].set_ylabel("episode length")
    axes[-1, 0].set_xlabel(f"env steps per agent ({CARRIED_NOTE})", fontsize=8)
    return save_figure(fig, path)


def plot_sweep(path, steps, curves, labels, title, num_seeds):
    """Every sweep point's mean return (carried forward, as plot_learning_curve) and min-max band on one set of
    axes. -> path."""
    plt = _pyplot()
    steps = np.asarray(steps, dtype=float)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.get_cmap("tab10" if len(curves) <= 10 else "viridis")
    for p, (carried, label) in enumerate(zip(curves, labels, strict=True)):
        color = colors(p if len(curves) <= 10 else p / max(1, len(curves) - 1))
        if carried is None:
            ax.plot([], [], color=color, label=f"{label}: no episode ended")
        else:
            _plot_carried(ax, steps, carried, f"{label}: ", num_seeds, color=color, full=False)
    if all(c is None for c in curves):
        _no_episodes(ax, steps)
    ax.set_xlabel(f"env steps per agent ({CARRIED_NOTE}; bands: 95% interval of the mean)", fontsize=8)
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=7)
    return save_figure(fig, path)
