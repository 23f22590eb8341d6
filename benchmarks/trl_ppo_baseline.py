"""Plain TRL PPO run, the baseline `bench_ppo.py` compares `swiftlike rlhf --rlhf_type ppo` against.

TRL's `PPOTrainer` (trl.experimental.ppo, last shipped in trl 1.12.0, so `bench_ppo.py` runs this with that
release first on the path) samples with `model.generate` in the training process and holds four models: policy,
reference, reward model and value model (initialised from the reward model, as ms-swift does). swiftlike is used
for look-ups alone: the model directory (`resolve_model`), the prompts (`load_dataset`) and the chat template
that renders them.

Prints one parseable line at the end:

    TRL_RESULT {"step_s": ..., "train_runtime": ..., "global_step": ..., "completion_mean_length": ...}

`completion_mean_length` (tokens up to and including the first end-of-sequence token, where TRL truncates them)
is counted around the trainer module's `batch_generation`, for the benchmark's FLOP count.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")

RESULT_PREFIX = "TRL_RESULT "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--reward_model", required=True, help="a one-label sequence-classification directory")
    parser.add_argument("--dataset", default="swiftlike/arithmetic")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_steps", type=int, default=6)
    parser.add_argument("--response_length", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import trl
        from trl.experimental.ppo import PPOConfig, PPOTrainer
        from trl.experimental.ppo import ppo_trainer as ppo_module

    from swiftlike.dataset import load_dataset
    from swiftlike.model import resolve_model

    model_dir = str(resolve_model(args.model).model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = load_dataset([args.dataset], seed=args.seed)[:args.batch_size * args.max_steps]
    prompts = [tokenizer.apply_chat_template(r["messages"][:-1] if r["messages"][-1]["role"] == "assistant"
                                             else r["messages"], add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"] for r in rows]
    dataset = Dataset.from_dict({"input_ids": prompts})
    policy, ref = (AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32) for _ in range(2))
    reward, value = (AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1,
                                                                        dtype=torch.float32) for _ in range(2))
    with tempfile.TemporaryDirectory(prefix="trl_ppo_baseline_") as tmp:
        config = PPOConfig(output_dir=tmp, seed=args.seed, per_device_train_batch_size=args.batch_size,
                           gradient_accumulation_steps=1, num_mini_batches=1, num_ppo_epochs=1,
                           total_episodes=args.batch_size * args.max_steps, response_length=args.response_length,
                           stop_token="eos", temperature=0.7, kl_coef=0.05, learning_rate=args.learning_rate,
                           num_sample_generations=0, save_strategy="no", report_to=[], bf16=False, fp16=False,
                           use_cpu=not torch.cuda.is_available())
        completion_lengths: list[int] = []
        generate = ppo_module.batch_generation

        def counted_generation(model, queries, *rest):  # measurement only: what was sampled, up to its end
            query_responses, logits = generate(model, queries, *rest)
            is_eos = query_responses[:, queries.shape[1]:] == tokenizer.eos_token_id
            ends = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, is_eos.shape[1])
            completion_lengths.extend(ends.tolist())
            return query_responses, logits
        ppo_module.batch_generation = counted_generation
        trainer = PPOTrainer(args=config, processing_class=tokenizer, model=policy, ref_model=ref,
                             reward_model=reward, train_dataset=dataset, eval_dataset=dataset, value_model=value)
        start = time.perf_counter()
        trainer.train()
        runtime = time.perf_counter() - start
    steps = trainer.state.global_step
    result = {"step_s": runtime / max(steps, 1), "train_runtime": runtime, "global_step": steps,
              "trl": trl.__version__,
              "completion_mean_length": sum(completion_lengths) / max(len(completion_lengths), 1)}
    print(f"  seconds per step  {result['step_s']:.2f}")
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
