"""The engine interface shared by infer, deploy, eval, rollout and RL.

Small on purpose (after ms-swift's and LLaMA-Factory's): generate a batch, stream one
request, manage LoRA adapters, replace weights, and release memory between phases.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator

from ...template import Template
from ..protocol import InferRequest, InferResponse, RequestConfig, StreamDelta


class InferEngine(ABC):
    template: Template
    model_name: str

    @property
    def tokenizer(self):
        return self.template.tokenizer

    def prompt_ids(self, request: InferRequest) -> list[int]:
        if request.input_ids is not None:
            return list(request.input_ids)
        return self.template.encode_prompt(request.messages)

    def check_adapter(self, request: InferRequest) -> None:
        if request.adapter is not None and request.adapter not in self.adapters:
            known = ", ".join(sorted(self.adapters)) or "none loaded"
            raise ValueError(f"unknown adapter {request.adapter!r}; loaded adapters: {known}")

    @property
    @abstractmethod
    def adapters(self) -> dict[str, str]:
        """Loaded LoRA adapters as {name: path}."""

    @abstractmethod
    def infer(self, requests: list[InferRequest], config: RequestConfig,
              use_tqdm: bool = False) -> list[InferResponse]:
        """Generate for a batch of requests; one response per request, `config.n` choices each."""

    @abstractmethod
    def stream(self, request: InferRequest, config: RequestConfig) -> Iterator[StreamDelta]:
        """Yield the answer as it is generated."""

    @abstractmethod
    def add_adapter(self, name: str, path: str) -> None:
        """Load a LoRA adapter so requests can name it."""

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, "object"]]) -> None:
        """Replace base-model weights in place (HF parameter names)."""

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory while a trainer runs; engines without that ability keep it."""

    def wake_up(self) -> None:
        """Undo `sleep`."""

    def close(self) -> None:
        """Release the engine's resources."""


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """Text up to the first stop string, and whether one was found (OpenAI semantics). For engines whose own
    stop matching differs from OpenAI's rule (pt's token-level check, lmdeploy's per-token stop_words)."""
    cuts = [text.index(word) for word in stop if word in text]
    return (text[: min(cuts)], True) if cuts else (text, False)
