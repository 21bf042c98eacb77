"""The command line: the flags every script shares (`Flags`), read by tyro (`parse_flags`; before JAX starts, the
few `prepare_jax` needs: `early_flags`), `ConfigError`, and the checks of the shared flags and of `require`.

A script's `Config` subclasses `Flags`, adds its algorithm's fields and redefines `env`, `total_timesteps` and
`log_every` with its own defaults; tyro turns every field into a flag of the same name (`num_seeds`: `--num-seeds`)."""

import contextlib
import dataclasses
import io
import json
import math
import os
import sys
from dataclasses import dataclass

import tyro

from scanrl.harness.migrations import RENAMED_FIELDS


class ConfigError(ValueError):
    """A config that cannot be run. Its message is one line that names the flag and says what to do; `harness.main`
    prints it as `error: <message>` and exits with code 2 (as it does a script's `validate`'s ValueError)."""


@dataclass(frozen=True)
class Flags:
    # experiment
    env: str = "CartPole-v1"
    """environment id: a gymnax id, one of ours or an installed suite's (see envs.list_envs()), or your own env as
    module:name (docs/envs.md)"""
    seed: int = 0
    """seed of agent 0; agent i uses seed + i, so any agent can be re-run alone with --seed"""
    num_seeds: int = 1
    """independent agents trained in parallel in one compiled program (vmapped)"""
    total_timesteps: int = 500_000
    """env steps per agent"""
    # evaluation and logging
    eval_episodes: int = 10
    """episodes of the deterministic final policy per agent"""
    track: bool = False
    """log to Weights & Biases"""
    wandb_project: str = "scanrl"
    """wandb project"""
    wandb_entity: str | None = None
    """wandb entity (team or user)"""
    wandb_group: str | None = None
    """wandb group"""
    out_dir: str = "runs"
    """parent directory of the run directory"""
    run_name: str | None = None
    """run directory name, one path component; default {env}__{algorithm}__{seed}__{unix time}_{random suffix}"""
    log_every: int = 20
    """print progress (and log to wandb) every this many iterations; the compiled scan runs pieces of at most this
    many iterations (the largest that divide the run), so Ctrl-C acts within one"""
    compile_cache: str | None = None
    """directory of JAX's persistent compilation cache, so a rerun of the same command loads its compiled programs
    instead of compiling them; off: no cache (default: $SCANRL_COMPILE_CACHE, else ~/.cache/scanrl/jax)"""
    profile: bool = False
    """write a JAX profiler trace of the first piece of training (--log-every iterations at most) to
    <run dir>/profile (Perfetto / TensorBoard)"""
    # chunks, checkpoints, resume and evaluation
    num_chunks: int | None = None
    """write metrics.csv and a checkpoint after each of this many chunks of iterations (as equal as whole pieces
    of the compiled scan allow); default: after the first piece that ends 60 s of training after the last one.
    Ctrl-C or SIGTERM end a chunk early, at a piece's end, resumable"""
    keep_checkpoints: int = 2
    """how many of the newest checkpoints <run dir>/checkpoints keeps"""
    resume: str | None = None
    """continue the run in this directory from its last checkpoint, with its config (only logging flags may differ)"""
    eval: str | None = None
    """do not train: load the last checkpoint of this run directory and print the returns of its deterministic
    policies over --eval-episodes episodes"""
    eval_sampled: bool = False
    """with --eval: act as in training, each action sampled from the policy's distribution (the figure papers that
    evaluate the stochastic policy report, e.g. gymnax-blines), instead of the deterministic policy's argmax / mean
    action; ppo, ppo_rnn and reinforce"""
    seed_index: int | None = None
    """with --eval: only the agent at this index of the run's agents (0 is the run's --seed); default all"""
    gif: str | None = None
    """with --eval: also write one episode of the agent at --seed-index (default 0) to this path as an animated gif
    (envs gymnax can draw: classic control, MinAtar, bsuite Catch, misc)"""
    # scale out: sweeps, devices and processes
    sweep: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """field=v1,v2,...: train every value x every seed in one compiled program; repeat the flag for a grid (the
    fields this script can sweep are listed at the top)"""
    num_devices: int | None = None
    """shard the agents over this many devices (default: as many as there are, or the most that divide the agents)"""
    coordinator_address: str | None = None
    """host:port of process 0 for a multi-process run (jax.distributed); every process gets the same flags"""
    num_processes: int = 1
    """processes of a multi-process run (one per host, or per GPU)"""
    process_id: int = 0
    """this process's index, 0 to --num-processes - 1; process 0 writes the run directory and wandb"""
    distributed_timeout: int = 60
    """seconds a multi-process run waits for all its processes to join; then each exits 1 with one line"""


