"""scanrl/harness/memory.py: the memory check, before anything is allocated (a run or an evaluation too
big, too many agents, a cgroup's limit), and an allocation that still fails: each one line."""

import re

import pytest
from cases import exit_code_and_error, tiny_config


def test_an_evaluation_too_big_for_memory_exits_2_before_training(finished_runs, tmp_path, capsys):
    """--eval-episodes enters the memory check: a billion episodes per agent used to train the whole run and then
    run out of memory in the final evaluation."""
    module, config = tiny_config("ppo", tmp_path / "runs", run_name="big", eval_episodes=10**9)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: the run needs about ") and "lower --eval-episodes (the final evaluation plays " \
        "1,000,000,000 episodes per agent at once), or --num-seeds" in err[0], err
    assert "iteration" not in capsys.readouterr().out and not (tmp_path / "runs" / "big").exists()
    code, err = exit_code_and_error(capsys, module.main, module.Config(eval=str(finished_runs["ppo"]),
                                                                           eval_episodes=10**9))
    assert code == 2 and len(err) == 1 and "lower --eval-episodes" in err[0], err  # --eval: before it is read


def test_a_run_too_big_for_memory_exits_2_before_allocating_with_both_figures(tmp_path, capsys):
    """4 DQN agents with a replay buffer of 2**30 transitions (over 100 GB each): refused from the agents' shapes,
    before anything is allocated, with the memory needed and available and the flags to lower;
    the run directory it had claimed is removed."""
    import dqn_tabular_q

    config = dqn_tabular_q.Config(env="CartPole-v1", agent="dqn", buffer_size=2**30, num_seeds=4, run_name="big",
                                  out_dir=str(tmp_path / "runs"))
    with pytest.raises(SystemExit) as exited:
        dqn_tabular_q.main(config)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1, err
    found = re.fullmatch(r"error: the run needs about ([\d.]+) GB of memory \(([\d.]+) GB of it the state of its "
                         r"(?:4 )?agents\) and this host has ([\d.]+) GB available: lower --num-seeds, "
                         r".*--buffer-size.*",
                         err[0])
    assert found, err[0]
    need, state, free = map(float, found.groups())
    assert state >= 4 * 2**30 * 2 * 4 * 4 / 1e9  # at least the observations and next observations, float32
    assert need > state and free < need
    assert not (tmp_path / "runs" / "big").exists()


@pytest.mark.slow
def test_an_allocation_that_still_fails_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    """Where the memory check cannot see a failure coming (here: it is told there are 10 PB), XLA's
    RESOURCE_EXHAUSTED becomes one line naming the flags to lower, exit 1, no traceback."""
    import ppo
    from scanrl.harness import memory

    monkeypatch.setattr(memory, "available_memory", lambda device: (10**16, "this host"))
    with pytest.raises(SystemExit) as exited:
        ppo.main(ppo.Config(hidden_size=1_000_000, out_dir=str(tmp_path / "runs")))
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 1 and len(err) == 1, err
    assert err[0].startswith("error: out of memory (RESOURCE_EXHAUSTED") and "lower --num-seeds" in err[0]
    assert "--hidden-size" in err[0]


@pytest.mark.parametrize("layout", ["v2", "v1", "v2 unlimited", "v1 unlimited", "none"])
def test_the_memory_check_reads_cgroup_v1_and_v2_limits(layout, tmp_path):
    from scanrl.harness.memory import cgroup_memory_left

    files = {"v2": {"memory.max": "8000\n", "memory.current": "3000\n"},
             "v1": {"memory/memory.limit_in_bytes": "8000\n", "memory/memory.usage_in_bytes": "3000\n"},
             "v2 unlimited": {"memory.max": "max\n", "memory.current": "3000\n"},
             "v1 unlimited": {"memory/memory.limit_in_bytes": "9223372036854771712\n",
                              "memory/memory.usage_in_bytes": "3000\n"},
             "none": {}}[layout]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_memory_left(str(tmp_path)) == (5000 if layout in ("v1", "v2") else None)


@pytest.mark.parametrize("num_seeds, sweep, message", [
    (2**30, ("lr=1e-3,3e-4",), "agents (--num-seeds x sweep points): 2,147,483,648 is more than the 2,147,483,647"),
    (10**8, (), "the run needs about "),
])
def test_too_many_agents_are_refused_before_anything_is_made_per_agent(num_seeds, sweep, message, tmp_path, capsys,
                                                                      monkeypatch):
    """The agent count is checked before the agents' keys exist: 2**31 agents used to take 10 GB and two minutes
    with no output, 10**8 seeds 9.4 GB before the memory check refused them. (--num-seeds 2**31 alone is past the
    bound of every integer flag: flags.check_flags.)"""
    import ppo
    from scanrl.harness import program

    made = []
    monkeypatch.setattr(program, "seed_keys", lambda config: made.append(config) or pytest.fail("keys were made"))
    with pytest.raises(SystemExit) as exited:
        ppo.main(ppo.Config(num_seeds=num_seeds, sweep=sweep, out_dir=str(tmp_path / "runs")))
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not made and not (tmp_path / "runs").exists()


def test_a_state_array_past_int64_elements_is_one_line_naming_the_flags_to_lower():
    """--hidden-size 2147483647, within int32, makes PPO's flat vector of parameters (and its Adam moments) about
    2**63 long, past XLA's int64 shapes: JAX's shape check raised a 28-line TypeError while the agents' shapes were
    traced, before the memory check could refuse them. Another error of the tracing stays itself."""
    import jax
    import jax.numpy as jnp

    import ppo
    from scanrl.harness.flags import ConfigError
    from scanrl.harness.memory import abstract_state

    config = ppo.Config(hidden_size=2**31 - 1)
    keys = jax.ShapeDtypeStruct((1, 2), jnp.uint32)
    with pytest.raises(ConfigError, match=re.escape("the agents' state holds an array of 2**63 elements or more, past "
                                                    "what XLA can index (and what any memory holds): lower --num-seeds")
                       ) as error:
        abstract_state(config, jax.vmap(ppo.make_train_parts(config)[0]), keys)
    message = str(error.value)
    assert message.endswith("or --hidden-size") and "\n" not in message and error.value.__cause__ is None
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values of integer type"):
        abstract_state(config, lambda key: jnp.zeros(2.5), keys)
