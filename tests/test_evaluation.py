"""The programs that measure a policy (scanrl/harness/program.py's, run in pieces by loop.py) and --eval of a saved
run (harness/evaluate.py: one agent, --eval-sampled, --gif): a sampled policy, and each agent's evaluation key."""

import importlib
import json

import jax
import numpy as np
import pytest
from cases import exit_code_and_error, read_csv
from PIL import Image


def test_eval_of_one_agent_prints_its_line(finished_runs, capsys):
    import ppo

    summary = json.loads((finished_runs["ppo"] / "summary.json").read_text())
    ppo.main(ppo.Config(eval=str(finished_runs["ppo"]), seed_index=1, eval_episodes=1))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("seed ")]
    assert len(lines) == 1 and lines[0].startswith(f"seed {summary['seeds'][1]} (index 1)")


def test_a_signal_during_eval_or_its_gif_stops_at_once_saying_nothing_was_written(finished_runs, tmp_path, capsys,
                                                                                   monkeypatch):
    """--eval writes nothing but its gif, so a signal stops it at once: it said "with a checkpoint" while it was made,
    and was not heard at all while the gif was drawn."""
    import os
    import signal

    import ppo
    from scanrl import envs
    from scanrl.harness import evaluate

    def signalled(function, signum):
        return lambda *args, **kwargs: (os.kill(os.getpid(), signum), function(*args, **kwargs))[1]

    monkeypatch.setattr(evaluate, "plan", signalled(evaluate.plan, signal.SIGTERM))
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(finished_runs["ppo"]), eval_episodes=1))
    assert code == 128 + signal.SIGTERM and err == ["SIGTERM: the evaluation stopped; nothing was written"], err
    monkeypatch.undo()
    monkeypatch.setattr(envs, "record_episode", signalled(envs.record_episode, signal.SIGINT))
    gif = tmp_path / "episode.gif"
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval=str(finished_runs["ppo"]), eval_episodes=1,
                                                                 gif=str(gif)))
    assert code == 128 + signal.SIGINT and err == [f"SIGINT: stopped while drawing the episode; {gif} was not written "
                                                   "(the returns above are the evaluation's)"], err
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_eval_sampled_plays_the_policy_training_acts_with(finished_runs, capsys):
    """--eval-sampled samples each action from the policy, as training does (the figure gymnax-blines and others
    publish), where --eval takes its argmax. After the tiny ppo run (4 iterations on CartPole) the policy is still
    spread out: sampled, it plays as training's last episodes did; its argmax already balances several times longer.
    The same command gives the same returns; a deterministic script and a command without --eval are refused."""
    import dqn_tabular_q
    import ppo

    def returns(**flags):
        ppo.main(ppo.Config(eval=str(finished_runs["ppo"]), eval_episodes=100, **flags))
        out = capsys.readouterr().out
        rows = [line.split("returns ")[1].split() for line in out.splitlines() if line.startswith("seed ")]
        return out, np.array(rows, dtype=float)

    out, greedy = returns()
    assert "deterministic policy, 100 episodes per agent" in out
    out, sampled = returns(eval_sampled=True)
    assert "sampled policy (actions drawn as in training), 100 episodes per agent" in out
    assert greedy.shape == sampled.shape == (2, 100)
    rows = read_csv(finished_runs["ppo"] / "metrics.csv")
    column = rows[0].index("episode_return")
    training = np.array([float(row[column]) for row in rows[1:] if row[1] == "4"])  # the last iteration, per seed
    assert (0.7 * training < sampled.mean(axis=1)).all() and (sampled.mean(axis=1) < 1.4 * training).all()
    assert (greedy.mean(axis=1) > 3 * training).all()
    np.testing.assert_array_equal(returns(eval_sampled=True)[1], sampled)

    code, err = exit_code_and_error(capsys, dqn_tabular_q.main, dqn_tabular_q.Config(
        eval=str(finished_runs["tabular_q"]), eval_sampled=True))
    assert code == 2 and err == ["error: --eval-sampled: dqn_tabular_q's policy is deterministic (its evaluation "
                                 "acts as it does); drop --eval-sampled"], err
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(eval_sampled=True))
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --eval-sampled evaluates a saved run: add "
                                                             "--eval <run dir>"), err


@pytest.mark.parametrize("script", ["ppo", *(pytest.param(s, marks=pytest.mark.slow) for s in ("ppo_rnn",
                                                                                            "ppo_rnn:gtrxl")),
                                    "reinforce", "td3", "dqn_tabular_q", "pqn"])
def test_an_untrained_sampled_policy_plays_like_a_random_one(script):
    """Each script's sampled policy (ppo_rnn's carries its memory, a GRU's or a GTrXL's, beside the key): untrained,
    its actor is close to uniform, so on CartPole it balances about as long as a uniformly random policy (22.05 steps
    on average over 1,000 episodes, benchmarks/learning.py). Greedy-Q and TD3 scripts have none: --eval-sampled
    refuses them."""
    from scanrl.harness.program import make_evaluate

    script, _, cell = script.partition(":")
    module = importlib.import_module(script)
    if script in ("td3", "dqn_tabular_q", "pqn"):
        assert not module.ALGORITHM.samples
        return
    config = module.Config(env="CartPole-v1", eval_episodes=200, **({"cell": cell} if cell else {}))
    init, _ = module.make_train_parts(config)
    runner = init(jax.random.PRNGKey(0))
    evaluate = jax.jit(make_evaluate(module.ALGORITHM, config, sampled=True).returns)
    returns = evaluate(jax.random.PRNGKey(1), runner)
    assert 18 < float(returns.mean()) < 27, returns.mean()


@pytest.mark.slow  # gymnax draws classic-control frames through gymnasium and pygame: ~0.2 s a frame
def test_eval_draws_one_episode(finished_runs, tmp_path, capsys):
    """--gif: one episode of the chosen agent as an animated gif, a frame per step; an env gymnax cannot draw
    (GridWorld) exits 2 before anything is loaded."""
    import dqn_tabular_q
    import ppo

    gif = tmp_path / "episode.gif"
    code, err = exit_code_and_error(capsys, dqn_tabular_q.main,
                                    dqn_tabular_q.Config(eval=str(finished_runs["tabular_q"]), gif=str(gif)))
    assert code == 2 and len(err) == 1 and "--gif: gymnax cannot draw GridWorld-v0" in err[0], err
    assert not gif.exists()
    summary = json.loads((finished_runs["ppo"] / "summary.json").read_text())
    ppo.main(ppo.Config(eval=str(finished_runs["ppo"]), seed_index=1, gif=str(gif)))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("one episode")]
    words = line.split()
    episode_return, length = float(words[words.index("return") + 1]), int(words[words.index("in") + 1])
    assert line.startswith(f"one episode of seed {summary['seeds'][1]} (index 1)")
    with Image.open(gif) as image:
        assert image.format == "GIF" and image.n_frames == length
    assert episode_return == length  # CartPole: +1 per step


def test_evaluation_key_is_no_key_of_init():
    """fold_in(key, i) equals split(key, n)[i]; the evaluation key is folded with a number no split reaches."""
    from scanrl.harness.program import evaluation_keys

    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(jax.random.fold_in(key, 1), jax.random.split(key, 4)[1])  # why it matters
    evaluation = evaluation_keys(np.asarray(key)[None])[0]
    assert not any(np.array_equal(evaluation, k) for k in np.asarray(jax.random.split(key, 64)))
    assert not np.array_equal(evaluation, np.asarray(key))
