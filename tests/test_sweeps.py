"""scanrl/harness/sweeps.py: --sweep: its points and their order, the checks of its specs and values,
and each agent training at its own values."""

import dataclasses

import jax
import numpy as np
import pytest
from cases import CASES, SWEEPS, check_program, exit_code_and_error, tiny_config

from scanrl import harness
from scanrl.harness.program import agent_layout, agent_parts
from scanrl.harness.sweeps import sweep_points


def test_a_sweep_says_which_flags_its_values_override():
    import ppo
    from scanrl.harness.cli import sweep_overrides
    from scanrl.harness.sweeps import sweep_points

    config = ppo.Config(learning_rate=1e-3, sweep=("lr=1e-3,3e-4",))
    assert sweep_overrides(ppo.ALGORITHM, config, sweep_points(ppo.ALGORITHM, config)) == [
        "note: --sweep learning_rate=0.001,0.0003 overrides --learning-rate 0.001: each point trains with its own "
        "value"]
    config = ppo.Config(sweep=("lr=1e-3,3e-4",))
    assert sweep_overrides(ppo.ALGORITHM, config, sweep_points(ppo.ALGORITHM, config)) == []


# An on-policy script and an off-policy one (the contract sweeps every script's fields).
@pytest.mark.slow
@pytest.mark.parametrize("case", ["ppo", "td3"])
def test_swept_values_train_as_the_config_would(case, tmp_path):
    """Each agent of a sweep reads its own value as config.<field>: the agent of a 2-point sweep (one program) at the
    value that is not the config's trains as a run with that value in its config, to float rounding (an array in
    one, a constant in the other)."""
    field, values, _ = SWEEPS[case]
    module, config = tiny_config(case, tmp_path, num_seeds=1, sweep=(f"{field}={values[0]},{values[1]}",))
    assert getattr(config, field) == values[0] != values[1]
    keys, swept_values, _ = agent_layout(config, sweep_points(module.ALGORITHM, config))
    iterations = module.ALGORITHM.num_iterations(config)
    parts = agent_parts(module.ALGORITHM, config)

    def train(key, values):
        _, init, update = parts(values)
        return jax.lax.scan(lambda runner, _: update(runner), init(key), None, iterations)

    _, swept = jax.jit(jax.vmap(train))(keys, swept_values)
    alone_config = dataclasses.replace(config, sweep=(), **{field: values[1]})
    _, alone = jax.jit(module.make_train(alone_config))(keys[1])
    for key in alone:
        np.testing.assert_allclose(np.asarray(swept[key][1], float), np.asarray(alone[key], float), rtol=1e-4,
                                   atol=1e-6, equal_nan=True, err_msg=key)


def test_bad_sweep_specs_exit_2_with_one_line(capsys, tmp_path):
    field, _, shape_field = SWEEPS["ppo"]
    bad = {
        "no_such_field=1,2": "no field 'no_such_field'",
        f"{shape_field}=1,2": "needs one value of --num-envs for the whole compiled program",
        "anneal_lr=0,1": "only the script's own numeric fields",
        "total_timesteps=1024,2048": "only the script's own numeric fields",
        "update_epochs=1.5,2": "takes whole numbers",
        "num_steps=1,3000000000": "is an int32 inside the compiled program",
        field: "malformed",
        f"{field}=": "malformed",
        f"{field}=a,b": "must be numbers",
        f"{field}=0.1,0.1": "repeats a value",
        "seed=1,2": "--num-seeds",
        f"{field}=-1,0.1": "--sweep learning_rate=-1: --learning-rate must be positive",
        f"{field}=-1": "--sweep learning_rate=-1: --learning-rate must be positive",  # a single value is checked too
    }
    for spec, words in bad.items():
        module, config = tiny_config("ppo", tmp_path, sweep=(spec,))
        code, err = exit_code_and_error(capsys, module.main, config)
        assert code == 2 and len(err) == 1 and words in err[0], (spec, err)
    module, config = tiny_config("ppo", tmp_path, sweep=(f"{field}=0.1", f"{field}=0.2"))
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and "given twice" in err[0]
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("case", list(CASES))
def test_each_algorithm_refuses_sweep_values_it_refuses_alone(case, tmp_path):
    field, values, _ = SWEEPS[case]
    module, config = tiny_config(case, tmp_path, sweep=(f"{field}=-1,{values[0]}",))
    with pytest.raises(harness.ConfigError, match=f"--sweep {field}=-1: --{field.replace('_', '-')} must"):
        harness.check(module.ALGORITHM, config)


def test_a_swept_field_that_changes_nothing_computed_is_refused():
    """reinforce.py --baseline none learns no value function: its vf_lr changes no metric and no policy."""
    import reinforce

    config = reinforce.Config(baseline="none", total_timesteps=2048, sweep=("vf_lr=1e-3,3e-3",))
    with pytest.raises(harness.ConfigError, match="--sweep vf_lr: the value of config.vf_lr changes nothing"):
        check_program(reinforce.ALGORITHM, config)
    check_program(reinforce.ALGORITHM, dataclasses.replace(config, baseline="value"))  # with a baseline it does


def test_a_gamma_sweep_reaches_the_reward_normaliser():
    """Swept values travel in the config, so the reward normaliser of each agent gets the agent's gamma."""
    import ppo

    check_program(ppo.ALGORITHM, ppo.Config(env="Pendulum-v1", total_timesteps=2048, sweep=("gamma=0.9,0.99",)))


def test_sweep_grid_order_and_agent_layout():
    import ppo

    config = ppo.Config(num_seeds=3, seed=5, sweep=("lr=1e-3,3e-4", "ent-coef=0,0.01"))
    points = sweep_points(ppo.ALGORITHM, config)
    assert points == [{"learning_rate": 1e-3, "ent_coef": 0.0}, {"learning_rate": 1e-3, "ent_coef": 0.01},
                      {"learning_rate": 3e-4, "ent_coef": 0.0}, {"learning_rate": 3e-4, "ent_coef": 0.01}]
    keys, swept, names = agent_layout(config, points)
    assert len(keys) == 12 and names[4] == "6 at learning_rate=0.001,ent_coef=0.01"
    np.testing.assert_array_equal(keys[4], keys[1])  # every point trains seeds 5, 6, 7
    np.testing.assert_array_equal(keys[:3], np.stack([jax.random.PRNGKey(s) for s in (5, 6, 7)]))
    np.testing.assert_allclose(swept["ent_coef"][3:6], 0.01)
    assert set(swept) == {"learning_rate", "ent_coef"} and swept["ent_coef"].dtype == np.float32
    int_swept = agent_layout(config, [{"num_steps": 64}, {"num_steps": 128}])[1]["num_steps"]
    assert int_swept.dtype == np.int32 and list(int_swept) == [64] * 3 + [128] * 3


@pytest.mark.slow  # a command line of its own: about 10 s to load
def test_cli_refuses_a_sweep_field_given_twice(run_script):
    result = run_script("ppo.py", "--sweep", "lr=1e-3", "--sweep", "lr=1e-4")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: --sweep learning_rate is given twice; list all its values in one flag"]
