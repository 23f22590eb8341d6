"""OpenAI request/response shapes <-> our InferRequest / RequestConfig / InferResponse.

Shared by every server that speaks the OpenAI API (`swiftlike deploy`, the rollout server's debugging
routes), so both answer the same way and report bad fields by their OpenAI names. Request bodies are
validated against the `openai` package's own request types (the maintained schema of the API: roles,
list-of-parts content, field types), through pydantic. Every field of OpenAI's and vLLM's request is in
openai_fields.FIELDS: applied with vLLM's meaning, or refused with a 400 naming it, never ignored.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from functools import cache

from . import openai_fields, tool_serving
from .protocol import InferRequest, InferResponse, RequestConfig, TokenLogprob

# Body fields that are RequestConfig fields of the same name and meaning (vLLM's extensions among them).
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                   "presence_penalty", "frequency_penalty", "n", "seed", "stop", "logprobs", "top_logprobs",
                   "prompt_logprobs", "stop_token_ids", "min_tokens", "ignore_eos", "include_stop_str_in_output",
                   "skip_special_tokens", "spaces_between_special_tokens", "allowed_token_ids", "bad_words",
                   "structured_outputs")


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
    if kwargs.get("top_k") == 0:  # vLLM's other spelling of no top-k
        kwargs["top_k"] = -1
    if isinstance(kwargs.get("stop"), str):
        kwargs["stop"] = [kwargs["stop"]]
    if kwargs.get("top_logprobs") and not kwargs.get("logprobs"):  # vLLM's rule, with its message
        raise OpenAIRequestError("when using `top_logprobs`, `logprobs` must be set to true")
    if isinstance(kwargs.get("logprobs"), int) and not isinstance(kwargs.get("logprobs"), bool):
        kwargs["top_logprobs"], kwargs["logprobs"] = kwargs["logprobs"], True  # completions API: logprobs=N
    if body.get("logit_bias"):
        try:
            kwargs["logit_bias"] = {int(k): float(v) for k, v in body["logit_bias"].items()}
        except (AttributeError, TypeError, ValueError):
            raise OpenAIRequestError("`logit_bias` must map token ids to numbers, e.g. {\"1234\": -100}") from None
    if body.get("echo"):  # OpenAI's legacy echo: the prompt's log-probs come with the answer's
        if kwargs.get("logprobs") and kwargs.get("prompt_logprobs") is None:
            kwargs["prompt_logprobs"] = kwargs.get("top_logprobs") or 0
        if body.get("max_tokens") == 0:  # the prompt alone: one token is generated and not answered
            kwargs["max_tokens"] = 1
    try:
        response_format = tool_serving.response_format_outputs(body.get("response_format"))
    except ValueError as e:
        raise OpenAIRequestError(str(e)) from None
    if response_format is not None:
        if kwargs.get("structured_outputs") is not None:
            raise OpenAIRequestError("`response_format` and `structured_outputs` both constrain the answer; send one")
        kwargs["structured_outputs"] = response_format
    if body.get("stream"):
        raise OpenAIRequestError("stream=true is not served here; use swiftlike deploy for streaming")
    try:
        return RequestConfig(**kwargs)
    except TypeError as e:
        raise OpenAIRequestError(f"bad sampling field: {e}") from None


@dataclass
class AnswerShape:
    """What a body asks of the answer's form rather than of sampling (vLLM's and OpenAI's fields)."""

    request_id: str | None = None
    return_token_ids: bool = False
    tokens_as_ids: bool = False  # return_tokens_as_token_ids: log-prob tokens as "token_id:<id>"
    echo: bool = False
    echo_only: bool = False  # echo with max_tokens 0: the prompt, without what was generated
    prompt_texts: list[str] = field(default_factory=list)


def answer_shape(body: dict, tokenizer=None) -> AnswerShape:
    """The answer's form; `tokenizer` (completions) turns token-id prompts back into text for `echo`."""
    shape = AnswerShape(request_id=body.get("request_id"), return_token_ids=bool(body.get("return_token_ids")),
                        tokens_as_ids=bool(body.get("return_tokens_as_token_ids")), echo=bool(body.get("echo")))
    if shape.echo:
        shape.echo_only = body.get("max_tokens") == 0
        prompt = body.get("prompt")
        prompts = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)) else [prompt]
        shape.prompt_texts = [p if isinstance(p, str) else tokenizer.decode(p) for p in prompts]
    return shape


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
    route = "chat" if chat else "completions"
    for name, value in body.items():
        problem = openai_fields.refusal(name, value, route)
        if problem is not None:
            raise OpenAIRequestError(problem)
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
    messages = [_chat_message(m, i) for i, m in enumerate(body["messages"])]
    tools = body.get("tools") or None
    try:
        tool_serving.tool_choice_of(tools, body.get("tool_choice"))
    except ValueError as e:
        raise OpenAIRequestError(str(e)) from None
    return InferRequest(messages=messages, tools=tools, tool_choice=body.get("tool_choice"))


