"""Commands beside a run, each `python -m scanrl.tools.<name>`: they import the harness, and nothing of the harness
imports them, so a training run never passes through them.

    contract.py     `python -m scanrl.tools.contract SCRIPT`: the checks a fork must pass, on a tiny run
    compare.py      `python -m scanrl.tools.compare RUN_DIR ...`: several runs' learning curves on one plot
"""
