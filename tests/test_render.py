"""--gif's drawing (scanrl/envs/render.py): quiet on a headless machine (no SDL or ALSA lines), one frame per step."""

import os
import sys

import pytest
from conftest import ROOT, run_warm

DRAW = """
import sys, jax, numpy as np
from scanrl import envs
from scanrl.envs.render import write_gif
env, params = envs.make(sys.argv[1])
states, state, key = [], env.reset(jax.random.PRNGKey(0), params)[1], jax.random.PRNGKey(1)
for t in range(int(sys.argv[2])):
    states.append(state)
    key, k_act, k_step = jax.random.split(key, 3)
    state = env.step(k_step, state, env.action_space(params).sample(k_act), params)[1]
write_gif(env, params, states, np.arange(1, len(states) + 1, dtype=float), sys.argv[3])
"""


@pytest.mark.slow  # gymnax draws classic-control frames through gymnasium and pygame: ~9 s an env
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0"])
def test_gif_is_quiet_with_one_frame_per_step(tmp_path, env_id):
    from PIL import Image

    path = tmp_path / "episode.gif"
    # No display and no sound card, as on a server: XDG_RUNTIME_DIR unset, DISPLAY unset.
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER",
                                                            "SDL_AUDIODRIVER")}
    done = run_warm([sys.executable, "-c", DRAW, env_id, "12", str(path)], ROOT, env, 300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "ALSA" not in done.stderr and "XDG_RUNTIME_DIR" not in done.stderr and "SDL" not in done.stderr, \
        done.stderr
    with Image.open(path) as gif:
        assert gif.n_frames == 12  # the step counter in the title keeps every frame distinct
