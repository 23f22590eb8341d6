"""The demo's data split and its before/after report (used by scripts/demo.sh).

The scorer is the training reward itself (swiftlike's `accuracy`, through math-verify, and `format_hash`), so
"accuracy" here means exactly what the policy was rewarded for: the right number on a last line `#### N`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from swiftlike.rl.rewards import build_reward_funcs
from swiftlike.train.outputs import read_log


def score(path: Path) -> tuple[int, int, int, list[dict]]:
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    funcs = build_reward_funcs(["accuracy", "format_hash"])
    answers = [r["response"] for r in rows]
    accuracy = funcs["accuracy"](answers, solution=[r["solution"] for r in rows])
    formatted = funcs["format_hash"](answers)
    return int(sum(a or 0 for a in accuracy)), int(sum(formatted)), len(rows), rows


def split(out_dir: str) -> None:
    """Disjoint SFT warm-up rows and held-out test rows from swiftlike/arithmetic-sft (GRPO's own prompts,
    swiftlike/arithmetic, share no question with it)."""
    from swiftlike.dataset import load_dataset
    rows = load_dataset(["swiftlike/arithmetic-sft"])
    out = Path(out_dir)
    for name, part in (("warmup_sft.jsonl", rows[:100]), ("held_out.jsonl", rows[-64:])):
        with (out / name).open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)


def mean(values: list[float]) -> float:
    return sum(values) / max(len(values), 1)


def report(base_path: str, before_path: str, after_path: str, run_dir: str) -> None:
    right_base, fmt_base, _, _ = score(Path(base_path))
    right_before, fmt_before, n, rows_before = score(Path(before_path))
    right_after, fmt_after, _, rows_after = score(Path(after_path))
    steps = [e for e in read_log(run_dir) if "reward" in e and "loss" in e]
    window = max(1, len(steps) // 5)
    first, last = steps[:window], steps[-window:]

    print("\n=== held-out prompts, greedy: base model, after the SFT warm-up (GRPO's start), after GRPO ===")
    for before, after in list(zip(rows_before, rows_after))[:3]:
        print(f"\nQ: {before['messages'][0]['content']}  (expected {before['solution']})")
        print(f"before: {before['response'].strip()[:200]!r}")
        print(f"after:  {after['response'].strip()[:200]!r}")
    print(f"\nreward (accuracy, 0 or 1 per answer) over the first {window} steps: "
          f"{mean([e['reward'] for e in first]):.3f}; over the last {window}: {mean([e['reward'] for e in last]):.3f}")
    print(f"accuracy on {n} held-out prompts:  base {right_base}/{n}, before GRPO {right_before}/{n}, "
          f"after GRPO {right_after}/{n}")
    print(f"answers ending in '#### N':         base {fmt_base}/{n}, before GRPO {fmt_before}/{n}, "
          f"after GRPO {fmt_after}/{n}")
    print(f"reward curve: {Path(run_dir) / 'images' / 'train_reward.png'}")


if __name__ == "__main__":
    if sys.argv[1] == "split":
        split(sys.argv[2])
    else:
        report(*sys.argv[2:6])
