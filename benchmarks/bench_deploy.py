"""`swiftlike deploy --infer_backend vllm` against bare `vllm serve`: the same model, the same load, one run.

Bare vLLM is `vllm serve`'s OpenAI server module (`python -m vllm.entrypoints.openai.api_server`).
Each server is started in turn (alternating over the rounds) on the same model directory, dtype (fp32),
max_model_len and KV-cache size (VLLM_CPU_KVCACHE_SPACE); each keeps its own defaults otherwise (ours runs
vLLM in-process with a stepping thread; `vllm serve` runs its API server and engine core as two
processes). The load: `--requests` completions chat requests (`/v1/chat/completions`, the same questions, greedy,
`--max_tokens`), `--concurrency` in flight at a time, after a few warm-up requests. Each side applies
the model's chat template its own way (ours from the template registry, vLLM's from the tokenizer), so
the prompt and output token counts are printed to show the loads match. Reported per server:
requests/s, output tokens/s (from the usage counts) and p50 / p99 latency; the ratio that matters is
swiftlike / vllm (goal >= 0.9x throughput).

    .venv/bin/python benchmarks/bench_deploy.py
    .venv/bin/python benchmarks/bench_deploy.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from common import add_run_options, fill_defaults, free_port, wait_until_ready

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "requests": 64, "rounds": 2}
QUICK = {"model": "tiny-random/qwen2_5", "requests": 16, "rounds": 1}
ENV = {"SWIFTLIKE_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
MAX_MODEL_LEN = 1024


def server_command(side: str, args, model_dir: str, port: int) -> list[str]:
    if side == "swiftlike":
        cli = Path(sys.executable).parent / "swiftlike"
        return [str(cli), "deploy", "--model", args.model, "--infer_backend", "vllm", "--port", str(port),
                "--torch_dtype", "float32", "--vllm_max_model_len", str(MAX_MODEL_LEN), "--served_model_name", "m"]
    # `vllm serve` is this module's CLI; the `vllm` script itself fails under vllm-cpu (it looks up the
    # version of a distribution named "vllm", and vllm-cpu's is named "vllm-cpu")
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32",
            "--max-model-len", str(MAX_MODEL_LEN), "--served-model-name", "m"]


def one_request(port: int, prompt: str, max_tokens: int) -> tuple[float, int, int]:
    start = time.perf_counter()
    r = requests.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=600,
                      json={"model": "m", "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "temperature": 0})
    r.raise_for_status()
    usage = r.json()["usage"]
    return time.perf_counter() - start, usage["completion_tokens"], usage["prompt_tokens"]


def load(port: int, prompts: list[str], args) -> dict:
    for p in prompts[:2]:
        one_request(port, p, args.max_tokens)  # warm-up
    start = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda p: one_request(port, p, args.max_tokens), prompts))
    wall = time.perf_counter() - start
    latencies = sorted(t for t, _, _ in results)
    tokens = sum(n for _, n, _ in results)
    return {"requests_s": len(results) / wall, "tokens_s": tokens / wall, "tokens": tokens, "wall_s": wall,
            "prompt_tokens": sum(p for _, _, p in results),
            "p50_s": statistics.median(latencies), "p99_s": latencies[min(len(latencies) - 1,
                                                                          int(0.99 * len(latencies)))]}


def run_side(side: str, args, model_dir: str, prompts: list[str], workdir: Path, tag: str) -> dict:
    port = free_port()
    log_path = workdir / f"{side}-{tag}.log"
    proc = subprocess.Popen(server_command(side, args, model_dir, port), stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT, env={**os.environ, **ENV})
    try:
        wait_until_ready(proc, f"http://127.0.0.1:{port}/v1/models", log_path, args.timeout)
        return load(port, prompts, args)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--requests", type=int, default=None, help="requests per measurement")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight at once")
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=None, help="measurements per server, order alternated")
    add_run_options(parser, QUICK, "requests", timeout=600)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    os.environ.update(ENV)
    from swiftlike.dataset import load_dataset
    from swiftlike.model import resolve_model
    model_dir = str(resolve_model(args.model).model_dir)
    prompts = [next(m["content"] for m in r["messages"] if m["role"] == "user")
               for r in load_dataset(["swiftlike/arithmetic"])][:args.requests]
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_deploy_"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {"swiftlike": [], "vllm": []}
    for r in range(args.rounds):
        for side in (("swiftlike", "vllm") if r % 2 == 0 else ("vllm", "swiftlike")):
            results[side].append(run_side(side, args, model_dir, prompts, workdir, str(r)))
            x = results[side][-1]
            print(f"round {r} {side:<9} {x['requests_s']:6.2f} req/s {x['tokens_s']:7.1f} tok/s "
                  f"p50 {x['p50_s']:.2f} s p99 {x['p99_s']:.2f} s ({x['prompt_tokens']} prompt, {x['tokens']} output "
                  "tokens)", flush=True)
    summary = {side: {k: statistics.median(x[k] for x in runs) for k in runs[0]} for side, runs in results.items()}
    print(f"\n{args.model}: {len(prompts)} requests, {args.concurrency} in flight, max_tokens {args.max_tokens}, "
          f"greedy, median of {args.rounds}")
    for side, x in summary.items():
        print(f"  {side:<9} {x['requests_s']:6.2f} req/s  {x['tokens_s']:7.1f} output tok/s  p50 {x['p50_s']:.2f} s"
              f"  p99 {x['p99_s']:.2f} s")
    ratio = summary["swiftlike"]["tokens_s"] / summary["vllm"]["tokens_s"]
    print(f"  swiftlike / vllm throughput: {ratio:.3f}x (goal >= 0.9x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": results, "ratio": ratio}, indent=2))
    print(f"logs in {workdir}")


if __name__ == "__main__":
    main()
