"""scanrl/harness/metrics.py: metrics.csv and the progress lines."""

import csv

import numpy as np
from cases import NAN

from scanrl.harness.metrics import MetricsCsv, Progress


def test_metrics_csv_writes_counts_as_integers(tmp_path):
    metrics = {"env_steps": np.array([[512.0]]), "episodes": np.array([[21.0]], np.float32),
               "episode_return": np.array([[20.5]])}
    MetricsCsv(str(tmp_path / "metrics.csv"), list(metrics), [0]).append(0, metrics)
    rows = list(csv.reader(open(tmp_path / "metrics.csv")))
    assert rows == [["seed", "iteration", "env_steps", "episodes", "episode_return"], ["0", "1", "512", "21", "20.5"]]


def test_progress_lines_carry_returns_forward(capsys):
    """A progress line shows each agent's latest finished episodes, also from rows between the lines, and says
    'no episode ended yet' only before any ended."""
    from types import SimpleNamespace

    import jax.numpy as jnp

    config = SimpleNamespace(seed=0, num_seeds=2, log_every=2)
    progress = Progress(config, [{}], np.arange(2), ("env_steps", "episode_return"), last=None)
    returns = jnp.array([[NAN, NAN, 5.0, NAN, NAN, NAN], [NAN, NAN, NAN, 7.0, NAN, NAN]])
    rows = {"env_steps": jnp.tile(jnp.arange(1, 7) * 10.0, (2, 1)), "episode_return": returns}
    progress.show(0, 6, rows)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("env_steps")[0].split()[1] for line in lines] == ["2", "4", "6"]
    assert lines[0].endswith("no episode ended yet")
    assert "return mean     6.00  min     5.00  max     7.00" in lines[1] and lines[2].endswith(lines[1][-40:])

    # Pieces of 4 iterations with a line every 5: the first piece has no line, and its returns still carry forward.
    config = SimpleNamespace(seed=0, num_seeds=2, log_every=5)
    progress = Progress(config, [{}], np.arange(2), ("env_steps", "episode_return"), last=None)
    for start in (0, 4):
        progress.show(start, 4, {k: v[:, start:start + 4] if start == 0 else jnp.concatenate(
            [v[:, 4:], v[:, 4:]], axis=1) for k, v in rows.items()})
    line = capsys.readouterr().out.splitlines()
    assert len(line) == 1 and line[0].split()[1] == "5" and "return mean     6.00" in line[0], line