def parse_flags(algorithm):
    """-> (tyro's parse of the command line, the fields it names: `given_fields`); tyro's error box (a bad value, an
    unknown flag) becomes the one line `error: ...` naming the flag, exit 2. --help prints as tyro prints it."""
    captured = io.StringIO()
    doc = sys.modules[algorithm.make_train_parts.__module__].__doc__
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(algorithm.config, description=description(doc)), given_fields(algorithm, sys.argv[1:])
    except SystemExit as exit_:
        if exit_.code in (0, None):
            sys.stderr.write(captured.getvalue())
            raise
        # The box: a title line (the kind of error), the message (wrapped over lines, naming the flag), a rule. Where
        # the output cannot show the box's characters (an ASCII locale), rich draws it as a rule under the title.
        message = []
        for line in captured.getvalue().splitlines()[1:]:
            text = line.strip().strip("│|").strip()
            if text and not text.strip("─-"):  # a rule: the one under an ASCII title, or the one after the message
                if message:
                    break
                continue
            message.append(text)
        for old, (new, _) in RENAMED_FIELDS.get(algorithm.name, {}).items():  # a flag renamed since: its name now
            if f"--{old.replace('_', '-')}" in sys.argv[1:]:
                raise ConfigError(f"--{old.replace('_', '-')} is --{new.replace('_', '-')} now; use that") from None
        raise ConfigError(f"{' '.join(message) or 'cannot parse the command line'} (see --help)") from None


def given_fields(algorithm, argv) -> set[str]:
    """The config fields a command line names (`--out-dir x`, `--out-dir=x`, `--no-track`), given as well as
    defaulted: --resume takes a logging flag given at its default (`--no-track`) over the run's value."""
    fields, given = {f.name for f in dataclasses.fields(algorithm.config)}, set()
    for arg in argv:
        if arg.startswith("--"):
            name = arg[2:].split("=")[0].replace("-", "_")
            name = name[3:] if name.startswith("no_") and name[3:] in fields else name
            given |= {name} & fields
    return given


def early_flags(argv) -> dict:
    """The flags read before JAX makes its backend (`prepare_jax`) that `argv` names: --help, and a multi-process run's,
    which must join first; as tyro reads them (`--process-id 1`, `--process-id=1`, `--process_id 1`), each with its
    value as a string ("" for --help), unchecked: the config check names a bad value later."""
    found = {}
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        key = "help" if name == "-h" else name[2:].replace("-", "_") if name.startswith("--") else None
        if key in ("help", "coordinator_address", "num_processes", "process_id", "distributed_timeout"):
            found[key] = value if eq or key == "help" else (argv[i + 1] if i + 1 < len(argv) else "")
    return found


# Flags that change what is logged or where, not what is computed: they may differ on --resume and --eval.
# (--log-every sets the length of the compiled scan's pieces: a resumed run keeps it.)
LOGGING_FLAGS = ("track", "wandb_project", "wandb_entity", "wandb_group", "out_dir", "run_name", "profile",
                 "compile_cache", "keep_checkpoints", "resume", "eval", "eval_sampled", "seed_index", "eval_episodes",
                 "gif", "num_devices", "coordinator_address", "num_processes", "process_id", "distributed_timeout")
