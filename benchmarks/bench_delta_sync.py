"""Delta vs full weight sync for full fine-tuning, measured per step on real optimizer updates.

SmolLM2-135M (fp32 trainer) takes `--steps` AdamW steps of SFT on `swiftlike/alpaca-mini` (4 rows a step,
the real gradient of the real loss) at each `--lrs` learning rate. After every step the weights go to one
`swiftlike rollout` server per `--engine_dtypes` dtype over http, twice: once with `--weight_sync full`
(every weight, cast to the server's dtype) and once with `--weight_sync delta` (the first sync full, then
only the elements whose value in that dtype changed, rollout/delta.py). Both start from the same weights
and send the same snapshots, so the bytes compare directly; sync seconds are the trainer's wall time of
`update_weights` (diff + encode + transfer + the server's patch and vLLM reload), the median of `--rounds`
passes that alternate which mode goes first. Beside them: the bytes a
LoRA-only sync (`--vllm_enable_lora`) would send, the adapter's fp32 tensors on every linear layer at
rank 8 and 16 (what PEFT saves), for scale; that trains another, smaller model, of course.

    .venv/bin/python benchmarks/bench_delta_sync.py
    .venv/bin/python benchmarks/bench_delta_sync.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_rollout import ENV, start_server, stop
from common import add_run_options, fill_defaults

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "steps": 4, "rounds": 1}
QUICK = {"model": "tiny-random/qwen2_5", "steps": 2, "rounds": 1}


def lora_bytes(model, rank: int) -> int:
    """fp32 bytes of a rank-r adapter on every nn.Linear except the head: r * (in + out) per layer."""
    import torch
    return sum(rank * (m.in_features + m.out_features) * 4 for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and not name.endswith("lm_head"))


def trajectory(model_id: str, lr: float, steps: int) -> tuple[list[list], dict]:
    """The weights before and after each of `steps` AdamW steps, and the LoRA sizes for this model."""
    import torch

    from swiftlike.dataset import load_dataset
    from swiftlike.model import load_model, load_tokenizer, resolve_model
    torch.manual_seed(0)
    resolved = resolve_model(model_id)
    tokenizer = load_tokenizer(resolved)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_model(resolved, "float32", "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rows = load_dataset(["swiftlike/alpaca-mini"])
    snapshots = [[(n, p.detach().clone()) for n, p in model.named_parameters()]]
    for step in range(steps):
        texts = [tokenizer.apply_chat_template(r["messages"], tokenize=False) for r in rows[4 * step:4 * step + 4]]
        batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=256)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        snapshots.append([(n, p.detach().clone()) for n, p in model.named_parameters()])
    return snapshots, {f"lora_r{r}_bytes": lora_bytes(model, r) for r in (8, 16)}


def remote(model_id: str, port: int, weight_sync: str, bucket_mb: int):
    from swiftlike.model import load_tokenizer, resolve_model
    from swiftlike.rollout.client.remote_engine import RemoteEngine, ServerClient
    from swiftlike.rollout.client.transport import make_transport
    from swiftlike.template import get_template
    resolved = resolve_model(model_id)
    template = get_template(resolved.meta.template, load_tokenizer(resolved))
    return RemoteEngine([ServerClient("127.0.0.1", port, 120)], template, make_transport("http", bucket_mb, None),
                        weight_sync)


def push_all(engine, snapshots) -> list[dict]:
    out = []
    for weights in snapshots:
        start = time.perf_counter()
        engine.update_weights(weights)
        s = engine.last_sync
        out.append({"bytes": s.bytes, "density": s.density, "seconds": time.perf_counter() - start})
    return out


def measure(args, workdir: Path) -> list[dict]:
    servers = {d: start_server(args.model, workdir / f"server-{d}.log", dtype=d) for d in args.engine_dtypes}
    results = []
    try:
        for lr in args.lrs:
            snapshots, lora = trajectory(args.model, lr, args.steps)
            for dtype, (_, port) in servers.items():
                runs = {"full": [], "delta": []}
                for r in range(args.rounds):
                    for mode in (("full", "delta") if r % 2 == 0 else ("delta", "full")):
                        runs[mode].append(push_all(remote(args.model, port, mode, args.bucket_mb), snapshots))
                for step in range(len(snapshots)):
                    f, d = runs["full"][0][step], runs["delta"][0][step]
                    results.append({"lr": lr, "engine_dtype": dtype, "step": step, "density": d["density"],
                                    "delta_bytes": d["bytes"], "full_bytes": f["bytes"], **lora,
                                    "delta_s": statistics.median(run[step]["seconds"] for run in runs["delta"]),
                                    "full_s": statistics.median(run[step]["seconds"] for run in runs["full"])})
            del snapshots
    finally:
        for proc, _ in servers.values():
            stop(proc)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per learning rate")
    parser.add_argument("--rounds", type=int, default=None, help="passes of both modes per trajectory, order "
                        "alternated (seconds are their median)")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-6, 1e-5])
    parser.add_argument("--engine_dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--bucket_mb", type=int, default=512, help="--weight_bucket_mb")
    add_run_options(parser, QUICK, "steps", timeout=1800)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_delta_sync_"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = measure(args, workdir)
    mib = 1 << 20
    print(f"\n{args.model}: full fine-tuning, AdamW, http, step 0 = the first (full) sync")
    print("| lr | engine dtype | step | density | delta MiB | full MiB | delta / full | LoRA r8 / r16 MiB "
          "| delta s | full s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['lr']:g} | {r['engine_dtype']} | {r['step']} | {r['density']:.4f} | "
              f"{r['delta_bytes'] / mib:.1f} | {r['full_bytes'] / mib:.1f} | {r['delta_bytes'] / r['full_bytes']:.3f} | "
              f"{r['lora_r8_bytes'] / mib:.1f} / {r['lora_r16_bytes'] / mib:.1f} | {r['delta_s']:.2f} | "
              f"{r['full_s']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\nlogs in {workdir}")


if __name__ == "__main__":
    main()
