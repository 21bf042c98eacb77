"""A run's record: everything a run writes, owned by one object (`RunRecord`) that the loop calls as training goes.
The run directory <out-dir>/<run-name>/, claimed by a new run (config.json written first, exclusively) or taken over by
--resume, and owned (`files.RunLock`) to the run's end; its checkpoints (every process) and metrics.csv, the progress
lines and wandb (process 0); at the end summary.json, the plots and the algorithm's own outputs. Nothing goes anywhere
but the directory the run claimed (`RunLock.check` before each chunk's writes), never through a link (`files`)."""

import contextlib
import dataclasses
import json
import os
import shutil
import time

import jax
import numpy as np

from scanrl.harness import aggregate, stops
from scanrl.harness.aggregate import nanmean
from scanrl.harness.checkpoints import Checkpoints
from scanrl.harness.files import RunLock, claim_run_directory, foreign_folder, replaced, save_figure
from scanrl.harness.flags import ConfigError
from scanrl.harness.metrics import MetricsCsv, Progress, columns_kept, plural
from scanrl.harness.plots import carried_returns, carry_forward, plot_learning_curve, plot_sweep, shared_ylim
from scanrl.harness.sweeps import point_label
from scanrl.harness.tracking import Tracking


class RunRecord:
    """The record of a new or resumed run (`job`: `program.Job`). The loop calls `start` once the agents exist, `piece`
    after each piece of a chunk, `chunk` after each chunk, `trained` after the last, `finish` at the end (or `failed`);
    `release` gives the directory up."""

    def __init__(self, job):
        self.job, self.config, self.points, self.lead = job, job.config, job.points, job.lead
        self.name = job.algorithm.name
        config, processes = job.config, job.processes
        os.umask(os.umask(0) | 0o022)  # what the run makes (on the way to its directory too) is no one else's to write
        if config.resume is not None:
            self.path = config.resume  # its real path (`resume.resumed`)
            self.run_name = os.path.basename(os.path.normpath(self.path))
            if self.lead and (foreign := foreign_folder(self.path)):
                raise ConfigError(f"--resume: the run directory {self.path} {foreign}; a run writes only in a folder "
                                  "of its own that no one else can write in")
        else:
            # Brax ids hold '/' and ':'. The suffix parts jobs started in the same second; all take process 0's name.
            env_name = config.env.replace("/", "-").replace(":", "-")
            stamp = processes.broadcast(int(time.time()))
            suffix = processes.broadcast(int.from_bytes(os.urandom(3), "big"))
            self.run_name = config.run_name or f"{env_name}__{self.name}__{config.seed}__{stamp}_{suffix:06x}"
            self.path = os.path.join(config.out_dir, self.run_name)
            claimed = claim_run_directory(self.path, {"algo": self.name, **dataclasses.asdict(config),
                                                      "resume": None}) if self.lead else ""
            if processes.broadcast(len(claimed)):  # process 0 could not claim it: every process stops
                raise ConfigError(claimed or f"run directory {self.path} could not be claimed by process 0")
        which = "--resume" if config.resume is not None else "the new run"
        self.lock = RunLock(self.path, which) if self.lead else None
        self.sweep = len(self.points) > 1
        self.labels = [point_label(p) for p in self.points]  # the points' names, and a sweep's folders
        self.point_dirs = [os.path.join(self.path, label) if self.sweep else self.path for label in self.labels]
        self.checkpoints = self.tracking = self.progress = None
        self.metrics_csvs, self.pending = [], None  # pending: (first iteration, rows) of the chunk being checkpointed

    @property
    def resume(self) -> str:
        """The command that goes on with the run (its stop lines say it)."""
        return stops.resume_command(self.job.algorithm.script, self.path, self.config.env)

    @contextlib.contextmanager
    def saving(self):
        """The checkpoints, open for the chunks (and --resume's restore); leaving waits for the save in flight."""
        with Checkpoints(self.path, self.config.keep_checkpoints) as self.checkpoints:
            yield self.checkpoints

    def start(self, history, done):
        """Training starts after iteration `done` (`history`: the restored metrics, or None): wandb's runs, each
        point's metrics.csv (a resumed run's rebuilt from `history`, whatever state the file was left in) and the
        progress lines."""
        job, config = self.job, self.config
        self.tracking = Tracking(config, self.run_name, self.path, self.points, self.labels, self.lead)
        if self.lead:
            tracked, keys = self.tracking.tracked(), tuple(job.metric_keys)
            seeds = [config.seed + i for i in range(config.num_seeds)]
            paths = [os.path.join(d, "metrics.csv") for d in self.point_dirs]
            self.metrics_csvs = [MetricsCsv(path, keys if history is None else columns_kept(path, keys), seeds,
                                            None if history is None else point_rows(history, p, config.num_seeds),
                                            make_dir=self.sweep) for p, path in enumerate(paths)]
            self.progress = Progress(config, self.points, job.local_agents, keys, job.num_iterations - 1,
                                     int(history["env_steps"][0, done - 1]) if done else 0, tracked)

    def piece(self, start, count, rows):
        """After a piece of iterations `start` .. `start + count - 1` ran: its progress lines, its metrics to wandb."""
        for p, log, env_steps in self.progress.show(start, count, rows):
            self.tracking.log(p, log, env_steps)

    def chunk(self, done, reached, runner, history, metrics, save=True):
        """After a chunk (iterations `done` .. `reached`, `metrics` its rows, `history` all so far): the rows of the
        chunk before go to metrics.csv once its checkpoint is committed (rows on disk never run ahead of a checkpoint,
        so a kill at any moment leaves a run --resume goes on from); a diverged chunk's rows go at once, to show
        where; then, with `save`, checkpoint `reached` starts writing while the next chunk trains."""
        self._write_pending()
        diverged = bool(metrics["nonfinite"].any())
        if diverged and self.lead:
            self._append(done, metrics)
        if save:
            with self.job.processes.guard("a chunk's checkpoint"):  # orbax syncs the processes
                self.checkpoints.save(reached, runner, history, self.name, self.config)
            self.pending = None if diverged else (done, metrics)

    def trained(self):
        """After the last chunk: its rows, once its checkpoint is committed."""
        self._write_pending()

    def _write_pending(self):
        with self.job.processes.guard("a chunk's checkpoint"):
            self.checkpoints.wait()
        if self.lead:
            self.lock.check()  # the rows, and the next checkpoint, go to the directory the run claimed or nowhere
            if self.pending is not None:
                self._append(*self.pending)
        self.pending = None

    def _append(self, first, metrics):
        for p, metrics_csv in enumerate(self.metrics_csvs):
            metrics_csv.append(first, point_rows(metrics, p, self.config.num_seeds))

    def failed(self, error):
        """The one line for an error that ended training (None: not one of those), wandb's runs ended; without a
        checkpoint written, the run directory is given up (nothing of it is worth keeping)."""
        script, config, checkpoints = self.job.algorithm.script, self.config, os.path.join(self.path, "checkpoints")
        trained = os.path.isdir(checkpoints) and any(name.isdigit() for name in os.listdir(checkpoints))
        if self.tracking is not None:
            self.tracking.finish(exit_code=1)
        if isinstance(error, OSError):  # metrics.csv or a checkpoint could not be written
            return stops.write_failed(error, script, self.path, config.env)
        failure = stops.callback_failure(error, script, self.path, config.env, trained or config.resume is not None)
        if failure is not None and not trained:
            self.give_up()
        return failure

    def give_up(self):
        """A new run that cannot start (it does not fit in memory) leaves no directory (its own: `RunLock.check`)."""
        if self.lead and self.config.resume is None:
            with contextlib.suppress(OSError):
                self.lock.check()
                self.release()
                shutil.rmtree(self.path, ignore_errors=True)

    def release(self):
        if self.lock is not None:
            self.lock.release()

    def finish(self, eval_returns, runner, history, extra):
        """The end of a trained run: its report (counts, speeds) and every output, from every agent's final evaluation
        (`eval_returns`: agents x episodes), final runners (read only by the algorithm's own outputs) and metrics."""
        job, config = self.job, self.config
        algorithm, num_agents = job.algorithm, len(job.keys)
        runner = job.processes.gather(runner, "the final runners") if algorithm.write_outputs is not None else None
        if not self.lead:
            return
        done = extra["resumed_after_iteration"] or 0

        def count_and_rate(key):
            """Per agent at the end; per second over all agents of this process's training (after iteration `done`)."""
            count = int(history[key][0, -1])
            return count, (count - (int(history[key][0, done - 1]) if done else 0)) * num_agents / extra["train_s"]

        env_steps, sps = count_and_rate("env_steps")
        extra = {**extra, "sps": sps, "num_devices": int(job.mesh.devices.size), "num_processes": jax.process_count()}
        counts, speeds = f"{env_steps} env steps", f"{sps:.0f} env steps/s"
        if "updates" in history:  # gradient updates, where an algorithm counts them apart from iterations
            updates, updates_per_s = count_and_rate("updates")
            extra = {"updates": updates, **extra, "updates_per_s": updates_per_s}
            counts, speeds = f"{counts} and {updates} updates", f"{speeds} and {updates_per_s:.0f} updates/s"
        print(f"\n{'=' * 72}\n{algorithm.name} on {config.env}: {plural(num_agents, 'agent')}, {counts} each")
        print(f"compile {extra['compile_s']:.1f} s, train {extra['train_s']:.1f} s, {speeds} over all agents")
        try:
            self.write_summaries(history, eval_returns.mean(axis=1), runner, extra)
        except OSError as error:
            self.tracking.finish(exit_code=1)
            raise stops.write_failed(error, algorithm.script, self.path, config.env) from None

    def write_summaries(self, history, eval_returns, runner, extra):
        """Every output of a finished run, its report, the wandb runs ended; `runner` on the host or None."""
        config, points = self.config, self.points
        self.lock.check()  # still the directory the run claimed
        title = f"{self.name} on {config.env}"
        ylim = None
        if self.sweep:  # every point's plot on the same axes, so they compare at a glance
            print("plotting the learning curves of every point", flush=True)
            curves = [carried_returns(point_rows(history, p, config.num_seeds)) for p in range(len(points))]
            ylim = shared_ylim([c for c in curves if c is not None])
            plot_sweep(os.path.join(self.path, "learning_curves.png"), history["env_steps"][0], curves,
                       self.labels, f"{title}: {len(points)} sweep points", config.num_seeds)
        summaries, images = zip(*(self.point_summary(p, (history, eval_returns, runner), extra, title, ylim)
                                  for p in range(len(points))), strict=True)
        if self.sweep:
            self.rank_points(summaries, extra)
        print(f"written to {self.path}\n{'=' * 72}")
        self.tracking.finish(summaries, images)

    def point_summary(self, p, rows, extra, title, ylim):
        """Sweep point p's plot, report lines, outputs and summary.json -> (its summary, its images)."""
        config, point, point_dir = self.config, self.points[p], self.point_dirs[p]
        metrics, returns, runner = point_rows(rows, p, config.num_seeds)
        seeds = [config.seed + i for i in range(config.num_seeds)]
        if self.sweep:
            print(f"-- point {p}: {self.labels[p]}")
        images = [plot_learning_curve(os.path.join(point_dir, "learning_curve.png"), metrics,
                                      f"{title}, {self.labels[p]}" if self.sweep else title, ylim)]
        final, fallback = final_returns(metrics, with_fallback=True)
        summary = {"algo": self.name, "env": config.env, "num_seeds": config.num_seeds, "seeds": seeds,
                   "total_timesteps": config.total_timesteps, "env_steps": int(metrics["env_steps"][0, -1]),
                   **extra, "sweep_point": point or None,
                   # the point's own count: a swept field may change it (td3's learning_starts)
                   **({"updates": int(metrics["updates"][0, -1])} if "updates" in metrics else {}),
                   "final_return": json_safe(np.ravel(final)), "eval_return": json_safe(np.ravel(returns)),
                   # over seeds, as rliable reports them: IQM with its 95% stratified-bootstrap interval
                   "eval_return_iqm": aggregate.summarize(returns), "final_return_iqm": aggregate.summarize(final)}
        if self.sweep:  # a point that diverged while the others trained on (harness.loop.check_divergence)
            bad = np.asarray(metrics["nonfinite"], bool).any(axis=0)
            summary["diverged_at_iteration"] = int(np.argmax(bad)) + 1 if bad.any() else None
            if bad.any():
                print(f"diverged at iteration {summary['diverged_at_iteration']}: its returns are not ranked")
        print(f"final return (last 10% of training): mean {nanmean(final):.2f}, per seed "
              + " ".join(f"{r:.1f}" for r in final))
        if fallback.any():
            late = [seeds[i] for i in np.flatnonzero(fallback)]
            print(f"  (no episode ended in the last 10% for seed(s) {', '.join(map(str, late))}: their last finished "
                  "episodes count instead)" if np.isfinite(final[fallback]).any() else
                  "  (no episode ended in this run: no final return; train for longer)")
        iqm = summary["eval_return_iqm"]
        iqm = f"IQM {iqm['iqm']:.2f} [{iqm['ci'][0]:.2f}, {iqm['ci'][1]:.2f}], " if iqm["n"] else ""
        print(f"eval return (deterministic policy):  mean {returns.mean():.2f}, {iqm}per seed "
              + " ".join(f"{r:.1f}" for r in returns))
        if self.job.algorithm.write_outputs is not None:
            fields, figures = self.job.algorithm.write_outputs(config, runner)
            summary.update(fields)
            images += [save_figure(figure, os.path.join(point_dir, name)) for name, figure in figures.items()]
        write_json(os.path.join(point_dir, "summary.json"), summary)
        return summary, images

    def rank_points(self, summaries, extra):
        """A sweep's summary.json, ranking its points, and the ranking's report line. The deterministic policy's
        return on fresh episodes is what a point delivers; the training return (exploring) ranks only where no point
        has one."""
        config, points, labels = self.config, self.points, self.labels
        by = "eval_return" if any(np.isfinite(nanmean(s["eval_return"])) for s in summaries) else "final_return"
        means = [np.nan if s["diverged_at_iteration"] else nanmean(s[by]) for s in summaries]
        ranking = sorted(range(len(points)), key=lambda p: -np.nan_to_num(means[p], nan=-np.inf))
        write_json(os.path.join(self.path, "summary.json"), {
            "algo": self.name, "env": config.env, "sweep": list(config.sweep), **extra, "ranked_by": f"{by}_mean",
            "ranking": [{"rank": r + 1, "point": labels[p], "values": points[p],
                         "final_return_mean": nanmean(summaries[p]["final_return"]),
                         "eval_return_mean": nanmean(summaries[p]["eval_return"]),
                         "diverged_at_iteration": summaries[p]["diverged_at_iteration"]}
                        for r, p in enumerate(ranking)]})
        described = ("eval return (deterministic policy, mean over seeds)" if by == "eval_return"
                     else "final return (last 10% of training, mean over seeds)")
        shown = ["diverged" if s["diverged_at_iteration"] else f"{m:.1f}"
                 for s, m in zip(summaries, means, strict=True)]
        print(f"ranking by {described}: " + "; ".join(f"{r + 1}. {labels[p]} ({shown[p]})"
                                                      for r, p in enumerate(ranking)))
        print(f"all points on one plot: {os.path.join(self.path, 'learning_curves.png')}")


def point_rows(tree, p, num_seeds):
    """Sweep point p's rows (its agents) of every array."""
    return jax.tree.map(lambda x: x[p * num_seeds:(p + 1) * num_seeds], tree)


def final_returns(metrics, with_fallback=False):
    """Per agent: the mean return of the episodes that ended in the last 10% of iterations, else (long episodes, a
    short run) its last finished episodes' return, NaN if none; `with_fallback` -> (returns, which agents fell back)."""
    num_iterations = metrics["episodes"].shape[1]
    tail = slice(num_iterations - max(1, num_iterations // 10), None)
    episodes = np.nan_to_num(np.asarray(metrics["episodes"][:, tail], dtype=float))
    with np.errstate(invalid="ignore", divide="ignore"):
        final = np.nansum(metrics["episode_return"][:, tail] * episodes, axis=1) / episodes.sum(axis=1)
    fallback = episodes.sum(axis=1) == 0
    final = np.where(fallback, carry_forward(metrics["episode_return"])[:, -1], final)
    return (final, fallback) if with_fallback else final


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
