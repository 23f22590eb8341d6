"""A running OpenAI-compatible server (`swiftlike deploy`, `vllm serve`, a hosted API) behind the engine
interface, so `eval --eval_url` and `app --base_url` use the same interface as an in-process engine.

Through the `openai` client, the reference implementation of the protocol (retries, SSE parsing, error
types), rather than hand-written HTTP. The server's other model names (a deploy server lists its LoRA
adapters as models) are this engine's adapters; `top_k` and `repetition_penalty`, which the OpenAI schema
lacks, travel as extra body fields, as vLLM's and our server's APIs read them.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm import tqdm

from ...utils.errors import UsageError
from ..protocol import Choice, InferRequest, InferResponse, RequestConfig, StreamDelta, TokenLogprob, TopLogprob, Usage
from .base import InferEngine


@dataclass
class OpenAIOptions:
    """Where the server is and how hard to use it."""

    base_url: str
    api_key: str | None = None
    max_concurrency: int = 16  # requests in flight at once from `infer`
    timeout: float | None = None  # seconds per request; None: the client's default
    url_flag: str = "--base_url"  # how the user named the URL and key, for error messages
    key_flag: str = "--api_key"


class OpenAIEngine(InferEngine):
    def __init__(self, options: OpenAIOptions, model: str | None = None, served_models: list[str] | None = None):
        """`model` is the name requests go to (default: the first the server lists); `served_models` skips the
        listing when the caller knows them (a server it mounts itself and that is not up yet)."""
        import openai
        self.options = options
        common = dict(base_url=options.base_url, api_key=options.api_key or "none", max_retries=2)
        if options.timeout is not None:
            common["timeout"] = options.timeout
        self.client = openai.OpenAI(**common)
        self.async_client = openai.AsyncOpenAI(**common)
        self.served_models = served_models or self._list_models()
        self.model_name = model or self.served_models[0]
        self.template = None

    def _list_models(self) -> list[str]:
        import openai
        url = self.options.base_url
        flag = self.options.url_flag
        try:
            names = [m.id for m in self.client.models.list().data]
        except openai.AuthenticationError as e:
            raise UsageError(f"{url} refused the API key ({e.status_code}); pass the server's key with "
                             f"{self.options.key_flag}") from e
        except openai.APIError as e:
            raise UsageError(f"no OpenAI-compatible server answers at {flag} {url} ({e}); start one with "
                             "`swiftlike deploy` or fix the URL") from e
        if not names:
            raise UsageError(f"{url}/models lists no model")
        return names

    @property
    def adapters(self) -> dict[str, str]:
        return {name: self.options.base_url for name in self.served_models if name != self.model_name}

    @property
    def tokenizer(self):
        raise ValueError("a remote OpenAI-compatible endpoint has no local tokenizer; send chat messages")

    def prompt_ids(self, request: InferRequest) -> list[int]:
        raise ValueError("a remote OpenAI-compatible endpoint takes chat messages, not token ids")

    def _request(self, request: InferRequest, config: RequestConfig) -> dict:
        if request.messages is None:
            raise ValueError("a remote OpenAI-compatible endpoint takes chat messages, not token ids")
        self.check_adapter(request)
        return dict(self.request_body(request.adapter, config), messages=request.messages)

    def request_body(self, adapter: str | None, config: RequestConfig) -> dict:
        """The `chat.completions.create` arguments for `config` besides the messages, for callers that speak the
        API themselves through `async_client` (the chat page's tool loop reads `tool_calls`, which the engine
        interface does not carry)."""
        extra = {}
        if config.top_k != -1:
            extra["top_k"] = config.top_k
        if config.repetition_penalty != 1.0:
            extra["repetition_penalty"] = config.repetition_penalty
        body = dict(model=adapter or self.model_name, n=config.n, max_tokens=config.max_tokens,
                    temperature=config.temperature, top_p=config.top_p, stop=config.stop or None, seed=config.seed,
                    extra_body=extra or None)
        if config.logprobs:
            body.update(logprobs=True, top_logprobs=config.top_logprobs or 0)
        return body

    @staticmethod
    def _logprobs(entries) -> list[TokenLogprob] | None:
        if entries is None or entries.content is None:
            return None
        return [TokenLogprob(-1, t.token, t.logprob, [TopLogprob(-1, a.token, a.logprob) for a in t.top_logprobs or []])
                for t in entries.content]

    def _response(self, resp) -> InferResponse:
        choices = [Choice(c.index, c.message.content or "", [], "length" if c.finish_reason == "length" else "stop",
                          self._logprobs(c.logprobs)) for c in sorted(resp.choices, key=lambda c: c.index)]
        usage = Usage(resp.usage.prompt_tokens, resp.usage.completion_tokens) if resp.usage else Usage(0, 0)
        return InferResponse(choices, usage, [])

    def infer(self, requests: list[InferRequest], config: RequestConfig, use_tqdm: bool = False) -> list[InferResponse]:
        bodies = [self._request(r, config) for r in requests]  # every request checked before any is sent

        def one(body):
            return self._response(self.client.chat.completions.create(**body))
        with ThreadPoolExecutor(self.options.max_concurrency) as pool:
            return list(tqdm(pool.map(one, bodies), total=len(bodies), desc="infer", unit="req",
                             disable=not use_tqdm))

    def stream(self, request: InferRequest, config: RequestConfig) -> Iterator[StreamDelta]:
        with self.client.chat.completions.create(**self._request(request, config), stream=True) as chunks:
            for chunk in chunks:
                yield from self._deltas(chunk)

    async def generate_async(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        return self._response(await self.async_client.chat.completions.create(**self._request(request, config)))

    async def stream_async(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[StreamDelta]:
        chunks = await self.async_client.chat.completions.create(**self._request(request, config), stream=True)
        async with chunks:
            async for chunk in chunks:
                for delta in self._deltas(chunk):
                    yield delta

    def _deltas(self, chunk) -> Iterator[StreamDelta]:
        for c in chunk.choices:
            finish = None if c.finish_reason is None else ("length" if c.finish_reason == "length" else "stop")
            if c.delta.content or finish is not None:
                yield StreamDelta(c.index, c.delta.content or "", [], finish, self._logprobs(c.logprobs))

    def add_adapter(self, name: str, path: str) -> None:
        raise ValueError("adapters of a remote endpoint are loaded on its server (e.g. `swiftlike deploy --adapters`)")

    def update_weights(self, named_tensors: Iterable[tuple[str, object]]) -> None:
        raise ValueError("a remote OpenAI-compatible endpoint's weights cannot be replaced from here")

    def close(self) -> None:
        self.client.close()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            loop.create_task(self.async_client.close())
            return
        # Its connections may belong to an event loop that has already ended; then there is nothing left to close.
        with contextlib.suppress(RuntimeError):
            asyncio.run(self.async_client.close())
