"""Plain TRL DPO run, the baseline `bench_dpo.py` compares `swiftlike rlhf --rlhf_type dpo` against.

Only transformers / TRL / PEFT / datasets do the training. swiftlike is used for two look-ups alone, so both
sides start from the same files: where the model directory is (`resolve_model`) and which pairs the dataset
spec names (`load_dataset`). The pairs go to TRL in its conversational preference format (prompt, chosen,
rejected message lists); TRL renders them with the tokenizer's own chat template.

The settings mirror swiftlike's (LoRA r8 alpha 32 on all linear layers, cosine schedule, weight decay 0.1,
adam_beta2 0.95, adamw_torch, seed 42, fp32, beta 0.1, sigmoid loss, no length limit, a checkpoint written at
the last step). Prints one parseable
line at the end:

    TRL_RESULT {"tokens_per_s": ..., "num_input_tokens_seen": ..., "train_runtime": ..., ...}

    SWIFTLIKE_OFFLINE=1 .venv/bin/python benchmarks/trl_dpo_baseline.py --model tiny-random/qwen2_5 --max_steps 3
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")

RESULT_PREFIX = "TRL_RESULT "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--dataset", default="swiftlike/arithmetic-preference")
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
    from trl import DPOConfig, DPOTrainer

    from swiftlike.dataset import load_dataset
    from swiftlike.model import resolve_model

    model_dir = str(resolve_model(args.model).model_dir)
    rows = load_dataset([args.dataset], seed=args.seed, row_kind="pair")
    dataset = Dataset.from_list([{"prompt": r["messages"][:-1], "chosen": r["messages"][-1:],
                                  "rejected": [{"role": "assistant", "content": r["rejected_response"]}]}
                                 for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    peft_config = LoraConfig(r=8, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                             task_type="CAUSAL_LM")

    with tempfile.TemporaryDirectory(prefix="trl_dpo_baseline_") as tmp:
        config = DPOConfig(
            output_dir=args.output_dir or tmp, seed=args.seed, data_seed=args.seed,
            per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=1,
            max_steps=args.max_steps, learning_rate=args.learning_rate, lr_scheduler_type="cosine",
            weight_decay=0.1, adam_beta2=0.95, optim="adamw_torch", beta=0.1, loss_type=["sigmoid"],
            max_length=None, bf16=False, fp16=False, gradient_checkpointing=False, report_to="none",
            # a checkpoint at the last step, inside train_runtime, as swiftlike writes one at the end of every run
            save_strategy="steps", save_steps=args.max_steps, logging_steps=100000,
            include_num_input_tokens_seen="non_padding",
            dataloader_pin_memory=False, use_cpu=not torch.cuda.is_available(),
        )
        trainer = DPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                             peft_config=peft_config)
        output = trainer.train()

    runtime = output.metrics["train_runtime"]
    seen = trainer.state.num_input_tokens_seen
    result = {"tokens_per_s": seen / max(runtime, 1e-9), "num_input_tokens_seen": seen, "train_runtime": runtime,
              "global_step": trainer.state.global_step, "train_rows": len(trainer.train_dataset),
              "train_loss": output.metrics.get("train_loss")}
    print(f"  train tokens/s    {result['tokens_per_s']:.1f}")
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
