"""FrozenLake as a text game: the built-in environment `frozen_lake` (the name of ms-swift's example plugin).

The board is a square grid of S (start), F (frozen, safe), H (hole) and G (goal), shown each turn with P where
the player stands. The model answers with one move per turn; reaching G scores 1 and ends the episode, falling
into H ends it with 0, and so does running out of moves. A move off the board leaves the player in place (as in
Gymnasium's FrozenLake). A reply with no readable move is an invalid move: it uses up a step, scores 0 and the
observation says what to write instead.

Moves the parser reads, case-insensitive: `<action>down</action>` (the format the prompt asks for, ms-swift's);
without the tags, the last of the words up/down/left/right (or north/south/west/east) in the reply; a reply that
is only U, D, L or R. Each row's `env_config` fixes the map: `seed` (required: the generations of one GRPO group
must see the same map), `size` (side, default 4), `p` (chance that a cell is frozen, default 0.8) and `max_steps`
(moves allowed, default size * size). Maps are drawn until one has a path from S to G, so every map is solvable.
"""
from __future__ import annotations

import random
import re
from collections import deque
from typing import Any

from .envs import Env, last_assistant_text, register_env
from .trajectory import RolloutRequest

MOVES: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
SYNONYMS = {"north": "up", "south": "down", "west": "left", "east": "right", "u": "up", "d": "down", "l": "left",
            "r": "right"}
MIN_SIZE, MAX_SIZE = 2, 12

_WORD = r"up|down|left|right|north|south|west|east"
_TAGGED = re.compile(rf"<action>\s*({_WORD})\s*</action>", re.IGNORECASE)
_BARE = re.compile(rf"\b({_WORD})\b", re.IGNORECASE)
_LETTER = re.compile(r"\s*([udlr])\s*[.!]?\s*", re.IGNORECASE)

SYSTEM_PROMPT = (
    "You are playing FrozenLake on a square grid. S is the start, F is frozen ice (safe), H is a hole, G is the goal "
    "and P marks where you stand. Each turn you move one cell: up, down, left or right. Reach G to win; stepping into "
    "H ends the game with no reward; a move off the grid leaves you where you are. Rows are numbered from 0 at the "
    "top and columns from 0 at the left.\n"
    "Answer every turn with your move inside action tags, for example: <action>down</action>")


def parse_move(text: str) -> str | None:
    """The move a reply names (up/down/left/right), or None when it names none."""
    tagged = _TAGGED.findall(text)
    if tagged:
        word = tagged[-1].lower()
    elif bare := _BARE.findall(text):
        word = bare[-1].lower()
    elif letter := _LETTER.fullmatch(text):
        word = letter.group(1).lower()
    else:
        return None
    return SYNONYMS.get(word, word)


def find_cell(grid: list[str], cell: str) -> tuple[int, int]:
    for row, line in enumerate(grid):
        if cell in line:
            return row, line.index(cell)
    raise ValueError(f"the map has no {cell!r} cell: {grid}")


