"""Weights & Biases, all of it: one wandb run per sweep point (grouped by the run), started when training starts, fed
with the progress lines' metrics, ended with its summary and plots; it never stops training: a wandb failure becomes
a one-line warning and the run goes on with its local files."""

import dataclasses
import os
import sys

# Seconds wandb may wait for its server when a run starts, and again when it ends (its defaults are 90 s and more:
# without network a run would sit that long before training, once per sweep point).
WANDB_TIMEOUT_S = 10


def safe_wandb(fn, *args, **kwargs):
    """Calls a wandb function; a failure becomes a one-line warning, never a stopped run. -> its value, or None."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - wandb may raise anything; training must go on
        print(f"warning: wandb: {type(error).__name__}: {error}", file=sys.stderr)
        return None


class Tracking:
    """A run's wandb runs (--track, process 0), one per sweep point; once one failed to start, no other tries."""

    def __init__(self, config, run_name, run_path, points, labels, lead):
        self.runs = []
        if not (lead and config.track):
            return
        sweep = len(points) > 1
        for values, label in zip(points, labels, strict=True):
            if self.runs and self.runs[-1] is None:
                self.runs.append(None)
                continue
            try:
                import wandb

                timeouts = {f"{when}_timeout": WANDB_TIMEOUT_S for when in ("init", "login", "finish")}
                self.runs.append(wandb.init(
                    project=config.wandb_project, entity=config.wandb_entity, dir=run_path, reinit="create_new",
                    name=f"{run_name}/{label}" if sweep else run_name, settings=wandb.Settings(**timeouts),
                    group=(config.wandb_group or run_name) if sweep else config.wandb_group,
                    config={**dataclasses.asdict(config), **values}))
            except Exception as error:  # noqa: BLE001
                print(f"warning: wandb could not start ({type(error).__name__}: {error}); training goes on with "
                      "local files only", file=sys.stderr)
                self.runs.append(None)

    def tracked(self) -> list[int]:  # the sweep points with a wandb run
        return [p for p, run in enumerate(self.runs) if run is not None]

    def log(self, p, metrics, step):
        safe_wandb(self.runs[p].log, metrics, step=step)

    def finish(self, summaries=None, images=None, exit_code=0):
        """Ends every point's run (a finished run's with its summary and images, logged at its last env step)."""
        if not self.tracked():
            return
        import wandb

        def finish(run, summary, paths):
            if paths:
                run.log({os.path.splitext(os.path.basename(p))[0]: wandb.Image(p) for p in paths},
                        step=summary.get("env_steps") if summary else None)
            if summary:
                run.summary.update(summary)
            run.finish(exit_code=exit_code)

        for p in self.tracked():
            safe_wandb(finish, self.runs[p], summaries and summaries[p], images[p] if images else ())
