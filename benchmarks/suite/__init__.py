"""The learning suites behind `python benchmarks/learning.py`, by concern:

    entries.py     what an entry is (a script, an env, a budget, seeds, a published reference), suite files, names
    suites.py      the suites' entries, with the published references and flags they are run with
    runner.py      running the entries through the scripts' command lines, fresh or resumed
    records.py     a finished entry's committed record, and the checks that a run or record is the entry's
    repository.py  the repository root, and paths as messages and committed files name them
    scores.py      a uniformly random policy's returns (`--random-scores`)
    report.py      the markdown report from the run directories and records, with where each row comes from
    verify.py      `--verify ENTRY`: an entry trained again from its record's command, checked against its interval
    plots.py       the report's learning curves and performance profiles
"""
