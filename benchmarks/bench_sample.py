"""Sampling throughput, side by side in one run: `swiftlike sample` on vLLM with an ORM scoring every answer,
against bare `vllm.LLM.generate` of the same prompts with the same `n` (goal: >= 0.95x its tokens/s).

One engine serves both sides (the sampler takes it as its `engine`), and the sides alternate over the rounds, so
machine noise hits them alike; the figure is the ratio of generated tokens per second. The sampler's side includes
what it adds: per-prompt seeded requests kept in flight by `generate_as_finished`, the `accuracy` reward (math-verify)
on a scoring thread, and each prompt's rows fsynced to the resumable file. Bare vLLM gets every prompt in one
`generate` call, its best case.

    .venv/bin/python benchmarks/bench_sample.py
    .venv/bin/python benchmarks/bench_sample.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's swiftlike

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "num_prompts": 32, "n": 8, "max_tokens": 128,
            "rounds": 3}
QUICK = {"model": "tiny-random/qwen2_5", "num_prompts": 8, "n": 4, "max_tokens": 16, "rounds": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model, one short round (smoke test)")
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key}", type=type(value), default=None)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value if not args.quick else QUICK.get(key, DEFAULTS[key]))

    from swiftlike.arguments import SampleArguments
    from swiftlike.infer.protocol import InferRequest, RequestConfig
    from swiftlike.sample import run_sampling
    from swiftlike.sample.run import build_sampler_engine, prompt_rows
    out_dir = Path(tempfile.mkdtemp(prefix="bench-sample-"))

    def sample_args(tag: str) -> SampleArguments:
        return SampleArguments(model=args.model, sampler_engine="vllm", torch_dtype="float32",
                               dataset=[f"swiftlike/arithmetic#{args.num_prompts}"], vllm_max_model_len=1024,
                               num_return_sequences=args.n, n_best_to_keep=1, orm_model="accuracy",
                               max_new_tokens=args.max_tokens, output_dir=str(out_dir), output_file=f"{tag}.jsonl")

    first = sample_args("warmup")
    engine = build_sampler_engine(first)
    prompts = [engine.prompt_ids(InferRequest(messages=m)) for _, _, m in prompt_rows(first)]
    params = engine.sampling_params(RequestConfig(max_tokens=args.max_tokens, temperature=1.0, n=args.n))

    def bare(tag: str) -> dict:
        from vllm.inputs import TokensPrompt
        start = time.perf_counter()
        outputs = engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}

    def ours(tag: str) -> dict:
        result = run_sampling(sample_args(tag), engine=engine)
        return {"tokens": result.tokens, "seconds": result.seconds, "tokens_per_s": result.tokens / result.seconds,
                "rows": result.rows, "passed": result.passed}

    run_sampling(first, engine=engine)  # warm-up: compiled kernels, math-verify's first parse
    sides = [("vllm", bare), ("sample", ours)]
    results = {name: [] for name, _ in sides}
    for r in range(args.rounds):
        for name, run in (sides if r % 2 == 0 else sides[::-1]):
            figures = run(f"r{r + 1}-{name}")
            results[name].append(figures)
            print(f"round {r + 1}  {name:<7} {figures['tokens']:>7} tokens in {figures['seconds']:6.1f} s  "
                  f"{figures['tokens_per_s']:8.1f} tokens/s", flush=True)
    engine.close()
    medians = {name: statistics.median(f["tokens_per_s"] for f in runs) for name, runs in results.items()}
    ratio = medians["sample"] / medians["vllm"]
    print(f"\n{args.model}: {args.num_prompts} prompts x {args.n} answers, <= {args.max_tokens} tokens, "
          f"{args.rounds} rounds")
    print(f"bare vllm.LLM.generate  {medians['vllm']:8.1f} tokens/s (median)")
    print(f"swiftlike sample + ORM  {medians['sample']:8.1f} tokens/s (median)")
    print(f"ratio sample / bare     {ratio:.3f}x  (goal >= 0.95x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results, "medians": medians,
                                               "ratio": ratio}, indent=2))


if __name__ == "__main__":
    main()
