"""Write a JSONL dataset of a verifiers environment's own entries for the `verifiers` environment.

Each row holds the entry's prompt as the messages, its answer as `solution` and the `env_config` that plays it
({"name": "verifiers", "env_id", "env_args", "split", "index", and "pass_env" when given}); the entries come from the environment's own
dataset (`split` eval: its eval_dataset), listed by the bridge in .venv-verifiers, where the environment package
must be installed (`.venv-verifiers/bin/pip install <package>`). The same arguments write the same file.

    .venv/bin/python scripts/make_verifiers_dataset.py guess-number-vf --env_args '{"size": 256}' --out guess.jsonl
    .venv/bin/python scripts/make_verifiers_dataset.py guess-number-vf --split eval --n 64 --out guess_eval.jsonl
"""
from __future__ import annotations

import argparse
import json

from swiftlike.rollout.multi_turn.verifiers_env import verifiers_rows
from swiftlike.utils import atomic_write_jsonl


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id", help="the installed environment's id, as vf.load_environment takes it")
    parser.add_argument("--env_args", type=json.loads, default=None,
                        help="load_environment's keyword arguments as a JSON object")
    parser.add_argument("--split", choices=("train", "eval"), default="train",
                        help="the environment's dataset (train) or its eval_dataset (eval)")
    parser.add_argument("--n", type=int, default=0, help="the first N entries (0: all of them)")
    parser.add_argument("--pass_env", nargs="*", default=None,
                        help="names of environment variables to hand to the environment's bridge (its environment "
                             "holds none of ours otherwise), e.g. its rubric's API key; written into each row")
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    args = parser.parse_args(argv)
    rows = verifiers_rows(args.env_id, env_args=args.env_args, split=args.split, n=args.n, pass_env=args.pass_env)
    atomic_write_jsonl(args.out, rows)
    print(f"{args.out}: {len(rows)} rows of {args.env_id} ({args.split})")


if __name__ == "__main__":
    main()