FLOAT32_MAX = 3.4028234663852886e38  # the largest float32: a larger value is inf inside the programs
MAX_SEED = 2**32 - 1  # a JAX key holds a 32-bit seed here; larger ones would alias smaller ones
MAX_COUNT = 2**31 - 1  # sizes and counters are int32 inside the compiled programs: every integer flag's bound


def description(module_doc) -> str:
    """--help's description: the first paragraph of the script's docstring and what --sweep can vary."""
    summary = (module_doc or "").strip().split("\n\n")[0]
    return (f"{summary}\n\n--sweep can vary the script's own numeric fields (lr is learning_rate), those that do "
            "not set a shape or a loop length; each agent reads its value as config.<field>")


def escaped(value) -> str:
    """`value` as a one-line message shows it: as it is, or where it holds a control character (a newline would split
    the line, an escape sequence drive the terminal) as JSON writes it."""
    text = str(value)
    return text if text.isprintable() else json.dumps(text)


def flag(name: str) -> str:
    """The command-line flag of a config field: num_seeds -> --num-seeds."""
    return "--" + name.replace("_", "-")


def require(config, positive=(), unit=(), nonnegative=()):
    """ConfigError naming the flag unless every field named in `positive` is > 0, in `unit` lies in [0, 1] and in
    `nonnegative` is >= 0 (NaN is none of these): the range checks of a script's `validate`."""
    for name in positive:
        value = getattr(config, name)
        if not value > 0:
            raise ConfigError(f"{flag(name)} must be {'a positive integer' if isinstance(value, int) else 'positive'}, "
                              f"got {value}")
    for names, high, where in ((unit, 1, "lie in [0, 1]"), (nonnegative, math.inf, "be 0 or more")):
        for name in names:
            if not 0 <= getattr(config, name) <= high:
                raise ConfigError(f"{flag(name)} must {where}, got {getattr(config, name)}")


def field_values(config, kind):
    """(field name, the value as given, one number of it) for every number of type `kind` in `config`'s fields: a
    field's value, each number of a tuple field (--hidden-sizes), an `int | None` field when set; never a bool."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        for item in value if isinstance(value, tuple) else (value,):
            if type(item) is kind:
                yield field.name, value, item


def require_finite(config):
    """ConfigError unless every float field is finite in float32, the programs' precision (NaN and inf slip through
    range checks; 1e40 is inf in float32)."""
    for name, _, value in field_values(config, float):
        if not abs(value) <= FLOAT32_MAX:
            why = "" if not math.isfinite(value) else (f", which is infinite in float32 (the programs compute in "
                                                       f"float32: at most {FLOAT32_MAX:.3g} in size)")
            raise ConfigError(f"{flag(name)} must be a finite number, got {value}{why}")


def require_int32(config):
    """ConfigError unless every int field lies within +-MAX_COUNT: the programs hold sizes and counts as int32, and
    past int64 a size is a traceback from deep inside JAX or XLA after the run directory is made. The seed has its own
    bound (MAX_SEED); what still does not fit in memory is the memory check's."""
    for name, value, item in field_values(config, int):
        if name != "seed" and not -MAX_COUNT <= item <= MAX_COUNT:
            given, each = (" ".join(map(str, value)), "each") if isinstance(value, tuple) else (value, "it")
            bound = f"at most {MAX_COUNT:,} (2**31 - 1)" if item > 0 else f"at least {-MAX_COUNT:,}"
            raise ConfigError(f"{flag(name)} {given}: the compiled programs hold {each} as an int32, {bound}")


