"""Craftax (Matthews et al. 2024) behind the gymnax 1.x interface: `envs.make("Craftax-Classic-Symbolic-v1")`.

Craftax is optional (`pip install -r requirements-craftax.txt`). The symbolic envs only: their observation is already
a flat float vector (Classic 1,345 features, full Craftax 8,268), for the scripts' MLPs; the pixel envs need a CNN.

Craftax's own `done` joins three ends; here dying (and, in Classic, stepping into lava; in full Craftax, beating
the final boss) is `terminated`, and running out of time (Classic 10,000 steps, Craftax 100,000) is `truncated`.
The reward is Craftax's: +1 for each achievement the first time it is unlocked, plus 0.1 per health point gained
(minus per point lost). Keyword arguments set Craftax's `EnvParams` fields (`max_timesteps=...`).
"""

import difflib

from gymnax.environments import spaces

from scanrl.envs.suite import SuiteEnv, installed, not_installed

SUITE = "Craftax"
INSTALL_HINT = "pip install -r requirements-craftax.txt"
IDS = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1")


def owns(env_id: str) -> bool:
    return env_id.startswith("Craftax-")


def is_installed() -> bool:
    return installed("craftax")


def list_ids() -> list[str]:
    return list(IDS)


class CraftaxEnv(SuiteEnv):
    """One symbolic Craftax env; `craftax_params` are Craftax's own EnvParams."""

    # Building a world costs several steps, so a VecEnv builds one per 16 envs a step (Craftax's baselines' default
    # OPTIMISTIC_RESET_RATIO) instead of one per env, for the envs that ended (envs.VecEnv).
    reset_ratio = 16

    def __init__(self, env_id, inner, craftax_params):
        self.inner, self.craftax_params = inner, craftax_params
        space = inner.observation_space(craftax_params)
        super().__init__(env_id, craftax_params.max_timesteps,
                         spaces.Box(0.0, 1.0, tuple(space.shape), space.dtype),
                         spaces.Discrete(inner.action_space(craftax_params).n))

    def _reset(self, key):
        return self.inner.reset_env(key, self.craftax_params)

    def _step(self, key, inner, action):
        obs, inner, reward, _, _ = self.inner.step_env(key, inner, action, self.craftax_params)
        # Craftax's game over without its time limit: the same check on the state with its clock at 0.
        terminated = self.inner.is_terminal(inner.replace(timestep=0), self.craftax_params)
        return obs, inner, reward, terminated


def make(env_id: str, **kwargs):
    if env_id not in IDS:
        if "-Pixels-" in env_id:
            raise ValueError(f"{env_id!r}: pixel observations need a CNN, which these scripts do not have; use the "
                             f"symbolic env ({env_id.replace('-Pixels-', '-Symbolic-')})")
        close = difflib.get_close_matches(env_id, IDS, n=2, cutoff=0.4)
        raise ValueError(f"unknown env {env_id!r}: Craftax's envs here are {', '.join(close or IDS)}")
    if not is_installed():
        raise not_installed(env_id, SUITE, INSTALL_HINT)
    from craftax.craftax_env import make_craftax_env_from_name

    inner = make_craftax_env_from_name(env_id, auto_reset=False)
    try:
        craftax_params = inner.default_params.replace(**kwargs)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{env_id}: {error}") from None
    env = CraftaxEnv(env_id, inner, craftax_params)
    return env, env.default_params
