"""Write a JSONL dataset of one reasoning-gym task for the `reasoning_gym` environment (needs the `agent` extra).

Each row holds the task's question as the user turn, its reference answer as `solution` and the `env_config`
the environment plays ({"name": "reasoning_gym", "task", "seed", "size", "index"}), so the same file serves
multi-turn GRPO (`--multi_turn_scheduler gym_scheduler`) and single-turn runs with `--reward_funcs accuracy`
where the task's answers are numbers. The task's generator is deterministic: the same arguments write the same
file.

    .venv/bin/python scripts/make_reasoning_gym_dataset.py basic_arithmetic --size 500 --out rg_arith.jsonl
    .venv/bin/python scripts/make_reasoning_gym_dataset.py chain_sum --size 200 --seed 1 \\
        --config '{"min_terms": 2, "max_terms": 4}' --max_attempts 2 --out chain_sum.jsonl
"""
from __future__ import annotations

import argparse
import json

from swiftlike.rollout.multi_turn.adapters import reasoning_gym_rows
from swiftlike.utils import atomic_write_jsonl


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="a reasoning-gym dataset name (basic_arithmetic, chain_sum, letter_counting, ...)")
    parser.add_argument("--size", type=int, required=True, help="number of rows")
    parser.add_argument("--seed", type=int, default=0, help="the task generator's seed")
    parser.add_argument("--config", type=json.loads, default=None,
                        help="the task's own options as a JSON object (its config dataclass fields)")
    parser.add_argument("--max_attempts", type=int, default=1, help="answers the environment takes before it ends")
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    args = parser.parse_args(argv)
    rows = reasoning_gym_rows(args.task, size=args.size, seed=args.seed, config=args.config,
                              max_attempts=args.max_attempts)
    atomic_write_jsonl(args.out, rows)
    print(f"{args.out}: {len(rows)} rows of {args.task}")


if __name__ == "__main__":
    main()
