"""The engine interface shared by infer, deploy, eval, the app, the rollout server and RL.

Small on purpose (after ms-swift's and LLaMA-Factory's): generate a batch, stream one request, serve
concurrent requests from an event loop, manage LoRA adapters, replace weights, release memory between
phases, and say what is served (dtype, context limit, policy version). Callers use only this; nothing
outside an engine's module touches its members.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from collections.abc import AsyncIterator, Iterable, Iterator

from ...template import Template
from ..protocol import DEFAULT_MAX_LOGPROBS, InferRequest, InferResponse, RequestConfig, StreamDelta


class InferEngine(ABC):
    template: Template
    model_name: str
    model_dir: Path | None = None  # the served checkpoint's local directory, where there is one
    # Weight updates applied, where the engine itself counts them (a rollout server does); None otherwise,
    # and then the caller that pushes the weights counts.
    policy_version: int | None = None
    # Most alternatives per position a request may ask for (vLLM's --max-logprobs, ms-swift's --max_logprobs).
    max_logprobs: int = DEFAULT_MAX_LOGPROBS
    # vLLM's extension fields of RequestConfig this engine applies; a non-default value of another is refused.
    applied_extensions: frozenset[str] = frozenset()

    @property
    def dtype(self) -> str:
        """The served weights' dtype, as torch names it without the prefix ("float32", "bfloat16")."""
        return "unknown"

    @property
    def max_model_len(self) -> int | None:
        """The longest prompt + answer the engine serves, in tokens; None if it sets no limit."""
        return None

    @property
    def supports_lora(self) -> bool:
        """Whether `add_adapter` can load LoRA adapters into this engine."""
        return True

    @property
    def supports_penalties(self) -> bool:
        """Whether OpenAI's presence_penalty / frequency_penalty are applied (vLLM); others refuse them."""
        return False

    @property
    def supports_prompt_logprobs(self) -> bool:
        """Whether `RequestConfig.prompt_logprobs` is answered (pt, vLLM); others refuse it."""
        return False

    def check_config(self, config: RequestConfig) -> None:
        """A sampling setting this engine would silently ignore is an error instead."""
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(config, name) != 0 and not self.supports_penalties:
                raise ValueError(f"{name} is not supported by the {type(self).__name__} backend; leave it at 0 "
                                 "or serve with --infer_backend vllm")
        for name in config.extensions_set():
            if name not in self.applied_extensions:
                raise ValueError(f"{name} is not supported by the {type(self).__name__} backend; leave it out "
                                 "or serve with --infer_backend vllm")
        if config.prompt_logprobs is not None and not self.supports_prompt_logprobs:
            raise ValueError(f"prompt_logprobs is not supported by the {type(self).__name__} backend; serve with "
                             "--infer_backend vllm or pt")
        for name in ("prompt_logprobs", "top_logprobs"):
            asked = getattr(config, name)
            if asked is not None and asked > self.max_logprobs:
                raise ValueError(f"{name}={asked} exceeds this server's --max_logprobs {self.max_logprobs}; ask "
                                 f"for fewer or restart it with --max_logprobs {asked}")

    def reset_prefix_cache(self) -> None:
        """Drop cached prompt prefixes (computed with weights that just changed); engines without one: no-op."""

    @property
    def tokenizer(self):
        return self.template.tokenizer

    def prompt_ids(self, request: InferRequest) -> list[int]:
        if request.input_ids is not None:
            return list(request.input_ids)
        return self.template.encode_prompt(request.messages, tools=request.tools or None)

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

    async def generate_async(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        """One request from an event loop (an HTTP server's). The default runs `infer` on a worker thread, one
        request at a time, for engines that are not thread-safe (pt); engines that batch concurrent
        requests themselves (vLLM, SGLang, LMDeploy) override it."""
        self.check_adapter(request)
        return (await asyncio.to_thread(self._one_at_a_time, self.infer, [request], config))[0]

    async def stream_async(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[StreamDelta]:
        """One request's deltas from an event loop; closing the iterator early stops generating for it."""
        if config.n != 1 or config.logprobs:  # `stream` yields one answer without log-probs
            response = await self.generate_async(request, config)
            for c in response.choices:
                yield StreamDelta(c.index, c.text, c.token_ids, c.finish_reason, c.logprobs)
            return
        self.check_adapter(request)
        loop = asyncio.get_running_loop()
        sink: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()

        def pump():
            try:
                for delta in self.stream(request, config):
                    loop.call_soon_threadsafe(sink.put_nowait, delta)
                    if stop.is_set():
                        break
            except Exception as e:
                loop.call_soon_threadsafe(sink.put_nowait, e)
            loop.call_soon_threadsafe(sink.put_nowait, None)
        worker = asyncio.ensure_future(asyncio.to_thread(self._one_at_a_time, pump))
        try:
            while (item := await sink.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            stop.set()
            await asyncio.shield(worker)

    def __new__(cls, *args, **kwargs):
        # Made here rather than in __init__ so that every engine has it whatever its own __init__ does.
        engine = super().__new__(cls)
        engine._serial_lock = threading.Lock()
        return engine

    def _one_at_a_time(self, fn, *args):
        with self._serial_lock:
            return fn(*args)

    @contextlib.contextmanager
    def between_steps(self):
        """A block in which no generation runs on this engine, for changing it (weights, adapters) while
        requests from `generate_async` / `stream_async` are being served. Engines that batch concurrent
        requests themselves pause their stepping; the default holds the lock that serialises them."""
        with self._serial_lock:
            yield

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory while a trainer runs; engines without that ability keep it."""

    def wake_up(self) -> None:
        """Undo `sleep`."""

    def close(self) -> None:
        """Release the engine's resources."""


def cut_at_stop(text: str, stop: list[str], include: bool = False) -> tuple[str, bool]:
    """Text up to the first stop string (with it when `include`, vLLM's include_stop_str_in_output), and
    whether one was found (OpenAI semantics). For engines whose own stop matching differs from OpenAI's rule
    (pt's token-level check, lmdeploy's per-token stop_words)."""
    cuts = [(text.index(word), len(word)) for word in stop if word in text]
    if not cuts:
        return text, False
    at, length = min(cuts)
    return text[: at + length if include else at], True
