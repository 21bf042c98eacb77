"""scanrl/harness/cli.py: the command line as a user types it: --help, and a bad flag as one error line,
exit 2."""

import subprocess
import sys

import pytest
from conftest import ROOT


def test_help_lists_the_shared_flags_and_what_can_be_swept(run_script):
    """--help as tyro prints it, answered from the script's Config before its heavy imports (prepare_jax): JAX is
    never imported, and the text is the one the script's own parse prints after them."""
    result = run_script("ppo.py", "--help", add_out_dir=False)
    assert result.returncode == 0 and not result.stderr
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: print('jax imported:', 'jax' in sys.modules, file=sys.stderr))\n"
             f"sys.argv = [{str(ROOT / 'ppo.py')!r}, '--help']\n"
             f"runpy.run_path({str(ROOT / 'ppo.py')!r}, run_name='__main__')\n")
    quick = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert quick.stdout == result.stdout and quick.stderr.strip() == "jax imported: False"
    full = ("import sys\n"
            f"sys.argv = [{str(ROOT / 'ppo.py')!r}, '--help']\n"
            "import ppo\nimport scanrl.harness.cli\n"
            "scanrl.harness.cli.parse_flags(ppo.ALGORITHM)\n")  # the parse after the heavy imports
    slow = subprocess.run([sys.executable, "-c", full], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert slow.stdout == result.stdout
    for flag in ("--env", "--seed", "--num-seeds", "--total-timesteps", "--track", "--wandb-project",
                 "--wandb-entity", "--wandb-group", "--out-dir", "--run-name", "--log-every", "--num-chunks",
                 "--resume", "--eval", "--gif", "--sweep", "--num-devices", "--coordinator-address",
                 "--learning-rate", "--num-minibatches", "--clip-coef"):  # the last ones: ppo's own
        assert flag in result.stdout, flag
    assert "PPO ratio clipping epsilon" in result.stdout  # each field's docstring is its help line
    assert "--sweep can vary the script's own numeric fields" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--env", "CartPol-v1"], "error: --env: unknown env 'CartPol-v1': did you mean CartPole-v1"),
    (["--num-processes", "2"], "error: --num-processes 2: a multi-process run needs --coordinator-address"),
    # tyro's own parse errors, its box turned into the one line
    (["--num-seeds", "x"], "error: Error parsing --num-seeds: invalid literal for int() with base 10: 'x'"),
    (["--num-seed", "4"], "error: Unrecognized options: --num-seed"),
    (["--env"], "error: Missing value for argument '--env'"),
])
def test_cli_bad_flag_exits_2_with_one_line(run_script, tmp_path, args, message):
    result = run_script("ppo.py", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert not (tmp_path / "runs").exists()
