"""`swiftlike infer`: interactive chat on stdin, or batch inference over a dataset to JSONL."""
from __future__ import annotations

import sys
import time
from dataclasses import asdict
from datetime import datetime

from ..arguments import InferArguments
from ..infer.engine import InferEngine
from ..infer import tool_serving
from ..infer.protocol import InferRequest
from ..utils import atomic_write_jsonl, get_logger
from ..utils.errors import UsageError
from . import arguments_of

logger = get_logger("swiftlike.infer")


def _default_adapter(engine: InferEngine) -> str | None:
    names = list(engine.adapters)
    if len(names) > 1:
        logger.warning("several adapters loaded; answering with the first, %r", names[0])
    return names[0] if names else None


def load_rows(args: InferArguments) -> list[dict]:
    """The --val_dataset rows to answer (the first --val_dataset_sample of them); read before the engine is built,
    so a wrong path or a bad row costs no model load."""
    from ..dataset import load_dataset
    rows = load_dataset(args.val_dataset, seed=args.seed, model_name=args.model_name,
                        model_author=args.model_author, use_hf=args.use_hf)
    if args.val_dataset_sample is not None:
        rows = rows[: args.val_dataset_sample]
    if not rows:
        raise UsageError(f"--val_dataset {' '.join(args.val_dataset)} has no rows")
    return rows


def run_batch(args: InferArguments, engine: InferEngine, rows: list[dict]) -> str:
    adapter = _default_adapter(engine)
    prompts, labels = [], []
    for row in rows:
        messages = list(row["messages"])
        label = messages.pop()["content"] if messages[-1]["role"] == "assistant" else None
        prompts.append(messages)
        labels.append(label)
    config = args.request_config()
    config.seed = args.seed if not config.greedy else None
    start = time.perf_counter()
    requests = [InferRequest(messages=m, adapter=adapter, tools=row.get("tools") or None)
                for m, row in zip(prompts, rows)]
    if any(r.tools for r in requests):
        config = tool_serving.with_tool_stops(config, engine.template.tool_parser, tool_serving.ToolChoice("auto"))
    responses = engine.infer(requests, config, use_tqdm=True)
    elapsed = time.perf_counter() - start
    result_path = args.result_path or f"infer_result/{datetime.now():%Y%m%d-%H%M%S}.jsonl"
    out_rows = []
    for row, messages, label, resp in zip(rows, prompts, labels, responses):
        extra = {k: v for k, v in row.items() if k not in ("messages",)}
        answer = tool_serving.tool_answer(resp.text, resp.choices[0].finish_reason, engine.template.tool_parser,
                                          tool_serving.tool_choice_of(row.get("tools") or None, None))
        reply = {"role": "assistant", "content": answer.content or ""}
        if answer.tool_calls:  # OpenAI's shape, as deploy answers: a row with tools gets its calls parsed
            reply["tool_calls"] = answer.tool_calls
        out = {**extra, "messages": messages + [reply],
               "response": resp.text, "labels": label, "finish_reason": answer.finish_reason,
               "usage": {"prompt_tokens": resp.usage.prompt_tokens,
                         "completion_tokens": resp.usage.completion_tokens}}
        if config.n > 1:
            out["responses"] = [c.text for c in resp.choices]
        if config.logprobs:
            out["logprobs"] = [[asdict(t) for t in c.logprobs or []] for c in resp.choices]
        out_rows.append(out)
    atomic_write_jsonl(result_path, out_rows)
    generated = sum(r.usage.completion_tokens for r in responses)
    print(f"\n[swiftlike infer] {len(rows)} prompts, {generated} tokens generated in {elapsed:.1f}s "
          f"({generated / max(elapsed, 1e-9):.1f} tokens/s) on {args.infer_backend}; results: {result_path}")
    return result_path


def run_interactive(args: InferArguments, engine: InferEngine) -> None:
    """A chat loop; `clear` forgets the history, `exit` or end of input quits."""
    adapter = _default_adapter(engine)
    config = args.request_config()
    history: list[dict] = []
    print("swiftlike chat: type a message; 'clear' resets the conversation, 'exit' quits.", flush=True)
    while True:
        print("<<< ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            break
        query = line.rstrip("\n")
        if query.strip() in ("exit", "quit"):
            break
        if query.strip() == "clear":
            history = []
            print("(history cleared)", flush=True)
            continue
        if not query.strip():
            continue
        history.append({"role": "user", "content": query})
        request = InferRequest(messages=history, adapter=adapter)
        print(">>> ", end="", flush=True)
        if args.stream:
            answer = ""
            for delta in engine.stream(request, config):
                print(delta.text, end="", flush=True)
                answer += delta.text
            print(flush=True)
        else:
            answer = engine.infer([request], config)[0].text
            print(answer, flush=True)
        history.append({"role": "assistant", "content": answer})


def infer_main(args: InferArguments | list[str] | None = None) -> str | None:
    """Batch mode (--val_dataset) returns the result path; chat mode returns None at end of input."""
    from ..infer.engine.factory import build_engine
    args = arguments_of(InferArguments, args)
    rows = load_rows(args) if args.val_dataset else None
    engine = build_engine(args.engine_spec())
    try:
        if rows is not None:
            return run_batch(args, engine, rows)
        run_interactive(args, engine)
        return None
    finally:
        engine.close()
