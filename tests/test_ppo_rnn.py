"""ppo_rnn.py: each cell's memory resets exactly where episodes start, the GTrXL's window holds --memory-length steps,
a policy with memory is evaluated with it, each cell trains, and it learns what ppo.py cannot (slow): CartPole without
velocities, MemoryChain (ppo.py's score there, and every cell's on longer chains, are in the learning suite's memory
results, benchmarks/results/learning_memory.md)."""

import functools
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE_OPTIONS, read_run

import ppo_rnn
from scanrl import blocks, envs


def network(discrete=True, action_dim=2, cell="gru", memory_length=4):
    config = ppo_rnn.Config(cell=cell, hidden_size=8, cell_size=6, memory_length=memory_length, num_heads=2)
    return ppo_rnn.ActorCriticRNN(action_dim, discrete, hidden_size=8, activation="tanh",
                                  cell=functools.partial(ppo_rnn.make_cell, config, cell))


def memory_shape(cell, num_envs, memory_length=4):
    config = ppo_rnn.Config(cell=cell, hidden_size=8, cell_size=6, memory_length=memory_length)
    return ppo_rnn.initial_memory(config, num_envs).shape


@pytest.mark.parametrize(("discrete", "cell"), [(True, "gru"), (False, "gru"), (True, "lstm"), (False, "lru"),
                                                (True, "gtrxl"), pytest.param(False, "gtrxl", marks=pytest.mark.slow)])
