"""benchmarks/bench_update.py: JAX and PyTorch do the same update (same losses, same new weights), and the
script runs end to end in a tiny configuration."""

import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import ROOT

pytest.importorskip(
    "torch", reason="PyTorch is an optional benchmark dependency: pip install -r requirements-bench.txt"
)

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_update as bench  # noqa: E402

SCRIPT = "benchmarks/bench_update.py"


def mlp_np(layers, x, activation):
    for kernel, bias in layers[:-1]:
        x = activation(x @ kernel + bias)
    kernel, bias = layers[-1]
    return x @ kernel + bias


def relu(x):
    return np.maximum(x, 0.0)


def twin(layers, i):
    return [(w[i], b[i]) for w, b in layers]


def assert_same_after_adam(jax_weights, torch_weights, initial, lr, steps):
    """Adam's first steps move each weight by about lr * sign(gradient), whatever the gradient's size, so a
    gradient within float32 rounding of zero may step either way in the two frameworks: those weights can
    differ by up to 2 * lr per step. Allow that for at most 0.1% of the weights; all others must agree to
    float tolerance. A wrong sign or a wrong loss moves (nearly) every weight the wrong way and fails."""
    leaves = jax.tree_util.tree_leaves_with_path(jax_weights)
    for (path, a), b, w in zip(leaves, jax.tree.leaves(torch_weights), jax.tree.leaves(initial), strict=True):
        name = jax.tree_util.keystr(path)
        assert a.shape == b.shape == w.shape, name
        assert not np.allclose(a, w, rtol=0, atol=1e-7), f"{name} did not move"
        close = np.isclose(a, b, rtol=1e-4, atol=1e-5)
        assert close.mean() >= 0.999, f"{name}: {np.sum(~close)} of {a.size} differ, max {np.abs(a - b).max()}"
        assert np.abs(a - b).max() <= 2 * lr * steps + 1e-5, name


def test_one_vpg_update_is_the_same_in_jax_and_pytorch():
    cfg = bench.VPGConfig(batch_size=512, train_v_iters=10)
    weights, batch = bench.make_vpg_weights(cfg, seed=3), bench.make_vpg_batch(cfg, seed=3)
    loss_pi, loss_v, new = bench.vpg_jax(weights, batch, cfg)
    torch_loss_pi, torch_loss_v, torch_new = bench.vpg_torch(weights, batch, cfg)

    # The losses at the initial weights, by hand: -mean(log pi(a|s) * A) and the value MSE.
    logits = mlp_np(weights["pi"], batch.obs, np.tanh)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected_pi = -(log_probs[np.arange(cfg.batch_size), batch.action] * batch.advantage).mean()
    expected_v = ((mlp_np(weights["v"], batch.obs, np.tanh)[:, 0] - batch.ret) ** 2).mean()
    assert loss_pi == pytest.approx(expected_pi, rel=1e-4, abs=1e-6)
    assert torch_loss_pi == pytest.approx(expected_pi, rel=1e-4, abs=1e-6)
    assert loss_v.shape == torch_loss_v.shape == (cfg.train_v_iters,)
    assert loss_v[0] == pytest.approx(expected_v, rel=1e-5)
    np.testing.assert_allclose(loss_v, torch_loss_v, rtol=1e-4)
    assert loss_v[-1] < loss_v[0]  # the value steps descend

    assert_same_after_adam(new["pi"], torch_new["pi"], weights["pi"], cfg.pi_lr, 1)
    assert_same_after_adam(new["v"], torch_new["v"], weights["v"], cfg.vf_lr, cfg.train_v_iters)


