"""Does `torch.compile` pay on this CPU? One LoRA training step (forward, backward, AdamW), eager against compiled.

Issue 36 asks for `torch.compile` where it measurably helps on a CPU and off where it does not. The step is
bench_train.py's SFT step: SmolLM2-135M-Instruct in fp32, LoRA r8 alpha 32 on every linear layer, dropout 0.05,
a batch of 4 rows; here of a fixed length (256 tokens), so the compiled graph is traced once and every timed
step reuses it (the best case for compile: padded rows of varying length retrace or run a dynamic-shape graph).

Each side runs in its own process (a compiled graph and its caches stay out of the eager side), the sides
alternate over the rounds, and the figure per side is its fastest timed step, the one other work on the machine
disturbed least. The compiled side also reports its first step, which includes tracing and Inductor's C++
code generation, and the steps it takes to earn that back. The first step's loss of both sides is printed: the
compiled graph must compute the eager step's numbers (within 1e-5).

    .venv/bin/python benchmarks/bench_compile.py
    .venv/bin/python benchmarks/bench_compile.py --quick   # smoke test on tiny-random/qwen2_5
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import alternating_rounds, fill_defaults, run_side_process

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "rows": 4, "tokens": 256, "steps": 6, "rounds": 2}
QUICK = {"model": "tiny-random/qwen2_5", "tokens": 32, "steps": 3, "rounds": 1}
SIDES = ("eager", "compiled")


def run_side(args) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from swiftlike.model import resolve_model
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(args.model).model_dir, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args.rows, args.tokens), generator=gen)
    forward = torch.compile(model) if args.side == "compiled" else model

    def step() -> float:
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss)

    start = time.perf_counter()
    first_loss = step()
    first = time.perf_counter() - start
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return {"first_step_s": first, "step_s": min(seconds), "first_loss": first_loss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, short rows, one round (smoke test)")
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key}", type=type(value), default=None, help=f"default {value}")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child process's one side
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    if args.side:
        print(json.dumps(run_side(args)))
        return
    child = [sys.executable, __file__] + [f"--{k}={getattr(args, k)}" for k in DEFAULTS]
    figures = alternating_rounds(
        args.rounds, [(side, lambda _tag, side=side: run_side_process(child, side)) for side in SIDES],
        lambda f: f"step {f['step_s']:.3f} s (fastest of {args.steps}), first step {f['first_step_s']:.1f} s, "
                  f"first loss {f['first_loss']:.6f}")
    eager = min(f["step_s"] for f in figures["eager"])
    compiled = min(f["step_s"] for f in figures["compiled"])
    compile_cost = min(f["first_step_s"] for f in figures["compiled"]) - eager
    loss_gap = max(abs(c["first_loss"] - e["first_loss"]) for c, e in zip(figures["compiled"], figures["eager"]))
    saved = eager - compiled
    print(f"\n{args.model}, LoRA r8 all-linear, fp32, {args.rows} rows x {args.tokens} tokens per step:")
    print(f"  eager step    {eager:.3f} s")
    print(f"  compiled step {compiled:.3f} s: {eager / compiled:.3f}x as fast as eager")
    print(f"  compiling     {compile_cost:.1f} s (first step over an eager step), "
          + (f"earned back after {compile_cost / saved:.0f} steps" if saved > 0 else "never earned back"))
    print(f"  first-step loss, compiled - eager: {loss_gap:.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "args": vars(args), "rounds": figures, "eager_step_s": eager, "compiled_step_s": compiled,
            "speedup": eager / compiled, "compile_s": compile_cost, "loss_gap": loss_gap}, indent=2))


if __name__ == "__main__":
    main()
