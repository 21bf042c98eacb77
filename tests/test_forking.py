"""Forking is safe: the contract check (scanrl/tools/contract.py) passes on every script, and on a fork, which names
itself and whose new fields sweep as the config reads them; the traps of a copied script end in one line."""

import contextlib
import dataclasses
import importlib
import io
import json
import os
import sys
import textwrap

import numpy as np
import pytest
from cases import CASES, check_program, cli_flags, exit_code_and_error, read_csv, tiny_config
from conftest import ROOT, run_warm

from scanrl import harness
from scanrl.tools import contract

# Per case: flags of a tiny run. The tabular learner runs bare: its tiny run learns nothing at first (no episode
# reaches the goal), so the contract shows its fields' effects in a longer run.
CONTRACT_FLAGS = {case: cli_flags(tiny) for case, (_, tiny, _) in CASES.items()}
CONTRACT_FLAGS["tabular_q"] = []
# Scripts whose contract runs here but which cases.CASES does not (yet) hold: case -> (module, tiny run).
# ppo_rnn.py with the LRU, the cell that runs on an associative scan, and with the GTrXL, whose memory is a window
# (the GRU and LSTM share the GTrXL's sequential path with a memory of one vector).
CONTRACT_ONLY = {"sac": ("sac", dict(total_timesteps=1024, update_every=32, log_every=1, learning_starts=256,
                                     batch_size=64, hidden_size=32, num_seeds=2, eval_episodes=2)),
                 # the renormalisation's warm-up shortened to a few passes, so that its other values show in the run
                 "crossq": ("crossq", dict(total_timesteps=1024, update_every=32, log_every=1, learning_starts=256,
                                           batch_size=64, hidden_size=32, critic_width=32, renorm_warmup=64,
                                           num_seeds=2, eval_episodes=2)),
                 "ppo_rnn": ("ppo_rnn", dict(cell="lru", num_steps=16, cell_size=8, hidden_size=16, eval_episodes=2)),
                 "ppo_rnn_gtrxl": ("ppo_rnn", dict(cell="gtrxl", num_steps=16, memory_length=4, hidden_size=16,
                                                   eval_episodes=2))}
CONTRACT_FLAGS.update({case: cli_flags(tiny) for case, (_, tiny) in CONTRACT_ONLY.items()})
# ppo's copy is trained on the researcher's own env, named as a module of the repository: the contract's --resume and
# --eval steps must name it too (scanrl imports code only when the command line names it).
CONTRACT_FLAGS["ppo"] += ["--env", "my_env:Corridor"]
SCRIPTS = {**{case: name for case, (name, _, _) in CASES.items()},
           **{case: name for case, (name, _) in CONTRACT_ONLY.items()}}


# A research repository's own modules, named as scanrl's once were: a script that imported them would fail here.
RESEARCHERS_OWN = {name: f"raise ImportError(\"the research repository's own {name} was imported\")\n"
                   for name in ("envs.py", "utils.py", "harness/__init__.py")}


def research_repository(tmp_path, script):
    """An empty directory outside the repository holding the researcher's own envs.py, utils.py, harness/ and env
    (my_env.py: docs/envs.md's corridor), and a copy of `script` alone, as my_<script>: -> (directory, the copy's
    file name)."""
    repo = tmp_path / "myresearch"
    own = {**RESEARCHERS_OWN, "my_env.py": (ROOT / "docs" / "examples" / "corridor.py").read_text()}
    for name, text in own.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    copy = f"my_{script}"
    (repo / copy).write_text((ROOT / script).read_text())
    return repo, copy


def in_repository(repo, *argv, timeout=900):
    """`python argv...` in `repo`, as a researcher runs it there: the installed scanrl, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(WANDB_MODE="offline", WANDB_DIR=str(repo), WANDB_CACHE_DIR=str(repo / ".wandb-cache"))
    return run_warm([sys.executable, *argv], repo, env, timeout)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SCRIPTS))
def test_every_script_copied_into_a_research_repository_keeps_the_contract(case, tmp_path):
    """Each script, copied alone into a directory beside the researcher's own envs.py, utils.py and harness/,
    passes `python -m scanrl.tools.contract`: it trains, --resume equals the uninterrupted run bit for bit,
    --eval reproduces its summary, and its fields sweep."""
    repo, copy = research_repository(tmp_path, f"{SCRIPTS[case]}.py")
    result = in_repository(repo, "-m", "scanrl.tools.contract", copy, *CONTRACT_FLAGS[case])
    assert result.returncode == 0 and "all checks passed" in result.stdout, result.stdout + result.stderr


def test_the_contract_sizes_a_bare_run_from_the_scripts_own_checks(tmp_path):
    """Bare (`python -m scanrl.tools.contract sac.py`), the tiny run is 4 iterations, or twice as long until the
    script's own checks accept it: sac.py and td3.py learn only after --learning-starts."""
    for name, starts in (("ppo", None), ("sac", 1_000), ("td3", 5_000)):
        algorithm = importlib.import_module(name).ALGORITHM
        config = contract.tiny_config(algorithm, [], str(tmp_path))
        harness.check(algorithm, config)
        step = algorithm.steps_per_iteration(config)
        if starts is None:
            assert config.total_timesteps == 4 * step
        else:
            assert starts < config.total_timesteps <= 2 * max(starts, 4 * step)


