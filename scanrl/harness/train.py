"""A new or resumed run, along its path: planned (`program`), its directory claimed (`rundir`), compiled and trained
chunk by chunk (`loop`), evaluated, summarised (`summaries`)."""

from scanrl.harness.agents import exit_on_lost_peers
from scanrl.harness.loop import compile_run, run_evaluation, train_run
from scanrl.harness.program import plan
from scanrl.harness.rundir import RunDirectory
from scanrl.harness.stops import StopRequest, resume_command
from scanrl.harness.summaries import summarize
from scanrl.harness.tracking import Tracking


def train(algorithm, config, points, exit_process=False):
    """The run, along that path. `exit_process`: a command line's run, which a second Ctrl-C ends at once."""
    job, run_dir = plan(algorithm, config, points), None
    try:
        # From here on Ctrl-C or SIGTERM (during compilation too) stop the run where the running chunk ends, and a
        # lost peer at a collective anywhere in the run is one line.
        with exit_on_lost_peers("a step the processes take together"), StopRequest(exit_process) as stop:
            described = job.describe()
            run_dir = RunDirectory(algorithm.name, job.config, points, job.lead)  # claimed, config.json written, owned
            if job.lead:
                print(f"{described}, run dir {run_dir.path}", flush=True)
            compiled, evaluation, compile_s = compile_run(job, run_dir, stop)
            tracking = Tracking(job.config, run_dir.run_name, run_dir.path, points, run_dir.labels, job.lead)
            trained = train_run(job, compiled, run_dir, tracking, stop)
            if trained is None:  # a finished run, left alone
                return
            runner, history, extra = trained
            resume = resume_command(algorithm.script, run_dir.path, job.config.env)
            eval_returns = run_evaluation(evaluation, job, runner, stop, "stopped during the final evaluation; "
                                          "training is finished, its checkpoint and metrics.csv written, summary.json "
                                          f"not: evaluate and summarise it with: {resume}")
            stop.stop_at_once("stopped while writing the summaries; training and evaluation are finished, the "
                              f"checkpoint and metrics.csv written, summary.json perhaps not: write it with: {resume}")
            summarize(job, eval_returns, runner, history, run_dir, tracking, {**extra, "compile_s": compile_s})
    finally:  # the run directory is owned until the end
        if run_dir is not None:
            run_dir.release()
