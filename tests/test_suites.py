"""The optional suites' adapters (scanrl/envs/craftax.py, xminigrid.py, playground.py) against each suite's own API,
and your own env from the command line (--env module:name, envs.register)."""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE_OPTIONS, ROOT, run_warm

from scanrl import envs
from scanrl.envs.suite import installed

craftax = pytest.importorskip("craftax", reason="pip install -r requirements-craftax.txt")
xminigrid = pytest.importorskip("xminigrid", reason="pip install -r requirements-xminigrid.txt")
if not installed("mujoco_playground"):  # found, not imported: its 3 s import is paid by the tests that use it
    pytest.skip("pip install -r requirements-playground.txt", allow_module_level=True)


def fast_jit(fn):
    """`jax.jit(fn)`, compiled at XLA's lowest backend optimisation level on its first call (these suites' steps
    compile in about half the time; nothing checked here depends on the level) and run compiled after."""
    jitted, compiled = jax.jit(fn), []

    def call(*args):
        if not compiled:
            compiled.append(jitted.lower(*args).compile(FAST_COMPILE_OPTIONS))
        return compiled[0](*args)
    return call


def lockstep(env, env_params, reference_reset, reference_step, actions, key):
    """Steps the adapter and the suite's own env side by side with the keys gymnax's `step` uses (`split(key)`: the
    step's, then the reset's), resetting the reference where the adapter says an episode ended. Returns per step:
    (terminated, truncated, reward, final observation, observation), the reference's (terminated, reward,
    observation), and the compiled (reset, step, reference step), for more checks without compiling again."""
    reference_reset, reference_step = fast_jit(reference_reset), fast_jit(reference_step)
    reset, step = fast_jit(env.reset), fast_jit(env.step)
    key, key_reset = jax.random.split(key)
    obs, state = reset(key_reset, env_params)
    ref_obs, ref_state = reference_reset(key_reset)
    np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
    ours, theirs = [], []
    for action in map(jnp.asarray, actions):
        key, key_step = jax.random.split(key)
        obs, state, reward, terminated, truncated, info = step(key_step, state, action, env_params)
        inner_key, reset_key = jax.random.split(key_step)
        final_obs, ref_state, ref_reward, ref_terminated = reference_step(inner_key, ref_state, action)
        ours.append((bool(terminated), bool(truncated), float(reward), np.asarray(info["final_observation"])))
        theirs.append((bool(ref_terminated), float(ref_reward), np.asarray(final_obs)))
        if terminated or truncated:
            ref_obs, ref_state = reference_reset(reset_key)
        else:
            ref_obs = final_obs
        np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
    return ours, theirs, (reset, step, reference_step)


def check_lockstep(ours, theirs, limit):
    """The adapter's step agrees with the suite's: reward, terminated (the task's own end), the true last
    observation; truncated exactly where an episode reaches the time limit without terminating."""
    length = 0
    for (terminated, truncated, reward, final_obs), (ref_end, ref_reward, ref_obs) in zip(ours, theirs, strict=True):
        length += 1
        assert terminated == ref_end
        assert truncated == (length >= limit)
        assert reward == pytest.approx(ref_reward)
        np.testing.assert_allclose(final_obs, ref_obs, atol=1e-6)
        if terminated or truncated:
            length = 0


# ----------------------------------------------------------------------------------------------------------
# Craftax


@pytest.mark.slow  # Craftax: about 15 s on 2 cores, most of it compiling its step
def test_craftax_terminates_on_death_and_truncates_at_its_time_limit_with_the_true_last_observation():
    from craftax.craftax_env import make_craftax_env_from_name

    env, env_params = envs.make("Craftax-Classic-Symbolic-v1", max_timesteps=6)
    assert env.observation_space(env_params).shape == (1345,) and env_params.max_steps_in_episode == 6
    inner = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=False)
    params = inner.default_params.replace(max_timesteps=6)
    # Craftax's own done joins death and the time limit; its state tells them apart.

    def reference_reset(key):
        return inner.reset_env(key, params)

    def reference_step(key, state, action):
        obs, state, reward, done, _ = inner.step_env(key, state, action, params)
        return obs, state, reward, done & (state.timestep < 6)

    actions = [0, 1, 2, 3, 4, 5, 6, 0]
    ours, theirs, (reset, step, reference_step) = lockstep(env, env_params, reference_reset, reference_step, actions,
                                                           jax.random.PRNGKey(1))
    check_lockstep(ours, theirs, 6)
    assert [t for _, t, _, _ in ours] == [False] * 5 + [True, False, False]

    # A real termination: the player at 0 health dies on the next step; that is not a truncation.
    obs, state = reset(jax.random.PRNGKey(2), env_params)
    state = state.replace(inner=state.inner.replace(player_health=state.inner.player_health * 0))
    final_obs, _, _, done = reference_step(jax.random.split(jax.random.PRNGKey(3))[0], state.inner, jnp.asarray(0))
    obs, _, _, terminated, truncated, info = step(jax.random.PRNGKey(3), state, jnp.asarray(0), env_params)
    assert bool(done) and bool(terminated) and not bool(truncated)
    np.testing.assert_allclose(info["final_observation"], final_obs, atol=1e-6)
    assert not np.array_equal(obs, info["final_observation"])  # the next episode's first observation


