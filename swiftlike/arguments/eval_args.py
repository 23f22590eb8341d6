"""Arguments of `swiftlike eval` (names follow ms-swift's `swift eval`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from ..utils.errors import UsageError
from .base import BaseArguments, arg
from .infer_args import SamplingArguments, VllmArguments

# ms-swift's name for evalscope, lm-evaluation-harness, and ours (the sets that ship with swiftlike)
EvalBackend = Literal["Native", "lm_eval", "swiftlike"]
EVAL_BACKENDS = get_args(EvalBackend)
BUILTIN_SETS = ("math", "mcq")
REASONING_GYM_PREFIX = "rg:"
# --eval_generation_config keys, in ms-swift's / evalscope's spelling, and the field each one sets here
GENERATION_KEYS = {"max_tokens": "max_new_tokens", "max_new_tokens": "max_new_tokens", "temperature": "temperature",
                   "top_p": "top_p", "top_k": "top_k", "repetition_penalty": "repetition_penalty",
                   "seed": "seed", "n": "eval_num_samples"}


def is_swiftlike_set(name: str) -> bool:
    """A set the swiftlike backend reads: built-in, a reasoning-gym task, or a local .jsonl file."""
    return name in BUILTIN_SETS or name.startswith(REASONING_GYM_PREFIX) or name.endswith(".jsonl")


@dataclass
class EvalArguments(BaseArguments, SamplingArguments, VllmArguments):
    """swiftlike eval: a model, or a running OpenAI-compatible endpoint, on benchmarks through evalscope,
    lm-evaluation-harness or swiftlike's own sets."""

    command = "eval"
    eval_backend: EvalBackend | None = arg(None, "Native (evalscope, as in ms-swift), lm_eval (lm-evaluation-harness) or "
                                   "swiftlike (the built-in math / mcq sets, rg:<reasoning-gym task> and .jsonl "
                                   "files). Default: swiftlike when every --eval_dataset is one of its sets, else "
                                   "Native.")
    eval_dataset: list[str] = arg(["math"], "Benchmarks: the harness's task names (gsm8k, arc, mmlu, ... for Native "
                                  "and lm_eval), or for swiftlike `math`, `mcq`, `rg:<task>` (a reasoning-gym task, "
                                  "scored by its own verifier) and local .jsonl files.")
    eval_limit: int | None = arg(None, "Use only the first N questions of each benchmark.")
    eval_dataset_args: dict | None = arg(None, "JSON object per dataset, e.g. '{\"gsm8k\": {\"local_path\": "
                                         "\"data/gsm8k.jsonl\", \"few_shot_num\": 0}}': a local file or folder in "
                                         "the benchmark's own format instead of the hub, few-shot count, subsets. "
                                         "For rg:<task>: size, seed and the task's options.")
    eval_generation_config: dict | None = arg(None, "JSON object of generation settings for the evaluated model, "
                                              "ms-swift's spelling: max_tokens, temperature, top_p, top_k, "
                                              "repetition_penalty, seed, n. Overrides the same flags.")
    extra_eval_args: dict | None = arg(None, "JSON object passed to the harness as is: evalscope's TaskConfig "
                                       "fields (Native) or lm_eval.simple_evaluate's keyword arguments (lm_eval).")
    eval_num_proc: int = arg(16, "Requests in flight at once against the served model (every backend).",
                             aliases=("--eval_concurrency",))
    eval_num_samples: int = arg(1, "Answers sampled per question (k); pass@k is reported when k > 1 (swiftlike).")
    eval_url: str | None = arg(None, "Evaluate a running OpenAI-compatible server (e.g. `swiftlike deploy`) at "
                               "this base URL, like http://127.0.0.1:8000/v1, instead of serving --model here.")
    eval_api_key: str | None = arg(None, "API key for --eval_url.")
    eval_model_name: str | None = arg(None, "Model name sent to --eval_url; default its first /v1/models entry.")
    eval_output_dir: str = arg("eval_output", "Where each run writes report.json, report.md and predictions.jsonl.")
    eval_all_checkpoints: str | None = arg(None, "A training run's output dir: evaluate every checkpoint-N in it "
                                           "(its adapters or weights) and draw accuracy over steps as a PNG and a "
                                           "table.")
    infer_backend: Literal["pt", "vllm"] = arg("pt", "Engine for --model (served here for Native and lm_eval).")
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
                          options=OpenAIOptions(self.eval_url, self.eval_api_key, self.eval_num_proc,
                                                url_flag="--eval_url", key_flag="--eval_api_key"))

    def dataset_args(self, name: str) -> dict:
        """--eval_dataset_args for one dataset (an empty dict when none were given)."""
        return dict((self.eval_dataset_args or {}).get(name) or {})

    def __post_init__(self) -> None:
        if self.eval_url and "/chat/completions" in self.eval_url:  # ms-swift accepts the route's full URL too
            self.eval_url = self.eval_url.split("/chat/completions", 1)[0]
        super().__post_init__()
        self._apply_generation_config()
        if self.temperature is None:
            self.temperature = 0.0  # greedy; --eval_num_samples > 1 needs a temperature > 0
        if not self.eval_dataset:
            raise UsageError("--eval_dataset is empty; name a benchmark (math, mcq, rg:<task>, a .jsonl file, or a "
                             "harness task such as gsm8k)")
        if self.eval_backend is None:
            self.eval_backend = "swiftlike" if all(map(is_swiftlike_set, self.eval_dataset)) else "Native"
        if self.eval_backend not in EVAL_BACKENDS:
            hint = " (OpenCompass and VLMEvalKit are not available)" if self.eval_backend in (
                "OpenCompass", "VLMEvalKit") else ""
            raise UsageError(f"--eval_backend {self.eval_backend}: choose one of {', '.join(EVAL_BACKENDS)}{hint}")
        if self.eval_backend == "swiftlike":
            foreign = [d for d in self.eval_dataset if not is_swiftlike_set(d)]
            if foreign:
                raise UsageError(f"--eval_dataset {' '.join(foreign)}: the swiftlike backend reads "
                                 f"{', '.join(BUILTIN_SETS)}, rg:<task> and .jsonl files; for harness tasks use "
                                 "--eval_backend Native (evalscope) or lm_eval")
        elif self.eval_num_samples > 1:
            raise UsageError("--eval_num_samples (pass@k) is the swiftlike backend's; the harnesses set their "
                             "own repeats (--extra_eval_args)")
        unknown = sorted(set(self.eval_dataset_args or {}) - set(self.eval_dataset))
        if unknown:
            raise UsageError(f"--eval_dataset_args names {', '.join(unknown)}, which --eval_dataset does not list "
                             f"({' '.join(self.eval_dataset)})")
        if self.eval_all_checkpoints is not None:
            if not Path(self.eval_all_checkpoints).is_dir():
                raise UsageError(f"--eval_all_checkpoints {self.eval_all_checkpoints}: no such directory (give a "
                                 "training run's output dir holding checkpoint-N folders)")
            if self.eval_url is not None:
                raise UsageError("--eval_all_checkpoints serves each checkpoint here; drop --eval_url")
        elif self.model is None and self.eval_url is None:
            raise UsageError("give --model (served here), --eval_url (a running OpenAI-compatible server) or "
                             "--eval_all_checkpoints (a run dir)")
        if self.eval_num_samples < 1:
            raise UsageError(f"--eval_num_samples must be >= 1, got {self.eval_num_samples}")
        if self.eval_num_samples > 1 and self.temperature == 0:
            raise UsageError("--eval_num_samples > 1 with --temperature 0 draws the same greedy answer k times; "
                             "set --temperature (e.g. 0.7)")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise UsageError(f"--eval_limit must be >= 1, got {self.eval_limit}")
        if self.eval_num_proc < 1:
            raise UsageError(f"--eval_num_proc must be >= 1, got {self.eval_num_proc}")
        if self.max_batch_size < 1:
            raise UsageError(f"--max_batch_size must be >= 1, got {self.max_batch_size}")

    def _apply_generation_config(self) -> None:
        for key, value in (self.eval_generation_config or {}).items():
            if key not in GENERATION_KEYS:
                raise UsageError(f"--eval_generation_config: unknown key {key!r}; it takes "
                                 f"{', '.join(GENERATION_KEYS)}")
            setattr(self, GENERATION_KEYS[key], value)


