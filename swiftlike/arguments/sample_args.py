"""Arguments of `swiftlike sample`: ms-swift's SamplingArguments names and defaults."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..utils.errors import UsageError
from .base import BaseArguments, arg
from .infer_args import SamplingArguments, VllmArguments
from .sandbox_args import SandboxArguments


@dataclass
class SampleArguments(BaseArguments, SamplingArguments, VllmArguments, SandboxArguments):
    """swiftlike sample: many answers per --dataset prompt, scored by an outcome (--orm_model) and/or process
    (--prm_model) reward, the best kept as SFT rows (and the worst as `rejected_response` for DPO)."""

    command = "sample"
    sampler_type: Literal["sample", "distill"] = arg(
        "sample", "sample: --model answers; distill: a teacher behind an OpenAI-compatible server answers "
        "(--sampler_engine client), its reasoning_content kept in <think> tags.")
    sampler_engine: Literal["pt", "transformers", "vllm", "client"] | None = arg(
        None, "What generates: pt (transformers; `transformers` is ms-swift's name for it), vllm (continuous "
        "batching across prompts), or client (any OpenAI-compatible URL, given as --engine_kwargs "
        "'{\"base_url\": ...}'). Default: pt, and client for --sampler_type distill.")
    output_dir: str = arg("sample_output", "Directory of the output file (and of an interrupted run's partial file).")
    output_file: str | None = arg(None, "Output file name inside --output_dir (no directory part), .jsonl; default: "
                                  "<time>.jsonl.")
    resume: bool = arg(False, "Continue the interrupted run whose partial file is in --output_dir: prompts already "
                       "written are skipped, and the output is the file an uninterrupted run writes.")
    override_exist_file: bool = arg(False, "Replace an existing output file (or an interrupted run's partial file) "
                                    "instead of stopping.")
    num_return_sequences: int = arg(64, "Answers sampled per prompt.")
    num_sampling_batch_size: int = arg(1, "Prompts per sampling batch; with --num_sampling_batches it bounds how "
                                       "many prompts are sampled (rows are committed per prompt either way).")
    num_sampling_batches: int | None = arg(None, "Sample only this many batches of --num_sampling_batch_size "
                                           "prompts; default: the whole dataset (shard).")
    n_best_to_keep: int = arg(5, "With a reward, keep at most this many best-scoring answers per prompt (each a "
                              "row); without one every answer is a row.")
    data_range: list[int] = arg([], "Shard of the dataset to sample: `i n` = shard i (0-based) of n contiguous "
                                "shards; answers are seeded by the prompt's index in the whole dataset, so the shards' "
                                "outputs concatenate to the unsharded run's.")
    max_new_tokens: int = arg(512, "Most tokens per answer.")
    stop_words: list[str] = arg([], "Extra strings that end an answer.")
    orm_model: str | None = arg(None, "Outcome reward: a --reward_funcs name (accuracy, ...; a plugin's from "
                                "--external_plugins), a reward model checkpoint (a --rlhf_type rm output), or a "
                                "served reward model's URL (`swiftlike deploy` of one). An answer passes when its "
                                "score is > 0.")
    prm_model: str | None = arg(None, "Process reward model: a name registered with register_prm in an "
                                "--external_plugins file, or a *ForTokenClassification checkpoint; an answer's PRM "
                                "score is its weakest step's.")
    prm_threshold: float = arg(0.0, "Answers whose PRM score is below this are not kept.")
    easy_query_threshold: float | None = arg(None, "Drop a prompt when at least this fraction of its answers pass "
                                             "the ORM (1.0: drop prompts every sample already solves).")
    engine_kwargs: dict | None = arg(None, "JSON object for the engine: for client, base_url, api_key, "
                                     "max_concurrency, timeout (ms-swift's); for vllm, more vllm.LLM arguments.")
    external_plugins: list[str] = arg([], "Python files that register reward functions (register_reward) and "
                                      "process reward models (register_prm) before --orm_model / --prm_model are "
                                      "looked up.")
    max_batch_size: int = arg(16, "Sequences per forward batch in the pt engine.")

    def __post_init__(self) -> None:
        if self.sampler_engine is None:
            self.sampler_engine = "client" if self.sampler_type == "distill" else "pt"
        if self.sampler_engine == "transformers":
            self.sampler_engine = "pt"
        if self.sampler_type == "distill" and self.sampler_engine != "client":
            raise UsageError(f"--sampler_type distill samples a teacher behind an OpenAI-compatible server: use "
                             f"--sampler_engine client (got {self.sampler_engine}) with --engine_kwargs "
                             "'{\"base_url\": \"http://host:port/v1\"}'")
        if isinstance(self.engine_kwargs, str):
            self.engine_kwargs = json.loads(self.engine_kwargs)
        if self.engine_kwargs is not None and not isinstance(self.engine_kwargs, dict):
            raise UsageError(f"--engine_kwargs must be a JSON object, got {self.engine_kwargs!r}")
        if self.sampler_engine == "client":
            if not (self.engine_kwargs or {}).get("base_url"):
                raise UsageError("--sampler_engine client needs the server's URL: --engine_kwargs "
                                 "'{\"base_url\": \"http://host:port/v1\", \"api_key\": \"...\"}'")
            unknown = set(self.engine_kwargs) - {"base_url", "api_key", "max_concurrency", "timeout"}
            if unknown:
                raise UsageError(f"--engine_kwargs {sorted(unknown)}: a client engine takes base_url, api_key, "
                                 "max_concurrency and timeout")
        elif self.engine_kwargs and self.sampler_engine == "pt":
            raise UsageError("--engine_kwargs is read by the vllm and client engines; the pt engine takes none")
        elif self.engine_kwargs:
            self.vllm_engine_kwargs = {**(self.vllm_engine_kwargs or {}), **self.engine_kwargs}
        if self.temperature is None:
            self.temperature = 1.0
        if self.model is None and self.sampler_engine != "client":
            raise UsageError("--model is required (or --adapters pointing at a checkpoint with args.json)")
        super().__post_init__()
        self._check_counts()
        if self.output_file is None:
            from datetime import datetime
            self.output_file = f"{datetime.now():%Y-%m-%d-%H-%M-%S}.jsonl"
        elif Path(self.output_file).name != self.output_file:
            raise UsageError(f"--output_file is a file name inside --output_dir, without a directory: got "
                             f"{self.output_file!r}; put the directory in --output_dir")
        if not self.output_file.endswith(".jsonl"):
            raise UsageError(f"--output_file {self.output_file!r}: the output is JSON lines; name it *.jsonl")
        if not self.dataset:
            raise UsageError("--dataset is required: the prompts to sample answers for")
        self.request_config(self.seed)  # a bad sampling value stops here, before any model loads

    def _check_counts(self) -> None:
        if self.num_return_sequences < 1:
            raise UsageError(f"--num_return_sequences must be >= 1, got {self.num_return_sequences}")
        rewarded = self.orm_model is not None or self.prm_model is not None  # without one, n_best is unread
        if rewarded and not 1 <= self.n_best_to_keep <= self.num_return_sequences:
            raise UsageError(f"--n_best_to_keep {self.n_best_to_keep} must be between 1 and --num_return_sequences "
                             f"({self.num_return_sequences}): it keeps the best of the answers sampled per prompt")
        if self.data_range and (len(self.data_range) != 2 or not 0 <= self.data_range[0] < self.data_range[1]):
            raise UsageError(f"--data_range takes two numbers, `i n` with 0 <= i < n (shard i of n), got "
                             f"{self.data_range}")
        if self.easy_query_threshold is not None and not 0 < self.easy_query_threshold <= 1:
            raise UsageError(f"--easy_query_threshold is a fraction of the answers, in (0, 1]; got "
                             f"{self.easy_query_threshold}")
        if self.easy_query_threshold is not None and self.orm_model is None:
            raise UsageError("--easy_query_threshold counts answers that pass the ORM: give --orm_model")
        if self.num_sampling_batch_size < 1 or (self.num_sampling_batches is not None and self.num_sampling_batches < 1):
            raise UsageError("--num_sampling_batch_size and --num_sampling_batches must be >= 1")
        if self.max_new_tokens < 1:
            raise UsageError(f"--max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_batch_size < 1:
            raise UsageError(f"--max_batch_size must be >= 1, got {self.max_batch_size}")

    def engine_spec(self):
        """The sampler's engine (pt or vllm); the client engine is built from --engine_kwargs."""
        options = self.vllm_options() if self.sampler_engine == "vllm" else None
        return self.model_engine_spec(self.sampler_engine, options, max_batch_size=self.max_batch_size)

    def request_config(self, seed: int):
        """One prompt's sampling: all its answers in one request, seeded by the prompt's place in the dataset."""
        from ..infer.protocol import InvalidSamplingParam, RequestConfig
        try:
            return RequestConfig(max_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                                 top_k=self.top_k, repetition_penalty=self.repetition_penalty,
                                 n=self.num_return_sequences, stop=list(self.stop_words), seed=seed)
        except InvalidSamplingParam as e:
            flag = {"max_tokens": "max_new_tokens", "n": "num_return_sequences"}.get(e.field_name, e.field_name)
            raise UsageError(f"--{flag} {e.reason}") from None