# ----------------------------------------------------------------------------------------------------------
# XLand-MiniGrid


def one_hot_view(grid):
    from xminigrid.core.constants import NUM_COLORS, NUM_TILES

    return jnp.concatenate([jnp.eye(NUM_TILES)[grid[..., 0]], jnp.eye(NUM_COLORS)[grid[..., 1]]], -1).reshape(-1)


def test_xminigrid_terminates_at_the_goal_and_truncates_at_max_steps_with_the_true_last_observation():
    env, env_params = envs.make("MiniGrid-Empty-5x5", max_steps=12)
    inner, inner_params = xminigrid.make("MiniGrid-Empty-5x5", max_steps=12)
    assert env.observation_space(env_params).shape == (7 * 7 * 25,) and env_params.max_steps_in_episode == 12

    def reference_reset(key):
        timestep = inner.reset(inner_params, key)
        return one_hot_view(timestep.observation), timestep

    def reference_step(key, timestep, action):
        timestep = inner.step(inner_params, timestep, action)
        return one_hot_view(timestep.observation), timestep, timestep.reward, timestep.discount == 0.0

    # Empty-5x5: the agent starts in the top-left corner facing right, the goal is in the bottom-right one. Turning
    # in place runs into the time limit; forward, forward, right, forward, forward reaches the goal.
    actions = [1] * 12 + [0, 0, 1, 0, 0] + [1] * 3
    ours, theirs, _ = lockstep(env, env_params, reference_reset, reference_step, actions, jax.random.PRNGKey(0))
    check_lockstep(ours, theirs, 12)
    ends = [(i, terminated, truncated) for i, (terminated, truncated, *_) in enumerate(ours) if terminated or truncated]
    assert ends == [(11, False, True), (16, True, False)]
    assert ours[16][2] == pytest.approx(1 - 0.9 * 5 / 12)  # the goal's reward, as XLand-MiniGrid gives it


# ----------------------------------------------------------------------------------------------------------
# MuJoCo Playground


@pytest.mark.slow
def test_playground_truncates_at_its_episode_length_and_terminates_when_the_simulation_fails():
    from mujoco_playground import registry

    env, env_params = envs.make("playground/CartpoleBalance", episode_length=4)
    inner = registry.load("CartpoleBalance", config_overrides={"impl": "jax", "episode_length": 4})
    assert env_params.max_steps_in_episode == 4
    assert env.action_space(env_params).shape == (1,) and env.observation_space(env_params).shape == (5,)

    def reference_reset(key):
        state = inner.reset(key)
        return state.obs, state

    def reference_step(key, state, action):
        state = inner.step(state, action)
        return state.obs, state, state.reward, state.done > 0.5

    actions = [jnp.array([a]) for a in (0.5, -0.5, 1.0, 0.0, 0.2, 0.3)]
    ours, theirs, (reset, step, _) = lockstep(env, env_params, reference_reset, reference_step, actions,
                                              jax.random.PRNGKey(0))
    check_lockstep(ours, theirs, 4)
    assert [t for _, t, _, _ in ours] == [False, False, False, True, False, False]

    # Playground ends an episode only where the simulation turned NaN: that is the task's end, terminated.
    _, state = reset(jax.random.PRNGKey(1), env_params)
    data = state.inner.data
    state = state.replace(inner=state.inner.replace(data=data.replace(qvel=data.qvel * jnp.nan)))
    _, _, _, terminated, truncated, _ = step(jax.random.PRNGKey(2), state, jnp.zeros(1), env_params)
    assert bool(terminated) and not bool(truncated)


