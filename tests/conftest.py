"""Shared test helpers: run a script as a user would, offline, with a timeout."""

import json
import os
import subprocess
import sys
from pathlib import Path

# As the scripts do: avoid the XLA:CPU scheduler hang on vmapped training (see README) in-process too.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_enable_concurrency_optimized_scheduler=false")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory):
    """One compilation cache for the session's tests (shared by pytest-xdist's workers, whose temporary
    directories share a parent), not the user's ~/.cache: many tests compile the same programs."""
    root = tmp_path_factory.getbasetemp()
    path = (root.parent if root.name.startswith("popen-gw") else root) / "compile-cache"
    os.environ.setdefault("SCANRL_COMPILE_CACHE", str(path))
    return path


@pytest.fixture
def run_script(tmp_path):
    """`run_script("ppo.py", "--total-timesteps", "1024", ...)` -> CompletedProcess, run in `tmp_path` with
    `--out-dir tmp_path/runs` added unless given, wandb offline and its files kept inside `tmp_path`;
    `env_overrides` (a dict) is applied last, for tests that need a different wandb setting."""

    def _run(script, *args, timeout=600, add_out_dir=True, env_overrides=None):
        env = {
            **os.environ,
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(tmp_path),
            "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
            "WANDB_SILENT": "true",
        }
        env.update(env_overrides or {})
        argv = [sys.executable, str(ROOT / script), *args]
        if add_out_dir and "--out-dir" not in args:
            argv += ["--out-dir", str(tmp_path / "runs")]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)

    return _run


def read_run(out_dir: Path):
    """The single run directory under `out_dir` and its summary.json."""
    (run_dir,) = list(Path(out_dir).iterdir())
    return run_dir, json.loads((run_dir / "summary.json").read_text())