def check_paths(config):
    """--run-name is one path component, --out-dir a directory this user can create or write in, --gif a file
    path in an existing folder: ConfigError otherwise, before anything is written."""
    name = config.run_name
    if name is not None and (name in ("", ".", "..") or {"/", os.altsep, "\0"} & set(name)):
        raise ConfigError(f"--run-name {name!r} must be one directory name (no '/', not '.' or '..'); the run "
                          "directory is <out-dir>/<run-name>: use --out-dir for the parent")
    for which, path in (("--run-name", name), ("--out-dir", config.out_dir)):
        if path is not None and any(ord(c) < 32 or ord(c) == 127 for c in path):  # a newline splits every line
            raise ConfigError(f"{which} {path!r} holds a control character (a newline, a tab); name it without")
    if name is not None and len(os.fsencode(name)) > 255:  # the longest file name Linux and macOS take
        raise ConfigError(f"--run-name is {len(os.fsencode(name))} bytes long; a directory name takes at most 255")
    if config.resume is None and config.eval is None:
        require_writable_dir(config.out_dir, "--out-dir")
    if config.gif is not None:
        if os.path.isdir(config.gif):
            raise ConfigError(f"--gif {config.gif} is a directory; give a file path, e.g. {config.gif}/episode.gif")
        if not config.gif.lower().endswith(".gif"):  # PIL picks the format from the name, after the drawing
            raise ConfigError(f"--gif {config.gif}: the file name must end in .gif, e.g. {config.gif}.gif")
        folder = os.path.dirname(os.path.abspath(config.gif))
        if not os.path.isdir(folder):
            raise ConfigError(f"--gif {config.gif}: the folder {folder} does not exist; create it first")
        require_writable_dir(folder, "--gif")


def require_writable_dir(path, which):
    """ConfigError unless `path` is a directory this user can write in, or can be created as one."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"{which} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{which} {path}: {existing} is not writable by this user; choose another {which}")


def check_flags(config):
    """The checks of the shared flags (--env's is `check_env`) and the bounds of every number of the config, the
    script's own fields too (finite floats, int32 ints); the algorithm's own checks come after, in `validate`."""
    require_finite(config)
    require_int32(config)
    check_paths(config)
    optional = tuple(name for name in ("num_chunks", "num_devices") if getattr(config, name) is not None)
    require(config, positive=("num_seeds", "total_timesteps", "eval_episodes", "log_every", "keep_checkpoints",
                              "distributed_timeout") + optional)
    if config.eval_sampled and config.eval is None:
        raise ConfigError("--eval-sampled evaluates a saved run: add --eval <run dir> (training's own evaluation is "
                          "the deterministic policy's)")
    if not 0 <= config.seed <= MAX_SEED - (config.num_seeds - 1):
        raise ConfigError(f"--seed {config.seed} with --num-seeds {config.num_seeds}: the seeds must lie in 0 to "
                          f"{MAX_SEED} (2**32 - 1)")
    if config.num_processes > 1 and config.coordinator_address is None:
        raise ConfigError(f"--num-processes {config.num_processes}: a multi-process run needs --coordinator-address "
                          f"host:port and --process-id in 0 to {config.num_processes - 1}")
    if not 0 <= config.process_id < config.num_processes:
        raise ConfigError(f"--process-id {config.process_id} must lie in 0 to --num-processes - 1 "
                          f"({config.num_processes - 1})")


def check_env(config):
    """ConfigError naming --env unless scanrl can make the env (a gymnax id, one of ours, a suite's, your own)."""
    from scanrl import envs  # here, not at the top: importing gymnax makes a JAX backend

    try:
        if config.env.endswith(":"):  # brax/halfcheetah: trained Brax's default backend, its runs named with the ':'
            raise ValueError(f"{config.env} ends in ':' with nothing after it; name a backend (brax/halfcheetah:mjx) "
                             "or your env's function (my_env.py:make), or drop the ':'")
        env, env_params = envs.make(config.env)
        envs.is_discrete(env, env_params)
    except ValueError as error:
        raise ConfigError(f"--env: {error}") from None
