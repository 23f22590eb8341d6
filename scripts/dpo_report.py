"""The DPO demo's data split and report (used by scripts/dpo_demo.sh).

- split: the last N pairs of swiftlike/arithmetic-preference are held out (pairs for TRL's evaluation, and
  their prompts alone for greedy answers); the rest is the training set.
- report: the held-out implicit-reward accuracy at each evaluation (TRL's
  eval_rewards/accuracies: the share of pairs whose chosen answer gets the higher reward
  beta * log(pi / pi_ref)), and, for greedy answers before and after, how many end in the chosen style's
  '#### N' line and how many are right (swiftlike's `format_hash` and `accuracy` rewards).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def split(out_dir: str, n_held: int) -> None:
    from swiftlike.dataset import load_dataset
    rows = load_dataset(["swiftlike/arithmetic-preference"], row_kind="pair")
    out = Path(out_dir)
    parts = {"train.jsonl": rows[:-n_held], "held_out.jsonl": rows[-n_held:],
             "held_out_prompts.jsonl": [{"messages": r["messages"][:-1], "solution": r["solution"]}
                                        for r in rows[-n_held:]]}
    for name, part in parts.items():
        with (out / name).open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)


def greedy_counts(path: Path) -> tuple[int, int, int]:
    """(answers, in the chosen style, right) of a `swiftlike infer` result file."""
    from swiftlike.rl.rewards.functions import build_reward_funcs
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    funcs = build_reward_funcs(["format_hash", "accuracy"])
    answers = [r["response"] for r in rows]
    styled = sum(float(s or 0) for s in funcs["format_hash"](answers))
    right = sum(float(s or 0) for s in funcs["accuracy"](answers, solution=[r["solution"] for r in rows]))
    return len(rows), int(styled), int(right)


def report(out_dir: str, run_dir: str) -> bool:
    from swiftlike.train.outputs import read_log
    evals = [e for e in read_log(run_dir) if "eval_rewards/accuracies" in e]
    out = Path(out_dir)
    n, styled_before, right_before = greedy_counts(out / "base_greedy.jsonl")
    _, styled_after, right_after = greedy_counts(out / "after_greedy.jsonl")
    held = sum(1 for _ in (out / "held_out.jsonl").open())
    final = evals[-1]["eval_rewards/accuracies"] if evals else float("nan")
    print(f"held-out pairs: {held}")
    for e in evals:
        print(f"  step {e['step']:>3}: eval_rewards/accuracies {e['eval_rewards/accuracies']:.3f}, "
              f"eval_rewards/margins {e.get('eval_rewards/margins', float('nan')):.3f}, eval_loss {e['eval_loss']:.4f}")
    print(f"greedy answers to the {n} held-out prompts (before -> after DPO):")
    print(f"  in the chosen style ('#### N' last line): {styled_before} -> {styled_after}")
    print(f"  right:                                    {right_before} -> {right_after}")
    met = final >= 0.8 and held >= 50 and styled_after > styled_before
    print(f"criterion (held-out reward accuracy >= 0.8 on >= 50 pairs, greedy answers move toward the chosen "
          f"style): {'MET' if met else 'NOT MET'} (accuracy {final:.3f})")
    return met


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "split":
        split(sys.argv[2], int(sys.argv[3]))
    elif command == "report":
        sys.exit(0 if report(sys.argv[2], sys.argv[3]) else 1)
    else:
        raise SystemExit(f"unknown command {command!r}: split | report")
