"""Generation throughput, side by side in one run: our vLLM engine, bare vllm.LLM.generate, our pt engine.

Both vLLM engines live in this process at once and are timed in alternating rounds, so
machine noise hits them alike; the figure that matters is the ratio, not the tokens/s.

    .venv/bin/python benchmarks/bench_infer.py --model HuggingFaceTB/SmolLM2-135M-Instruct
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

TOPICS = ["the sea", "a small robot", "bread", "autumn", "a library", "trains", "a lighthouse", "chess"]


def prompts(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Write a short story about {TOPICS[i % len(TOPICS)]}, part {i}."}]
            for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--num_prompts", type=int, default=64)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip_pt", action="store_true", help="leave out the (slow) transformers engine")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from swiftlike.infer import InferRequest, RequestConfig
    from swiftlike.infer.engine.pt_engine import PtEngine
    from swiftlike.infer.engine.vllm_engine import VllmEngine, VllmOptions, engine_kwargs
    from swiftlike.model import load_tokenizer, resolve_model
    from swiftlike.template import get_template

    resolved = resolve_model(args.model)
    template = get_template(resolved.meta.template, load_tokenizer(resolved))
    chats = prompts(args.num_prompts)
    requests = [InferRequest(messages=m) for m in chats]
    config = RequestConfig(max_tokens=args.max_tokens, temperature=0)
    options = VllmOptions(torch_dtype="float32", max_model_len=1024)

    ours = VllmEngine(resolved, template, options)
    bare = LLM(**engine_kwargs(resolved.model_dir, options))
    bare_prompts = [TokensPrompt(prompt_token_ids=template.encode_prompt(m)) for m in chats]
    bare_params = SamplingParams(max_tokens=args.max_tokens, temperature=0, stop_token_ids=template.stop_token_ids)

    def time_ours() -> tuple[float, int]:
        start = time.perf_counter()
        out = ours.infer(requests, config)
        return time.perf_counter() - start, sum(r.usage.completion_tokens for r in out)

    def time_bare() -> tuple[float, int]:
        start = time.perf_counter()
        out = bare.generate(bare_prompts, bare_params, use_tqdm=False)
        return time.perf_counter() - start, sum(len(o.outputs[0].token_ids) for o in out)

    time_ours(), time_bare()  # warm-up
    rates: dict[str, list[float]] = {"swiftlike_vllm": [], "bare_vllm": []}
    for r in range(args.rounds):
        order = [("swiftlike_vllm", time_ours), ("bare_vllm", time_bare)]
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            seconds, tokens = fn()
            rates[name].append(tokens / seconds)
    ours.close()
    bare = None  # free the engine before the pt run
    if not args.skip_pt:
        pt = PtEngine(resolved, template, torch_dtype="float32", max_batch_size=args.num_prompts)
        start = time.perf_counter()
        out = pt.infer(requests, config)
        rates["swiftlike_pt"] = [sum(x.usage.completion_tokens for x in out) / (time.perf_counter() - start)]

    med = {k: statistics.median(v) for k, v in rates.items()}
    print("per round:", {k: [round(x, 1) for x in v] for k, v in rates.items()})
    print(f"\nmodel {args.model}: {args.num_prompts} prompts x {args.max_tokens} new tokens, greedy, fp32, "
          f"{args.rounds} alternating rounds (median)")
    for name, rate in med.items():
        print(f"  {name:<15} {rate:8.1f} tokens/s   ({rate / med['bare_vllm']:.3f}x bare vLLM)")
    result = {"model": args.model, "num_prompts": args.num_prompts, "max_tokens": args.max_tokens,
              "tokens_per_s": med, "ratio_vs_bare_vllm": {k: v / med["bare_vllm"] for k, v in med.items()}}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
