"""Completion log-probs, forward + backward: the logits path against the chunked path from hidden states.

GRPO's trainer scores each completion token as `log_softmax(h W^T / T)[token]`. The logits path computes the
(tokens x vocabulary) float32 logits and `selected_logps` over them; the chunked path
(`swiftlike/rl/core/chunked_logps.py`) takes the hidden states and the head's weight and holds at most one chunk's
logits. Random tensors of SmolLM2-135M's shapes (hidden 576, vocabulary 49152; 16 rows x 256 completion tokens by
default), the entropy asked for as the trainer's loss does, the head frozen as under LoRA (`--train_head`: it
trains, as full fine-tuning of a tied head). Each side runs in its own process, so its peak resident memory
(`ru_maxrss`; tracemalloc does not see torch's buffers) is its own; the figure reported is the peak above the
process's memory once the inputs exist. The sides alternate over the rounds, so machine noise hits them alike, and
the time reported is each side's fastest pass, the one other work on the machine disturbed least.

    .venv/bin/python benchmarks/bench_logps.py
    .venv/bin/python benchmarks/bench_logps.py --quick   # smoke test on small shapes
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from common import alternating_rounds, fill_defaults, run_side_process

DEFAULTS = {"rows": 16, "tokens": 256, "hidden": 576, "vocab": 49152, "temperature": 0.9, "repeats": 3, "rounds": 2}
QUICK = {"rows": 2, "tokens": 16, "hidden": 64, "vocab": 1024, "repeats": 1, "rounds": 1}
SIDES = ("logits", "chunked")


def run_side(args) -> dict:
    """The fastest of `repeats` timed forward + backward passes of one side (after one untimed pass), and the peak
    memory above what the inputs take, in this process."""
    import torch
    from swiftlike.rl.core.chunked_logps import linear_selected_logps
    from swiftlike.rl.core.sampling import selected_logps
    gen = torch.Generator().manual_seed(0)
    n = args.rows * args.tokens
    hidden = torch.randn(n, args.hidden, generator=gen).requires_grad_()
    weight = (torch.randn(args.vocab, args.hidden, generator=gen) * 0.05).requires_grad_(args.train_head)
    ids = torch.randint(0, args.vocab, (n,), generator=gen)
    advantages = torch.randn(n, generator=gen)
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def step() -> None:
        if args.side == "logits":
            out = selected_logps(hidden @ weight.T, ids, args.temperature, with_entropy=True)
        else:
            out = linear_selected_logps(hidden, weight, None, ids, args.temperature, with_entropy=True,
                                        chunk_rows=args.chunk_rows)
        (out.logps * advantages).sum().backward()
        hidden.grad = weight.grad = None

    step()
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": min(seconds), "peak_mib": (peak_kib - base_kib) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, one pass per side (smoke test)")
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key}", type=type(value), default=None)
    parser.add_argument("--chunk_rows", type=int, default=None, help="rows per chunk (default: chunked_logps's)")
    parser.add_argument("--train_head", action="store_true", help="the head's weight trains (full fine-tuning)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child process's one side
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    if args.side:
        print(json.dumps(run_side(args)))
        return
    child = [sys.executable, __file__] + [f"--{k}={getattr(args, k)}" for k in DEFAULTS]
    child += [f"--chunk_rows={args.chunk_rows}"] * (args.chunk_rows is not None) + ["--train_head"] * args.train_head
    figures = alternating_rounds(
        args.rounds, [(side, lambda _tag, side=side: run_side_process(child, side)) for side in SIDES],
        lambda f: f"{f['seconds']:.3f} s, peak +{f['peak_mib']:.0f} MiB")
    result = {side: {"seconds": min(f["seconds"] for f in rows),
                     "peak_mib": max(f["peak_mib"] for f in rows)} for side, rows in figures.items()}
    result["speedup"] = result["logits"]["seconds"] / result["chunked"]["seconds"]
    result["memory_ratio"] = result["logits"]["peak_mib"] / max(result["chunked"]["peak_mib"], 1e-9)
    shape = f"{args.rows} rows x {args.tokens} tokens, hidden {args.hidden}, vocab {args.vocab}, T {args.temperature}"
    print(f"{shape}, head {'trained' if args.train_head else 'frozen'}:")
    print(f"  logits path : {result['logits']['seconds']:.3f} s, peak +{result['logits']['peak_mib']:.0f} MiB")
    print(f"  chunked path: {result['chunked']['seconds']:.3f} s, peak +{result['chunked']['peak_mib']:.0f} MiB")
    print(f"  chunked is {result['speedup']:.2f}x as fast, with {result['memory_ratio']:.1f}x less peak memory")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **result}, indent=2))


if __name__ == "__main__":
    main()
