"""Engines whose generation is natively asynchronous (SGLang, LMDeploy), behind the same InferEngine interface.

Both libraries run their request handling on one asyncio event loop that must stay the same for the engine's
whole life (sglang binds its response loop, lmdeploy its PyTorch engine, to the first loop that uses them).
So every coroutine of such an engine runs on that loop, on its own thread, and callers on other threads or
loops reach it through `asyncio.run_coroutine_threadsafe`: the sync `infer` / `stream` of InferEngine, and
`generate_async` / `stream_async` for an HTTP server's loop, where concurrent requests batch inside the engine.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import queue
import threading
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType

from tqdm import tqdm

from ..protocol import Choice, InferRequest, InferResponse, RequestConfig, StreamDelta, TokenLogprob, Usage
from .base import InferEngine

_END = object()

# One streamed piece of one choice, with the log-probs of its tokens when they were asked for.
LoggedDelta = tuple[StreamDelta, list[TokenLogprob] | None]


def import_backend(module: str, backend: str) -> ModuleType:
    """Import an optional inference library, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"--infer_backend {backend} needs the {module} package, which is not installed ({e}); "
                         f"install it with pip install 'swiftlike[{backend}]' (NVIDIA GPU with CUDA required)") from e


class LoopThread:
    """Runs an event loop on a daemon thread; `paused()` hands the loop to the caller for the span of a call
    that drives it itself (`loop.run_until_complete`), as sglang's synchronous engine methods do. Tasks in
    flight keep running during that call, since it runs the same loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str):
        self.loop = loop
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self.loop.run_forever, name=self.name, daemon=True)
        self._thread.start()

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()

    @contextlib.contextmanager
    def paused(self):
        with self._lock:
            self._stop()
            try:
                yield
            finally:
                self._start()

    def close(self) -> None:
        with self._lock:
            self._stop()


async def merge_streams(streams: list[AsyncIterator]) -> AsyncIterator:
    """The items of several async iterators as they arrive (the n choices of one request)."""
    sink: asyncio.Queue = asyncio.Queue()

    async def drain(stream):
        try:
            async for item in stream:
                await sink.put(item)
            await sink.put(_END)
        except Exception as e:  # re-raised to the consumer below
            await sink.put(e)

    tasks = [asyncio.ensure_future(drain(s)) for s in streams]
    try:
        remaining = len(tasks)
        while remaining:
            item = await sink.get()
            if item is _END:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()


async def collect(prompt_ids: list[int], stream: AsyncIterator[LoggedDelta], n: int,
                  logprobs: bool) -> InferResponse:
    """One response from a stream of deltas: each choice's pieces joined, in index order."""
    texts, tokens = [""] * n, [[] for _ in range(n)]
    lps: list[list[TokenLogprob]] = [[] for _ in range(n)]
    finish: list[str] = ["length"] * n
    async for delta, delta_logprobs in stream:
        texts[delta.index] += delta.text
        tokens[delta.index].extend(delta.token_ids)
        lps[delta.index].extend(delta_logprobs or [])
        if delta.finish_reason is not None:
            finish[delta.index] = delta.finish_reason
    choices = [Choice(i, texts[i], tokens[i], finish[i], lps[i] if logprobs else None) for i in range(n)]
    return InferResponse(choices, Usage(len(prompt_ids), sum(len(t) for t in tokens)), list(prompt_ids))


class AsyncInferEngine(InferEngine):
    """Subclasses implement `_agenerate` and `_astream` as coroutines of `self._loop`; the rest comes from here."""

    _loop: asyncio.AbstractEventLoop

    @abstractmethod
    async def _agenerate(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        """One request, all `config.n` choices (runs on the engine's loop)."""

    @abstractmethod
    def _astream(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[LoggedDelta]:
        """One request's deltas as they are generated (runs on the engine's loop)."""

    def _submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _on_loop(self, fn: Callable, *args):
        """Run a plain function on the engine's thread and wait for it (for library calls that expect that)."""
        async def call():
            return fn(*args)
        return self._submit(call()).result()

    def infer(self, requests: list[InferRequest], config: RequestConfig, use_tqdm: bool = False) -> list[InferResponse]:
        """All requests go to the engine at once, which batches them."""
        for r in requests:
            self.check_adapter(r)
        bar = tqdm(total=len(requests), desc="infer", disable=not use_tqdm)

        async def one(request):
            response = await self._agenerate(request, config)
            bar.update(1)
            return response

        async def every():
            return await asyncio.gather(*(one(r) for r in requests))
        try:
            return list(self._submit(every()).result())
        finally:
            bar.close()

    def stream(self, request: InferRequest, config: RequestConfig) -> Iterator[StreamDelta]:
        self.check_adapter(request)
        sink: queue.Queue = queue.Queue()

        async def pump():
            try:
                async for delta, _ in self._astream(request, config):
                    sink.put(delta)
            except Exception as e:
                sink.put(e)
            sink.put(_END)
        future = self._submit(pump())
        try:
            while (item := sink.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            future.cancel()  # the consumer stopped early: the engine stops generating for it

    async def generate_async(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        """`_agenerate` awaited from any other event loop; cancelling the caller cancels the engine's task."""
        self.check_adapter(request)
        return await asyncio.wrap_future(self._submit(self._agenerate(request, config)))

    async def stream_async(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[StreamDelta]:
        """`_astream` iterated from any other event loop; closing the iterator early aborts the request."""
        self.check_adapter(request)
        caller = asyncio.get_running_loop()
        sink: asyncio.Queue = asyncio.Queue()

        async def pump():
            try:
                async for delta, logprobs in self._astream(request, config):
                    delta.logprobs = logprobs
                    caller.call_soon_threadsafe(sink.put_nowait, delta)
            except Exception as e:
                caller.call_soon_threadsafe(sink.put_nowait, e)
            caller.call_soon_threadsafe(sink.put_nowait, _END)
        future = self._submit(pump())
        try:
            while (item := await sink.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            future.cancel()
