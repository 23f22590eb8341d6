"""Tools in served requests: OpenAI's `tools` / `tool_choice` / `response_format` over any engine.

The prompt carries the tool list (the template's agent template writes it, as in training), and the answer's
text is read back into OpenAI `tool_calls` by the same agent template, so what a model was trained to write is
what the server parses. `tool_choice: required` or a named function is enforced, not hoped for: on an engine
with constrained decoding (vLLM's structured outputs) the call is generated in two constrained steps, the
tool's name as a `choice` among the offered names right after the template's call opening, then the
arguments as JSON under that tool's parameter schema; the markup around them is the template's own literal
text (`call_markup`), so the result parses with the template like any call the model writes itself. Engines
without constrained decoding refuse `required` / a named function and `response_format` by name.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from typing import Literal

from ..template.agent import AgentTemplate
from ..template.toolcall import ParsedCompletion, normalize_tools, tool_name
from .protocol import Choice, InferRequest, InferResponse, RequestConfig, Usage

Mode = Literal["auto", "none", "required", "named"]


@dataclass(frozen=True)
class ToolChoice:
    """What a request lets the model do with its tools: `named` forces a call to `name`."""
    mode: Mode
    name: str | None = None

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")


def tool_choice_of(tools: list[dict] | None, tool_choice) -> ToolChoice:
    """OpenAI's `tool_choice` checked against `tools`: absent means `auto` with tools and `none` without."""
    if tool_choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(tool_choice, str):
        if tool_choice not in ("auto", "none", "required"):
            raise ValueError(f"`tool_choice` {tool_choice!r} is not one of auto, none, required, or "
                             '{"type": "function", "function": {"name": ...}}')
        choice = ToolChoice(tool_choice)  # type: ignore[arg-type]
    else:
        name = (tool_choice.get("function") or {}).get("name") if isinstance(tool_choice, dict) else None
        if tool_choice.get("type") != "function" or not isinstance(name, str):
            raise ValueError('`tool_choice` as an object must be {"type": "function", "function": {"name": ...}}')
        choice = ToolChoice("named", name)
    if choice.mode != "none" and not tools:
        raise ValueError(f"`tool_choice` {choice.name or choice.mode!r} needs `tools`: send the tools the model may "
                         "call, or leave tool_choice out")
    names = [tool_name(t) for t in tools or ()]
    if choice.name is not None and choice.name not in names:
        raise ValueError(f"`tool_choice` names function {choice.name!r}, which is not in `tools` ({', '.join(names)})")
    return choice


def request_tool_choice(request: InferRequest) -> ToolChoice:
    return tool_choice_of(request.tools, request.tool_choice)


def check_support(engine, request: InferRequest, config: RequestConfig, response_format_asked: bool) -> ToolChoice:
    """The request's tool choice, or ValueError (HTTP 400) naming what this engine cannot honour."""
    choice = request_tool_choice(request)
    constrained = "structured_outputs" in engine.applied_extensions
    backend = type(engine).__name__
    if choice.forced and not constrained:
        asked = f"{{'function': {{'name': {choice.name!r}}}}}" if choice.name else "'required'"
        raise ValueError(f"`tool_choice` {asked} is not supported by the {backend} backend: it cannot force a call "
                         "without constrained decoding; send tool_choice 'auto' or serve with --infer_backend vllm")
    if response_format_asked and not constrained:
        raise ValueError(f"`response_format` json_object / json_schema is not supported by the {backend} backend "
                         "(it needs constrained decoding); leave it out or serve with --infer_backend vllm")
    if choice.forced and config.structured_outputs is not None:
        raise ValueError("`tool_choice` required / a named function constrains the answer itself; it cannot be "
                         "combined with structured_outputs or response_format")
    if choice.mode != "none" and (request.tools and engine.template.tool_parser is None):
        raise ValueError("this server's template has no agent template to write and read tool calls; restart it "
                         "with --agent_template hermes (or another, see docs/agent.md)")
    if choice.forced and config.n != 1:
        raise ValueError("`tool_choice` required / a named function is answered with n=1; send n=1")
    return choice


def with_tool_stops(config: RequestConfig, parser: AgentTemplate | None, choice: ToolChoice) -> RequestConfig:
    """Formats whose results follow inside the assistant turn (ReAct) stop where the tool must run."""
    if parser is None or choice.mode == "none" or not parser.stop_words:
        return config
    return replace(config, stop=[*config.stop, *(w for w in parser.stop_words if w not in config.stop)])


