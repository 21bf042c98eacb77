"""A new or resumed run, along its path: planned (`program`), its directory claimed (`rundir`), compiled and trained
chunk by chunk (`loop`), evaluated, summarised (`summaries`)."""

import shlex
import signal
import time

from scanrl.harness.agents import any_process, exit_on_lost_peers
from scanrl.harness.flags import ConfigError
from scanrl.harness.loop import awake, compile_job, run_evaluation, train_run
from scanrl.harness.metrics import plural
from scanrl.harness.program import plan
from scanrl.harness.rundir import RunDirectory
from scanrl.harness.stops import RunStopped, StopRequest
from scanrl.harness.summaries import summarize
from scanrl.harness.tracking import Tracking


def train(algorithm, config, points, exit_process=False):
    """A new or resumed run: planned, its directory claimed, compiled, trained in chunks, evaluated, summarised.
    `exit_process`: a command line's run, which a second Ctrl-C ends at once (`StopRequest`)."""
    job = plan(algorithm, config, points)
    config, run_dir = job.config, None  # with its device count
    try:
        with exit_on_lost_peers("a step the processes take together"):  # at a collective anywhere in the run
            # From here on Ctrl-C or SIGTERM (during compilation too) stop the run where the running chunk ends.
            with StopRequest(exit_process) as stop:
                described = job.describe()
                run_dir = RunDirectory(algorithm.name, config, points, job.lead)  # claimed, config.json written, owned
                if job.lead:
                    print(f"{described}, run dir {run_dir.path}", flush=True)
                stop.doing, doing = "stopping once compiled, before any training", stop.doing
                try:
                    compiled, evaluation, compile_s = awake(compile_job, job)
                except ConfigError:
                    run_dir.give_up()  # a new run that cannot start leaves nothing behind
                    raise
                stop.doing = doing
                signum = any_process(stop.signal or 0)
                if signum:  # during compilation: nothing trained yet, nothing to wait for
                    raise RunStopped(f"{signal.Signals(signum).name}: stopped while compiling, before any training: "
                                     f"nothing was trained{' further' if config.resume else ''}; "
                                     f"{'continue' if config.resume else 'start it'} with: python {algorithm.script} "
                                     f"--resume {shlex.quote(run_dir.path)}", 128 + signum)
                if job.lead:
                    print(f"compiled in {compile_s:.1f} s", flush=True)
                tracking = Tracking(config, run_dir.run_name, run_dir.path, points, run_dir.labels, job.lead)
                trained = train_run(job, compiled, run_dir, tracking, stop)
                if trained is None:
                    return
                runner, history, done, start = trained
                extra = {"resumed_after_iteration": done or None, "compile_s": compile_s,
                         "train_s": time.perf_counter() - start}
                if job.lead:
                    print(f"trained in {extra['train_s']:.1f} s; evaluating {plural(len(job.keys), 'agent')} on "
                          f"{plural(config.eval_episodes, 'episode')} each, then writing the summaries and plots",
                          flush=True)

                def stopped(signum):
                    return RunStopped(f"{signum.name}: stopped during the final evaluation; training is finished, "
                                      "its checkpoint and metrics.csv written, summary.json not: evaluate and "
                                      f"summarise it with: python {algorithm.script} --resume "
                                      f"{shlex.quote(run_dir.path)}", 128 + signum, abandon=True)

                eval_returns = run_evaluation(evaluation, job, runner, stop, stopped)
                summarize(job, eval_returns, runner, history, run_dir, tracking, extra)
    finally:  # a new run's directory is owned until the end
        if run_dir is not None:
            run_dir.release()