def test_memory_resets_exactly_at_episode_starts(discrete, cell):
    """The scanned sequence (the update's replay) against the network stepped one observation at a time in Python,
    its memory set to zeros by hand before each episode's first observation and otherwise carried (the GTrXL's: a
    full window, its every slot marked as a step of the episode)."""
    rng = np.random.default_rng(0)
    num_steps, num_envs = 12, 3
    obs = jnp.asarray(rng.normal(size=(num_steps, num_envs, 4)), jnp.float32)
    start = rng.random((num_steps, num_envs)) < 0.25
    start[0] = [True, False, False]  # env 0 starts an episode with the sequence; 1 and 2 are inside one
    start[5, 1] = True
    start = jnp.asarray(start)
    memory = jnp.asarray(rng.normal(size=memory_shape(cell, num_envs)), jnp.float32)  # the memory it starts from
    if cell == "gtrxl":
        memory = memory.at[..., -1].set(1.0)
    net = network(discrete, cell=cell)
    params = jax.jit(net.init)(jax.random.PRNGKey(0), memory, obs, start)  # compiled: op by op took most of the time
    apply = jax.jit(net.apply)
    final_memory, pi, values = apply(params, memory, obs, start)

    never_start = jnp.zeros((1, 1), bool)
    step = jax.jit(net.apply)
    for env in range(num_envs):
        carry = memory[env:env + 1]
        for t in range(num_steps):
            if start[t, env]:
                carry = jnp.zeros_like(carry)
            carry, pi_t, value_t = step(params, carry, obs[t:t + 1, env:env + 1], never_start)
            np.testing.assert_allclose(value_t[0, 0], values[t, env], rtol=1e-5, atol=1e-6)
            for got, want in zip(pi_t, pi, strict=True):
                np.testing.assert_allclose(got[0, 0], want[t, env], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(carry[0], final_memory[env], rtol=1e-5, atol=1e-6)

    # After a start nothing before it matters: other observations and memory before step 5 of env 1, same outputs.
    changed = obs.at[:5, 1].set(7.0)
    _, _, values_changed = apply(params, memory.at[1].set(-3.0), changed, start)
    np.testing.assert_array_equal(values_changed[5:, 1], values[5:, 1])
    assert not np.allclose(values_changed[:5, 1], values[:5, 1])


def test_linear_recurrence_on_an_associative_scan_equals_the_sequential_one_with_resets():
    """The LRU's parallel scan (the reset folded into the operator's elements) against h_t = a_t h_{t-1} + b_t in a
    Python loop, h_{t-1} set to zeros by hand where an episode starts; complex, as the LRU's state is."""
    rng = np.random.default_rng(1)
    num_steps, num_envs, size = 37, 3, 5  # not a power of two: the scan's odd tail
    a = jnp.asarray(rng.uniform(0.5, 1.0, (num_steps, num_envs, size)) * np.exp(1j * rng.uniform(0, 6, size)))
    b = jnp.asarray(rng.normal(size=(num_steps, num_envs, size)) + 1j * rng.normal(size=(num_steps, num_envs, size)))
    start = rng.random((num_steps, num_envs)) < 0.15
    start[0, 0] = True
    memory = jnp.asarray(rng.normal(size=(num_envs, size)) + 0j)
    got = ppo_rnn.reset_linear_recurrence(a, b, jnp.asarray(start), memory)
    h = np.asarray(memory)
    for t in range(num_steps):
        h = np.where(start[t][:, None], 0.0, h)
        h = np.asarray(a[t]) * h + np.asarray(b[t])
        np.testing.assert_allclose(got[t], h, rtol=1e-5, atol=1e-5)


def test_the_default_cell_is_the_gru_under_its_old_parameter_names():
    """--cell defaults to gru with its parameters where they were before --cell existed (saved runs still load and
    train alike: the default's metrics and parameters were compared bit for bit before and after, see the commit);
    the other cells name their own."""
    assert ppo_rnn.Config().cell == "gru"
    for cell in ppo_rnn.CELLS:
        net = network(cell=cell)
        memory = jnp.zeros(memory_shape(cell, 2))
        params = jax.jit(net.init)(jax.random.PRNGKey(0), memory, jnp.zeros((3, 2, 4)), jnp.zeros((3, 2), bool))
        assert cell in params["params"], params["params"].keys()


def test_the_gtrxl_window_holds_the_last_memory_length_steps():
    """Transformer-XL's memory is a window: with --memory-length 3 an observation 4 steps back changes nothing, one
    3 steps back changes the output."""
    rng = np.random.default_rng(1)
    obs = jnp.asarray(rng.normal(size=(8, 1, 4)), jnp.float32)
    start = jnp.zeros((8, 1), bool).at[0].set(True)
    net = network(cell="gtrxl", memory_length=3)
    memory = jnp.zeros(memory_shape("gtrxl", 1, memory_length=3))
    params = jax.jit(net.init)(jax.random.PRNGKey(0), memory, obs, start)
    apply = jax.jit(net.apply)
    values = apply(params, memory, obs, start)[2]
    assert np.array_equal(apply(params, memory, obs.at[3].set(5.0), start)[2][7], values[7])
    assert not np.allclose(apply(params, memory, obs.at[4].set(5.0), start)[2][7], values[7])


def remember_the_context():
    """A scripted MemoryChain policy with memory: it keeps the context bit shown with an episode's first
    observation and answers it at the end (+1 every episode); without its memory it answers at random."""

    def step(memory, obs, start):
        memory = jnp.where(start, obs[:, 2], memory)
        return memory, (memory > 0).astype(jnp.int32)

    return envs.RecurrentPolicy(lambda num_envs: jnp.zeros(num_envs), step)


def test_evaluate_carries_a_policys_memory():
    env, env_params = envs.make_vec("MemoryChain-bsuite", 16)
    policy = remember_the_context()
    returns = envs.evaluate(env, env_params, policy, jax.random.PRNGKey(0), 20)
    np.testing.assert_array_equal(returns, np.ones(16))
    # The same policy with its memory cleared at every step is a guess: it loses some episodes.
    forgetful = envs.RecurrentPolicy(policy.initial_carry, lambda m, obs, start: policy.step(m, obs, start | True))
    assert envs.evaluate(env, env_params, forgetful, jax.random.PRNGKey(0), 20).min() == -1
    # Acting without the memory is refused in one line, not answered with a number.
    with pytest.raises(TypeError, match="this policy has memory"):
        policy(jnp.zeros((1, 3)))


def test_masked_envs_hide_the_velocities():
    full, params = envs.make("CartPole-v1")
    masked, _ = envs.make("CartPole-v1-masked")
    key = jax.random.PRNGKey(0)
    obs, _ = jax.jit(full.reset)(key, params)
    masked_obs, _ = jax.jit(masked.reset)(key, params)
    np.testing.assert_array_equal(masked_obs, obs[jnp.array([0, 2])])
    assert masked.observation_space(params).shape == (2,)
    # Through the training stack the final observation before an auto-reset is masked too.
    env, params = envs.make_vec("Pendulum-v1-masked", 2)

    @jax.jit
    def reset_and_step(key):
        _, state = env.reset(key, params)
        return env.step(key, state, jnp.zeros((2, 1)), params)

    next_obs, _, _, _, _, info = reset_and_step(key)
    assert next_obs.shape == (2, 2) and info["final_observation"].shape == (2, 2)


def test_truncation_bootstraps_from_the_final_observation_with_its_episodes_memory():
    """next_obs_values with a critic's memory: a truncated step's value is the critic's one step from that step's
    own memory (its episode, not reset) on the final observation; the last step's from the rollout's last memory."""
    value_fn = lambda obs, memory: obs.sum(-1) + 10 * memory.sum(-1)  # noqa: E731
    values = jnp.zeros((3, 1))
    done = jnp.array([[0.0], [1.0], [0.0]])  # step 1 truncated
    memory = jnp.array([[[1.0]], [[2.0]], [[3.0]]])
    next_obs = jnp.array([[[5.0]], [[6.0]], [[7.0]]])
    time_limit = SimpleNamespace(max_steps_in_episode=1)  # a truncation at every step possible
    got = blocks.next_obs_values(value_fn, values, done, jnp.zeros((3, 1)), next_obs, jnp.array([[8.0]]), time_limit,
                                 memory)
    np.testing.assert_allclose(got[:, 0], [0.0, 6.0 + 10 * 2.0, 8.0 + 10 * 3.0])


@pytest.mark.slow  # a compile per cell: about 13 s each on 2 cores
@pytest.mark.parametrize("cell", ["lstm", "lru"])
def test_each_cell_trains(cell):
    """Two iterations of each other cell's training program on the masked Pendulum (continuous actions): finite
    losses, a memory of the cell's width carried in the runner. That they learn: the memory suite
    (benchmarks/results/learning_memory.md); --resume and --eval: `python -m scanrl.tools.contract ppo_rnn.py
    --cell lru` (the commit names its run)."""
    config = ppo_rnn.Config(env="Pendulum-v1-masked", cell=cell, total_timesteps=128, num_steps=16, cell_size=8)
    key = jax.random.PRNGKey(0)
    runner, metrics = jax.jit(ppo_rnn.make_train(config)).lower(key).compile(FAST_COMPILE_OPTIONS)(key)
    assert runner.memory.shape == (4, 16)
    assert all(np.isfinite(metrics[key]).all() for key in ("loss/actor", "loss/critic", "entropy")), metrics


@pytest.mark.slow
def test_learns_masked_cartpole(run_script, tmp_path):
    """150k env steps, 4 seeds: ppo_rnn.py balances the pole it sees without velocities (eval IQM >= 400; 500 on
    every seed here), its evaluation agreeing with training. ppo.py, without memory, scores about 40 there (the
    learning suite's memory results)."""
    result = run_script("ppo_rnn.py", "--env", "CartPole-v1-masked", "--num-seeds", "4", "--total-timesteps", "150000",
                        optimized=True)
    assert result.returncode == 0, result.stderr
    run_dir, summary = read_run(tmp_path / "runs")
    assert summary["eval_return_iqm"]["iqm"] >= 400, summary
    # The evaluation with memory agrees with what training saw at its end (a policy evaluated without its memory
    # scores like ppo.py: about 40), and --eval of the saved run plays the same episodes to the same returns.
    assert np.mean(summary["final_return"]) >= 400, summary
    result = run_script("ppo_rnn.py", "--eval", str(run_dir), optimized=True)  # the run's compiled evaluation
    assert result.returncode == 0, result.stderr
    means = [line.split("mean ")[1].split()[0] for line in result.stdout.splitlines() if line.startswith("seed ")]
    assert means == [f"{r:.2f}" for r in summary["eval_return"]], result.stdout


@pytest.mark.slow
def test_gtrxl_learns_memory_chain(run_script, tmp_path):
    """MemoryChain-bsuite (remember the context bit 5 steps), --cell gtrxl with an 8-step window: every seed answers
    right (eval 1.0; a guess scores 0). (The masked CartPole's 500 takes it 100k steps, 107 s here: the memory suite's
    row, ppo_rnn_gtrxl-CartPole-v1-masked, holds it.)"""
    result = run_script("ppo_rnn.py", "--cell", "gtrxl", "--env", "MemoryChain-bsuite", "--num-seeds", "2",
                        "--total-timesteps", "30000", "--memory-length", "8", "--eval-episodes", "8", optimized=True)
    assert result.returncode == 0, result.stderr
    _, summary = read_run(tmp_path / "runs")
    assert min(summary["eval_return"]) == 1.0, summary