def test_menagerie_tasks_without_menagerie_are_one_line(monkeypatch):
    from mujoco_playground._src import mjx_env

    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", mjx_env.EXTERNAL_DEPS_PATH / "no_menagerie_here")
    with pytest.raises(ValueError, match="needs mujoco_menagerie"):
        envs.make("playground/Go1JoystickFlatTerrain")


# ----------------------------------------------------------------------------------------------------------
# Every suite through the scripts' stack


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [pytest.param("Craftax-Classic-Symbolic-v1", marks=pytest.mark.slow),
                                    "MiniGrid-Empty-5x5", "playground/CartpoleBalance"])
def test_episode_statistics_count_each_suites_own_rewards(env_id):
    kwargs = {"max_timesteps": 7} if env_id.startswith("Craftax") else (
        {"max_steps": 7} if env_id.startswith("MiniGrid") else {"episode_length": 7})
    env, env_params = envs.make_vec(env_id, 3, **kwargs)
    obs, state = fast_jit(env.reset)(jax.random.PRNGKey(0), env_params)
    space = env.action_space(env_params)
    step = fast_jit(lambda key, state: env.step(key, state, jax.vmap(space.sample)(jax.random.split(key, 3)),
                                                env_params))
    total = np.zeros(3)
    for t, key in enumerate(jax.random.split(jax.random.PRNGKey(1), 7)):
        obs, state, reward, terminated, truncated, info = step(key, state)
        total += np.asarray(reward)
        if t < 6:
            assert not np.asarray(info["episode_done"]).any() or np.asarray(terminated).any()
    done = np.asarray(info["episode_done"])
    assert done.all()  # every env ended by the 7th step (a time limit of 7, or sooner)
    np.testing.assert_allclose(np.asarray(info["episode_return"])[np.asarray(truncated)],
                               total[np.asarray(truncated)], rtol=1e-5)
    assert (np.asarray(info["episode_length"])[np.asarray(truncated)] == 7).all()


def test_uninstalled_suites_answer_with_their_install_line(monkeypatch):
    from scanrl.envs import craftax as craftax_envs
    from scanrl.envs import playground as playground_envs
    from scanrl.envs import xminigrid as xminigrid_envs

    for module, env_id in ((craftax_envs, "Craftax-Classic-Symbolic-v1"), (xminigrid_envs, "MiniGrid-Empty-8x8"),
                           (playground_envs, "playground/CartpoleBalance")):
        monkeypatch.setattr(module, "is_installed", lambda: False)
        suite = module.__name__.rsplit(".", 1)[1]
        with pytest.raises(ValueError, match=f"not installed: pip install -r requirements-{suite}.txt"):
            envs.make(env_id)
        assert env_id not in envs.list_envs()


def test_an_installed_suite_that_fails_to_import_is_one_line(monkeypatch):
    """A suite that is installed but broken (a version clash, a missing library) was a 20-42 line traceback."""
    monkeypatch.setitem(sys.modules, "craftax.craftax_env", None)  # importing it raises ImportError
    with pytest.raises(ValueError, match=r"^'Craftax-Classic-Symbolic-v1': Craftax is installed but fails "
                                         r"\(ModuleNotFoundError: .*\); reinstall it: "
                                         r"pip install -r requirements-craftax.txt$"):
        envs.make("Craftax-Classic-Symbolic-v1")


def test_list_envs_names_every_installed_suite():
    ids = envs.list_envs()
    for env_id in ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1", "MiniGrid-Empty-8x8", "MiniGrid-DoorKey-8x8",
                   "playground/CartpoleBalance", "playground/CheetahRun", "brax/halfcheetah", "CartPole-v1"):
        assert env_id in ids
    assert not any(i.startswith("XLand-MiniGrid") for i in ids)


# ----------------------------------------------------------------------------------------------------------
# Your own env

