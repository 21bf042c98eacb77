"""What a suite is made of: its entries (a script trained on an env with a budget and seeds), the published result
each is compared with and its env's normalisation range; a JSON suite file, and the checks on names."""

import json
import os
from dataclasses import dataclass

# The name each script writes into config.json's "algo", by the suite's algorithm label.
SCRIPT_ALGO = {"ppo": "ppo", "ppo_rnn": "ppo_rnn", "dqn": "dqn_tabular_q", "pqn": "pqn", "vpg": "reinforce",
               "td3": "td3", "sac": "sac", "crossq": "crossq", "tabular_q": "dqn_tabular_q", "ppo_rnn_lstm": "ppo_rnn",
               "ppo_rnn_lru": "ppo_rnn", "ppo_rnn_gtrxl": "ppo_rnn"}


@dataclass(frozen=True)
class Reference:
    """A published result to put next to ours: `value` (None: none found) as `text` gives it, and where from."""

    value: float | None
    text: str
    source: str


NONE_FOUND = Reference(None, "none found", "")


@dataclass(frozen=True)
class Entry:
    """One line of a suite: a script trained on an env with a budget, and what to compare it with."""

    name: str
    """run directory name and --only name, one path component"""
    algo: str
    """a key of SCRIPT_ALGO (ppo, dqn, pqn, vpg, td3, sac, tabular_q, a memory of ppo_rnn): the plots and
    the aggregate rows group by it"""
    script: str
    """the script that trains it, run from the repository root"""
    env: str
    total_timesteps: int
    """env steps per seed (--total-timesteps)"""
    num_seeds: int
    flags: tuple[str, ...] = ()
    """the script's flags beyond --env, --total-timesteps, --num-seeds, --seed, --out-dir and --run-name"""
    reference: Reference = NONE_FOUND
    low: float | None = None
    """normalised score 0 (a uniformly random policy's mean return); None leaves the entry out of the profiles"""
    high: float | None = None
    """normalised score 1 (a published or "solved" score); None: the best eval IQM on this env in the report"""
    range_source: str = ""
    """where `high` comes from"""
    gpu_only: bool = False
    """skipped, with a message, where JAX sees no GPU"""
    seed: int = 0
    """--seed: the entry's seeds are seed, seed + 1, ..."""
    sampled_episodes: int = 0
    """above 0: once trained, the final policies are also evaluated with --eval-sampled (actions sampled, as in
    training) on this many episodes per seed, for a published figure of that kind; the report adds its column"""


class SuiteError(Exception):
    """A suite, a name or a run directory that cannot be used: one line, exit 2."""


class SuiteStopped(Exception):
    """A script's run that SIGINT, SIGTERM or SIGHUP stopped (the runner passed the signal on and waited for the script
    to stop with its checkpoint): one line, exit 1."""


