"""The agent demos' tool loop and report (scripts/agent_sft_demo.sh: base -> SFT; scripts/agent_demo.sh: SFT ->
multi-turn GRPO), and the GRPO demo's prompts.

- loop: every held-out question of swiftlike/calculator-agent-test is run as a real tool loop against a
  running `swiftlike deploy` with the `openai` client: the model's parsed `tool_calls` are executed by the
  built-in tools (`swiftlike.tools.call_tool`), their results go back as `tool` messages, until the model
  answers without a call or the round limit is reached. One JSON line per question is written.
- report: before against after, on the same questions: the share answered right (the `accuracy` reward on
  the final answer's '#### N' line, as GRPO scores it), each with a percentile-bootstrap 95% interval and the
  paired interval of the difference; assistant turns per question; the share of attempted calls that were well
  formed; per task.
- prompts: GRPO prompts from swiftlike/calculator-agent, whose rows are whole tool traces: each row cut to its
  question (the first user message), with its tools and solution, so the model writes the calls itself.

A call is *attempted* when the reply parses into `tool_calls` or its text holds the agent template's call
opening (a call the template could not parse comes back as text). It is *well formed* when it was parsed,
names an offered tool and its arguments are a JSON object the tool accepts (no `error` in its result).
"""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from demo_report import bootstrap_ci, paired_bootstrap_diff

CALL_OPENING = "<tool_call>"
MAX_ROUNDS = 4


def held_out(n: int) -> list[dict]:
    from swiftlike.dataset import load_dataset
    return load_dataset(["swiftlike/calculator-agent-test"])[:n]


def run_question(client, model: str, row: dict, max_tokens: int) -> dict:
    """One question's tool loop; the transcript and the counts the report needs."""
    from swiftlike.tools import call_tool
    messages = [dict(m) for m in row["messages"]]
    offered = {t["function"]["name"] for t in row["tools"]}
    attempted = well_formed = 0
    final = ""
    for _ in range(MAX_ROUNDS):
        choice = client.chat.completions.create(model=model, messages=messages, tools=row["tools"],
                                                max_tokens=max_tokens, temperature=0).choices[0]
        message = choice.message
        if not message.tool_calls:
            final = message.content or ""
            attempted += final.count(CALL_OPENING)
            messages.append({"role": "assistant", "content": final})
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            attempted += 1
            try:
                arguments = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                arguments = None
            result = call_tool(call.function.name, arguments) if isinstance(arguments, dict) else \
                json.dumps({"error": "arguments are not a JSON object"})
            if call.function.name in offered and isinstance(arguments, dict) and '"error"' not in result:
                well_formed += 1
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"task": row["task"], "solution": row["solution"], "final": final, "attempted": attempted,
            "well_formed": well_formed, "rounds": sum(m["role"] == "assistant" for m in messages),
            "messages": messages}


def loop(base_url: str, model: str, out_path: str, n: int, max_tokens: int = 128) -> None:
    from openai import OpenAI
    from tqdm import tqdm
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    rows = held_out(n)
    with ThreadPoolExecutor(8) as pool:
        results = list(tqdm(pool.map(lambda r: run_question(client, model, r, max_tokens), rows), total=len(rows),
                            desc=f"tool loops ({model})"))
    tmp = Path(out_path + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in results)
    tmp.replace(out_path)


def scores(path: Path) -> tuple[list[dict], list[float]]:
    from swiftlike.rl.rewards.functions import build_reward_funcs
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    accuracy = build_reward_funcs(["accuracy"])["accuracy"]
    right = [float(s or 0) for s in accuracy([r["final"] for r in rows], solution=[r["solution"] for r in rows])]
    return rows, right


def describe(name: str, rows: list[dict], right: list[float]) -> None:
    lo, hi = bootstrap_ci(right)
    attempted = sum(r["attempted"] for r in rows)
    well = sum(r["well_formed"] for r in rows)
    share = f"{well / attempted:.3f}" if attempted else "n/a"
    turns = [r["rounds"] for r in rows]
    print(f"{name:<8} right {int(sum(right)):>3}/{len(rows)} = {sum(right) / len(rows):.3f}  95% CI [{lo:.3f}, {hi:.3f}]"
          f"  | turns per question {sum(turns) / len(turns):.2f} (max {max(turns)})"
          f"  | calls attempted {attempted}, well formed {well} ({share})"
          f"  | questions with a well-formed call {sum(r['well_formed'] > 0 for r in rows)}/{len(rows)}")


def report(out_dir: str, before: str = "base", after: str = "sft") -> bool:
    """`before` and `after` name the stages whose `<stage>_loops.jsonl` are compared, question by question."""
    out = Path(out_dir)
    base_rows, base_right = scores(out / f"{before}_loops.jsonl")
    sft_rows, sft_right = scores(out / f"{after}_loops.jsonl")
    if [r["solution"] for r in base_rows] != [r["solution"] for r in sft_rows]:
        raise SystemExit(f"{before}_loops.jsonl and {after}_loops.jsonl hold different questions; a paired "
                         "comparison needs the same ones in the same order")
    print(f"held-out questions: {len(base_rows)} (swiftlike/calculator-agent-test), tool loops through "
          f"swiftlike deploy (vLLM) and the openai client, greedy, at most {MAX_ROUNDS} rounds")
    describe(before, base_rows, base_right)
    describe(after, sft_rows, sft_right)
    diff, lo, hi = paired_bootstrap_diff(base_right, sft_right)
    print(f"{after} - {before}: {diff:+.3f}  paired 95% CI [{lo:+.3f}, {hi:+.3f}]")
    for task in sorted({r["task"] for r in base_rows}):
        picks = [i for i, r in enumerate(base_rows) if r["task"] == task]
        print(f"  {task:<16} {len(picks):>3} questions: right {int(sum(base_right[i] for i in picks))} -> "
              f"{int(sum(sft_right[i] for i in picks))}")
    example = next((r for r, ok in zip(sft_rows, sft_right) if ok and r["rounds"] > 1), None)
    if example:
        print("a trained tool loop:")
        for m in example["messages"]:
            text = m.get("content") or json.dumps([c["function"] for c in m.get("tool_calls", [])])
            print(f"  [{m['role']}] {text[:160]}")
    beyond = lo > 0
    print(f"the share answered right rose beyond noise (paired 95% interval above 0): {'YES' if beyond else 'NO'}")
    return beyond


def prompts(out_path: str, n: int, seed: int = 1) -> None:
    """n questions of swiftlike/calculator-agent (shuffled with `seed`) as GRPO prompt rows."""
    import random

    from swiftlike.dataset import load_dataset
    rows = load_dataset(["swiftlike/calculator-agent"])
    random.Random(seed).shuffle(rows)
    with Path(out_path).open("w", encoding="utf-8") as f:
        for row in rows[:n]:
            question = next(m for m in row["messages"] if m["role"] == "user")
            f.write(json.dumps({"messages": [question], "tools": row["tools"], "solution": row["solution"],
                                "task": row["task"]}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "loop":
        loop(rest[0], rest[1], rest[2], int(rest[3]), *(int(x) for x in rest[4:5]))
    elif command == "report":
        sys.exit(0 if report(*rest[:3]) else 1)
    elif command == "prompts":
        prompts(rest[0], int(rest[1]))
    else:
        sys.exit(f"unknown command {command!r}: use loop, report or prompts")