@cache
def _messages_schema():
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter
    return TypeAdapter(list[ChatCompletionMessageParam])


def chat_messages(messages) -> list[dict]:
    """A chat `messages` list on its own (vLLM's `/classify` chat form), checked against OpenAI's message schema,
    in the shape templates read."""
    from pydantic import ValidationError
    if not isinstance(messages, list) or not messages:
        raise OpenAIRequestError("`messages` must be a non-empty list of {role, content} objects")
    try:
        checked = _materialised(_messages_schema().validate_python(messages), "messages")
    except ValidationError as e:
        raise _problem(e, "messages") from None
    return [_chat_message(m, i) for i, m in enumerate(checked)]


def _chat_message(message: dict, index: int) -> dict:
    """One message in the shape templates read; OpenAI's tool turns keep their calls and call ids."""
    role = "system" if message["role"] == "developer" else message["role"]  # the newer name of the system role
    out = {"role": role, "content": _text_of(message.get("content"), index)}
    if role == "assistant" and message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    if role == "tool" and message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    return out


def completion_requests(body: dict, tokenizer) -> list[InferRequest]:
    """One request per prompt: OpenAI's `prompt` is a string, a list of token ids, or a list of either (a batch
    in one HTTP request, answered with the choices of prompt i at indices i*n .. i*n+n-1)."""
    validated(body, chat=False)
    prompt = body.get("prompt")


    special = body.get("add_special_tokens", True) is not False  # vLLM's default for completions
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        return [_one_prompt(p, tokenizer, f"prompt.{i}", special) for i, p in enumerate(prompt)]
    return [_one_prompt(prompt, tokenizer, "prompt", special)]


def _one_prompt(prompt, tokenizer, where: str, special: bool) -> InferRequest:
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return InferRequest(input_ids=prompt)
    if not isinstance(prompt, str) or not prompt:
        raise OpenAIRequestError(f"`{where}` must be a non-empty string (or a list of token ids)")
    return InferRequest(input_ids=tokenizer.encode(prompt, add_special_tokens=special))


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


def _token(t, shape: AnswerShape) -> str:
    return f"token_id:{t.token_id}" if shape.tokens_as_ids else t.token


def chat_response(resp: InferResponse, model: str, shape: AnswerShape | None = None, tool_parser=None,
                  tool_choice: tool_serving.ToolChoice | None = None) -> dict:
    """With `tool_parser` (the template's agent template) and a tool choice other than none, calls in the text
    become the message's `tool_calls` (finish_reason tool_calls); text with malformed calls is answered as text."""
    shape = shape or AnswerShape()
    tool_choice = tool_choice or tool_serving.ToolChoice("none")
    choices = []
    for c in resp.choices:
        logprobs = None
        if c.logprobs is not None:
            logprobs = {"content": [{"token": _token(t, shape), "logprob": t.logprob,
                                     "top_logprobs": [{"token": _token(a, shape), "logprob": a.logprob}
                                                      for a in t.top_logprobs]} for t in c.logprobs]}
        answer = tool_serving.tool_answer(c.text, c.finish_reason, tool_parser, tool_choice)
        message = {"role": "assistant", "content": answer.content}
        if answer.tool_calls is not None:
            message["tool_calls"] = answer.tool_calls
        choice = {"index": c.index, "message": message, "finish_reason": answer.finish_reason, "logprobs": logprobs}
        if shape.return_token_ids:
            choice["token_ids"] = c.token_ids
        choices.append(choice)
    out = {"id": f"chatcmpl-{shape.request_id or uuid.uuid4().hex}", "object": "chat.completion",
           "created": int(time.time()), "model": model, "choices": choices, "usage": _usage(resp)}
    if resp.prompt_logprobs is not None:  # where vLLM puts it in a chat answer
        out["prompt_logprobs"] = _prompt_logprobs(resp)
    if shape.return_token_ids:
        out["prompt_token_ids"] = resp.prompt_token_ids
    return out


