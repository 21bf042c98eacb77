"""Scale out (scanrl/harness/agents.py, sweeps.py, processes.py): agents sharded over devices, a multi-process run,
and --sweep.

The reference for every comparison is a one-device run made in this process with `main(Config(...))`. A run on 2
devices gives each device the one-device program for its own agents, so its metrics equal, bit for bit, the one-device
runs of those agents (seeds 0-1 and 2-3); whether they do depends on how the algorithm's program compiles, so that
test runs every case. Runs that need more devices or processes than this test process has are subprocesses, as a user
would start them."""

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import ROOT
from test_harness import CASES, cli_flags, exit_code_and_error, read_csv, tiny_config

from scanrl import harness
from scanrl.harness.agents import agent_layout, choose_devices
from scanrl.harness.sweeps import agent_parts, point_label, sweep_points

# Per case: a sweepable field and two of its values, and a field that sets array shapes or a loop length.
SWEEPS = {
    "ppo": ("learning_rate", (2.5e-4, 1e-3), "num_envs"),
    "reinforce": ("pi_lr", (3e-4, 1e-3), "num_steps"),
    "td3": ("tau", (0.005, 0.05), "batch_size"),
    "tabular_q": ("learning_rate", (0.1, 0.5), "num_envs"),
    "dqn": ("learning_rate", (2.5e-4, 1e-3), "batch_size"),
    "pqn": ("q_lambda", (0.8, 0.95), "num_minibatches"),
}
TWO_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def tiny_flags(case, **overrides):
    _, tiny, _ = CASES[case]
    return cli_flags({**tiny, **overrides})


def script(case):
    return f"{CASES[case][0]}.py"


def by_iteration(rows):
    """metrics.csv rows (without the header) in the order a run writes them: iteration, then seed."""
    return sorted(rows, key=lambda row: (int(row[1]), int(row[0])))


@pytest.fixture(scope="module")
def one_device_run(tmp_path_factory):
    """`one_device_run(case, seed, **overrides)` -> the run directory of a tiny 2-agent run (seeds `seed`, `seed` + 1)
    made in this process on one device; made once per module and arguments."""
    made = {}

    def _run(case, seed, **overrides):
        defaults = tiny_config(case, ".")[1]
        overrides = {k: v for k, v in overrides.items() if getattr(defaults, k) != v}
        key = (case, seed, tuple(sorted(overrides.items())))
        if key not in made:
            out_dir = tmp_path_factory.mktemp(f"{case}_{seed}")
            module, config = tiny_config(case, out_dir, seed=seed, num_seeds=2, num_chunks=1, run_name="run",
                                         num_devices=1, **overrides)
            module.main(config)
            made[key] = out_dir / "run"
        return made[key]

    return _run


def expected_four_agents(one_device_run, case):
    """The metrics.csv rows of seeds 0-3: the one-device runs of seeds 0-1 and 2-3."""
    halves = [read_csv(one_device_run(case, seed) / "metrics.csv") for seed in (0, 2)]
    return halves[0][0], by_iteration(halves[0][1:] + halves[1][1:])


