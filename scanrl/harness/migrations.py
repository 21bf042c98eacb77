"""Runs that older commits of scanrl wrote, as this one reads them: every change since to what a run holds, in one
place. The promise it keeps: --resume and --eval take such a run as it was trained (tests/data holds a run an earlier
version wrote, which the tests resume), or say in one line what to use instead. No JAX."""

# Fields a script gained, each with the one value it could have had before: a run without it trained with that value.
ADDED_FIELDS = {"ppo_rnn": {"cell": "gru", "memory_length": 32, "num_heads": 4}, "dqn_tabular_q": {"optimizer": "adam"}}
# Fields a script renamed, {script: {name then: (name now, its value from the old config)}}: ppo_rnn.py's gru_size
# sized every cell but the GTrXL, which worked at --hidden-size.
RENAMED_FIELDS = {"ppo_rnn": {"gru_size": ("cell_size", lambda saved: saved["hidden_size"]
                                           if saved.get("cell") == "gtrxl" else saved["gru_size"])}}
# Leaves of an agent's state renamed, {name then: name now}: dqn_tabular_q.py's replay buffer held its write position
# as `position` until it became blocks.ReplayBuffer (`pos`).
RENAMED_STATE = {"position": "pos"}
# Names of scripts whose runs this version cannot read, and what to do instead.
RETIRED = {
    "dqn": "dqn was dqn_tabular_q.py's name for its runs before PQN moved to pqn.py, and this version cannot read "
           "them; train it again",
    "ppo_trxl": "ppo_trxl.py became ppo_rnn.py --cell gtrxl, which cannot read its runs (its parameters are named "
                "otherwise): use the last ppo_trxl.py (git show b042acc:ppo_trxl.py > ppo_trxl.py), or train again "
                "with ppo_rnn.py --cell gtrxl"}
RETIRED["tabular_q"] = RETIRED["dqn"].replace("dqn was", "tabular_q was", 1)


def config_now(name, saved: dict, say=None) -> dict:
    """A run's config (config.json's or a checkpoint's) as script `name` reads it today: the fields it gained since
    with the value they had, renamed ones under their names now; `say(line)` is told of each."""
    saved = dict(saved)
    for key, value in ADDED_FIELDS.get(name, {}).items():
        if key not in saved:
            saved[key] = value
            if say:
                say(f"has no {key}: it was written before {name}.py had --{key.replace('_', '-')}, so the run trained "
                    f"with --{key.replace('_', '-')} {value}, the only value then")
    for old, (new, value) in RENAMED_FIELDS.get(name, {}).items():
        if old in saved and new not in saved:
            saved[new] = value(saved)
            del saved[old]
            if say:
                say(f"has {old}, which {name}.py calls --{new.replace('_', '-')} now: {saved[new]}")
    return saved
