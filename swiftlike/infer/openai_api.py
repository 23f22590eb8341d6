"""OpenAI request/response shapes <-> our InferRequest / RequestConfig / InferResponse.

Pure conversions, shared by every server that speaks the OpenAI API (the rollout server's debugging
endpoints now, `swiftlike deploy` next), so both answer the same way and report bad fields by their
OpenAI names.
"""
from __future__ import annotations

import json
import time
import uuid

from .protocol import InferRequest, InferResponse, RequestConfig

SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "n", "seed", "stop",
                   "logprobs", "top_logprobs")


class OpenAIRequestError(ValueError):
    """A request the API refuses (answered with HTTP 400 and this message)."""


async def json_object(request) -> dict:
    """A request's body as a JSON object (a Starlette request), or OpenAIRequestError naming what is wrong."""
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OpenAIRequestError(f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise OpenAIRequestError("request body must be a JSON object")
    return body


def request_config(body: dict, default_max_tokens: int) -> RequestConfig:
    """The sampling part of a chat/completions body; OpenAI's defaults where a field is absent."""
    kwargs = {k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None}
    kwargs.setdefault("max_tokens", body.get("max_completion_tokens") or default_max_tokens)
    if isinstance(kwargs.get("stop"), str):
        kwargs["stop"] = [kwargs["stop"]]
    if isinstance(kwargs.get("logprobs"), int) and not isinstance(kwargs.get("logprobs"), bool):
        kwargs["top_logprobs"], kwargs["logprobs"] = kwargs["logprobs"], True  # completions API: logprobs=N
    if body.get("stream"):
        raise OpenAIRequestError("stream=true is not served here; use swiftlike deploy for streaming")
    try:
        return RequestConfig(**kwargs)
    except TypeError as e:
        raise OpenAIRequestError(f"bad sampling field: {e}") from None


def chat_request(body: dict) -> InferRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIRequestError("`messages` must be a non-empty list of {role, content} objects")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool") \
                or not isinstance(m.get("content"), str):
            raise OpenAIRequestError(f"bad message {str(m)[:100]}: each needs a role (system, user, assistant, "
                                     "tool) and a string content")
    return InferRequest(messages=[{"role": m["role"], "content": m["content"]} for m in messages])


def completion_request(body: dict, tokenizer) -> InferRequest:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return InferRequest(input_ids=prompt)
    if not isinstance(prompt, str) or not prompt:
        raise OpenAIRequestError("`prompt` must be a non-empty string (or a list of token ids)")
    return InferRequest(input_ids=tokenizer.encode(prompt, add_special_tokens=False))


def _usage(resp: InferResponse) -> dict:
    return {"prompt_tokens": resp.usage.prompt_tokens, "completion_tokens": resp.usage.completion_tokens,
            "total_tokens": resp.usage.total_tokens}


def chat_response(resp: InferResponse, model: str) -> dict:
    choices = []
    for c in resp.choices:
        logprobs = None
        if c.logprobs is not None:
            logprobs = {"content": [{"token": t.token, "logprob": t.logprob,
                                     "top_logprobs": [{"token": a.token, "logprob": a.logprob}
                                                      for a in t.top_logprobs]} for t in c.logprobs]}
        choices.append({"index": c.index, "message": {"role": "assistant", "content": c.text},
                        "finish_reason": c.finish_reason, "logprobs": logprobs})
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": _usage(resp)}


def completion_response(resp: InferResponse, model: str) -> dict:
    choices = []
    for c in resp.choices:
        logprobs = None
        if c.logprobs is not None:
            logprobs = {"tokens": [t.token for t in c.logprobs], "token_logprobs": [t.logprob for t in c.logprobs],
                        "top_logprobs": [{a.token: a.logprob for a in t.top_logprobs} for t in c.logprobs]}
        choices.append({"index": c.index, "text": c.text, "finish_reason": c.finish_reason, "logprobs": logprobs})
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": _usage(resp)}


def stream_choice(chunk, chat: bool) -> dict:
    """One streamed piece of one choice, as a chat or completions chunk choice."""
    logprobs = None
    if chunk.logprobs is not None:
        if chat:
            logprobs = {"content": [{"token": t.token, "logprob": t.logprob,
                                     "top_logprobs": [{"token": a.token, "logprob": a.logprob}
                                                      for a in t.top_logprobs]} for t in chunk.logprobs]}
        else:
            logprobs = {"tokens": [t.token for t in chunk.logprobs],
                        "token_logprobs": [t.logprob for t in chunk.logprobs],
                        "top_logprobs": [{a.token: a.logprob for a in t.top_logprobs} for t in chunk.logprobs]}
    if chat:
        return {"index": chunk.index, "delta": {"content": chunk.text}, "finish_reason": chunk.finish_reason,
                "logprobs": logprobs}
    return {"index": chunk.index, "text": chunk.text, "finish_reason": chunk.finish_reason, "logprobs": logprobs}
