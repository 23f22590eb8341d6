"""Plain TRL GKD run, the baseline `bench_gkd.py` compares `swiftlike rlhf --rlhf_type gkd` against.

Only transformers / TRL / PEFT / datasets do the training: TRL's `GKDTrainer` (trl.experimental), which samples
the student's completions with `model.generate`. swiftlike is used for look-ups alone, so both sides start
from the same files: the model directories (`resolve_model`) and the rows the dataset spec names
(`load_dataset`), given to TRL as conversational `messages`.

The settings mirror the swiftlike side of the benchmark (LoRA r16 alpha 32 on all linear layers, fp32, lmbda,
beta, temperature, max new tokens, batch, lr, cosine schedule, weight decay 0.1, adam_beta2 0.95, seed 42, a
checkpoint at the last step). Prints one parseable line at the end:

    TRL_RESULT {"step_s": ..., "train_runtime": ..., "global_step": ..., "completion_mean_length": ...}

`completion_mean_length` (tokens up to and including the first end-of-sequence token, as TRL masks them) is
counted around `generate_on_policy_outputs`, for the benchmark's FLOP count.

    SWIFTLIKE_OFFLINE=1 .venv/bin/python benchmarks/trl_gkd_baseline.py --model tiny-random/qwen2_5 \
        --teacher tiny-random/qwen2_5 --max_steps 2
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings

os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")

RESULT_PREFIX = "TRL_RESULT "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--teacher", required=True)
    parser.add_argument("--dataset", default="swiftlike/alpaca-mini")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_steps", type=int, default=6)
    parser.add_argument("--max_new_tokens", type=int, default=48)
    parser.add_argument("--lmbda", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--temperature", type=float, default=0.9)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output_dir", default=None, help="default: a temporary directory, removed at the end")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.gkd import GKDConfig, GKDTrainer

    from swiftlike.dataset import load_dataset
    from swiftlike.model import resolve_model

    model_dir = str(resolve_model(args.model).model_dir)
    teacher_dir = str(resolve_model(args.teacher).model_dir)
    rows = load_dataset([args.dataset], seed=args.seed)
    dataset = Dataset.from_list([{"messages": r["messages"]} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32)
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                             task_type="CAUSAL_LM")

    with tempfile.TemporaryDirectory(prefix="trl_gkd_baseline_") as tmp:
        config = GKDConfig(
            output_dir=args.output_dir or tmp, seed=args.seed, data_seed=args.seed,
            per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=1,
            max_steps=args.max_steps, learning_rate=args.learning_rate, lr_scheduler_type="cosine",
            weight_decay=0.1, adam_beta2=0.95, optim="adamw_torch", lmbda=args.lmbda, beta=args.beta,
            temperature=args.temperature, max_new_tokens=args.max_new_tokens, bf16=False, fp16=False,
            gradient_checkpointing=False, report_to="none",
            # a checkpoint at the last step, inside train_runtime, as swiftlike writes one at the end of every run
            save_strategy="steps", save_steps=args.max_steps, logging_steps=100000,
            dataloader_pin_memory=False, use_cpu=not torch.cuda.is_available(),
        )
        trainer = GKDTrainer(model=model, teacher_model=teacher, args=config, train_dataset=dataset,
                             processing_class=tokenizer, peft_config=peft_config)
        completion_lengths: list[int] = []
        generate = trainer.generate_on_policy_outputs

        def counted_generate(unwrapped, inputs, generation_config):  # measurement only: what was sampled
            ids, attention_mask, labels = generate(unwrapped, inputs, generation_config)
            completion_lengths.extend(attention_mask[:, inputs["prompts"].shape[1]:].sum(1).tolist())
            return ids, attention_mask, labels
        trainer.generate_on_policy_outputs = counted_generate
        output = trainer.train()

    runtime = output.metrics["train_runtime"]
    steps = trainer.state.global_step
    result = {"step_s": runtime / max(steps, 1), "train_runtime": runtime, "global_step": steps,
              "train_loss": output.metrics.get("train_loss"),
              "completion_mean_length": sum(completion_lengths) / max(len(completion_lengths), 1)}
    print(f"  seconds per step  {result['step_s']:.2f}")
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
