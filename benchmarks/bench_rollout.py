"""Server mode, measured in one run: weight-sync throughput per transport, and GRPO wall time sync vs async.

1. Transports. One `swiftlike rollout` server; the benchmark process loads the same model and pushes
   every weight (fp32) to it through each transport (http, path under /dev/shm, gloo), `--rounds` times,
   alternating the order. Timed on the trainer side: the transfer (begin + all buckets) and the commit
   (the server's vLLM reload, the same work for every transport). The limit is a plain in-memory copy of
   the same tensors (`clone`), timed in the same process: what moving the bytes costs with no encoding,
   socket or file in the way.
2. Sync vs async GRPO. The server pinned to core 0 and the trainer to core 1 (`taskset`), one thread
   each; the same GRPO run (merged-LoRA full sync over http) with and without `--async_generate true`.
   Step time is the wall time between consecutive log records (steps 2..N), so the first step (start-up,
   nothing to overlap yet) is left out. With async, generation of the next batch overlaps this batch's
   training, so the ideal step time is max(generate, train) instead of their sum.

    .venv/bin/python benchmarks/bench_rollout.py
    .venv/bin/python benchmarks/bench_rollout.py --quick   # smoke test on a tiny model
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
from pathlib import Path

from common import add_run_options, fill_defaults, free_port, run_logged, wait_until_ready

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "steps": 6, "rounds": 3}
QUICK = {"model": "tiny-random/qwen2_5", "steps": 3, "rounds": 1}
TRANSPORTS = ["http", "path", "gloo"]
ENV = {"SWIFTLIKE_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
       "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def swiftlike_cli() -> str:
    local = Path(sys.executable).parent / "swiftlike"
    return str(local) if local.exists() else "swiftlike"


def pinned(core: int | None) -> list[str]:
    return ["taskset", "-c", str(core)] if core is not None else []


def start_server(model: str, log_path: Path, core: int | None = None, dtype: str = "float32"
                 ) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [*pinned(core), swiftlike_cli(), "rollout", "--model", model, "--port", str(port), "--torch_dtype",
           dtype, "--vllm_max_model_len", "1024"]
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env={**os.environ, **ENV})
    wait_until_ready(proc, f"http://127.0.0.1:{port}/health", log_path, 600)
    return proc, port


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure_transports(args, workdir: Path) -> dict:
    import torch

    from swiftlike.model import load_model, load_tokenizer, resolve_model
    from swiftlike.rollout.client.remote_engine import RemoteEngine, ServerClient
    from swiftlike.rollout.client.transport import buckets, make_transport
    from swiftlike.template import get_template
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    resolved = resolve_model(args.model)
    template = get_template(resolved.meta.template, load_tokenizer(resolved))
    named = list(load_model(resolved, "float32", "cpu").named_parameters())
    nbytes = sum(p.numel() * p.element_size() for _, p in named)
    proc, port = start_server(args.model, workdir / "server-transports.log")
    times: dict[str, list[tuple[float, float]]] = {t: [] for t in TRANSPORTS}
    copies: list[float] = []
    try:
        engines = {t: RemoteEngine([ServerClient("127.0.0.1", port, 60)], template,
                                   make_transport(t, args.bucket_mb, None)) for t in TRANSPORTS}
        for r in range(args.rounds):
            start = time.perf_counter()
            with torch.no_grad():
                copied = [p.detach().clone() for _, p in named]
            copies.append(time.perf_counter() - start)
            del copied
            for name in (TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]):
                engine = engines[name]
                client = engine.clients[0]
                start = time.perf_counter()
                update_id = client.post("/update_weights/begin")["update_id"]
                for bucket in buckets(((n, p.detach()) for n, p in named), engine.dtype, args.bucket_mb << 20):
                    engine.transport.send(engine.clients, [update_id], bucket)
                sent = time.perf_counter()
                client.post("/update_weights/commit", json={"update_id": update_id})
                engine.transport.after_update()
                times[name].append((sent - start, time.perf_counter() - sent))
        for engine in engines.values():
            engine.close()
    finally:
        stop(proc)
    mib = nbytes / (1 << 20)
    copy_s = statistics.median(copies)
    out = {"bytes": nbytes, "memcpy_s": copy_s, "memcpy_mib_s": mib / copy_s, "transports": {}}
    for name, runs in times.items():
        transfer = statistics.median(t for t, _ in runs)
        commit = statistics.median(c for _, c in runs)
        out["transports"][name] = {"transfer_s": transfer, "commit_s": commit, "transfer_mib_s": mib / transfer,
                                   "total_mib_s": mib / (transfer + commit), "vs_memcpy": copy_s / transfer}
    return out


def grpo_command(args, port: int, output_dir: Path, asynchronous: bool) -> list[str]:
    return [*pinned(1), swiftlike_cli(), "rlhf", "--rlhf_type", "grpo", "--model", args.model, "--dataset",
            "swiftlike/arithmetic", "--reward_funcs", "accuracy", "format_hash", "--num_generations", "4",
            "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
            "--max_completion_length", str(args.max_completion_length), "--temperature", "1.0", "--beta", "0",
            "--learning_rate", "1e-4", "--lora_dropout", "0", "--torch_dtype", "float32",
            "--gradient_checkpointing", "false", "--logging_steps", "1", "--save_steps", "1000", "--report_to",
            "none", "--max_steps", str(args.steps), "--use_vllm", "true", "--vllm_mode", "server",
            "--vllm_server_port", str(port), "--async_generate", str(asynchronous).lower(),
            "--output_dir", str(output_dir)]


def measure_async(args, workdir: Path) -> dict:
    from swiftlike.train.outputs import read_log
    proc, port = start_server(args.model, workdir / "server-grpo.log", core=0)
    results: dict[str, list[dict]] = {"sync": [], "async": []}
    try:
        for r in range(args.rounds):
            for mode in (("sync", "async") if r % 2 == 0 else ("async", "sync")):
                out = workdir / f"grpo-{mode}-{r}"
                run_logged(grpo_command(args, port, out, mode == "async"), workdir / f"grpo-{mode}-{r}.log",
                           args.timeout, ENV)
                steps = [e for e in read_log(next(out.glob("v0-*"))) if "loss" in e]
                results[mode].append({
                    "step_times": [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(steps, steps[1:])],
                    "generate": statistics.mean(e.get("timing/generate", e.get("timing/generate_wait", 0))
                                                for e in steps[1:]),
                    "staleness_max": max(e["staleness/max"] for e in steps)})
    finally:
        stop(proc)
    summary = {}
    for mode, runs in results.items():
        summary[mode] = {"s_per_step": statistics.median(statistics.mean(x["step_times"]) for x in runs),
                         "generate_s": statistics.median(x["generate"] for x in runs),
                         "staleness_max": max(x["staleness_max"] for x in runs), "runs": runs}
    summary["async_vs_sync"] = summary["async"]["s_per_step"] / summary["sync"]["s_per_step"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (steps 2..N are timed)")
    parser.add_argument("--rounds", type=int, default=None, help="repeats of each measurement, order alternated")
    parser.add_argument("--bucket_mb", type=int, default=512, help="--weight_bucket_mb of the transports")
    parser.add_argument("--max_completion_length", type=int, default=64)
    parser.add_argument("--skip", choices=["transports", "async"], default=None, help="leave one part out")
    add_run_options(parser, QUICK, "steps", timeout=1800)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    if os.cpu_count() < 2 and args.skip != "async":
        sys.exit("the sync/async part pins the server and the trainer to two different cores; this machine has 1")
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_rollout_"))
    workdir.mkdir(parents=True, exist_ok=True)
    result = {"model": args.model}
    if args.skip != "transports":
        t = result["transports"] = measure_transports(args, workdir)
        print(f"\nFull-weight sync of {args.model}: {t['bytes'] / (1 << 20):.1f} MiB fp32, {args.bucket_mb} MiB "
              f"buckets, median of {args.rounds}")
        print(f"  {'memory copy (limit)':<22} {t['memcpy_mib_s']:8.0f} MiB/s   {t['memcpy_s']:.3f} s")
        for name, x in t["transports"].items():
            print(f"  {name:<22} {x['transfer_mib_s']:8.0f} MiB/s   transfer {x['transfer_s']:.3f} s + commit "
                  f"{x['commit_s']:.3f} s = {x['total_mib_s']:.0f} MiB/s end to end; "
                  f"{x['vs_memcpy']:.3f}x of memcpy")
    if args.skip != "async":
        a = result["grpo"] = measure_async(args, workdir)
        print(f"\nGRPO {args.steps} steps, server on core 0, trainer on core 1, median of {args.rounds}")
        for mode in ("sync", "async"):
            x = a[mode]
            print(f"  {mode:<6} {x['s_per_step']:6.2f} s/step  (of which waiting for generation "
                  f"{x['generate_s']:.2f} s; max staleness {x['staleness_max']:.0f})")
        print(f"  async / sync step time: {a['async_vs_sync']:.3f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"\nlogs in {workdir}")


if __name__ == "__main__":
    main()
