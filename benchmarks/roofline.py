"""This machine's bound: the peak matmul rate torch reaches (fp32, and bf16) and the memory bandwidth, measured
here, so a training benchmark can say what share of the machine its step uses.

Peak: square matmuls of growing size on the threads this process may use (its CPU affinity), best of several
repeats; the largest rate is the peak (2·n³ FLOPs per n×n product). Bandwidth: a large tensor copied (read +
write) and summed (read), in GB/s. Written as JSON that the training benchmarks read (`load_peak`).

    .venv/bin/python benchmarks/roofline.py --json benchmarks/roofline.json
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

SIZES = (256, 512, 1024, 2048)
BANDWIDTH_BYTES = 1 << 29  # 512 MiB: far beyond the caches
DEFAULT_JSON = Path(__file__).with_name("roofline.json")


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: allocation, thread pool start
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_rate(n: int, dtype: torch.dtype, repeats: int) -> float:
    """GFLOP/s of an n×n by n×n product."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    out = torch.empty(n, n, dtype=dtype)
    seconds = best_seconds(lambda: torch.matmul(a, b, out=out), repeats)
    return 2 * n ** 3 / seconds / 1e9


def bandwidth(repeats: int) -> dict[str, float]:
    """GB/s: a copy moves the tensor twice (read + write), a sum once."""
    src = torch.ones(BANDWIDTH_BYTES // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy = best_seconds(lambda: dst.copy_(src), repeats)
    total = best_seconds(lambda: src.sum(), repeats)
    return {"copy_gb_s": 2 * BANDWIDTH_BYTES / copy / 1e9, "read_gb_s": BANDWIDTH_BYTES / total / 1e9}


def measure(repeats: int = 5) -> dict:
    torch.set_num_threads(usable_cores())
    rates = {}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        rates[name] = {n: matmul_rate(n, dtype, repeats) for n in SIZES}
    return {"threads": torch.get_num_threads(), "cores": usable_cores(), "torch": torch.__version__,
            "matmul_gflops": rates, "peak_gflops": {k: max(v.values()) for k, v in rates.items()},
            **bandwidth(repeats), "measured": time.strftime("%Y-%m-%d %H:%M:%S")}


def load_peak(path: Path = DEFAULT_JSON, dtype: str = "float32") -> float | None:
    """The peak GFLOP/s of `dtype` recorded by this script, or None when it has not been run here."""
    if not path.is_file():
        return None
    return json.loads(path.read_text())["peak_gflops"].get(dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=str(DEFAULT_JSON))
    args = parser.parse_args()
    result = measure(args.repeats)
    print(f"{result['cores']} usable cores, {result['threads']} torch threads, torch {result['torch']}")
    for dtype, rates in result["matmul_gflops"].items():
        cells = ", ".join(f"{n}: {r:.1f}" for n, r in rates.items())
        print(f"  matmul {dtype:<8} GFLOP/s by size: {cells}  -> peak {result['peak_gflops'][dtype]:.1f}")
    print(f"  memory bandwidth: copy {result['copy_gb_s']:.1f} GB/s, read {result['read_gb_s']:.1f} GB/s")
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
