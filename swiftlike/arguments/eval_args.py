"""Arguments of `swiftlike eval` (names follow ms-swift's `swift eval`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .base import BaseArguments, arg
from .infer_args import SamplingArguments, VllmArguments


@dataclass
class EvalArguments(BaseArguments, SamplingArguments, VllmArguments):
    """swiftlike eval: accuracy and pass@k of a model, or of a running OpenAI-compatible endpoint."""

    command = "eval"
    eval_backend: str = arg("Native", "Evaluation backend, as ms-swift spells it; swiftlike has Native only (its "
                            "built-in benchmarks and .jsonl files), not OpenCompass or VLMEvalKit.")
    eval_dataset: list[str] = arg(["math"], "Benchmarks: built-in `math` (word problems, checked with math-verify) "
                                  "and `mcq` (four-choice), or local .jsonl files of {question, answer} or "
                                  "{question, choices, answer-letter} rows.")
    eval_limit: int | None = arg(None, "Use only the first N questions of each benchmark.")
    eval_num_samples: int = arg(1, "Answers sampled per question (k); pass@k is reported when k > 1.")
    eval_url: str | None = arg(None, "Evaluate a running OpenAI-compatible server (e.g. `swiftlike deploy`) at "
                               "this base URL, like http://127.0.0.1:8000/v1, instead of loading --model.")
    eval_api_key: str | None = arg(None, "API key for --eval_url.")
    eval_model_name: str | None = arg(None, "Model name sent to --eval_url; default its first /v1/models entry.")
    eval_concurrency: int = arg(16, "Requests in flight at once against --eval_url.")
    eval_output_dir: str = arg("eval_output", "Where each run writes report.json, report.md and predictions.jsonl.")
    infer_backend: Literal["pt", "vllm"] = arg("pt", "Engine for --model.")
    max_new_tokens: int = arg(256, "Most tokens per answer.")
    max_batch_size: int = arg(16, "Prompts per forward batch in the pt engine.")

    def engine_spec(self):
        """--eval_url: the running server behind the engine interface; otherwise --model, loaded here."""
        if self.eval_url is None:
            options = self.vllm_options() if self.infer_backend == "vllm" else None
            return self.model_engine_spec(self.infer_backend, options, max_batch_size=self.max_batch_size)
        from ..infer.engine import EngineSpec
        from ..infer.engine.openai_engine import OpenAIOptions
        return EngineSpec("openai", model=self.eval_model_name,
                          options=OpenAIOptions(self.eval_url, self.eval_api_key, self.eval_concurrency,
                                                url_flag="--eval_url", key_flag="--eval_api_key"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.temperature is None:
            self.temperature = 0.0  # greedy; --eval_num_samples > 1 needs a temperature > 0
        if self.eval_backend != "Native":
            raise ValueError(f"--eval_backend {self.eval_backend}: swiftlike supports Native only (the built-in "
                             "benchmarks math and mcq, and .jsonl files); OpenCompass and VLMEvalKit are not "
                             "available")
        if self.model is None and self.eval_url is None:
            raise ValueError("give --model (evaluated in-process) or --eval_url (a running OpenAI-compatible "
                             "server)")
        if not self.eval_dataset:
            raise ValueError("--eval_dataset is empty; use math, mcq or a .jsonl file")
        if self.eval_num_samples < 1:
            raise ValueError(f"--eval_num_samples must be >= 1, got {self.eval_num_samples}")
        if self.eval_num_samples > 1 and self.temperature == 0:
            raise ValueError("--eval_num_samples > 1 with --temperature 0 draws the same greedy answer k times; "
                             "set --temperature (e.g. 0.7)")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise ValueError(f"--eval_limit must be >= 1, got {self.eval_limit}")