def response_format_outputs(response_format) -> dict | None:
    """OpenAI's `response_format` as vLLM structured-output parameters; None for plain text."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise ValueError("`response_format.json_schema.schema` must be a JSON schema object")
        return {"json": schema}
    raise ValueError(f"`response_format.type` {kind!r} is not one of text, json_object, json_schema")


def _parameters(tool: dict) -> dict:
    schema = tool["function"].get("parameters")
    return schema if isinstance(schema, dict) and schema else {"type": "object"}


async def generate_forced_call(engine, request: InferRequest, config: RequestConfig) -> InferResponse:
    """One answer that is a call to one of the allowed tools (see the module docstring), by constrained steps."""
    parser = engine.template.tool_parser
    choice = request_tool_choice(request)
    tools = {tool_name(t): t for t in normalize_tools(request.tools)}
    names = [choice.name] if choice.name is not None else list(tools)
    prompt = engine.prompt_ids(request)

    def ids(text: str) -> list[int]:
        return list(engine.tokenizer(text, add_special_tokens=False)["input_ids"])

    heads = {name: parser.call_markup(name)[0].split(name, 1)[0] for name in names}
    usage = Usage(len(prompt), 0)
    name = names[0]
    if len(names) > 1 and len(set(heads.values())) == 1:
        step = replace(config, structured_outputs={"choice": names}, stop=[], n=1)
        picked = await engine.generate_async(replace(request, messages=None, input_ids=prompt + ids(heads[name])),
                                             step)
        usage.completion_tokens += picked.usage.completion_tokens
        name = picked.text.strip()
        if name not in tools:  # the constraint held only if the engine applied it
            raise RuntimeError(f"constrained decoding picked {name!r}, not one of {names}")
    before, after = parser.call_markup(name)
    before_ids, after_ids = ids(before), ids(after)
    step = replace(config, structured_outputs={"json": _parameters(tools[name])}, stop=[], n=1)
    args = await engine.generate_async(replace(request, messages=None, input_ids=prompt + before_ids), step)
    generated = args.choices[0]
    usage.completion_tokens += len(generated.token_ids)
    closed = generated.finish_reason != "length"
    text = before + generated.text + (after if closed else "")
    token_ids = before_ids + generated.token_ids + (after_ids if closed else [])
    return InferResponse([Choice(0, text, token_ids, generated.finish_reason)], usage, prompt)


async def generate(engine, request: InferRequest, config: RequestConfig) -> InferResponse:
    """`engine.generate_async`, with a forced tool choice enforced."""
    if request_tool_choice(request).forced:
        return await generate_forced_call(engine, request, config)
    return await engine.generate_async(request, config)


def _openai_call(call) -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}


@dataclass(frozen=True)
class ToolAnswer:
    """A completion as OpenAI's assistant message: content (None when empty) and tool_calls, or plain text."""
    content: str | None
    tool_calls: list[dict] | None
    finish_reason: str


def tool_answer(text: str, finish_reason: str, parser: AgentTemplate | None, choice: ToolChoice) -> ToolAnswer:
    """Calls that all parse make a `tool_calls` answer; anything malformed is answered as the text it is."""
    if parser is None or choice.mode == "none":
        return ToolAnswer(text, None, finish_reason)
    parsed: ParsedCompletion = parser.parse(text)
    if not parsed.calls or not all(c.ok for c in parsed.calls):
        return ToolAnswer(text, None, finish_reason)
    content = parsed.content.strip()
    return ToolAnswer(content or None, [_openai_call(c.call) for c in parsed.calls], "tool_calls")


class ToolCallStream:
    """One streamed choice read for calls: text is passed on as content until the agent template's call opening
    appears (a tail that may begin it is held back); from there the text is kept, and at the end it becomes
    OpenAI's tool_calls deltas, or, when it does not parse, the content it is."""

    def __init__(self, parser: AgentTemplate, choice: ToolChoice):
        self.parser, self.choice = parser, choice
        self.text, self.sent, self.in_call = "", 0, False

    def feed(self, piece: str) -> str:
        """The content that can go out now."""
        self.text += piece
        if self.in_call:
            return ""
        opening = self.parser.call_start
        at = self.text.find(opening, self.sent)
        if at >= 0:
            self.in_call = True
            safe = at
        else:
            safe = len(self.text)
            for k in range(min(len(opening) - 1, len(self.text) - self.sent), 0, -1):
                if self.text.endswith(opening[:k]):
                    safe = len(self.text) - k
                    break
        out, self.sent = self.text[self.sent:safe], safe
        return out

    def finish(self, finish_reason: str) -> tuple[str, list[dict] | None, str]:
        """(content left to send, tool_calls deltas or None, finish_reason)."""
        answer = tool_answer(self.text, finish_reason, self.parser, self.choice)
        if answer.tool_calls is None:
            return self.text[self.sent:], None, finish_reason
        deltas = [{"index": i, **call} for i, call in enumerate(answer.tool_calls)]
        return "", deltas, "tool_calls"


__all__ = ["ToolAnswer", "ToolCallStream", "ToolChoice", "check_support", "generate", "generate_forced_call",
           "response_format_outputs", "tool_answer", "tool_choice_of", "with_tool_stops"]