# Normalisation per env: (low, high, where high comes from). low: a uniformly random policy's mean return over 1,000
# episodes, measured with `python benchmarks/learning.py --suite full --random-scores` (seed 0, 2026-11-24; Brax
# HalfCheetah over 100 episodes, `--random-episodes 100`; Craftax-Classic over 200, `--only
# ppo-Craftax-Classic-Symbolic-v1 --random-episodes 200`, 1.58 ± 1.38; full Craftax likewise with `--suite memory
# --only ppo-Craftax-Symbolic-v1`, 1.2 ± 1.15, 2026-11-27; Seaquest with `--suite minatar`; the masked Pendulum,
# -1221 as Pendulum's, and MiniGrid-MemoryS8 with `--suite memory`, 2026-11-28).
# high: gymnasium's reward_threshold ("solved") where the env has one, else the published return we compare with;
# None where there is neither: the report then takes the best eval IQM on that env among its entries, and says so.
SCORE_RANGES = {
    "CartPole-v1": (22.05, 475.0, "gymnasium reward_threshold"),
    "Acrobot-v1": (-498.5, -100.0, "gymnasium reward_threshold"),
    "MountainCar-v0": (-200.0, -110.0, "gymnasium reward_threshold"),
    "MountainCarContinuous-v0": (-33.18, 90.0, "gymnasium reward_threshold"),
    "Pendulum-v1": (-1221.0, -130.0, "gymnax README: gymnax-blines PPO/ES checkpoint"),
    "CartPole-v1-masked": (22.05, 475.0, "CartPole-v1's (the same dynamics and rewards, fewer observations)"),
    "Pendulum-v1-masked": (-1221.0, -130.0, "Pendulum-v1's (the same dynamics and rewards, fewer observations)"),
    "MemoryChain-bsuite": (0.004, 1.0, "the optimum: +1 for the right answer (a guess scores 0 on average)"),
    "benchmarks/studies/memory_chain.py:memory_chain_50": (0.0, 1.0, "the optimum: +1 for the right answer (a guess "
                                                          "scores 0 on average)"),
    "benchmarks/studies/memory_chain.py:memory_chain_100": (0.0, 1.0, "the optimum: +1 for the right answer (a guess "
                                                          "scores 0 on average)"),
    "Asterix-MinAtar": (0.448, None, "best eval IQM in this report"),
    "Breakout-MinAtar": (0.408, None, "best eval IQM in this report"),
    "Freeway-MinAtar": (0.397, None, "best eval IQM in this report"),
    "SpaceInvaders-MinAtar": (4.074, None, "best eval IQM in this report"),
    "Seaquest-MinAtar": (0.104, None, "best eval IQM in this report"),
    "MiniGrid-MemoryS8": (0.196, 1.0, "the reward's bound (1 - 0.9 * steps / 320 for the right object)"),
    "MiniGrid-Empty-8x8": (0.111, 0.961, "the optimum: 11 steps to the goal, 1 - 0.9 * 11 / 256"),
    "Craftax-Classic-Symbolic-v1": (1.58, 22.0, "its most: 22 achievements, +1 each the first time (the health "
                                    "rewards add up to at most 0)"),
    "Craftax-Symbolic-v1": (1.2, 226.0, "its most, the Craftax scoreboard's 100%: 226 (each achievement's reward "
                            "by its difficulty, the first time)"),
    "playground/CartpoleBalance": (358.0, 1000.0, "the most an episode can earn: 1,000 steps of reward 1 at most"),
    "playground/CartpoleSwingup": (27.0, 1000.0, "the most an episode can earn: 1,000 steps of reward 1 at most"),
    "GridWorld-v0": (0.226, 1.0, "the optimum: reward 1 at the goal (scanrl/envs/gridworld.py)"),
    "FrozenLake-misc": (0.016, 0.7, "gymnasium reward_threshold of FrozenLake-v1 (4x4, slippery)"),
    "brax/halfcheetah:mjx": (-283.5, None, "best eval IQM in this report"),
    # Gymnasium's own envs (C MuJoCo), uniformly random actions (2026-12-01): HalfCheetah 30 episodes, the others 100
    # (tests/test_gymnasium_mujoco.py holds ours to these envs' random-policy rewards and episode ends)
    "mujoco/HalfCheetah-v5": (-273.0, None, "best eval IQM in this report"),
    "mujoco/Hopper-v5": (16.7, None, "best eval IQM in this report"),
    "mujoco/Walker2d-v5": (1.8, None, "best eval IQM in this report"),
}


def entry(name, algo, script, env, total_timesteps, num_seeds, flags=(), reference=NONE_FOUND, **kwargs) -> Entry:
    """An Entry with its env's normalisation range from SCORE_RANGES."""
    low, high, source = SCORE_RANGES.get(env, (None, None, ""))
    return Entry(name, algo, script, env, total_timesteps, num_seeds, tuple(flags), reference, low, high, source,
                 **kwargs)


def load_suite_file(path) -> tuple[str, tuple[Entry, ...]]:
    """-> (suite name, entries) of a JSON suite file; SuiteError if it cannot be read or a field is of another type
    than Entry's."""
    from scanrl.harness.files import open_regular  # here: this module is read by tools that need no scanrl

    try:
        with open_regular(path) as f:
            data = json.load(f)
        entries = []
        for item in data["entries"]:
            fields = dict(item)
            if isinstance(fields.get("reference"), dict):
                fields["reference"] = Reference(**fields["reference"])
            if not isinstance(fields.get("flags", ()), list | tuple):
                raise TypeError(f"entry {fields.get('name')!r}: flags is not a list")
            fields["flags"] = tuple(fields.get("flags", ()))
            if "low" not in fields and "high" not in fields:
                low, high, source = SCORE_RANGES.get(fields.get("env"), (None, None, ""))
                fields.update(low=low, high=high, range_source=source)
            entries.append(Entry(**fields))
        name = data.get("name") or os.path.splitext(os.path.basename(path))[0]
        if not isinstance(name, str):
            raise TypeError("name is not a string")
        for e in entries:
            check_types(e)
    except RecursionError:
        raise SuiteError(f"--suite-file {shown_text(path)}: nested too deeply") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise SuiteError(f"--suite-file {shown_text(path)}: {shown_text(text)}") from None
    check_name(name, "suite name")
    return name, tuple(entries)


