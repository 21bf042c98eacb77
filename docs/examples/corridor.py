"""A corridor of 10 cells: start at 0, walk left or right; reaching cell 9 gives 1 and ends the episode, every other
step costs 0.01 (best return 1 - 8 * 0.01 = 0.92). Train it: python ppo.py --env corridor:Corridor"""

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces


@struct.dataclass
class State(environment.EnvState):
    pos: jax.Array


@struct.dataclass
class Params(environment.EnvParams):
    max_steps_in_episode: int = 50  # gymnax truncates the episode here


class Corridor(environment.Environment):
    @property
    def default_params(self):
        return Params()

    def reset_env(self, key, params):
        state = State(time=0, pos=jnp.int32(0))
        return jax.nn.one_hot(state.pos, 10), state

    def step_env(self, key, state, action, params):
        pos = jnp.clip(state.pos + 2 * action - 1, 0, 9)  # action 0: left, 1: right
        state = State(time=state.time + 1, pos=pos)
        terminated = pos == 9  # the task's own end; gymnax's step adds the time limit and the auto-reset
        return jax.nn.one_hot(pos, 10), state, jnp.where(terminated, 1.0, -0.01), terminated, {}

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (10,), jnp.float32)
