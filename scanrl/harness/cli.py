"""`main`: a script's command line (`flags.parse_flags`), checked before anything compiles, then a new run trained,
a run resumed (--resume) or evaluated (--eval: `evaluate`); every user error ends here in its one line and exit code."""

import logging
import os
import sys

import jax

from scanrl.harness import compile_cache
from scanrl.harness.evaluate import evaluate_run
from scanrl.harness.flags import ConfigError, check_env, check_flags, flag, parse_flags
from scanrl.harness.loop import train
from scanrl.harness.memory import size_flags
from scanrl.harness.resume import resumed
from scanrl.harness.stops import RunStopped, StopRequest, env_failure
from scanrl.harness.sweeps import sweep_points


def main(algorithm, config=None):
    """Runs a script: parses its flags (unless `config` is given), then evaluates a saved run (--eval), resumes one
    (--resume) or trains a new one. A bad config ends with its one line `error: ...` and exit code 2, before
    anything is compiled or written; a run stopped early (signal, non-finite values) with its own line and code."""
    try:
        given = None  # the fields the command line names; None when `config` is given
        if config is None:
            config, given = parse_flags(algorithm)
            # A host callback that raises is logged with its traceback at every call; the run's one line names it.
            logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)
        compile_cache.start(config.compile_cache)
        if config.eval is not None:
            with StopRequest(exit_process=given is not None) as stop:
                evaluate_run(algorithm, config, stop)
            return
        if config.resume is not None:
            config = resumed(algorithm, config, given or ())
        config, points = check(algorithm, config)
        if jax.process_index() == 0:
            for note in sweep_overrides(algorithm, config, points):
                print(note)
        train(algorithm, config, points, exit_process=given is not None)
    except RunStopped as stopped:
        print(stopped, file=sys.stderr)
        if stopped.abandon and given is not None:  # from the command line: nothing of this process is needed
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(stopped.code)
        sys.exit(stopped.code)
    except jax.errors.JaxRuntimeError as error:  # an allocation the memory check did not foresee
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        cause = str(error).strip().splitlines()[0]
        print(f"error: out of memory ({cause}): lower {size_flags(config)}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # a bad config, or the user's own env failing where it is first traced (--eval, shapes)
        failure = error if isinstance(error, ConfigError) else None if config is None else env_failure(config, error)
        if failure is None:
            raise
        print(f"error: {failure}", file=sys.stderr)
        sys.exit(2)


def check(algorithm, config):
    """-> (the config as it trains, its sweep points); ConfigError if it cannot be trained. Writes nothing."""
    check_flags(config)
    check_env(config)
    algorithm.check(config)
    iterations = algorithm.num_iterations(config)
    if iterations < 1:
        raise ConfigError(f"--total-timesteps {config.total_timesteps} is less than one iteration of "
                          f"{algorithm.script} ({algorithm.steps_per_iteration(config):,} env steps); raise it")
    if config.num_chunks is not None and config.num_chunks > iterations:
        raise ConfigError(f"--num-chunks {config.num_chunks} is more than the {iterations} iterations of this run; "
                          f"use 1 to {iterations}")
    return config, sweep_points(algorithm, config)


def sweep_overrides(algorithm, config, points) -> list[str]:
    """A note for each swept field whose own flag was set too: the sweep's values replace it, not silently."""
    if not config.sweep:
        return []
    defaults = algorithm.config(env=config.env)  # a default may depend on the env (dqn_tabular_q's learner)
    return [f"note: --sweep {name}={','.join(f'{p[name]:g}' for p in points)} overrides {flag(name)} "
            f"{getattr(config, name)}: each point trains with its own value" for name in points[0]
            if getattr(config, name) != getattr(defaults, name)]