def shortest_path(grid: list[str]) -> list[str] | None:
    """The moves of a shortest walk from S to G over non-hole cells (breadth-first), None when G is unreachable."""
    start, size = find_cell(grid, "S"), len(grid)
    came_from: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        row, col = queue.popleft()
        if grid[row][col] == "G":
            path, at = [], (row, col)
            while came_from[at] is not None:
                at, move = came_from[at]
                path.append(move)
            return path[::-1]
        for move, (dr, dc) in MOVES.items():
            nxt = (row + dr, col + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in came_from and grid[nxt[0]][nxt[1]] != "H":
                came_from[nxt] = ((row, col), move)
                queue.append(nxt)
    return None


def generate_map(seed: int, size: int = 4, p: float = 0.8) -> list[str]:
    """A solvable size x size map, the same for the same (seed, size, p): holes with chance 1 - p, S and G on two
    different random cells, redrawn until a path joins them."""
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"frozen_lake: env_config size must be {MIN_SIZE}..{MAX_SIZE}, got {size}")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"frozen_lake: env_config p (the chance a cell is frozen) must be in (0, 1], got {p}")
    rng = random.Random(seed)
    while True:
        cells = [["F" if rng.random() < p else "H" for _ in range(size)] for _ in range(size)]
        start, goal = rng.sample(range(size * size), 2)
        cells[start // size][start % size] = "S"
        cells[goal // size][goal % size] = "G"
        grid = ["".join(line) for line in cells]
        if shortest_path(grid) is not None:
            return grid


def render(grid: list[str], position: tuple[int, int]) -> str:
    """The grid, cells separated by spaces, with P on the player's cell."""
    lines = []
    for row, line in enumerate(grid):
        cells = list(line)
        if row == position[0]:
            cells[position[1]] = "P"
        lines.append(" ".join(cells))
    return "\n".join(lines)


def _int_option(env_config: dict, key: str, default: int | None) -> int:
    value = env_config.get(key, default)
    if value is None:
        raise ValueError(f"frozen_lake: env_config needs {key!r} (an integer), got {env_config}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"frozen_lake: env_config {key!r} must be an integer, got {value!r}")
    return value


class FrozenLakeEnv(Env):
    """One episode on the map `env_config` fixes; see the module docstring for the rules and accepted answers."""

    def __init__(self, env_config: dict):
        super().__init__(env_config)
        self.seed = _int_option(env_config, "seed", None)
        self.size = _int_option(env_config, "size", 4)
        p = env_config.get("p", 0.8)
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise ValueError(f"frozen_lake: env_config 'p' must be a number, got {p!r}")
        self.p = float(p)
        self.max_steps = _int_option(env_config, "max_steps", self.size * self.size)
        if self.max_steps < 1:
            raise ValueError(f"frozen_lake: env_config 'max_steps' must be at least 1, got {self.max_steps}")
        self.grid = generate_map(self.seed, self.size, self.p)
        self.position = find_cell(self.grid, "S")
        self.steps = 0

    def board(self) -> str:
        return f"{render(self.grid, self.position)}\nYou are at row {self.position[0]}, column {self.position[1]}."

    def first_observation(self) -> str:
        return (f"FrozenLake {self.size}x{self.size}, {self.max_steps} moves allowed:\n{self.board()}\n"
                "What is your first move?")

    async def reset(self, request: RolloutRequest) -> tuple[str, dict, str]:
        self.position, self.steps = find_cell(self.grid, "S"), 0
        return self.first_observation(), {"seed": self.seed, "size": self.size}, SYSTEM_PROMPT

    async def step(self, action: list[dict]) -> tuple[str, float, bool, dict[str, Any]]:
        move = parse_move(last_assistant_text(action, "frozen_lake"))
        self.steps += 1
        left = self.max_steps - self.steps
        info: dict[str, Any] = {"step": self.steps, "move": move}
        if move is None:
            status, said = "invalid", ("I could not find a move in your reply. Answer with exactly one of up, down, "
                                       "left, right inside action tags, like <action>down</action>.")
        else:
            row, col = self.position[0] + MOVES[move][0], self.position[1] + MOVES[move][1]
            if 0 <= row < self.size and 0 <= col < self.size:
                self.position = (row, col)
                status, said = "moved", f"You moved {move}."
            else:
                status, said = "edge", f"Moving {move} would leave the grid, so you stay where you are."
            cell = self.grid[self.position[0]][self.position[1]]
            if cell == "G":
                return f"{said} You reached the goal!\n{self.board()}", 1.0, True, {**info, "status": "goal"}
            if cell == "H":
                return f"{said} You fell into a hole. Game over.\n{self.board()}", 0.0, True, {**info, "status": "hole"}
        if left <= 0:
            return (f"{said} You are out of moves. Game over.\n{self.board()}", 0.0, True,
                    {**info, "status": "step_limit"})
        return (f"{said}\n{self.board()}\n{left} moves left. What is your next move?", 0.0, False,
                {**info, "status": status})


register_env("frozen_lake", FrozenLakeEnv)
