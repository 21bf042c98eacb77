"""scanrl/harness/cli.py: the command line as a user types it: --help, and a bad flag as one error line,
exit 2."""

import subprocess
import sys

import pytest
from cases import exit_code_and_error
from conftest import ROOT


@pytest.mark.slow
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
            "import ppo\nimport scanrl.harness.flags\n"
            "scanrl.harness.flags.parse_flags(ppo.ALGORITHM)\n")  # the parse after the heavy imports
    slow = subprocess.run([sys.executable, "-c", full], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert slow.stdout == result.stdout
    for flag in ("--env", "--seed", "--num-seeds", "--total-timesteps", "--track", "--wandb-project",
                 "--wandb-entity", "--wandb-group", "--out-dir", "--run-name", "--log-every", "--num-chunks",
                 "--resume", "--eval", "--gif", "--sweep", "--num-devices", "--coordinator-address",
                 "--learning-rate", "--num-minibatches", "--clip-coef"):  # the last ones: ppo's own
        assert flag in result.stdout, flag
    assert "PPO ratio clipping epsilon" in result.stdout  # each field's docstring is its help line
    assert "--sweep can vary the script's own numeric fields" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    # tyro's own parse error: its box, drawn in ASCII where the output cannot show the box's characters, turned into
    # the one line
    (["--num-seeds", "x"], "error: Error parsing --num-seeds: invalid literal for int() with base 10: 'x'"),
    # a character the output's encoding cannot show is printed escaped (it was a UnicodeEncodeError's traceback)
    (["--env", "Cart\u00e9"], "error: --env: unknown env 'Cart\\xe9'"),
])
def test_a_bad_flag_is_one_line_exit_2_where_the_output_is_ascii(run_script, tmp_path, args, message):
    result = run_script("ppo.py", *args, env_overrides={"PYTHONIOENCODING": "ascii"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert not (tmp_path / "runs").exists()


def test_a_flag_renamed_since_says_its_name_now(tmp_path, monkeypatch, capsys):
    """ppo_rnn.py's --gru-size became --cell-size (issue 89): one line naming the new flag, exit 2."""
    import ppo_rnn

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo_rnn.py", "--gru-size", "32"])
    code, lines = exit_code_and_error(capsys, ppo_rnn.main)
    assert code == 2 and lines == ["error: --gru-size is --cell-size now; use that"], lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, message", [
    (["--env", "CartPol-v1"], "error: --env: unknown env 'CartPol-v1': did you mean CartPole-v1"),
    (["--num-processes", "2"], "error: --num-processes 2: a multi-process run needs --coordinator-address"),
    (["--num-seeds", "x"], "error: Error parsing --num-seeds: invalid literal for int() with base 10: 'x'"),
    (["--num-seed", "4"], "error: Unrecognized options: --num-seed"),
    (["--env"], "error: Missing value for argument '--env'"),
])
def test_a_bad_flag_is_one_line_exit_2_before_anything_is_written(args, message, tmp_path, monkeypatch, capsys):
    """ppo.py's command line in this process (its output captured: rich draws tyro's box in ASCII)."""
    import ppo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo.py", *args])
    code, lines = exit_code_and_error(capsys, ppo.main)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(message), lines
    assert not (tmp_path / "runs").exists()
