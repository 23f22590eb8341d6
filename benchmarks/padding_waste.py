"""What padding-free batches would save a DPO step on this CPU, counted before building them.

bench_dpo.py's DPO step runs TRL's batch: the B chosen and B rejected sequences (prompt + answer) padded to the
longest of the 2B. Packing them into one row without padding saves the matmul FLOPs of the pad positions, but on
a CPU there is no variable-length attention kernel: the packed row's attention runs over the whole row with a
block-diagonal mask (transformers' SDPA path), T x T for a row of T tokens instead of 2B x L x L. This script
encodes bench_dpo.py's dataset with our chat template exactly as `swiftlike rlhf --rlhf_type dpo` does
(`PreferenceEncoder`), draws batches in a seeded random order, and counts both sides' model FLOPs with
`swiftlike/utils/flops.py`'s formula (forward; training multiplies both sides alike). No model runs.

It prints both packed layouts: the row under transformers' row-wide mask, and the row on segment attention
(`swiftlike/model/segment_attention.py`, which attends within each sequence), the layout `swiftlike rlhf --rlhf_type
dpo` now runs; on segment attention the packed row saves the pad positions' FLOPs without paying the mask's.

    .venv/bin/python benchmarks/padding_waste.py
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's swiftlike

from bound import model_shape  # noqa: E402


def attention_flops(shape, rows: int, query_len: int, key_len: int) -> int:
    """QKᵀ and AV over a dense (query x key) score matrix per row, masked or not: what SDPA computes on a CPU."""
    return 4 * shape.layers * shape.heads * shape.head_dim * rows * query_len * key_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--dataset", default="swiftlike/arithmetic-preference")
    parser.add_argument("--batch_size", type=int, default=4, help="pairs per batch (bench_dpo.py's)")
    parser.add_argument("--batches", type=int, default=200, help="random batches drawn")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()

    from swiftlike.dataset import load_dataset
    from swiftlike.model import load_tokenizer, resolve_model
    from swiftlike.rl.preference.data import PreferenceEncoder
    from swiftlike.template import get_template
    resolved = resolve_model(args.model)
    encoder = PreferenceEncoder(get_template(resolved.meta.template, load_tokenizer(resolved)))
    pairs = []
    for row in load_dataset([args.dataset], seed=42):
        prompt, chosen, rejected = encoder.pair_ids(row)
        pairs.append((len(prompt) + len(chosen), len(prompt) + len(rejected)))
    shape = model_shape(args.model)
    rng = random.Random(0)
    real = padded = linear_padded = linear_packed = attn_padded = attn_packed = attn_segments = 0
    for _ in range(args.batches):
        batch = rng.sample(pairs, args.batch_size)
        lengths = [n for pair in batch for n in pair]
        width, total = max(lengths), sum(lengths)
        real += total
        padded += len(lengths) * width
        linear_padded += 2 * shape.matmul_params * len(lengths) * width
        linear_packed += 2 * shape.matmul_params * total
        attn_padded += attention_flops(shape, len(lengths), width, width)
        attn_packed += attention_flops(shape, 1, total, total)
        attn_segments += sum(attention_flops(shape, 1, n, n) for n in lengths)
    padded_flops, packed_flops = linear_padded + attn_padded, linear_packed + attn_packed
    segments_flops = linear_packed + attn_segments
    figures = {"pairs": len(pairs), "mean_sequence": real / (args.batches * 2 * args.batch_size),
               "padding_share": 1 - real / padded, "packed_over_padded_flops": packed_flops / padded_flops,
               "segments_over_padded_flops": segments_flops / padded_flops,
               "attention_share_padded": attn_padded / padded_flops, "attention_share_packed": attn_packed / packed_flops}
    print(f"{args.dataset} on {args.model}: {len(pairs)} pairs, batches of {args.batch_size} pairs "
          f"({2 * args.batch_size} sequences), {args.batches} random batches")
    print(f"  mean sequence {figures['mean_sequence']:.1f} tokens; padding is {100 * figures['padding_share']:.1f}% "
          "of the padded batch's positions")
    print(f"  forward FLOPs, packed / padded: {figures['packed_over_padded_flops']:.3f} (attention "
          f"{100 * figures['attention_share_padded']:.1f}% of the padded batch's, "
          f"{100 * figures['attention_share_packed']:.1f}% of the packed row's, dense-masked on a CPU)")
    print(f"  forward FLOPs, packed on segment attention / padded: {figures['segments_over_padded_flops']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **figures}, indent=2))


if __name__ == "__main__":
    main()