@dataclass
class TrainingBenchmarkArguments:
    """Benchmarks on the live model every --eval_steps of a training run (ms-swift's evalscope-in-training flags)."""

    eval_use_evalscope: bool = arg(False, "Every --eval_steps and at the end, score the model being trained on "
                                   "--eval_dataset (served in this process to the backend) and log "
                                   "eval_bench/<dataset>/accuracy beside the training curves. ms-swift's name; "
                                   "the backend follows --eval_backend.")
    eval_backend: EvalBackend | None = arg(None, "With --eval_use_evalscope: Native (evalscope), lm_eval or swiftlike; "
                                   "default as in `swiftlike eval` (swiftlike for its own sets, else Native).")
    eval_dataset: list[str] = arg([], "With --eval_use_evalscope: the benchmarks, named as in `swiftlike eval` "
                                  "(gsm8k, arc, ... or math, mcq, rg:<task>, a .jsonl file).")
    eval_dataset_args: dict | None = arg(None, "With --eval_use_evalscope: JSON per dataset, as in `swiftlike "
                                         "eval` (local_path, few_shot_num, subsets; rg: size and seed).")
    eval_limit: int | None = arg(None, "With --eval_use_evalscope: the first N questions of each benchmark.")
    eval_generation_config: dict | None = arg(None, "With --eval_use_evalscope: JSON generation settings "
                                              "(max_tokens default 256, temperature default 0, top_p, top_k, "
                                              "seed).")
    extra_eval_args: dict | None = arg(None, "With --eval_use_evalscope: JSON passed to the harness as is.")

    def check_benchmarks(self) -> None:
        """Refuse a half-given setting before any model loads, by building the eval arguments once."""
        if not self.eval_use_evalscope:
            given = [f"--{n}" for n in ("eval_dataset", "eval_dataset_args", "eval_limit", "eval_backend")
                     if getattr(self, n)]
            if given:
                raise UsageError(f"{', '.join(given)} {'takes' if len(given) == 1 else 'take'} effect with --eval_use_evalscope true; add it, or drop "
                                 "them (the validation loss comes from --val_dataset / --split_dataset_ratio)")
            return
        if not self.eval_dataset:
            raise UsageError("--eval_use_evalscope true needs --eval_dataset (e.g. gsm8k, or math, rg:<task>)")
        self.benchmark_arguments("http://127.0.0.1:1/v1", "checked")

    def benchmark_arguments(self, eval_url: str, output_dir: str) -> EvalArguments:
        """The `swiftlike eval` arguments that score the live model served at `eval_url`."""
        generation = {"max_tokens": 256, "temperature": 0.0, **(self.eval_generation_config or {})}
        return EvalArguments(eval_url=eval_url, eval_backend=self.eval_backend, eval_dataset=list(self.eval_dataset),
                             eval_dataset_args=self.eval_dataset_args, eval_limit=self.eval_limit,
                             eval_generation_config=generation, extra_eval_args=self.extra_eval_args,
                             eval_output_dir=output_dir)
