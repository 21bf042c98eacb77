"""A JAX GridWorld in the gymnax 1.x Environment API (registered as `GridWorld-v0`).

The agent walks an 8 x 12 grid from the bottom-right cell (7, 11) to the top-left cell (0, 0): actions
right, down, left, up; a move into a border leaves the agent where it is; reaching the goal gives reward 1
and ends the episode (the shortest path takes 18 steps); every other step gives 0. A time limit truncates
episodes (200 steps by default), so a policy that never finds the goal shows up in the episode lengths.
The observation is the agent's cell `(row, col)`; `num_states` and `state_index` let a Q-table index it.

    env, env_params = envs.make("GridWorld-v0", rows=5, cols=5, start=(4, 4), goal=(0, 0), random_start=True)
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

# right, down, left, up as (row, col) offsets
MOVES = ((0, 1), (1, 0), (0, -1), (-1, 0))
ACTION_NAMES = ("right", "down", "left", "up")


@struct.dataclass
class EnvState(environment.EnvState):
    row: jax.Array
    col: jax.Array


@struct.dataclass
class EnvParams(environment.EnvParams):
    max_steps_in_episode: int = 200


class GridWorld(environment.Environment[EnvState, EnvParams]):
    """Deterministic grid walk to a goal cell; see the module docstring."""

    def __init__(self, rows: int = 8, cols: int = 12, start=(7, 11), goal=(0, 0), random_start: bool = False):
        for name, (r, c) in (("start", start), ("goal", goal)):
            if not (0 <= r < rows and 0 <= c < cols):
                raise ValueError(f"{name} {(r, c)} lies outside the {rows} x {cols} grid")
        if tuple(start) == tuple(goal) and not random_start:
            raise ValueError("start and goal are the same cell")
        if rows * cols < 2:
            raise ValueError("the grid needs at least two cells")
        self.rows, self.cols = rows, cols
        self.start, self.goal = tuple(start), tuple(goal)
        self.random_start = random_start

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    @property
    def name(self) -> str:
        return "GridWorld-v0"

    @property
    def num_actions(self) -> int:
        return 4

    @property
    def num_states(self) -> int:
        return self.rows * self.cols

    def state_index(self, obs):
        """Row-major index of the cell in `obs` (any leading batch shape)."""
        return obs[..., 0] * self.cols + obs[..., 1]

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def observation_space(self, params) -> spaces.Box:
        return spaces.Box(0, max(self.rows, self.cols) - 1, (2,), jnp.int32)

    def _start_cell(self, key):
        if not self.random_start:
            return jnp.int32(self.start[0]), jnp.int32(self.start[1])
        # Uniform over every cell but the goal: draw among num_states - 1 indices and skip the goal's.
        goal_index = self.goal[0] * self.cols + self.goal[1]
        index = jax.random.randint(key, (), 0, self.num_states - 1, jnp.int32)
        index = index + (index >= goal_index)
        return index // self.cols, index % self.cols

    def reset_env(self, key, params) -> tuple[jax.Array, EnvState]:
        row, col = self._start_cell(key)
        return jnp.stack([row, col]), EnvState(time=jnp.int32(0), row=row, col=col)

    def step_env(self, key, state, action, params) -> tuple[jax.Array, EnvState, jax.Array, jax.Array, dict]:
        moves = jnp.array(MOVES, jnp.int32)
        row = jnp.clip(state.row + moves[action, 0], 0, self.rows - 1)
        col = jnp.clip(state.col + moves[action, 1], 0, self.cols - 1)
        terminated = jnp.logical_and(row == self.goal[0], col == self.goal[1])
        state = EnvState(time=state.time + 1, row=row, col=col)
        return jnp.stack([row, col]), state, terminated.astype(jnp.float32), terminated, {}

    def step(self, key, state, action, params=None) -> tuple[jax.Array, EnvState, Any, Any, Any, dict]:
        """gymnax's step with its auto-reset, written out so a reset costs two selects and no extra key
        split when the start cell is fixed (this step runs inside tight scans)."""
        if params is None:
            params = self.default_params
        obs_step, state_step, reward, terminated, _ = self.step_env(key, state, action, params)
        truncated = state_step.time >= params.max_steps_in_episode
        done = jnp.logical_or(terminated, truncated)
        row0, col0 = self._start_cell(key)
        row = jnp.where(done, row0, state_step.row)
        col = jnp.where(done, col0, state_step.col)
        state = EnvState(time=jnp.where(done, 0, state_step.time), row=row, col=col)
        info = {"terminated": terminated, "truncated": truncated, "final_observation": obs_step}
        return jnp.stack([row, col]), state, reward, terminated, truncated, info


def greedy_path_length(env: GridWorld, env_params, q_table):
    """Steps the greedy policy (argmax, first of ties) takes from the start cell to the goal on GridWorld;
    -1 if it does not arrive within the time limit."""

    def _step(carry, _):
        state, steps, arrived = carry
        action = jnp.argmax(q_table[state.row * env.cols + state.col])
        _, state, _, terminated, _ = env.step_env(None, state, action, env_params)
        steps = jnp.where(arrived, steps, steps + 1)
        return (state, steps, jnp.logical_or(arrived, terminated)), None

    start = EnvState(time=jnp.int32(0), row=jnp.int32(env.start[0]), col=jnp.int32(env.start[1]))
    (_, steps, arrived), _ = jax.lax.scan(_step, (start, jnp.int32(0), jnp.bool_(False)), None,
                                     env_params.max_steps_in_episode)
    return jnp.where(arrived, steps, -1)


def plot_q_values(env: GridWorld, q_tables, title):
    """The grid coloured by max_a Q (mean over agents) with the greedy action of the mean table in each cell: a
    matplotlib figure, which the harness saves in the run directory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q = np.asarray(q_tables).mean(0).reshape(env.rows, env.cols, -1)
    fig, ax = plt.subplots(figsize=(1 + 0.6 * env.cols, 0.6 * env.rows + 1.2))
    image = ax.imshow(q.max(-1), cmap="viridis")
    fig.colorbar(image, ax=ax, label="max_a Q(s, a)")
    arrows = {"right": (0.3, 0), "down": (0, 0.3), "left": (-0.3, 0), "up": (0, -0.3)}
    for row in range(env.rows):
        for col in range(env.cols):
            if (row, col) == env.goal:
                ax.text(col, row, "G", ha="center", va="center", color="white", fontweight="bold")
                continue
            dx, dy = arrows[ACTION_NAMES[int(np.argmax(q[row, col]))]]
            ax.arrow(col - dx / 2, row - dy / 2, dx, dy, head_width=0.15, length_includes_head=True,
                     color="white")
    ax.add_patch(plt.Rectangle((env.start[1] - 0.5, env.start[0] - 0.5), 1, 1, fill=False, color="red", lw=2,
                               label="start"))
    ax.plot([], [], " ", label="G: goal; arrows: greedy action")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, frameon=False)
    ax.set_xticks(range(env.cols))
    ax.set_yticks(range(env.rows))
    ax.set_title(title)
    return fig


def q_value_outputs(env: GridWorld, stats, title):
    """q_values.png of agents' Q-tables (`stats["q_table"]`) and their greedy path lengths, printed and returned as
    summary fields: -> ({"greedy_path_length": [...]}, {"q_values.png": figure})."""
    lengths = [None if n < 0 else int(n) for n in stats["greedy_path_length"]]
    print("greedy path length from the start: " + " ".join("-" if n is None else str(n) for n in lengths))
    return {"greedy_path_length": lengths}, {"q_values.png": plot_q_values(env, stats["q_table"], title)}


def make_gridworld(rows: int = 8, cols: int = 12, start=(7, 11), goal=(0, 0), random_start: bool = False,
                   max_steps_in_episode: int = 200):
    """Factory for `envs.make("GridWorld-v0", **kwargs)`: returns `(env, env_params)`."""
    env = GridWorld(rows, cols, start, goal, random_start)
    return env, EnvParams(max_steps_in_episode=max_steps_in_episode)
