"""OpenAI request/response shapes <-> our InferRequest / RequestConfig / InferResponse.

Shared by every server that speaks the OpenAI API (`swiftlike deploy`, the rollout server's debugging
routes), so both answer the same way and report bad fields by their OpenAI names. Request bodies are
validated against the `openai` package's own request types (the maintained schema of the API: roles,
list-of-parts content, field types), through pydantic. A field that would change the answer and that is
not built here (tools, structured output, logit_bias, ...) is refused with a 400 naming it, never ignored.
"""
from __future__ import annotations

import json
import time
import uuid
from functools import cache

from .protocol import InferRequest, InferResponse, RequestConfig

# top_k, repetition_penalty and prompt_logprobs are vLLM's extensions of the OpenAI body, read the same way.
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "n", "seed", "stop", "logprobs", "top_logprobs", "prompt_logprobs")

# Fields of OpenAI's request schema that change the answer and are not built: refused (HTTP 400) when set.
NOT_BUILT = {
    "tools": "tool calling", "tool_choice": "tool calling", "functions": "function calling",
    "function_call": "function calling", "logit_bias": "logit_bias", "audio": "audio output",
    "modalities": "non-text output", "prediction": "predicted outputs", "web_search_options": "web search",
    "reasoning_effort": "reasoning effort", "verbosity": "verbosity control", "best_of": "best_of",
    "echo": "echo", "suffix": "suffix (insertion)",
}


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


@cache
def _schemas():
    from openai.types import completion_create_params
    from openai.types.chat import completion_create_params as chat_params
    from pydantic import TypeAdapter
    return TypeAdapter(chat_params.CompletionCreateParamsBase), TypeAdapter(completion_create_params.CompletionCreateParamsBase)


def _problem(error, where: str) -> OpenAIRequestError:
    """One readable message from pydantic's errors: a union (a message's kinds, by role) reports every kind's
    complaint, so say which roles exist when the role fits none, else the most specific complaint."""
    errors = [{**e, "loc": e["loc"][1:] if e["loc"] and isinstance(e["loc"][0], int) else e["loc"]}
              for e in error.errors()]  # an iterator's errors start with the item's index, already in `where`
    roles = [e for e in errors if e["loc"] and e["loc"][-1] == "role" and e["type"] == "literal_error"]
    if roles and {e["loc"][0] for e in roles} == {e["loc"][0] for e in errors if e["loc"]}:
        names = ", ".join(sorted({str(e["ctx"]["expected"]).strip("'") for e in roles}))
        return OpenAIRequestError(f"invalid request: `{where}`: role {roles[0]['input']!r} is not one of {names}")
    deepest = max(errors, key=lambda e: len(e["loc"]))
    inner = ".".join(str(p) for p in deepest["loc"] if not str(p)[:1].isupper())  # drop union member names
    return OpenAIRequestError(f"invalid request: `{'.'.join(p for p in (where, inner) if p)}`: {deepest['msg']}")