# Entry's fields and the JSON types a suite file may give them.
FIELD_TYPES = {"name": str, "algo": str, "script": str, "env": str, "total_timesteps": int, "num_seeds": int,
               "range_source": str, "gpu_only": bool, "seed": int, "sampled_episodes": int}


def check_types(e: Entry):
    """TypeError naming the first field of a suite file's entry whose value is not of Entry's type."""
    for key, kind in FIELD_TYPES.items():
        value = getattr(e, key)
        if not isinstance(value, kind) or kind is int and isinstance(value, bool):
            raise TypeError(f"entry {e.name!r}: {key} is {json.dumps(value)}, not {kind.__name__}")
    for key in ("low", "high"):
        value = getattr(e, key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise TypeError(f"entry {e.name!r}: {key} is {json.dumps(value)}, not a number or null")
    if not all(isinstance(flag, str) for flag in e.flags):
        raise TypeError(f"entry {e.name!r}: flags is not a list of strings")
    if not isinstance(e.reference, Reference) or not isinstance(e.reference.text, str) or \
            not isinstance(e.reference.source, str):
        raise TypeError(f"entry {e.name!r}: reference is not {{value, text, source}}")


def shown_text(text) -> str:
    """A string as a one-line message shows it: as JSON writes it where it holds a control character."""
    text = str(text)
    return text if text.isprintable() else json.dumps(text)


def check_name(name, what):
    """SuiteError unless `name` is one directory name that a message shows as it is (no '/', control character)."""
    if not name or "/" in name or name in (".", "..") or not name.isprintable():
        raise SuiteError(f"{what} {json.dumps(name)} must be one directory name, with no control character")


# The flags an entry's `flags` may not give: those the runner sets from the entry's fields, and those that would not
# train one new run in <--out-dir>/<entry name> (another folder or name, a saved run resumed or evaluated, a sweep's
# points, which no summary of one run holds). `--out-dir X` in an entry's flags trained the run in X.
PLACED = ("env", "total_timesteps", "num_seeds", "seed", "out_dir", "run_name", "resume", "eval", "eval_sampled",
          "seed_index", "gif", "sweep")


def check_entries(entries):
    """SuiteError unless the names are distinct directory names, each algo label is known and its script is the
    label's (a suite file names no other program to run), the counts are positive and the flags leave where and how
    its run trains to the runner (`PLACED`)."""
    names = [e.name for e in entries]
    for e in entries:
        check_name(e.name, "entry name")
        for word in e.flags:
            if word.startswith("--") and word[2:].partition("=")[0].replace("-", "_") in PLACED:
                raise SuiteError(f"entry {e.name}: its flags give {shown_text(word.partition('=')[0])}, which the "
                                 "runner sets from the entry (--env, --total-timesteps, --num-seeds, --seed, and the "
                                 f"run in <--out-dir>/{e.name}) or which would not train that one run: drop it")
        if e.algo not in SCRIPT_ALGO:
            raise SuiteError(f"entry {e.name}: algo {json.dumps(e.algo)} is not one of {', '.join(SCRIPT_ALGO)}")
        if e.script != f"{SCRIPT_ALGO[e.algo]}.py":
            raise SuiteError(f"entry {e.name}: script {json.dumps(e.script)} is not {SCRIPT_ALGO[e.algo]}.py, the "
                             f"script of algo {e.algo}")
        if e.total_timesteps < 1 or e.num_seeds < 1 or e.sampled_episodes < 0:
            raise SuiteError(f"entry {e.name}: total_timesteps and num_seeds must be positive, sampled_episodes "
                             "at least 0")
    if len(set(names)) < len(names):
        raise SuiteError(f"entry names repeat: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")


def select(entries, only) -> tuple[Entry, ...]:
    """The entries named by --only (comma lists allowed), in suite order; all when none is named."""
    names = [n.strip() for item in only for n in item.split(",") if n.strip()]
    if not names:
        return entries
    known = {e.name for e in entries}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SuiteError(f"--only: unknown entry {', '.join(map(shown_text, unknown))}; the suite has: "
                         f"{', '.join(e.name for e in entries)}")
    return tuple(e for e in entries if e.name in names)
