"""Arguments of `swiftlike deploy`: an OpenAI-compatible server (names follow ms-swift's `swift deploy`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    max_batch_size: int = arg(16, "Prompts per forward batch in the pt engine.")

    def engine_spec(self):
        options = {"vllm": self.vllm_options, "sglang": self.sglang_options,
                   "lmdeploy": self.lmdeploy_options}.get(self.infer_backend)
        return self.model_engine_spec(self.infer_backend, options() if options else None,
                                      max_batch_size=self.max_batch_size, max_logprobs=self.max_logprobs)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model is None:
            raise ValueError("--model is required (or --adapters pointing at a checkpoint with args.json)")
        self.check_serving()

    def check_serving(self) -> None:
        self.check_logprob_limit(self.vllm_engine_kwargs)
        if not 0 < self.port < 65536:
            raise ValueError(f"--port must be in 1..65535, got {self.port}")
        for name in ("max_concurrency", "max_new_tokens", "max_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