def test_one_td3_cycle_is_the_same_in_jax_and_pytorch():
    cfg = bench.TD3Config(batch_size=128)
    weights, batch = bench.make_td3_weights(cfg, seed=1), bench.make_td3_batch(cfg, seed=1)
    critic_losses, actor_loss, new = bench.td3_jax(weights, batch, cfg)
    torch_critic_losses, torch_actor_loss, torch_new = bench.td3_torch(weights, batch, cfg)

    def policy(actor, obs):
        return cfg.action_bound * np.tanh(mlp_np(actor, obs, relu))  # low + (tanh + 1) * half range, bound +-2

    def q(critic, obs, action):
        return mlp_np(critic, np.concatenate([obs, action], axis=-1), relu)[:, 0]

    # The first critic loss by hand: clipped double-Q target with clipped smoothing noise, both twins' MSE.
    b = jax.tree.map(lambda x: x[0], batch)
    eps = np.clip(cfg.policy_noise * b.noise, -cfg.noise_clip, cfg.noise_clip)
    next_action = np.clip(policy(weights["actor_target"], b.next_obs) + eps * cfg.action_bound,
                          -cfg.action_bound, cfg.action_bound)
    next_qs = [q(twin(weights["critic_target"], i), b.next_obs, next_action) for i in range(2)]
    assert (next_qs[0] < next_qs[1]).any() and (next_qs[1] < next_qs[0]).any()  # the min over twins matters
    assert (np.abs(cfg.policy_noise * b.noise) > cfg.noise_clip).any()  # the noise clip is exercised
    target = b.reward + cfg.gamma * (1 - b.terminated) * np.minimum(*next_qs)
    expected_critic = sum(((q(twin(weights["critic"], i), b.obs, b.action) - target) ** 2).mean() for i in range(2))
    assert critic_losses.shape == torch_critic_losses.shape == (cfg.policy_delay,)
    assert critic_losses[0] == pytest.approx(expected_critic, rel=1e-5)
    np.testing.assert_allclose(critic_losses, torch_critic_losses, rtol=1e-4)

    # The actor loss by hand: -Q_1 of the critic after both critic updates (the actor step leaves it as is)
    # at mu(s) of the actor before its update, on the last batch.
    obs = batch.obs[-1]
    for loss, weights_after in ((actor_loss, new), (torch_actor_loss, torch_new)):
        expected_actor = -q(twin(weights_after["critic"], 0), obs, policy(weights["actor"], obs)).mean()
        assert loss == pytest.approx(expected_actor, rel=1e-4, abs=1e-6)

    assert_same_after_adam(new["critic"], torch_new["critic"], weights["critic"], cfg.learning_rate,
                           cfg.policy_delay)
    assert_same_after_adam(new["actor"], torch_new["actor"], weights["actor"], cfg.learning_rate, 1)
    # Targets move by tau * (online - target), about 1e-6 here: check them against polyak by hand, tightly.
    for after in (new, torch_new):
        for name in ("actor", "critic"):
            expected = jax.tree.map(lambda p, t: cfg.tau * p + (1 - cfg.tau) * t, after[name],
                                    weights[f"{name}_target"])
            for got, want in zip(jax.tree.leaves(after[f"{name}_target"]), jax.tree.leaves(expected), strict=True):
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


def test_tiny_run_prints_the_table_and_writes_update_md_and_png(run_script, tmp_path):
    out_dir = tmp_path / "results"
    result = run_script(SCRIPT, "--repeats", "2", "--iters", "2", "--vpg-batch", "64", "--td3-batch", "16",
                        "--train-v-iters", "2", "--no-compile", "--out-dir", str(out_dir), timeout=300,
                        add_out_dir=False)
    assert result.returncode == 0, result.stderr
    table = (out_dir / "update.md").read_text()
    assert "jax " in table.splitlines()[0] and "torch " in table.splitlines()[0]
    for algo in ("VPG", "TD3"):
        for framework, mode in (("PyTorch", "eager"), ("JAX", "jit"), ("JAX", "jit + scan")):
            head = f"| {algo} | {framework} | {mode} | "
            assert head in result.stdout
            (line,) = [x for x in table.splitlines() if x.startswith(head)]
            ms, ratio = (float(x) for x in line[len(head):].strip(" |").split(" | "))
            assert ms > 0 and ratio > 0
            if mode == "eager":
                assert ratio == 1.0
    assert "torch.compile" not in table
    assert (out_dir / "update.png").read_bytes().startswith(b"\x89PNG")


def test_without_torch_exits_2_with_the_install_command(tmp_path):
    # The script asks importlib.util.find_spec whether torch is installed: make it answer no.
    hide_torch = ("import importlib.util, runpy, sys; find_spec = importlib.util.find_spec; "
                  "importlib.util.find_spec = lambda name, *a: None if name == 'torch' else find_spec(name, *a); "
                  "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", hide_torch, str(ROOT / SCRIPT), "--out-dir", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: PyTorch is needed for this benchmark: "
                                     "pip install -r requirements-bench.txt")
    assert not (tmp_path / "r").exists()
