"""Arguments of `swiftlike deploy`: an OpenAI-compatible server (names follow ms-swift's `swift deploy`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..model.seq_cls import is_seq_cls_adapter, is_seq_cls_model
from ..utils.errors import UsageError
from .base import BaseArguments, arg
from .infer_args import LmdeployArguments, LogprobLimitArguments, SglangArguments, VllmArguments


@dataclass
class DeployArguments(BaseArguments, VllmArguments, SglangArguments, LmdeployArguments, LogprobLimitArguments):
    """swiftlike deploy: serve a model and its LoRA adapters behind the OpenAI API."""

    command = "deploy"
    infer_backend: Literal["pt", "vllm", "sglang", "lmdeploy"] = arg("pt", "Inference engine.")
    host: str = arg("127.0.0.1", "Address to bind; 127.0.0.1 serves this machine only (0.0.0.0: all, with "
                    "--api_key).")
    port: int = arg(8000, "TCP port to listen on.")
    api_key: str | None = arg(None, "When set, every /v1 request needs the header "
                              "`Authorization: Bearer KEY`.")
    served_model_name: str | None = arg(None, "The base model's name in /v1/models and requests; default --model.")
    max_concurrency: int = arg(256, "Requests generating at once; more wait their turn.")
    max_new_tokens: int = arg(512, "max_tokens of a request that does not set it.")
    max_batch_size: int = arg(16, "Prompts per forward batch in the pt engine (sequences per forward pass of a pt "
                              "classifier).")
    task_type: Literal["causal_lm", "seq_cls"] | None = arg(
        None, "ms-swift's: causal_lm serves generation (the OpenAI routes); seq_cls serves a sequence-classification "
        "(reward) model at POST /classify, vLLM's route. Default: seq_cls when the checkpoint is one (config.json "
        "names a ...ForSequenceClassification architecture, or a LoRA checkpoint of `rlhf --rlhf_type rm`), else "
        "causal_lm.")
    num_labels: int | None = arg(None, "seq_cls: the classifier's number of labels; default the checkpoint's (another "
                                 "number is refused: that head was never trained).")

    def engine_spec(self):
        options = {"vllm": self.vllm_options, "sglang": self.sglang_options,
                   "lmdeploy": self.lmdeploy_options}.get(self.infer_backend)
        return self.model_engine_spec(self.infer_backend, options() if options else None,
                                      max_batch_size=self.max_batch_size, max_logprobs=self.max_logprobs)

    def __post_init__(self) -> None:
        # A reward model renders as GRPO's --reward_model renders it: a checkpoint's args.json does not choose its
        # template or system prompt (the command line still may).
        given_template, given_system = self.template, self.system
        if self.model is not None and is_seq_cls_adapter(self.model):  # --model <LoRA rm checkpoint>
            self.model, self.adapters = None, [self.model, *self.adapters]
        super().__post_init__()
        if self.model is None:
            raise UsageError("--model is required (or --adapters pointing at a checkpoint with args.json)")
        if self.task_type is None:
            self.task_type = "seq_cls" if self._checkpoint_classifies() else "causal_lm"
        if self.task_type == "seq_cls":
            self.template, self.system = given_template, given_system
            if self.infer_backend not in ("pt", "vllm"):
                raise UsageError(f"--task_type seq_cls is served by --infer_backend pt or vllm, not "
                                 f"{self.infer_backend}")
        elif self.num_labels is not None:
            raise UsageError("--num_labels is read with --task_type seq_cls (a classifier); this deployment "
                             "generates")
        self.check_serving()

    def _checkpoint_classifies(self) -> bool:
        """A local --model directory with a classification head, or a LoRA rm checkpoint among --adapters (a hub
        id is not fetched to look: give --task_type seq_cls; a generation engine refuses a classifier)."""
        return is_seq_cls_model(self.model) or any(is_seq_cls_adapter(p) for p in self.adapter_paths().values())

    def check_num_labels(self, served: int) -> None:
        if self.num_labels is not None and self.num_labels != served:
            raise UsageError(f"--num_labels {self.num_labels}: {self.model} classifies into {served} labels; drop "
                             "--num_labels or give the checkpoint's number")

    def check_serving(self) -> None:
        self.check_logprob_limit(self.vllm_engine_kwargs)
        if not 0 < self.port < 65536:
            raise UsageError(f"--port must be in 1..65535, got {self.port}")
        for name in ("max_concurrency", "max_new_tokens", "max_batch_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name} must be >= 1, got {getattr(self, name)}")
