"""What every script must pass, each check once, parametrised over the eight scripts: --help lists every field of its
Config with the field's docstring, a bad config is refused in one line naming the flag (and the defaults are not),
and each agent of a vmapped batch depends on its own seed alone (the same program each time, different seeds different
agents). What is one algorithm's own (its targets against a reference, that it learns) is in its test_<script>.py."""

import ast
import dataclasses
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import exit_code_and_error
from conftest import FAST_COMPILE_OPTIONS, ROOT

SCRIPTS = ("ppo", "ppo_rnn", "reinforce", "td3", "sac", "crossq", "dqn_tabular_q", "pqn")


def own_field_docstrings(script):
    """{field: its docstring, whitespace collapsed} of the fields the script's own Config class declares (the
    shared ones it inherits are declared in scanrl/harness), read from the source as tyro reads them."""
    tree = ast.parse((ROOT / f"{script}.py").read_text())
    (config,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Config"]
    docs = {}
    for field, after in zip(config.body, config.body[1:], strict=False):
        if isinstance(field, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            docs[field.target.id] = " ".join(after.value.value.split())
    return docs


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_lists_every_field_with_its_docstring(script, run_script):
    result = run_script(f"{script}.py", "--help", add_out_dir=False)
    assert result.returncode == 0, result.stderr
    # tyro draws the help in boxes and wraps it: compare the words only.
    text = " ".join(result.stdout.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())
    config = importlib.import_module(script).Config
    for field in dataclasses.fields(config):
        flag = "--" + field.name.replace("_", "-")
        assert flag in text, flag
        if field.type in (bool, "bool"):
            assert "--no-" + flag[2:] in text, flag
    docs = own_field_docstrings(script)
    assert docs and set(docs) <= {field.name for field in dataclasses.fields(config)}
    for name, doc in docs.items():
        assert doc in text, (name, doc)


# (script, Config overrides, a fragment of the one-line message): each script's own checks (its `validate`) and the
# shared checks of its fields (a finite number); the shared flags' own are the harness's (tests/test_flags.py).
BAD_CONFIGS = [
    ("ppo", dict(activation="gelu"), "--activation 'gelu' is unknown"),
    ("ppo", dict(num_envs=0), "--num-envs must be a positive integer"),
    ("ppo", dict(num_minibatches=3), "--num-minibatches 3 does not divide the rollout"),
    ("ppo", dict(total_timesteps=100), "--total-timesteps 100 is smaller than one rollout"),
    ("ppo", dict(learning_rate=0.0), "--learning-rate must be positive"),
    ("ppo", dict(clip_coef=float("nan")), "--clip-coef must be a finite number, got nan"),
    ("ppo", dict(vf_coef=-1.0), "--vf-coef must be 0 or more, got -1.0"),
    ("ppo", dict(ent_coef=-0.01), "--ent-coef must be 0 or more"),
    ("ppo", dict(gae_lambda=1.5), "--gae-lambda must lie in [0, 1]"),
    ("ppo_rnn", dict(cell="rnn"), "--cell 'rnn' is unknown; use one of gru, lstm, lru"),
    # a minibatch is whole env sequences: 4 divides the rollout (6 x 128), not --num-envs
    ("ppo_rnn", dict(num_envs=6, num_minibatches=4), "--num-minibatches 4 does not divide --num-envs 6"),
    ("ppo_rnn", dict(total_timesteps=500), "--total-timesteps 500 is smaller than one rollout (--num-envs x "
                                           "--num-steps = 512)"),
    ("ppo_rnn", dict(cell="gtrxl", num_heads=3), "--num-heads 3 does not divide --cell-size 64"),
    ("reinforce", dict(activation="gelu"), "--activation 'gelu' is unknown"),
    ("reinforce", dict(num_envs=0), "--num-envs must be a positive integer"),
    ("reinforce", dict(train_v_iters=-1), "--train-v-iters must be a positive integer"),
    ("reinforce", dict(total_timesteps=100), "--total-timesteps 100 is smaller than one rollout"),
    ("reinforce", dict(pi_lr=0.0), "--pi-lr must be positive"),
    ("reinforce", dict(gae_lambda=1.5), "--gae-lambda must lie in [0, 1]"),
    ("td3", dict(env="CartPole-v1"), "--env CartPole-v1 has discrete actions; TD3 needs a continuous"),
    ("td3", dict(num_envs=0), "--num-envs must be a positive integer"),
    ("td3", dict(total_timesteps=4), "--total-timesteps 4 is smaller than one update phase (--num-envs x "
                                     "--update-every = 8)"),
    ("td3", dict(updates_per_step=0.3), "updates per phase; it must be a whole number"),
    ("td3", dict(updates_per_step=0.0625), "updates per phase; it must be a whole number, 1 or more"),
    ("td3", dict(tau=0.0), "--tau must be positive"),
    ("td3", dict(policy_noise=-0.1), "--policy-noise must be 0 or more"),
    ("td3", dict(learning_starts=50_000), "--learning-starts 50000 leaves no steps to learn"),
    ("sac", dict(env="CartPole-v1"), "--env CartPole-v1 has discrete actions; SAC needs a continuous"),
    ("sac", dict(num_envs=0), "--num-envs must be a positive integer"),
    ("sac", dict(total_timesteps=4), "--total-timesteps 4 is smaller than one update phase (--num-envs x "
                                     "--update-every = 8)"),
    ("sac", dict(updates_per_step=0.3), "updates per phase; it must be a whole number, 1 or more"),
    ("sac", dict(updates_per_step=0.0625), "updates per phase; it must be a whole number, 1 or more"),
    ("sac", dict(init_alpha=0.0), "--init-alpha must be positive"),
    ("sac", dict(tau=1.5), "--tau"),
    ("sac", dict(learning_starts=50_000), "--learning-starts 50000 leaves no steps to learn"),
    ("crossq", dict(env="CartPole-v1"), "--env CartPole-v1 has discrete actions; CrossQ needs a continuous"),
    ("crossq", dict(critic_width=0), "--critic-width must be a positive integer"),
    ("crossq", dict(renorm_momentum=1.0), "--renorm-momentum must lie strictly between 0 and 1"),
    ("crossq", dict(renorm_momentum=-0.5), "--renorm-momentum must lie in [0, 1]"),
    ("crossq", dict(renorm_warmup=-1), "--renorm-warmup must be 0 or more"),
    ("crossq", dict(batch_size=1), "--batch-size must be 2 or more for batch renormalisation"),
    ("crossq", dict(policy_delay=0), "--policy-delay must be a positive integer"),
    ("crossq", dict(adam_beta1=1.0), "--adam-beta1 below 1"),
    ("dqn_tabular_q", dict(env="Pendulum-v1"), "--env Pendulum-v1 has continuous actions"),
    ("dqn_tabular_q", dict(env="CartPole-v1", agent="tabular"), "--agent tabular needs a finite-state env"),
    ("dqn_tabular_q", dict(num_envs=0), "--num-envs must be a positive integer"),
    ("dqn_tabular_q", dict(gamma=1.5), "--gamma must lie in [0, 1]"),
    ("dqn_tabular_q", dict(start_e=-0.1), "--start-e must lie in [0, 1]"),
    ("dqn_tabular_q", dict(env="CartPole-v1", train_frequency=3), "--train-frequency 3 and --num-envs 10"),
    ("dqn_tabular_q", dict(env="CartPole-v1", buffer_size=64), "--buffer-size 64 must hold at least one batch"),
    ("dqn_tabular_q", dict(env="CartPole-v1", total_timesteps=10_000),
     "--learning-starts 10000 leaves no steps to learn"),
    ("dqn_tabular_q", dict(total_timesteps=10), "--total-timesteps 10 is smaller than one iteration"),
    ("dqn_tabular_q", dict(hidden_sizes=(64, 0)), "--hidden-sizes must be positive integers"),
    ("pqn", dict(env="Pendulum-v1"), "--env Pendulum-v1 has continuous actions"),
    ("pqn", dict(num_minibatches=3), "--num-minibatches 3 does not divide the rollout"),
    ("pqn", dict(q_lambda=1.5), "--q-lambda must lie in [0, 1]"),
    ("pqn", dict(update_epochs=0), "--update-epochs must be a positive integer"),
    ("pqn", dict(max_grad_norm=0.0), "--max-grad-norm must be positive"),
    ("pqn", dict(total_timesteps=10), "--total-timesteps 10 is smaller than one rollout"),
]


@pytest.mark.parametrize("script, overrides, message", BAD_CONFIGS,
                         ids=[f"{s}-{'-'.join(o)}" for s, o, _ in BAD_CONFIGS])
def test_bad_config_names_the_flag(script, overrides, message, capsys, tmp_path):
    """As the command line answers it: one `error:` line, exit 2, nothing written."""
    module = importlib.import_module(script)
    code, lines = exit_code_and_error(capsys, module.main, module.Config(**overrides, out_dir=str(tmp_path)))
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not any(tmp_path.iterdir())


# The defaults of every script pass its checks, and so do configs the table above must not catch.
GOOD_CONFIGS = [(script, {}) for script in SCRIPTS] + [
    ("reinforce", dict(env="Pendulum-v1", baseline="none")),  # plain REINFORCE, continuous actions
]


@pytest.mark.parametrize("script, overrides", GOOD_CONFIGS, ids=[f"{s}-{'-'.join(o)}" for s, o in GOOD_CONFIGS])
def test_defaults_pass_the_checks(script, overrides):
    module = importlib.import_module(script)
    module.validate(module.Config(**overrides))


# Per script a tiny run whose compile is short: a few iterations, small networks, and the two agents' metrics
# differing within them (dqn_tabular_q: its tabular learner; the other learner's program is DQN's usual one).
TINY = {
    "ppo": dict(total_timesteps=2 * 4 * 32, num_steps=32, num_minibatches=2, update_epochs=2, hidden_size=16),
    "ppo_rnn": dict(total_timesteps=2 * 4 * 32, num_steps=32, num_minibatches=2, update_epochs=2, hidden_size=16,
                    cell_size=8),
    "reinforce": dict(total_timesteps=2 * 8 * 32, num_steps=32, train_v_iters=5, hidden_size=16),
    "td3": dict(total_timesteps=64, num_envs=2, update_every=4, learning_starts=32, buffer_size=256, batch_size=16,
                hidden_size=16),
    "sac": dict(total_timesteps=64, num_envs=2, update_every=4, learning_starts=32, buffer_size=256, batch_size=16,
                hidden_size=16),
    "crossq": dict(total_timesteps=64, num_envs=2, update_every=4, learning_starts=32, buffer_size=256, batch_size=16,
                   hidden_size=16, critic_width=16),
    # FrozenLake is slippery (the env keys matter) and its goal is near, so the tables fill within the budget.
    "dqn_tabular_q": dict(env="FrozenLake-misc", total_timesteps=5_000, num_steps=500, start_e=1.0, end_e=0.0,
                          exploration_fraction=0.5),
    "pqn": dict(total_timesteps=2 * 8 * 16, num_envs=8, num_steps=16, num_minibatches=2, update_epochs=2,
                hidden_sizes=(16,)),
}
assert set(TINY) == set(SCRIPTS)


def arrays(tree):
    """The leaves of a pytree as numpy arrays (a typed PRNG key as its raw bits)."""
    return [np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
            for x in jax.tree.leaves(tree)]


SLOW_COMPILES = ("ppo_rnn", "sac", "crossq")  # 10-22 s each on 2 cores


@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_COMPILES else s
                                    for s in SCRIPTS])
def test_each_agent_of_a_vmapped_batch_depends_on_its_seed_alone(script):
    """make_train(config) is a pure program: run twice it trains the same agents, different seeds train different
    agents, and an agent's numbers depend on its own seed alone, not on the other agents of the batch nor on its
    place among them (so any agent can be trained again alone with --seed). One compile per script, at XLA's lowest
    optimisation level: the check is about the program, not its speed. (That a program made again is the same, bit
    for bit: the contract's --resume check, tests/test_forking.py.)"""
    module = importlib.import_module(script)
    config = module.Config(**TINY[script])
    module.validate(config)
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    train = jax.jit(jax.vmap(module.make_train(config))).lower(keys).compile(FAST_COMPILE_OPTIONS)
    runner, metrics = train(keys)
    batch = arrays((runner, metrics))
    for x, y in zip(batch, arrays(train(keys)), strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(not np.allclose(x[0], x[1], equal_nan=True) for x in arrays(metrics)), "the two agents train alike"
    for x, y in zip(batch, arrays(train(keys[::-1])), strict=True):  # the same seeds, in the other order
        np.testing.assert_allclose(x, y[::-1], rtol=1e-6, atol=1e-7)