@pytest.mark.slow
def test_a_copied_script_writes_its_runs_to_its_own_directory(tmp_path):
    """`python my_ppo.py` in the research repository trains there, into ./runs, and the run is named my_ppo."""
    repo, copy = research_repository(tmp_path, "ppo.py")
    result = in_repository(repo, copy, "--total-timesteps", "1024", "--num-seeds", "2", "--eval-episodes", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (repo / "runs").iterdir()
    assert "__my_ppo__" in run_dir.name and (run_dir / "summary.json").exists()
    assert sorted(p.name for p in repo.iterdir() if not p.name.startswith(".")) == sorted(
        ["envs.py", "utils.py", "harness", "my_env.py", copy, "runs", "wandb"] if (repo / "wandb").exists() else
        ["envs.py", "utils.py", "harness", "my_env.py", copy, "runs"])


GUIDE = (ROOT / "docs" / "forking.md").read_text()
GUIDE_BLOCKS = [block.split("```", 1)[0] for block in GUIDE.split("```python\n")[1:]]


def guide_block(containing):
    """The forking guide's python block holding `containing`, dedented."""
    (block,) = [b for b in GUIDE_BLOCKS if containing in b]
    return textwrap.dedent(block)


def write_fork(tmp_path, name, field, use):
    """ppo.py forked as the forking guide says, saved as `name`.py, its new field named `field`: the guide's Config
    field under max_grad_norm and, with `use`, the guide's KL penalty in place of the loss line."""
    source = (ROOT / "ppo.py").read_text()
    anchor = '''    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
'''
    assert anchor in source
    source = source.replace(anchor, anchor + textwrap.indent(guide_block("kl_coef: float").replace("kl_coef", field),
                                                             "    "))
    if use:
        line = "        loss = actor_loss + config.vf_coef * critic_loss - config.ent_coef * entropy\n"
        assert line in source
        source = source.replace(line, textwrap.indent(guide_block("approx_kl = ").replace("kl_coef", field),
                                                      " " * 8))
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


@pytest.mark.slow
def test_the_guides_make_train_example_runs():
    """The forking guide's make_train block, as written: 4 agents, and the shape it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(guide_block("ppo.make_train(ppo.Config("), {})
    assert out.getvalue().strip() == "(4, 39)"


@pytest.mark.slow
def test_a_forks_new_field_sweeps_as_the_config_reads_it(tmp_path):
    """The trap of the issue: a fork reads its new field as config.<field>. A sweep of it is accepted, and each point
    trains with its own value: swept alone, it changes the metrics (the contract's own measurement)."""
    fork = contract.load_script(write_fork(tmp_path, "ppo_kl", "kl_coef", use=True))
    _, tiny, _ = CASES["ppo"]
    config = fork.Config(**{**tiny, "num_chunks": 1})
    check_program(fork.ALGORITHM, dataclasses.replace(config, sweep=("kl_coef=0,0.5",)))
    assert contract.changed_metrics(fork.ALGORITHM, config, {"kl_coef": [0.5]}) == ["kl_coef"]


def test_a_forks_unread_field_cannot_be_swept(tmp_path):
    path = write_fork(tmp_path, "ppo_unread", "unread_coef", use=False)
    fork = contract.load_script(path)
    config = fork.Config(total_timesteps=2048, sweep=("unread_coef=0,1",))
    with pytest.raises(harness.ConfigError) as error:
        check_program(fork.ALGORITHM, config)
    assert str(error.value).startswith("--sweep unread_coef: the value of config.unread_coef changes nothing "
                                       "ppo_unread.py computes")


@pytest.mark.slow
def test_a_fork_names_itself_and_ppo_refuses_its_runs(tmp_path, capsys):
    """A copy of ppo.py is not "ppo": its runs carry its file's name, and ppo.py's --eval and --resume of them
    exit 2 naming both scripts (before: ppo.py --resume went on training a fork's run as plain PPO)."""
    import ppo

    fork = contract.load_script(write_fork(tmp_path, "ppo_fork", "fork_coef", use=True))
    _, tiny, _ = CASES["ppo"]
    fork.main(fork.Config(**{**tiny, "num_chunks": 2, "out_dir": str(tmp_path / "runs")}))
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "__ppo_fork__" in run_dir.name
    assert json.loads((run_dir / "config.json").read_text())["algo"] == "ppo_fork"
    for flag in ("eval", "resume"):
        code, err = exit_code_and_error(capsys, ppo.main, dataclasses.replace(ppo.Config(), **{flag: str(run_dir)}))
        assert code == 2 and err == [f"error: --{flag}: {run_dir} is a run of ppo_fork (ppo_fork.py), not of ppo "
                                     "(ppo.py); use ppo_fork.py"]


def test_every_script_trains_from_make_train_with_plain_defaults():
    """`make_train(Config(...))` as the README uses it, with nothing resolved by hand (dqn_tabular_q's learner
    defaults included): the programs trace (compiling them is the contract's business)."""
    import jax

    for name in ("ppo", "reinforce", "td3", "sac", "crossq", "dqn_tabular_q", "pqn"):
        module = importlib.import_module(name)
        for config in (module.Config(), module.Config(env="CartPole-v1") if name == "dqn_tabular_q" else None):
            if config is not None:
                jax.eval_shape(module.make_train(config), jax.random.PRNGKey(0))


@pytest.mark.slow
@pytest.mark.parametrize("edit, message", [
    (("optax.clip_by_global_norm(config.max_grad_norm), optax.adam",
      "optax.clip_by_global_norm(config.max_grad_norm), optax.add_decayed_weights(0.0), optax.adam"),
     "holds an agent state of another structure than this version"),
    (("x = act(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(obs))",
      "x = act(nn.Dense(2 * self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(obs))"),
     "holds train_state.params.actor.params.Dense_0.bias of shape (2, 64) (float32), but this version of the "
     "script and the run's config make it (2, 128) (float32)"),
])
def test_resuming_a_run_after_the_fork_changed_its_state_exits_2(edit, message, tmp_path, capsys):
    """A fork edited between a run and its --resume or --eval (its optimizer gains a transform: its state another
    structure; a layer widened: arrays of other shapes) is told so in one line, compared before anything is
    restored, not that its intact checkpoints are damaged."""
    path = write_fork(tmp_path, "ppo_edit", "edit_coef", use=True)
    fork = contract.load_script(path)
    _, tiny, _ = CASES["ppo"]
    fork.main(fork.Config(**{**tiny, "num_chunks": 2, "out_dir": str(tmp_path / "runs"), "run_name": "run"}))
    (tmp_path / "runs" / "run" / "summary.json").unlink()
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(*edit))
    edited = contract.load_script(path)
    for flag in ("resume", "eval"):
        code, err = exit_code_and_error(capsys, edited.main, edited.Config(**{flag: str(tmp_path / "runs" / "run")}))
        assert code == 2 and len(err) == 1 and message in err[0], (flag, err)
    assert not (tmp_path / "runs" / "run" / "damaged_checkpoints").exists()


@pytest.mark.slow
def test_a_forks_new_metric_is_a_column_where_its_dict_has_it_and_the_harness_names_are_refused(tmp_path, capsys):
    """A fork adds a metric to the metrics dict alone: metrics.csv gets its column in the dict's order, with no
    second list of keys to keep in step. One named as the harness's own (env_steps) would be overwritten, and one
    the harness reads (episodes) dropped would end the run after training: one line naming update's line, exit 2,
    before anything trains, and no run directory is left."""
    source = (ROOT / "ppo.py").read_text()
    line = '            "episodes": episodes,\n'
    assert line in source
    update_line = source[:source.index("    def update(")].count("\n") + 1
    _, tiny, _ = CASES["ppo"]
    for metric, value in (("kl2", "2 * episodes"), ("env_steps", "episodes"), ("episodes", None)):
        path = tmp_path / f"ppo_{metric}.py"
        path.write_text(source.replace(line, "" if value is None else line + f'            "{metric}": {value},\n'))
        fork = contract.load_script(path)
        runs = tmp_path / f"runs_{metric}"
        config = fork.Config(**{**tiny, "out_dir": str(runs), "run_name": "run", "eval_episodes": 1})
        if metric == "kl2":
            fork.main(config)
            rows = read_csv(runs / "run" / "metrics.csv")
            assert rows[0][:6] == ["seed", "iteration", "env_steps", "episodes", "kl2", "episode_return"], rows[0]
            assert all(float(row[4]) == 2 * float(row[3]) for row in rows[1:])
            continue
        code, err = exit_code_and_error(capsys, fork.main, config)
        said = ("holds env_steps, which the harness adds itself" if value else
                "has no 'episodes' (how many episodes ended in the iteration")
        assert code == 2 and len(err) == 1 and f"error: {path.name}:{update_line}: the metrics dict `update` " \
            "returns " in err[0] and said in err[0], err
        assert not runs.exists() or not any(runs.iterdir())


def test_the_contract_names_why_a_run_failed():
    """`a run: ppo_m.py exited 2` left the reason out: the script's last line comes with it."""
    def main(config):
        print("error: --env: 'Nope-v0': unknown env", file=sys.stderr)
        sys.exit(2)

    fork = type("Fork", (), {"ALGORITHM": type("Algorithm", (), {"script": "ppo_m.py"}), "main": staticmethod(main)})
    with pytest.raises(contract.ContractFailure, match=r"^ppo_m.py exited 2: error: --env: 'Nope-v0': unknown env$"):
        contract.run_main(fork, None)


def test_the_contract_runs_every_check_unless_the_run_failed(capsys):
    """A failed check is one FAIL line and the others still run; only a failed run skips the checks that need it."""
    ran = []

    def fail():
        raise contract.ContractFailure("differs")

    def passes(name):
        return lambda: ran.append(name) or ""

    assert contract.run_checks([("make_train", fail), ("a run", passes("run")), ("after", passes("after"))]) == 1
    assert ran == ["run", "after"]
    assert contract.run_checks([("a run", fail), ("after", passes("skipped"))]) == 1
    assert ran == ["run", "after"]
    out = capsys.readouterr().out
    assert "  FAIL  make_train: differs" in out and out.count("(the other checks need the run)") == 1


def test_an_error_in_a_forks_code_is_one_line_naming_its_file_and_line(tmp_path, capsys):
    """A fork that fails, inside a check or as it is imported, is the check's FAIL line (or the error line) with the
    fork's file:line, not a traceback; one that exits as it is imported (sys.exit(0): exit 0, nothing printed, as if
    it passed) is the error line, exit 1."""
    path = tmp_path / "ppo_bug.py"
    path.write_text("import numpy\n\n\ndef update(runner):\n    return runner / 0\n")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    assert contract.run_checks([("a run", lambda: namespace["update"](1))], str(path)) == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == [f"  FAIL  a run: ZeroDivisionError: division by zero ({path}:5)",
                                    "  (the other checks need the run)"] and not out.err
    path.write_text("import numpy\n\nnumpy.nope\n")
    with pytest.raises(SystemExit, match=rf"^error: {path} fails as it is imported: AttributeError: module 'numpy' "
                                         rf"has no attribute 'nope' \({path}:3\)$"):
        contract.load_script(path)
    path.write_text("import sys\n\nsys.exit(0)\n")  # exit 0, nothing printed: the contract seemed to pass
    with pytest.raises(SystemExit, match=rf"^error: {path} exits as it is imported \(sys.exit\(0\)\): a script "
                                         r"trains only under `if __name__ == \"__main__\":`, so the contract can "
                                         r"import it$") as exited:
        contract.main([str(path)])
    assert exited.value.code != 0


def test_the_contract_fails_a_policy_that_ignores_the_trained_agent(finished_runs, tmp_path):
    """A fork whose evaluated policy acts with freshly initialised parameters, not the runner's, trained and evaluated
    without a word (--eval even reproduced its summary): agent 0 and an agent re-initialised from another key act
    alike on its evaluation episodes, and its actions read none of the agent's arrays."""
    import jax

    import ppo

    _, config = tiny_config("ppo", finished_runs["ppo"].parent, run_name="whole", keep_checkpoints=4)
    _, runner = contract.restored_runner(ppo, config, finished_runs["ppo"])
    agent = jax.tree.map(lambda x: np.asarray(x)[0], runner)
    assert contract.policy_reads_agent(ppo.ALGORITHM, config, agent).startswith(
        "agent 0 and an agent re-initialised from another key act differently at ")
    source = (ROOT / "ppo.py").read_text()
    line = 'return actor.apply(runner.train_state.params["actor"], obs)'
    assert line in source
    path = tmp_path / "ppo_fresh.py"
    path.write_text(source.replace(line, "return actor.apply(actor.init(jax.random.PRNGKey(0), obs), obs)"))
    fork = contract.load_script(path)
    with pytest.raises(contract.ContractFailure, match=r"^the evaluated policy ignores the trained parameters: "
                                                       r"agent 0 and an agent re-initialised from another key act "
                                                       r"alike at all \d+ steps of its evaluation"):
        contract.policy_reads_agent(fork.ALGORITHM, config, agent)


def test_a_module_beside_a_copied_script_that_shadows_a_dependency_is_one_line(tmp_path):
    """A researcher's own jax.py (or numpy/, ...) beside the copy would be imported in place of the package, with a
    traceback from deep inside: one line naming it, exit 2, before anything loads."""
    repo, copy = research_repository(tmp_path, "ppo.py")
    (repo / "numpy").mkdir()
    (repo / "numpy" / "__init__.py").write_text("")
    result = in_repository(repo, copy, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {repo / 'numpy' / '__init__.py'} beside the script stands in for the numpy package (Python imports "
        "the script's folder first); rename it"], result.stderr
