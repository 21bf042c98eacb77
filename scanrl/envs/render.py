"""Drawing an episode to a gif, quietly and quickly on a headless machine.

gymnax draws the classic-control envs through gymnasium, which renders with pygame. Its visualizer makes a new
gymnasium env for every frame, and each one initialises pygame again: on a machine with no display and no sound
card, SDL and ALSA print a block of errors per frame, and 500 frames take minutes. Here pygame gets SDL's dummy
video and audio drivers before it is imported, one gymnasium env draws every frame, and Pillow writes the gif.
The other envs gymnax draws (MinAtar, bsuite Catch, misc) go through gymnax's matplotlib visualizer as before.
"""

import contextlib
import os

# Before pygame is imported anywhere: no display, no sound card, no greeting line.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import numpy as np  # noqa: E402

# gymnasium's classic-control envs; gymnax's visualizer draws these through gymnasium and pygame.
GYM_DRAWN = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")
FRAME_MS = 50  # gymnax's visualizer plays these envs at 20 frames per second


def gym_frames(env_name, params, states):
    """One RGB array per state, all drawn by one gymnasium env (gymnax's own state-to-gymnasium mapping)."""
    import gymnasium as gym
    from gymnax.visualize import vis_gym

    gym_env = gym.make(env_name, render_mode="rgb_array")
    try:
        gym_env.reset(seed=0)
        unwrapped = gym_env.unwrapped
        vis_gym.set_gym_params(unwrapped, env_name, params)
        frames = []
        for state in states:
            unwrapped.state = vis_gym.get_gym_state(state, env_name)
            if env_name == "Pendulum-v1":  # the torque arrow
                unwrapped.last_u = np.asarray(state.last_u, dtype=np.float64)
            frames.append(np.asarray(gym_env.render()))
        return frames
    finally:
        gym_env.close()


def titled(frame, title):
    """The frame under a white band holding `title`, as gymnax's visualizer titles its frames."""
    from PIL import Image, ImageDraw, ImageFont

    band = 40
    image = Image.new("RGB", (frame.shape[1], frame.shape[0] + band), "white")
    image.paste(Image.fromarray(frame), (0, band))
    font = ImageFont.load_default(size=20)
    draw = ImageDraw.Draw(image)
    width = draw.textlength(title, font=font)
    draw.text(((image.width - width) / 2, 10), title, fill="black", font=font)
    return image


def write_gif(env, env_params, states, cumulative_rewards, path):
    """Writes `states` (one per frame, unbatched gymnax states of the base env `env`) to the gif `path`, whole or not
    at all: drawn into a new file beside it (created exclusively), renamed over `path` once written."""
    import tempfile

    folder, name = os.path.split(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(suffix=".gif", prefix=f".{name}.", dir=folder)
    os.close(fd)
    try:
        if env.name in GYM_DRAWN:
            images = [titled(frame, f"{env.name}: step {t + 1}, return {float(r):.2f}")
                      for t, (frame, r) in enumerate(zip(gym_frames(env.name, env_params, states), cumulative_rewards,
                                                         strict=True))]
            images[0].save(temporary, format="GIF", save_all=True, append_images=images[1:], duration=FRAME_MS,
                           loop=0)
        else:
            import matplotlib

            matplotlib.use("Agg")
            from gymnax.visualize import Visualizer

            Visualizer(env, env_params, states, cumulative_rewards).animate(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
