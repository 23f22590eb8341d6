"""The GKD demo's data split, held-out divergence and report (used by scripts/gkd_demo.sh).

- split: swiftlike/self-cognition (filled with the teacher's name and author) shuffled; the last N rows are
  held out (their prompts only); the rest is the teacher's SFT data and the GKD prompts.
- kl: per-token KL(teacher || model) on the held-out prompts followed by the teacher's own greedy answer, at
  temperature 1, averaged over the answer tokens of all prompts: the distance on-policy distillation
  shrinks, measured on the same fixed token sequences before and after.
- report: the KL before and after, the share of held-out greedy answers that name the teacher's identity, the
  answer to "who are you?", and whether the demo's criterion holds.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

NAME, AUTHOR = "Swifty", "Lark Labs"
WHO = "who are you?"


def split(out_dir: str, n_held: int) -> None:
    from swiftlike.dataset import load_dataset
    rows = [r for r in load_dataset(["swiftlike/self-cognition"], model_name=[NAME], model_author=[AUTHOR])]
    random.Random(0).shuffle(rows)
    out = Path(out_dir)
    held = [{"messages": r["messages"][:-1]} for r in rows[-n_held:]]
    held.append({"messages": [{"role": "user", "content": WHO}]})
    parts = {"train.jsonl": rows[:-n_held], "held_out_prompts.jsonl": held}
    for name, part in parts.items():
        with (out / name).open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)


def _answers(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8")]


def kl(out_dir: str, teacher_dir: str, model_dir: str, stage: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from swiftlike.model import load_tokenizer, resolve_model
    from swiftlike.rl.core.distill import forward_kl_per_token
    from swiftlike.rl.preference.data import PreferenceEncoder
    from swiftlike.rl.online.teacher import PackedSequences, completion_logits
    from swiftlike.template import get_template
    out = Path(out_dir)
    resolved = resolve_model(model_dir)
    template = get_template(resolved.meta.template, load_tokenizer(resolved))
    encoder = PreferenceEncoder(template)
    rows = _answers(out / "teacher_greedy.jsonl")
    sequences = [encoder.split(r["messages"]) for r in rows]  # an infer result's messages end in its answer
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).eval()
    model = AutoModelForCausalLM.from_pretrained(resolved.model_dir, dtype=torch.float32).eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(sequences), 8):
            batch = PackedSequences.pack(sequences[start:start + 8])
            n = len(batch.predict_at)
            total += float(forward_kl_per_token(completion_logits(model, batch), completion_logits(teacher, batch))) * n
            tokens += n
    result = {"stage": stage, "model": model_dir, "prompts": len(rows), "tokens": tokens, "kl": total / tokens}
    (out / f"kl_{stage}.json").write_text(json.dumps(result))
    print(f"held-out KL(teacher || {stage}) = {result['kl']:.4f} per token over {tokens} tokens, {len(rows)} prompts")


def _question(row: dict) -> str:
    return next(m["content"] for m in reversed(row["messages"]) if m["role"] == "user")


def _identity(rows: list[dict]) -> int:
    return sum(NAME.lower() in r["response"].lower() for r in rows)


def report(out_dir: str, run_dir: str) -> bool:
    from swiftlike.train.outputs import read_log
    out = Path(out_dir)
    before = json.loads((out / "kl_before.json").read_text())
    after = json.loads((out / "kl_after.json").read_text())
    answers = {stage: _answers(out / f"{stage}_greedy.jsonl") for stage in ("teacher", "base", "after")}
    who = {stage: next(r["response"] for r in rows if _question(r) == WHO) for stage, rows in answers.items()}
    steps = [e for e in read_log(run_dir) if "jsd" in e]
    drop = 1 - after["kl"] / before["kl"]
    print(f"GKD steps: {len(steps)}; on-policy share {sum(e['on_policy'] for e in steps) / max(len(steps), 1):.2f}")
    for e in steps[:2] + steps[-2:]:
        print(f"  step {e['step']:>3}: jsd {e['jsd']:.4f}, teacher_kl {e['teacher_kl']:.4f}, "
              f"mean length {e['completions/mean_length']:.1f}")
    print(f"held-out KL(teacher || student) per token, {before['prompts']} prompts + the teacher's greedy answers "
          f"({before['tokens']} tokens): {before['kl']:.4f} -> {after['kl']:.4f} ({100 * drop:.1f}% lower)")
    n = len(answers["base"])
    print(f"greedy answers naming '{NAME}' ({n} held-out prompts): teacher {_identity(answers['teacher'])}, "
          f"student before {_identity(answers['base'])}, after {_identity(answers['after'])}")
    for stage in ("teacher", "base", "after"):
        print(f"  {WHO!r} -> {stage:>7}: {who[stage]!r}")
    met = before["prompts"] >= 32 and drop >= 0.5 and NAME.lower() in who["after"].lower()
    print(f"criterion (held-out KL falls >= 50% on >= 32 prompts, the student's answer to {WHO!r} takes the "
          f"teacher's identity): {'MET' if met else 'NOT MET'}")
    return met


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "split":
        split(rest[0], int(rest[1]))
    elif command == "kl":
        kl(*rest)
    elif command == "report":
        sys.exit(0 if report(*rest) else 1)
    else:
        sys.exit(f"unknown command {command!r}: split | kl | report")
