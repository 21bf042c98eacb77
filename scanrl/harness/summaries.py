"""The end of a run, on process 0: per sweep point learning_curve.png, summary.json and the algorithm's own outputs;
with --sweep, the points ranked in the run's summary.json and on one plot; the report printed; the wandb runs ended."""

import os

import jax
import numpy as np

from scanrl.harness import aggregate
from scanrl.harness.agents import gather
from scanrl.harness.files import save_figure
from scanrl.harness.metrics import nanmean, plural
from scanrl.harness.plots import carried_returns, carry_forward, plot_learning_curve, plot_sweep, shared_ylim
from scanrl.harness.rundir import json_safe, point_rows, write_json
from scanrl.harness.stops import write_failed


def write_summaries(run_dir, tracking, algorithm, history, eval_returns, runner, extra):
    """Every output of a finished run, its report, the wandb runs ended; `runner` on the host or None."""
    config, points = run_dir.config, run_dir.points
    run_dir.lock.check()  # still the directory the run claimed
    title = f"{run_dir.name} on {config.env}"
    ylim = None
    if run_dir.sweep:  # every point's plot on the same axes, so they compare at a glance
        print("plotting the learning curves of every point", flush=True)
        curves = [carried_returns(point_rows(history, p, config.num_seeds)) for p in range(len(points))]
        ylim = shared_ylim([c for c in curves if c is not None])
        plot_sweep(os.path.join(run_dir.path, "learning_curves.png"), history["env_steps"][0], curves,
                   run_dir.labels, f"{title}: {len(points)} sweep points", config.num_seeds)
    summaries, images = zip(*(point_summary(run_dir, algorithm, p, (history, eval_returns, runner), extra, title, ylim)
                              for p in range(len(points))), strict=True)
    if run_dir.sweep:
        rank_points(run_dir, summaries, extra)
    print(f"written to {run_dir.path}\n{'=' * 72}")
    tracking.finish(summaries, images)


def point_summary(run_dir, algorithm, p, rows, extra, title, ylim):
    """Sweep point p's plot, report lines, outputs and summary.json -> (its summary, its images)."""
    config, point, point_dir = run_dir.config, run_dir.points[p], run_dir.point_dirs[p]
    metrics, returns, runner = point_rows(rows, p, config.num_seeds)
    seeds = run_dir.seeds()
    if run_dir.sweep:
        print(f"-- point {p}: {run_dir.labels[p]}")
    images = [plot_learning_curve(os.path.join(point_dir, "learning_curve.png"), metrics,
                                  f"{title}, {run_dir.labels[p]}" if run_dir.sweep else title, ylim)]
    final, fallback = final_returns(metrics, with_fallback=True)
    summary = {"algo": run_dir.name, "env": config.env, "num_seeds": config.num_seeds, "seeds": seeds,
               "total_timesteps": config.total_timesteps, "env_steps": int(metrics["env_steps"][0, -1]),
               **extra, "sweep_point": point or None,
               # the point's own count: a swept field may change it (td3's learning_starts)
               **({"updates": int(metrics["updates"][0, -1])} if "updates" in metrics else {}),
               "final_return": json_safe(np.ravel(final)), "eval_return": json_safe(np.ravel(returns)),
               # over seeds, as rliable reports them: IQM with its 95% stratified-bootstrap interval
               "eval_return_iqm": aggregate.summarize(returns), "final_return_iqm": aggregate.summarize(final)}
    if run_dir.sweep:  # a point that diverged while the others trained on (harness.loop.check_divergence)
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
    if algorithm.write_outputs is not None:
        fields, figures = algorithm.write_outputs(config, runner)
        summary.update(fields)
        images += [save_figure(figure, os.path.join(point_dir, name)) for name, figure in figures.items()]
    write_json(os.path.join(point_dir, "summary.json"), summary)
    return summary, images


def rank_points(run_dir, summaries, extra):
    """A sweep's summary.json, ranking its points, and the ranking's report line. The deterministic policy's return
    on fresh episodes is what a point delivers; the training return (exploring) ranks only where no point has one."""
    config, points = run_dir.config, run_dir.points
    by = "eval_return" if any(np.isfinite(nanmean(s["eval_return"])) for s in summaries) else "final_return"
    means = [np.nan if s["diverged_at_iteration"] else nanmean(s[by]) for s in summaries]
    ranking = sorted(range(len(points)), key=lambda p: -np.nan_to_num(means[p], nan=-np.inf))
    write_json(os.path.join(run_dir.path, "summary.json"), {
        "algo": run_dir.name, "env": config.env, "sweep": list(config.sweep), **extra, "ranked_by": f"{by}_mean",
        "ranking": [{"rank": r + 1, "point": run_dir.labels[p], "values": points[p],
                     "final_return_mean": nanmean(summaries[p]["final_return"]),
                     "eval_return_mean": nanmean(summaries[p]["eval_return"]),
                     "diverged_at_iteration": summaries[p]["diverged_at_iteration"]}
                    for r, p in enumerate(ranking)]})
    described = ("eval return (deterministic policy, mean over seeds)" if by == "eval_return"
                 else "final return (last 10% of training, mean over seeds)")
    shown = ["diverged" if s["diverged_at_iteration"] else f"{m:.1f}" for s, m in zip(summaries, means, strict=True)]
    print(f"ranking by {described}: " + "; ".join(f"{r + 1}. {run_dir.labels[p]} ({shown[p]})"
                                                  for r, p in enumerate(ranking)))
    print(f"all points on one plot: {os.path.join(run_dir.path, 'learning_curves.png')}")


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


def summarize(job, eval_returns, runner, history, run_dir, tracking, extra):
    """The end of a trained run: its report (counts, speeds) and the run directory's summaries, from every agent's
    final evaluation (`eval_returns`: agents x episodes), final runner and metrics history."""
    algorithm, config, num_agents = job.algorithm, job.config, len(job.keys)
    # only the algorithm's own outputs read the final runners, on the host
    runner = gather(runner, "the final runners") if algorithm.write_outputs is not None else None
    if not job.lead:
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
        write_summaries(run_dir, tracking, algorithm, history, eval_returns.mean(axis=1), runner, extra)
    except OSError as error:
        tracking.finish(exit_code=1)
        raise write_failed(error, algorithm.script, run_dir.path, run_dir.config.env) from None
