"""XLand-MiniGrid's MiniGrid tasks (Nikulin et al. 2024) behind the gymnax 1.x interface:
`envs.make("MiniGrid-Empty-8x8")`.

XLand-MiniGrid is optional (`pip install -r requirements-xminigrid.txt`). Its `MiniGrid-*` ids are single tasks
with fixed rules; its `XLand-MiniGrid-*` ids draw rules from benchmark files downloaded from the internet, and are not
offered here. Reaching the goal is `terminated` (the reward, 1 - 0.9 * steps / max steps, comes then); the task's
step limit (`max_steps`, e.g. 256 on Empty-8x8) is `truncated`.

The agent sees a 7 x 7 window of (tile, colour) ids. Ids are categories, not magnitudes, so the observation is their
one-hot codes, flattened: 7 * 7 * (13 tiles + 12 colours) = 1,225 floats for the scripts' MLPs. Keyword arguments
go to `xminigrid.make` (`view_size=5`, `max_steps=100`).
"""

import difflib

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from scanrl.envs.suite import SuiteEnv, installed, not_installed

SUITE = "XLand-MiniGrid"
INSTALL_HINT = "pip install -r requirements-xminigrid.txt"


def owns(env_id: str) -> bool:
    return env_id.startswith(("MiniGrid-", "XLand-MiniGrid-"))


def is_installed() -> bool:
    return installed("xminigrid")


def list_ids() -> list[str]:
    import xminigrid  # the registry only: its ids are not known before

    return [i for i in xminigrid.registered_environments() if i.startswith("MiniGrid-")]


class XMiniGridEnv(SuiteEnv):
    """One XLand-MiniGrid task; `inner_params` are its own EnvParams (grid size, view size, step limit)."""

    def __init__(self, env_id, inner, inner_params):
        from xminigrid.core.constants import NUM_COLORS, NUM_TILES

        self.inner, self.inner_params = inner, inner_params
        self.num_tiles, self.num_colors = int(NUM_TILES), int(NUM_COLORS)
        size = inner_params.view_size ** 2 * (self.num_tiles + self.num_colors)
        super().__init__(env_id, inner_params.max_steps, spaces.Box(0.0, 1.0, (size,), jnp.float32),
                         spaces.Discrete(inner.num_actions(inner_params)))

    def _obs(self, grid):
        return jnp.concatenate([jax.nn.one_hot(grid[..., 0], self.num_tiles),
                                jax.nn.one_hot(grid[..., 1], self.num_colors)], axis=-1).reshape(-1)

    def _reset(self, key):
        timestep = self.inner.reset(self.inner_params, key)
        return self._obs(timestep.observation), timestep

    def _step(self, key, timestep, action):
        # The task's randomness lives in its state; its step ends at the goal (discount 0) or at max_steps.
        timestep = self.inner.step(self.inner_params, timestep, action)
        return self._obs(timestep.observation), timestep, timestep.reward, timestep.discount == 0.0


def make(env_id: str, **kwargs):
    if env_id.startswith("XLand-MiniGrid-"):
        raise ValueError(f"{env_id!r}: XLand-MiniGrid's XLand-* tasks draw their rules from benchmark files it "
                         "downloads; scanrl offers its MiniGrid-* tasks (envs.list_envs())")
    if not is_installed():
        raise not_installed(env_id, SUITE, INSTALL_HINT)
    import xminigrid

    ids = list_ids()
    if env_id not in ids:
        close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.4)
        raise ValueError(f"unknown env {env_id!r}: {'did you mean ' + ', '.join(close) + '?' if close else ''} "
                         "XLand-MiniGrid's tasks are in envs.list_envs()")
    try:
        inner, inner_params = xminigrid.make(env_id, **kwargs)
    except TypeError as error:
        raise ValueError(f"{env_id}: {error}") from None
    env = XMiniGridEnv(env_id, inner, inner_params)
    return env, env.default_params