def _legacy_logprobs(entries: list[TokenLogprob], shape: AnswerShape) -> dict:
    """OpenAI's completions log-probs; each top_logprobs holds the chosen token too (as vLLM's)."""
    return {"tokens": [_token(t, shape) for t in entries], "token_logprobs": [t.logprob for t in entries],
            "top_logprobs": [{**{_token(a, shape): a.logprob for a in t.top_logprobs}, _token(t, shape): t.logprob}
                             for t in entries]}


def _echoed_logprobs(resp: InferResponse, tokenizer, shape: AnswerShape) -> dict:
    """The prompt's positions in the legacy shape: the first has no log-prob (nothing precedes it)."""
    first = resp.prompt_token_ids[0]
    head = tokenizer.decode([first]) if tokenizer is not None else ""
    rest = _legacy_logprobs([e for e in resp.prompt_logprobs[1:]], shape)
    return {"tokens": [f"token_id:{first}" if shape.tokens_as_ids else head, *rest["tokens"]],
            "token_logprobs": [None, *rest["token_logprobs"]], "top_logprobs": [None, *rest["top_logprobs"]]}


def completion_response(resps: InferResponse | list[InferResponse], model: str, shape: AnswerShape | None = None,
                        tokenizer=None, prompt_logprobs_asked: bool = True) -> dict:
    """One completions answer for one prompt or a batch of them (choices of prompt i follow prompt i-1's).
    With `echo`, each choice's text and log-probs start with its prompt's (OpenAI's legacy completions)."""
    shape = shape or AnswerShape()
    resps = [resps] if isinstance(resps, InferResponse) else resps
    choices = []
    for i, resp in enumerate(resps):
        prompt_logprobs = _prompt_logprobs(resp) if prompt_logprobs_asked else None
        for c in resp.choices:
            text, entries = ("", []) if shape.echo_only else (c.text, c.logprobs)
            logprobs = _legacy_logprobs(entries, shape) if c.logprobs is not None else None
            if shape.echo:
                text = shape.prompt_texts[i] + text
                if logprobs is not None and resp.prompt_logprobs is not None:
                    echoed = _echoed_logprobs(resp, tokenizer, shape)
                    logprobs = {k: echoed[k] + logprobs[k] for k in logprobs}
            choice = {"index": len(choices), "text": text, "finish_reason": c.finish_reason, "logprobs": logprobs}
            if prompt_logprobs is not None:
                choice["prompt_logprobs"] = prompt_logprobs
            if shape.return_token_ids:
                choice["token_ids"], choice["prompt_token_ids"] = c.token_ids, resp.prompt_token_ids
            choices.append(choice)
    return {"id": f"cmpl-{shape.request_id or uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": model, "choices": choices, "usage": _usage(*resps)}


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


def detokenize(body: dict, engine) -> dict:
    """vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": the text}."""
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise OpenAIRequestError("`tokens` must be a list of token ids (integers)")
    vocab = len(engine.tokenizer)
    bad = [t for t in tokens if not 0 <= t < vocab]
    if bad:
        raise OpenAIRequestError(f"token ids {bad[:5]} are outside the served tokenizer's vocabulary (0..{vocab - 1})")
    return {"prompt": engine.tokenizer.decode(tokens)}


def tokenizer_info(engine) -> dict:
    """vLLM's /tokenizer_info: the served tokenizer's special tokens and chat template, which a client with a
    remote tokenizer (lm-evaluation-harness's `tokenizer_backend=remote`) reads instead of downloading it."""
    tokenizer = engine.tokenizer
    return {"tokenizer_class": type(tokenizer).__name__, "eos_token": tokenizer.eos_token,
            "bos_token": tokenizer.bos_token, "pad_token": tokenizer.pad_token, "unk_token": tokenizer.unk_token,
            "chat_template": getattr(tokenizer, "chat_template", None), "model_max_length": engine.max_model_len}


def tokenize(body: dict, engine) -> dict:
    """vLLM's /tokenize: {"prompt": text, "add_special_tokens": bool} -> the served tokenizer's ids."""
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise OpenAIRequestError("`prompt` must be a string")
    ids = engine.tokenizer.encode(prompt, add_special_tokens=bool(body.get("add_special_tokens", True)))
    return {"tokens": ids, "count": len(ids), "max_model_len": engine.max_model_len}
