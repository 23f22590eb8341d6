"""Plain TRL SFT run, the baseline `bench_train.py` compares `swiftlike sft` against.

Only transformers / TRL / PEFT / datasets do the training. swiftlike is used for two look-ups
alone, so both sides start from the same files: where the model directory is
(`resolve_model`) and which rows the dataset spec names (`load_dataset`). The rows'
`messages` go to TRL as they are; TRL renders them with the tokenizer's own chat template.

The settings mirror `swiftlike sft`'s defaults (cosine schedule, weight decay 0.1,
adam_beta2 0.95, adamw_torch, seed 42) and its fp32 training (TRL would default to bf16).
Prints one parseable line at the end:

    TRL_RESULT {"tokens_per_s": ..., "num_input_tokens_seen": ..., "train_runtime": ..., ...}

    SWIFTLIKE_OFFLINE=1 .venv/bin/python benchmarks/trl_sft_baseline.py --model tiny-random/qwen2_5 --max_steps 3
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")

RESULT_PREFIX = "TRL_RESULT "


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--dataset", default="swiftlike/alpaca-mini")
    parser.add_argument("--max_length", type=int, default=512)
    parser.add_argument("--packing", type=_bool, default=False)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--max_steps", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output_dir", default=None, help="default: a temporary directory, removed at the end")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from swiftlike.dataset import load_dataset
    from swiftlike.model import resolve_model

    model_dir = str(resolve_model(args.model).model_dir)
    rows = load_dataset([args.dataset], seed=args.seed)
    dataset = Dataset.from_list([{"messages": row["messages"]} for row in rows])

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    peft_config = LoraConfig(r=8, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                             task_type="CAUSAL_LM")

    with tempfile.TemporaryDirectory(prefix="trl_sft_baseline_") as tmp:
        config = SFTConfig(
            output_dir=args.output_dir or tmp, seed=args.seed,
            max_length=args.max_length, packing=args.packing, packing_strategy="bfd",
            per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=1,
            max_steps=args.max_steps, learning_rate=args.learning_rate, lr_scheduler_type="cosine",
            weight_decay=0.1, adam_beta2=0.95, optim="adamw_torch",
            bf16=False, fp16=False,  # TRL's default is bf16 mixed precision; swiftlike --torch_dtype float32 is not
            gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=100000,
            # as swiftlike counts: packed (padding-free) batches have no padding, and "non_padding" there would
            # skip real tokens equal to the pad id (the end-of-turn token of many chat templates)
            include_num_input_tokens_seen="all" if args.packing else "non_padding", dataloader_pin_memory=False,
            assistant_only_loss=False,
        )
        trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                             peft_config=peft_config)
        output = trainer.train()

    runtime = output.metrics["train_runtime"]
    seen = trainer.state.num_input_tokens_seen
    result = {
        "tokens_per_s": seen / max(runtime, 1e-9),
        "num_input_tokens_seen": seen,
        # TRL's own count (attention_mask sum, or every token of a padding-free batch), as a cross-check
        "trl_num_tokens": trainer._total_train_tokens,
        "train_runtime": runtime,
        "global_step": trainer.state.global_step,
        "train_rows": len(trainer.train_dataset),
        "train_loss": output.metrics.get("train_loss"),
    }
    print(f"  train tokens/s    {result['tokens_per_s']:.1f}")
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
