"""Write the built-in FrozenLake datasets into swiftlike/dataset/data/ (make_builtin_datasets.py writes them too).

swiftlike/frozen-lake: 512 rows, swiftlike/frozen-lake-test: 128 held-out rows, each naming one solvable 4x4 map
by its seed in ms-swift's row format (`env_config` = {"name": "frozen_lake", "seed": N, "size": 4}); no map of
the test rows is also a training map. The messages are what the `frozen_lake` environment's reset shows (its
system prompt and the first board), so a row reads as the first turn; under `--multi_turn_scheduler
gym_scheduler` the environment itself produces them. Deterministic: rerunning reproduces the files byte for byte.

    .venv/bin/python scripts/make_frozen_lake_dataset.py
"""
from __future__ import annotations

from pathlib import Path

from swiftlike.rollout.multi_turn.frozen_lake import SYSTEM_PROMPT, FrozenLakeEnv
from swiftlike.utils import atomic_write_jsonl

DATA_DIR = Path(__file__).resolve().parent.parent / "swiftlike" / "dataset" / "data"
TRAIN_FILE, TEST_FILE = "frozen_lake.jsonl", "frozen_lake_test.jsonl"
TRAIN_ROWS, TEST_ROWS = 512, 128
SIZE = 4
TEST_SEEDS_FROM = 1_000_000  # test seeds count up from here, training seeds from 0


def _rows(count: int, first_seed: int, exclude: set[tuple[str, ...]]) -> tuple[list[dict], set[tuple[str, ...]]]:
    rows, maps, seed = [], set(exclude), first_seed
    while len(rows) < count:
        env = FrozenLakeEnv({"seed": seed, "size": SIZE})
        if tuple(env.grid) not in maps:
            maps.add(tuple(env.grid))
            rows.append({"messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": env.first_observation()}],
                         "env_config": {"name": "frozen_lake", "seed": seed, "size": SIZE}})
        seed += 1
    return rows, maps - exclude


def frozen_lake_files() -> dict[str, list[dict]]:
    """File name -> rows; make_builtin_datasets.builtin_files() includes them and the tests compare it with the
    committed files."""
    test, test_maps = _rows(TEST_ROWS, TEST_SEEDS_FROM, set())
    train, _ = _rows(TRAIN_ROWS, 0, test_maps)
    return {TRAIN_FILE: train, TEST_FILE: test}


def main() -> None:
    for name, rows in frozen_lake_files().items():
        atomic_write_jsonl(DATA_DIR / name, rows)
        print(f"{DATA_DIR / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