@pytest.fixture(scope="module")
def two_device_runs(tmp_path_factory):
    """Every case's tiny run of seeds 0-3 in one process that sees 2 CPU devices (one process, one import, for all
    five), as `main` runs it: the agents split over both devices. -> {case: run directory, "stdout": ...}."""
    out_dir = tmp_path_factory.mktemp("two_devices")
    code = (f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
            "from test_harness import CASES, tiny_config\n"
            "for case in CASES:\n"
            f"    module, config = tiny_config(case, {str(out_dir)!r}, num_seeds=4, num_chunks=1, run_name=case)\n"
            "    module.main(config)\n")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(out_dir), **TWO_DEVICES}
    result = subprocess.run([sys.executable, "-c", code], cwd=out_dir, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return {case: out_dir / case for case in CASES} | {"stdout": result.stdout}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_devices_equal_one_device_runs_per_seed(case, one_device_run, two_device_runs):
    assert two_device_runs["stdout"].count("on 2 device(s)") == len(CASES)
    header, expected = expected_four_agents(one_device_run, case)
    rows = read_csv(two_device_runs[case] / "metrics.csv")
    assert rows[0] == header and rows[1:] == expected


@pytest.mark.slow
def test_two_processes_on_localhost_write_one_run_with_all_seeds(one_device_run, tmp_path):
    with socket.socket() as s:  # a free port for the coordinator
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"  # one CPU device per process
    flags = tiny_flags("ppo", num_seeds=4, run_name="multi", out_dir=str(tmp_path / "runs"),
                       coordinator_address=f"localhost:{port}", num_processes=2)
    processes = [subprocess.Popen([sys.executable, str(ROOT / "ppo.py"), *flags, "--process-id", str(i)],
                                  cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    for p, (_, err) in zip(processes, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert os.listdir(tmp_path / "runs") == ["multi"]
    assert "written to" in outputs[0][0] and "written to" not in outputs[1][0]  # process 0 reports and writes
    header, expected = expected_four_agents(one_device_run, "ppo")
    rows = read_csv(tmp_path / "runs" / "multi" / "metrics.csv")
    assert rows[0] == header and rows[1:] == expected
    summary = json.loads((tmp_path / "runs" / "multi" / "summary.json").read_text())
    assert summary["num_processes"] == 2 and summary["seeds"] == [0, 1, 2, 3]


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
    iterations = module.num_iterations(config)
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


def point_dirs(run_dir, field, values):
    return [run_dir / point_label({field: v}) for v in values]


@pytest.mark.slow
def test_sweep_writes_each_point_as_its_own_run_and_ranks_them(one_device_run, tmp_path):
    """2 values x 2 seeds in one program on one device: each point's directory holds what the run without --sweep
    at its value writes, to float rounding (a vmapped batch of 4 agents and one of 2 are compiled apart); the run's
    summary ranks the points."""
    field, values, _ = SWEEPS["ppo"]
    module, config = tiny_config("ppo", tmp_path, num_seeds=2, num_chunks=1, run_name="sweep",
                                 sweep=(f"lr={values[0]},{values[1]}",))
    module.main(config)
    run_dir = tmp_path / "sweep"
    for value, point_dir in zip(values, point_dirs(run_dir, field, values), strict=True):
        got, expected = (read_csv(d / "metrics.csv") for d in (point_dir, one_device_run("ppo", 0, **{field: value})))
        assert got[0] == expected[0] and len(got) == len(expected) > 1
        got, expected = (np.array([[float(v == "True") if v in ("True", "False") else float(v) for v in row]
                                   for row in rows[1:]]) for rows in (got, expected))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6, equal_nan=True)
        assert (point_dir / "learning_curve.png").exists()
        assert json.loads((point_dir / "summary.json").read_text())["sweep_point"] == {field: value}
    summary = json.loads((run_dir / "summary.json").read_text())
    ranking = summary["ranking"]
    assert sorted(e["values"][field] for e in ranking) == sorted(values)
    assert summary["ranked_by"].startswith("eval")
    means = [e["eval_return_mean"] for e in ranking]
    assert [e["rank"] for e in ranking] == [1, 2] and means == sorted(means, reverse=True)


def test_a_diverging_sweep_point_is_reported_while_the_healthy_points_finish(tmp_path, capsys):
    """One point's NaNs used to stop the whole sweep, with no summary for the healthy points: the point is named in
    a warning, the others train to the end, and the ranking puts it last, marked diverged."""
    module, config = tiny_config("ppo", tmp_path, num_seeds=2, run_name="sweep", sweep=("lr=2.5e-4,1e30",))
    module.main(config)
    err = capsys.readouterr().err
    assert err.count("warning: sweep point learning_rate=1e+30 diverged (non-finite loss or parameters, first at "
                     "iteration 1); the other points train on.") == 1, err
    ranking = json.loads((tmp_path / "sweep" / "summary.json").read_text())["ranking"]
    assert [(e["point"], e["diverged_at_iteration"]) for e in ranking] == [("learning_rate=0.00025", None),
                                                                             ("learning_rate=1e+30", 1)]
    healthy = read_csv(tmp_path / "sweep" / "learning_rate=0.00025" / "metrics.csv")
    assert len(healthy) == 1 + 4 * 2 and all(row[-1] == "False" for row in healthy[1:])


@pytest.mark.slow
def test_sweep_on_two_devices_equals_one_point_sweeps_bit_for_bit(run_script, tmp_path):
    """With one sweep point per device, each device runs the one-device program of that point's agents: a
    one-value sweep of that point (its value an input, as in the sweep, not a constant)."""
    field, values, _ = SWEEPS["ppo"]
    result = run_script("ppo.py", *tiny_flags("ppo", num_seeds=2, run_name="sweep"),
                        "--sweep", f"{field}={values[0]},{values[1]}", env_overrides=TWO_DEVICES)
    assert result.returncode == 0, result.stderr[-3000:]
    for value, point_dir in zip(values, point_dirs(tmp_path / "runs" / "sweep", field, values), strict=True):
        alone = run_script("ppo.py", *tiny_flags("ppo", num_seeds=2, run_name=f"alone{value}", num_devices=1),
                           "--sweep", f"{field}={value}", env_overrides=TWO_DEVICES)
        assert alone.returncode == 0, alone.stderr[-3000:]
        assert read_csv(point_dir / "metrics.csv") == read_csv(tmp_path / "runs" / f"alone{value}" / "metrics.csv")


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
        harness.check(reinforce.ALGORITHM, config)
    harness.check(reinforce.ALGORITHM, dataclasses.replace(config, baseline="value"))  # with a baseline it does


def test_a_gamma_sweep_reaches_the_reward_normaliser():
    """Swept values travel in the config, so the reward normaliser of each agent gets the agent's gamma."""
    import ppo

    harness.check(ppo.ALGORITHM, ppo.Config(env="Pendulum-v1", total_timesteps=2048, sweep=("gamma=0.9,0.99",)))


def test_devices_that_do_not_divide_the_agents_exit_2(capsys, tmp_path):
    seen = len(jax.devices())  # this test process's CPU devices: one per core
    module, config = tiny_config("ppo", tmp_path, num_devices=seen + 1)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and f"--num-devices {seen + 1}: this process sees {seen} device(s)" in err[0]
    assert not any(tmp_path.iterdir())


def test_default_devices_are_one_per_core_and_the_most_that_divide_the_agents(capsys):
    """The test process, as any script, gets one CPU device per core; agents go to the most devices that divide
    them, with a note when that is fewer than all (none for a single agent)."""
    import ppo

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    code = "import ppo, jax; from scanrl import harness; print(len(jax.devices()), harness.available_cores())"
    seen = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    count, cores = map(int, seen.stdout.split())
    assert count == cores >= 1, seen.stderr
    devices = jax.devices()
    if len(devices) < 2:
        pytest.skip("one core here: nothing to split")
    config = ppo.Config()
    assert choose_devices(config, 2 * len(devices)) == devices and not capsys.readouterr().out
    assert choose_devices(config, 1) == devices[:1] and not capsys.readouterr().out
    assert len(choose_devices(config, len(devices) + 1)) < len(devices)
    assert f"do not divide over {len(devices)} devices" in capsys.readouterr().out
    assert choose_devices(dataclasses.replace(config, num_devices=1), 2 * len(devices)) == devices[:1]


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


def test_cli_refuses_a_sweep_field_given_twice(run_script):
    result = run_script("ppo.py", "--sweep", "lr=1e-3", "--sweep", "lr=1e-4")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: --sweep learning_rate is given twice; list all its values in one flag"]


@pytest.mark.slow
def test_sweep_logs_one_wandb_run_per_point_in_one_group(run_script, tmp_path):
    result = run_script("ppo.py", *tiny_flags("ppo", run_name="sweep"), "--sweep", "lr=1e-3,3e-4", "--track")
    assert result.returncode == 0, result.stderr[-3000:]
    offline = sorted((tmp_path / "runs" / "sweep" / "wandb").glob("offline-run-*"))
    assert len(offline) == 2
    records = [next(d.glob("*.wandb")).read_bytes() for d in offline]
    assert all(b"sweep/learning_rate=" in r for r in records)  # run names; the group is the run name
    assert sum(b"sweep/learning_rate=0.001" in r for r in records) == 1


def test_sweep_resumes_from_its_checkpoint(tmp_path):
    """A sweep run cut after its first chunk resumes to the metrics of the uninterrupted run, point by point."""
    module, config = tiny_config("ppo", tmp_path, num_seeds=2, num_chunks=2, run_name="whole",
                                 sweep=("lr=1e-3,3e-4",))
    module.main(config)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    shutil.copytree(whole, cut)
    steps = sorted(int(p.name) for p in (cut / "checkpoints").iterdir() if p.name.isdigit())
    shutil.rmtree(cut / "checkpoints" / str(steps[-1]))
    (cut / "summary.json").unlink()
    module.main(module.Config(resume=str(cut)))
    for value in (1e-3, 3e-4):
        label = point_label({"learning_rate": value})
        assert read_csv(cut / label / "metrics.csv") == read_csv(whole / label / "metrics.csv")
    assert json.loads((cut / "summary.json").read_text())["ranking"] == json.loads(
        (whole / "summary.json").read_text())["ranking"]


@pytest.mark.slow
@pytest.mark.parametrize("process_id", [0, 1])
def test_a_process_whose_peers_never_join_exits_1_with_one_line(process_id, tmp_path):
    """Alone, process 0 waits for the others and process 1 for the coordinator; after --distributed-timeout each
    exits 1 with one line (JAX alone would wait 300 s, then abort with a C++ stack dump)."""
    import time

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / "ppo.py"), "--coordinator-address", f"localhost:{port}",
                             "--num-processes", "2", "--process-id", str(process_id), "--distributed-timeout", "5",
                             "--out-dir", str(tmp_path / "runs")], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and time.perf_counter() - start < 60
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: process {process_id} of 2: "), lines
    assert "did not join within 5 s (--distributed-timeout)" in lines[0]
    assert not (tmp_path / "runs").exists()