# The docs' example env (docs/examples/corridor.py), as a user's module, plus a broken env and a registered id.
CORRIDOR = (ROOT / "docs" / "examples" / "corridor.py").read_text() + '''

class Unbatched(Corridor):  # a callback that cannot run under jax.vmap: fails only in the training program
    def step_env(self, key, state, action, params):
        action = jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct((), jnp.int32), action)
        return super().step_env(key, state, action, params)


class OldStyle(Corridor):  # gymnax 0.0.x: step returns five values
    def step(self, key, state, action, params):
        obs, state, reward, done, info = self.step_env(key, state, action, params)
        return obs, state, reward, done, info


from scanrl import envs  # noqa: E402

envs.register("Corridor-v0", Corridor)
'''


def run_in(cwd, *args, timeout=300):
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "WANDB_MODE": "disabled"}
    return run_warm([sys.executable, str(ROOT / "ppo.py"), *args], cwd, env, timeout)


@pytest.mark.slow
def test_your_own_env_trains_from_the_command_line_and_its_runs_import_it_only_when_named(tmp_path):
    (tmp_path / "my_env.py").write_text(CORRIDOR)
    out = tmp_path / "runs"
    run = run_in(tmp_path, "--env", "my_env:Corridor", "--total-timesteps", "20000", "--num-seeds", "2",
                 "--out-dir", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    (run_dir,) = out.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert min(summary["eval_return"]) == pytest.approx(0.92, abs=1e-4)  # 9 steps right: 1 - 8 * 0.01

    # A run directory's config.json never makes scanrl import code: the command line must name the env.
    (tmp_path / "my_env.py").write_text("raise SystemExit('imported')\n")
    for flag in ("--eval", "--resume"):
        refused = run_in(tmp_path, flag, str(run_dir))
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines()[-1] == (
            f"error: {flag}: {run_dir} trained on my_env:Corridor, which imports my_env; scanrl imports code only "
            f"when your own command line names it: python ppo.py {flag} {run_dir} --env my_env:Corridor")
    (tmp_path / "my_env.py").write_text(CORRIDOR)
    evaluated = run_in(tmp_path, "--eval", str(run_dir), "--env", "my_env:Corridor")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "mean over agents: 0.92" in evaluated.stdout


def test_your_own_env_by_file_path_and_by_registered_id(tmp_path):
    (tmp_path / "my_env.py").write_text(CORRIDOR)
    by_file = envs.make(f"{tmp_path / 'my_env.py'}:Corridor")
    assert by_file[0].action_space(by_file[1]).n == 2
    sys.path.insert(0, str(tmp_path))
    try:
        env, env_params = envs.make("my_env:Corridor-v0")  # the id my_env registers when imported
        assert env_params.max_steps_in_episode == 50 and "Corridor-v0" in envs.list_envs()
        assert envs.make("Corridor-v0")[1].max_steps_in_episode == 50
    finally:
        sys.path.remove(str(tmp_path))
        envs.REGISTERED.pop("Corridor-v0", None)
        sys.modules.pop("my_env", None)


@pytest.mark.slow
@pytest.mark.parametrize("env_id,message", [
    ("my_env:OldStyle", "step must return gymnax 1.x's (obs, state, reward, terminated, truncated, info)"),
    ("my_env:Nope", "my_env has no attribute 'Nope' and registers no env of that id"),
    ("my_env:jax", "not a gymnax env"),
    ("sys:exit", "making the env failed: SystemExit"),  # exited 0, silently
    ("my_env:Unbatched", "the env raised NotImplementedError: vmap is only supported for the pure_callback"),
])
def test_a_broken_env_of_your_own_is_one_line(tmp_path, env_id, message):
    """Each is one line and exit 2, before a run directory is left behind: an env that is no env, and one that
    fails only where the training program is made (batched), named by its file and line."""
    (tmp_path / "my_env.py").write_text(CORRIDOR)
    run = run_in(tmp_path, "--env", env_id, "--out-dir", str(tmp_path / "runs"))
    assert run.returncode == 2, run.stderr[-3000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert lines[0].startswith(f"error: --env: '{env_id}': " if "Unbatched" not in env_id else
                               f"error: --env {env_id}: the env raised ")
    assert "Unbatched" not in env_id or f"{tmp_path / 'my_env.py'}:" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_register_refuses_ids_that_are_taken():
    for taken in ("CartPole-v1", "GridWorld-v0", "brax/ant", "MiniGrid-Empty-8x8", "mod:Env", ""):
        with pytest.raises(ValueError, match="cannot register"):
            envs.register(taken, lambda: None)
