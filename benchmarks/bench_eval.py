"""`swiftlike eval --eval_backend Native` (evalscope) against `swiftlike deploy --infer_backend vllm` vs against
bare `vllm serve`: the same benchmark rows, concurrency and greedy settings, one run.

The rows are GSM8K-shaped ({question, answer: "...\\n#### n"}, made up here: sums and products) in the hub
mirror's folder layout, read by evalscope's own gsm8k adapter through --eval_dataset_args local_path and scored
by its own metric. Each server is started in turn on the same model directory, dtype (fp32), max_model_len and
KV-cache size, and `swiftlike eval --eval_url` runs against it as a subprocess; its wall time (evalscope's start,
the requests and the scoring) is the figure. Printed: both wall times, their ratio swiftlike / vllm, each
side's accuracy and how many questions got the same verdict (and the same reply) on both.

    .venv/bin/python benchmarks/bench_eval.py
    .venv/bin/python benchmarks/bench_eval.py --compiled   # swiftlike deploy --vllm_enforce_eager false
    .venv/bin/python benchmarks/bench_eval.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_deploy import server_command as deploy_server_command
from common import add_run_options, fill_defaults, free_port, swiftlike_cli, wait_until_ready

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "rows": 96, "rounds": 1}
QUICK = {"model": "tiny-random/qwen2_5", "rows": 16, "rounds": 1}
ENV = {"SWIFTLIKE_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
SIDES = ("swiftlike", "vllm")


def server_command(side: str, args, model_dir: str, port: int) -> list[str]:
    """bench_deploy's two servers (the same model, dtype, max_model_len and served name), ours compiled on ask."""
    compiled = ["--vllm_enforce_eager", "false"] if side == "swiftlike" and args.compiled else []
    return [*deploy_server_command(side, args, model_dir, port), *compiled]


def write_gsm8k_folder(root: Path, rows: int, seed: int = 0) -> Path:
    """GSM8K's record format and its hub mirror's layout (README configs, main/test.jsonl)."""
    rng = random.Random(seed)
    records = []
    for i in range(rows):
        a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
        records.append({"question": f"A shop sells {a} apples in the morning and {b} in the afternoon, and each "
                                    f"apple costs {c} dollars. How many dollars does the shop take in?",
                        "answer": f"It sells {a} + {b} = {a + b} apples, for {a + b} * {c} = {(a + b) * c} "
                                  f"dollars.\n#### {(a + b) * c}"})
    (root / "main").mkdir(parents=True, exist_ok=True)
    (root / "main" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (root / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n  - split: test\n"
                                    "    path: main/test.jsonl\n---\n")
    return root


def run_side(side: str, args, model_dir: str, data: Path, workdir: Path, tag: str) -> dict:
    port = free_port()
    log_path = workdir / f"{side}-{tag}-server.log"
    proc = subprocess.Popen(server_command(side, args, model_dir, port), stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT, env={**os.environ, **ENV})
    try:
        wait_until_ready(proc, f"http://127.0.0.1:{port}/v1/models", log_path, args.timeout)
        out = workdir / f"{side}-{tag}-eval"
        cmd = [swiftlike_cli(), "eval", "--eval_backend", "Native", "--eval_url", f"http://127.0.0.1:{port}/v1",
               "--eval_dataset", "gsm8k", "--eval_dataset_args",
               json.dumps({"gsm8k": {"local_path": str(data), "few_shot_num": 0}}),
               "--eval_num_proc", str(args.concurrency), "--max_new_tokens", str(args.max_tokens),
               "--temperature", "0", "--eval_output_dir", str(out)]
        eval_log = workdir / f"{side}-{tag}-eval.log"
        start = time.perf_counter()
        done = subprocess.run(cmd, stdout=open(eval_log, "w"), stderr=subprocess.STDOUT, env={**os.environ, **ENV},
                              timeout=args.timeout)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"swiftlike eval against {side} failed ({done.returncode}); see {eval_log}")
        run_dir = next(out.iterdir())
        report = json.loads((run_dir / "report.json").read_text())
        rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
        return {"wall_s": wall, "accuracy": report["benchmarks"]["gsm8k"]["accuracy"], "rows": rows,
                "report": str(run_dir / "report.json")}
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--rows", type=int, default=None, help="GSM8K-shaped questions")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (--eval_num_proc)")
    parser.add_argument("--max_tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=None, help="runs per server, order alternated")
    parser.add_argument("--compiled", action="store_true",
                        help="swiftlike deploy with --vllm_enforce_eager false (torch.compile, the mode vllm serve "
                             "runs in by default; our CPU default is eager)")
    add_run_options(parser, QUICK, "rows", timeout=900)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    os.environ.update(ENV)
    from swiftlike.model import resolve_model
    model_dir = str(resolve_model(args.model).model_dir)
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_eval_"))
    workdir.mkdir(parents=True, exist_ok=True)
    data = write_gsm8k_folder(workdir / "gsm8k", args.rows)
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
            x = run_side(side, args, model_dir, data, workdir, str(r))
            runs[side].append(x)
            print(f"round {r} {side:<9} {x['wall_s']:6.1f} s  accuracy {x['accuracy']:.4f}", flush=True)
    wall = {side: min(x["wall_s"] for x in runs[side]) for side in SIDES}
    ours, theirs = runs["swiftlike"][0]["rows"], runs["vllm"][0]["rows"]
    same_verdict = sum(a["correct"] == b["correct"] for a, b in zip(ours, theirs, strict=True))
    same_reply = sum(a["reply"] == b["reply"] for a, b in zip(ours, theirs, strict=True))
    ratio = wall["swiftlike"] / wall["vllm"]
    mode = "compiled (--vllm_enforce_eager false)" if args.compiled else "eager (the CPU default)"
    print(f"\nswiftlike deploy {mode}")
    print(f"{args.model}: evalscope gsm8k, {len(ours)} questions, {args.concurrency} in flight, max_tokens "
          f"{args.max_tokens}, greedy, best of {args.rounds}")
    for side in SIDES:
        print(f"  {side:<9} {wall[side]:6.1f} s  accuracy {runs[side][0]['accuracy']:.4f}")
    print(f"  wall time swiftlike / vllm: {ratio:.3f}x")
    print(f"  same verdict on {same_verdict}/{len(ours)} questions, same reply on {same_reply}/{len(ours)}")
    if args.json:
        summary = {"model": args.model, "compiled": args.compiled, "questions": len(ours), "concurrency": args.concurrency,
                   "max_tokens": args.max_tokens, "wall_s": wall, "ratio": ratio,
                   "accuracy": {side: runs[side][0]["accuracy"] for side in SIDES},
                   "same_verdict": same_verdict, "same_reply": same_reply,
                   "reports": {side: [x["report"] for x in runs[side]] for side in SIDES}}
        Path(args.json).write_text(json.dumps(summary, indent=2))
    print(f"logs in {workdir}")


if __name__ == "__main__":
    main()