def _materialised(value, where: str = ""):
    """The openai types declare lists as Iterable, which pydantic validates lazily: walk them now, so a bad
    item is reported here, by its place in the body, rather than half-way through generation."""
    from pydantic import ValidationError
    if isinstance(value, dict):
        return {k: _materialised(v, f"{where}.{k}".lstrip(".")) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    out, iterator = [], iter(value)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return out
        except ValidationError as e:
            raise _problem(e, f"{where}.{len(out)}") from None
        out.append(_materialised(item, f"{where}.{len(out)}"))


def validated(body: dict, chat: bool) -> dict:
    """`body` checked against OpenAI's request schema, with every not-built field refused by name."""
    from pydantic import ValidationError
    for name, what in NOT_BUILT.items():
        if body.get(name) is not None:
            raise OpenAIRequestError(f"`{name}` is not supported by this server ({what} is not built); "
                                     "leave it out")
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise OpenAIRequestError(f"`response_format` {json.dumps(response_format)[:80]} is not supported by this "
                                 "server (structured output is not built); only {\"type\": \"text\"}")
    # A completions `prompt` is checked by `completion_requests`: the schema's union of lazily validated
    # iterables would take a batch of token-id lists for one list of ids and then reject its first item.
    schema_body = body if chat else {**body, "prompt": ""}
    try:
        # `model` may be left out here: the server answers with its base model
        checked = _schemas()[0 if chat else 1].validate_python({"model": "", **schema_body})
    except ValidationError as e:
        raise _problem(e, "") from None
    out = {**body, **_materialised(checked)}
    if not chat:
        out["prompt"] = body.get("prompt")
    return out


def _text_of(content, index: int) -> str:
    """A message's content as text: a string, or OpenAI's list of parts, whose text parts are joined."""
    if isinstance(content, str) or content is None:
        return content or ""
    texts = []
    for part in content:
        if part.get("type") != "text":
            raise OpenAIRequestError(f"`messages.{index}.content`: a {part.get('type')} part is not supported "
                                     "(this server serves text models); send text parts only")
        texts.append(part["text"])
    return "".join(texts)


def chat_request(body: dict) -> InferRequest:
    body = validated(body, chat=True)
    if not body["messages"]:
        raise OpenAIRequestError("`messages` must be a non-empty list of {role, content} objects")
    # "developer" is the newer name of the system role
    messages = [{"role": "system" if m["role"] == "developer" else m["role"],
                 "content": _text_of(m.get("content"), i)} for i, m in enumerate(body["messages"])]
    return InferRequest(messages=messages)


def completion_requests(body: dict, tokenizer) -> list[InferRequest]:
    """One request per prompt: OpenAI's `prompt` is a string, a list of token ids, or a list of either (a batch
    in one HTTP request, answered with the choices of prompt i at indices i*n .. i*n+n-1)."""
    validated(body, chat=False)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        return [_one_prompt(p, tokenizer, f"prompt.{i}") for i, p in enumerate(prompt)]
    return [_one_prompt(prompt, tokenizer, "prompt")]


def _one_prompt(prompt, tokenizer, where: str) -> InferRequest:
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return InferRequest(input_ids=prompt)
    if not isinstance(prompt, str) or not prompt:
        raise OpenAIRequestError(f"`{where}` must be a non-empty string (or a list of token ids)")
    return InferRequest(input_ids=tokenizer.encode(prompt, add_special_tokens=False))


def _usage(*resps: InferResponse) -> dict:
    prompt = sum(r.usage.prompt_tokens for r in resps)
    completion = sum(r.usage.completion_tokens for r in resps)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _prompt_logprobs(resp: InferResponse) -> list | None:
    """vLLM's shape: per prompt position None or {token id: {logprob, rank, decoded_token}}, holding the top
    alternatives and the prompt token itself."""
    if resp.prompt_logprobs is None:
        return None
    out: list = []
    for entry in resp.prompt_logprobs:
        if entry is None:
            out.append(None)
            continue
        position = {str(a.token_id): {"logprob": a.logprob, "rank": rank, "decoded_token": a.token}
                    for rank, a in enumerate(entry.top_logprobs, 1)}
        position[str(entry.token_id)] = {"logprob": entry.logprob, "rank": entry.rank, "decoded_token": entry.token}
        out.append(position)
    return out


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
    out = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
           "model": model, "choices": choices, "usage": _usage(resp)}
    if resp.prompt_logprobs is not None:  # where vLLM puts it in a chat answer
        out["prompt_logprobs"] = _prompt_logprobs(resp)
    return out


def completion_response(resps: InferResponse | list[InferResponse], model: str) -> dict:
    """One completions answer for one prompt or a batch of them (choices of prompt i follow prompt i-1's)."""
    resps = [resps] if isinstance(resps, InferResponse) else resps
    choices = []
    for resp in resps:
        prompt_logprobs = _prompt_logprobs(resp)
        for c in resp.choices:
            logprobs = None
            if c.logprobs is not None:
                logprobs = {"tokens": [t.token for t in c.logprobs], "token_logprobs": [t.logprob for t in c.logprobs],
                            "top_logprobs": [{a.token: a.logprob for a in t.top_logprobs} for t in c.logprobs]}
            choice = {"index": len(choices), "text": c.text, "finish_reason": c.finish_reason, "logprobs": logprobs}
            if prompt_logprobs is not None:
                choice["prompt_logprobs"] = prompt_logprobs
            choices.append(choice)
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": _usage(*resps)}


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


def tokenize(body: dict, engine) -> dict:
    """vLLM's /tokenize: {"prompt": text, "add_special_tokens": bool} -> the served tokenizer's ids."""
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise OpenAIRequestError("`prompt` must be a string")
    ids = engine.tokenizer.encode(prompt, add_special_tokens=bool(body.get("add_special_tokens", True)))
    return {"tokens": ids, "count": len(ids), "max_model_len": engine.max_model_len}
