"""scanrl/harness/agents.py: agents (sweep points x seeds) split over devices and processes, the devices
chosen, and a compiled program that does not grow with the agents.

The reference for every comparison is a one-device run made in this process with `main(Config(...))`. A run on 2
devices gives each device the one-device program for its own agents, so its metrics equal, bit for bit, the one-device
runs of those agents (seeds 0-1 and 2-3); whether they do depends on how the algorithm's program compiles, so that
test runs one case of each kind of program (TWO_DEVICE_CASES: PPO's TrainStates, TD3's replay buffer and counters,
a Q-table, PQN's Q(lambda) targets; reinforce.py and DQN build theirs from the same pieces). Runs that need more
devices or processes than this test process has are subprocesses, as a user would start them. The one-device runs
are made once, here: every test compared with them (a 2-process run, a sweep's points) is in this file."""

import dataclasses
import importlib
import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from cases import SCRIPTS, SWEEPS, copy_run, exit_code_and_error, read_csv, tiny_config, tiny_flags
from conftest import ROOT, TEST_FLAGS, run_warm

from scanrl.harness.agents import choose_devices
from scanrl.harness.program import seed_keys
from scanrl.harness.sweeps import point_label

TWO_DEVICES = {"XLA_FLAGS": f"{TEST_FLAGS} --xla_force_host_platform_device_count=2"}  # compiled as the 1-device runs


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


TWO_DEVICE_CASES = ("ppo", "td3", "tabular_q", "pqn")


@pytest.fixture(scope="module")
def two_device_runs(tmp_path_factory):
    """Every case's tiny run of seeds 0-3 in one process that sees 2 CPU devices (one process, one import, for all
    of TWO_DEVICE_CASES), as `main` runs it: the agents split over both devices. -> {case: run directory, "stdout":
    ...}."""
    out_dir = tmp_path_factory.mktemp("two_devices")
    code = (f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
            "from cases import tiny_config\n"
            f"for case in {TWO_DEVICE_CASES!r}:\n"
            f"    module, config = tiny_config(case, {str(out_dir)!r}, num_seeds=4, num_chunks=1, run_name=case)\n"
            "    module.main(config)\n")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(out_dir), **TWO_DEVICES}
    result = run_warm([sys.executable, "-c", code], out_dir, env, 900)
    assert result.returncode == 0, result.stderr[-3000:]
    return {case: out_dir / case for case in TWO_DEVICE_CASES} | {"stdout": result.stdout}


@pytest.mark.slow
@pytest.mark.parametrize("case", TWO_DEVICE_CASES)
def test_two_devices_equal_one_device_runs_per_seed(case, one_device_run, two_device_runs):
    assert two_device_runs["stdout"].count("on 2 device(s)") == len(TWO_DEVICE_CASES)
    header, expected = expected_four_agents(one_device_run, case)
    rows = read_csv(two_device_runs[case] / "metrics.csv")
    assert rows[0] == header and rows[1:] == expected


@pytest.mark.slow
def test_two_processes_on_localhost_write_one_run_with_all_seeds(one_device_run, tmp_path):
    with socket.socket() as s:  # a free port for the coordinator
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    env["XLA_FLAGS"] = f"{TEST_FLAGS} --xla_force_host_platform_device_count=1"  # one CPU device per process
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


def test_devices_that_do_not_divide_the_agents_exit_2(capsys, tmp_path):
    seen = len(jax.devices())  # this test process's CPU devices: one per core
    module, config = tiny_config("ppo", tmp_path, num_devices=seen + 1)
    code, err = exit_code_and_error(capsys, module.main, config)
    assert code == 2 and f"--num-devices {seen + 1}: this process sees {seen} device(s)" in err[0]
    assert not any(tmp_path.iterdir())


def test_default_devices_are_one_per_core_and_the_most_that_divide_the_agents(capsys, monkeypatch):
    """A script's process gets one CPU device per core; agents go to the most devices that divide them, with a note
    when that is fewer than all (none for a single agent)."""
    import ppo

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    code = "import ppo, jax; from scanrl import harness; print(len(jax.devices()), harness.available_cores())"
    seen = run_warm([sys.executable, "-c", code], ROOT, env, 120)
    count, cores = map(int, seen.stdout.split())
    assert count == cores >= 1, seen.stderr
    devices = jax.devices()
    if len(devices) < 2:  # this test process has one (conftest.py's XLA_FLAGS name no count): the split of two
        devices = devices * 2
        monkeypatch.setattr(jax, "devices", lambda: devices)
    config = ppo.Config()
    assert choose_devices(config, 2 * len(devices)) == devices and not capsys.readouterr().out
    assert choose_devices(config, 1) == devices[:1] and not capsys.readouterr().out
    assert len(choose_devices(config, len(devices) + 1)) < len(devices)
    assert f"do not divide over {len(devices)} devices" in capsys.readouterr().out
    assert choose_devices(dataclasses.replace(config, num_devices=1), 2 * len(devices)) == devices[:1]


@pytest.mark.slow
def test_resume_keeps_the_device_count_the_run_trained_on(finished_runs, tmp_path, capsys):
    """config.json records the devices a run was split over; a resume where there are fewer says so (it used to
    switch the count, and the numbers, silently)."""
    import ppo

    run_dir = copy_run(finished_runs, "ppo", tmp_path)
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["num_devices"] == json.loads((run_dir / "summary.json").read_text())["num_devices"] >= 1
    (run_dir / "summary.json").unlink()
    more = len(jax.devices()) + 1
    (run_dir / "config.json").write_text(json.dumps({**saved, "num_devices": more}))
    code, err = exit_code_and_error(capsys, ppo.main, ppo.Config(resume=str(run_dir)))
    assert code == 2 and len(err) == 1 and err[0].startswith(
        f"error: --resume: the run trained on {more} devices and this process sees {len(jax.devices())}; "), err


def program_size(module, config, num_agents):
    """Equations in the jaxpr of the vmapped training chunk (sub-jaxprs included) for `num_agents` agents."""
    init, update = module.make_train_parts(config)
    keys = seed_keys(dataclasses.replace(config, num_seeds=num_agents))
    runner = jax.eval_shape(jax.vmap(init), keys)
    jaxpr = jax.make_jaxpr(jax.vmap(update))(runner)

    def count(j):
        total = len(j.eqns)
        for eqn in j.eqns:
            for param in eqn.params.values():
                for sub in param if isinstance(param, (list, tuple)) else [param]:
                    inner = getattr(sub, "jaxpr", sub)
                    total += count(inner) if hasattr(inner, "eqns") else 0
        return total

    return count(jaxpr.jaxpr)


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_compiled_program_does_not_grow_with_the_agents(script):
    """The program for 64 agents is the program for 2: nothing in an iteration is unrolled per agent (a
    jax.debug.callback per agent once made 1,000 seeds take 45 s to compile)."""
    module = importlib.import_module(script)
    config = module.Config()
    assert program_size(module, config, 2) == program_size(module, config, 64)
