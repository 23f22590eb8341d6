"""Partial rollout on the rollout server: a weight update interrupts generation instead of waiting for it.

An update (full weights or an adapter) closes the gate: every resumable request in flight is aborted in
the engine, keeping the tokens and log-probs it had produced; the update runs with the engine paused;
then each aborted request is submitted again as prompt + its prefix, with the tokens it has left, under
the new weights. The engine recomputes the prefix's KV cache with the new weights (AReaL's interrupt
and re-prefill; vLLM keeps no cache computed under weights it no longer holds), so every token is
sampled, and its log-probability reported, by exactly one version's weights. The answer records which
tokens each version produced as `version_spans`, [[version, token count], ...] in order.

Only a request whose every setting resumes exactly is cut (`resumable`): sampling that depends on the
token alone (temperature, top-p / top-k, the repetition penalty, which vLLM applies over the prompt too,
so the prefix keeps counting), log-probs, and several choices (each resumes alone). Anything else runs
under the gate: the update waits until it finishes, and it never sees two versions. That is a seed (one
stream of draws over the choices), prompt log-probs, presence / frequency penalties (they count only
the generated tokens, so a resumed piece would forget the prefix's), stop strings (one split across the
cut would go unseen, and the resumed piece's text is decoded anew from all tokens, so vLLM's cut at the
stop string would be lost), streaming, any setting added later until it is known to resume, and the
OpenAI routes (their answers carry no `version_spans`). GRPO's rollout sets none of them.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from ...infer.engine.base import InferEngine
from ...infer.protocol import Choice, InferRequest, InferResponse, RequestConfig, TokenLogprob, Usage


# RequestConfig fields whose effect a cut request keeps exactly when it resumes from its prefix (max_tokens and
# n are split by `generate_resumable`); a request with any other field off its default is not cut.
RESUMES_EXACTLY = frozenset({"max_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "n", "logprobs",
                             "top_logprobs"})


def resumable(config: RequestConfig) -> bool:
    """Whether a request can be cut at an update and continued from its prefix with nothing changed."""
    defaults = RequestConfig()
    return all(getattr(config, f.name) == getattr(defaults, f.name)
               for f in dataclasses.fields(RequestConfig) if f.name not in RESUMES_EXACTLY)


class UpdateGate:
    """Orders generation and updates on one event loop: updates one at a time, each with nothing running."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._pieces: set[asyncio.Task] = set()  # resumable pieces, cancelled by an update
        self._lock = asyncio.Lock()
        self.interrupted = 0  # pieces cut by an update so far
        self.tokens = 0  # tokens the resumable requests have produced so far

    async def enter(self) -> None:
        while not self._open.is_set():  # woken by one update's end, but the next may have begun
            await self._open.wait()
        self._running += 1
        self._idle.clear()

    def leave(self) -> None:
        self._running -= 1
        if self._running == 0:
            self._idle.set()

    async def run(self, make: Callable[[], Awaitable]):
        """A non-resumable request: an update waits for it."""
        await self.enter()
        try:
            return await make()
        finally:
            self.leave()

    async def update(self, apply: Callable[[], Awaitable]):
        """Cut the resumable pieces, wait for the rest, apply, reopen."""
        async with self._lock:
            self._open.clear()
            try:
                for piece in list(self._pieces):
                    piece.cancel()
                await self._idle.wait()
                return await apply()
            finally:
                self._open.set()

    async def piece(self, consume: Callable[[], Awaitable]) -> bool:
        """Run one resumable piece; returns False when an update cut it (the caller resumes)."""
        task = asyncio.ensure_future(consume())
        self._pieces.add(task)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:  # the client went away
            task.cancel()
            raise
        finally:
            self._pieces.discard(task)
        if task.cancelled():
            self.interrupted += 1
            return False
        task.result()
        return True


async def generate_resumable(engine: InferEngine, gate: UpdateGate, version: Callable[[], int],
                             request: InferRequest, config: RequestConfig) -> InferResponse:
    """One request's `config.n` choices, each continued across updates; see the module docstring."""
    prompt = engine.prompt_ids(request)
    choices = await asyncio.gather(*(_one_choice(engine, gate, version, request, prompt, config, k)
                                     for k in range(config.n)))
    usage = Usage(len(prompt), sum(len(c.token_ids) for c in choices))
    oldest = min((c.version_spans[0][0] for c in choices if c.version_spans), default=version())
    return InferResponse(list(choices), usage, prompt, oldest)


async def _one_choice(engine: InferEngine, gate: UpdateGate, version: Callable[[], int], request: InferRequest,
                      prompt: list[int], config: RequestConfig, index: int) -> Choice:
    tokens: list[int] = []
    logprobs: list[TokenLogprob] = []
    texts: list[str] = []
    spans: list[list[int]] = []
    finish: list[str] = []
    pieces = 0  # that produced tokens: the text of a cut piece may lag its tokens, so several are decoded anew
    while True:
        await gate.enter()
        try:
            at = version()
            start = len(tokens)
            piece = InferRequest(input_ids=prompt + tokens, adapter=request.adapter)
            piece_config = dataclasses.replace(config, n=1, max_tokens=config.max_tokens - len(tokens), logprobs=True)

            async def consume():
                async for delta in engine.stream_async(piece, piece_config):
                    tokens.extend(delta.token_ids)
                    gate.tokens += len(delta.token_ids)
                    logprobs.extend(delta.logprobs or [])
                    texts.append(delta.text)
                    if delta.finish_reason is not None:
                        finish.append(delta.finish_reason)
            done = await gate.piece(consume)
        finally:
            gate.leave()
        if len(tokens) > start:
            pieces += 1
            if spans and spans[-1][0] == at:
                spans[-1][1] += len(tokens) - start
            else:
                spans.append([at, len(tokens) - start])
        if done or finish or len(tokens) >= config.max_tokens:
            break
    text = "".join(texts) if pieces <= 1 else engine.tokenizer.decode(tokens, skip_special_tokens=True)
    reason = finish[-1] if finish else "length"
    return Choice(index, text, tokens, reason, logprobs if config.logprobs else None,
                  version_spans=[tuple(s) for s in spans])
