"""Tool calls as data: the tool list, the calls an assistant makes, and one conversation shape for both.

Datasets arrive in ms-swift's agent shape (`tool_call` / `tool_response` messages whose content is JSON) or in
OpenAI's (`assistant` messages with `tool_calls`, then `tool` messages with `tool_call_id`). Both become one
canonical shape, which is also what `transformers`' chat templates read, so a conversation goes unchanged from
a dataset row to an agent template or to the tokenizer's own `apply_chat_template(..., tools=...)`:

    {"role": "assistant", "content": "...", "tool_calls": [{"type": "function",
        "function": {"name": "calculator", "arguments": {"expression": "2 * 3"}}}]}
    {"role": "tool", "content": "{\"result\": 6}", "name": "calculator"}

`arguments` is a JSON object (a dict), never a JSON string: templates write it with `json.dumps`, and the
OpenAI wire format's string is made from it at the edge. Errors name the message (`messages[3]`) so the
dataset loader can prefix the file and line.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

Message = dict  # canonical: {"role", "content"} plus "tool_calls" (assistant) or "name" / "tool_call_id" (tool)

CALL_ROLES = ("tool_call", "function_call")  # ms-swift's role for one call, and its ShareGPT alias
RESULT_ROLES = ("tool", "tool_response", "function_response", "observation", "observations")


@dataclass(frozen=True)
class ToolCall:
    """One call to a tool: the name and the arguments as a JSON object."""
    name: str
    arguments: dict

    def as_message_call(self) -> dict:
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParsedCall:
    """A call found in generated text. `call` is None when it did not parse, and `error` says why; `text` is the
    call's own text as generated, so a caller can show or log what the model wrote."""
    text: str
    call: ToolCall | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.call is not None


@dataclass(frozen=True)
class ParsedCompletion:
    """A completion split into the assistant's text and its calls (in order, well-formed or not)."""
    content: str
    calls: list[ParsedCall] = field(default_factory=list)

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [parsed.call for parsed in self.calls if parsed.call is not None]

    def as_message(self) -> Message:
        """The assistant message this completion stands for; calls that did not parse are left out."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.valid_calls:
            message["tool_calls"] = [call.as_message_call() for call in self.valid_calls]
        return message


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def loads_lenient(text: str) -> Any:
    """JSON, or failing that a Python literal (ms-swift's react_en writes arguments as a Python dict repr).

    `ast.literal_eval` only builds literals (no names, calls or attributes), so untrusted model output is safe
    to pass; a too-deep or too-long input raises, and that is reported as not parsing."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as json_error:
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ValueError(f"not JSON ({json_error.msg} at column {json_error.colno})") from None


def parse_arguments(value: Any) -> dict:
    """A call's arguments: a JSON object, or a string holding one (OpenAI sends a string)."""
    if isinstance(value, str):
        value = loads_lenient(value) if value.strip() else {}
    if not isinstance(value, dict):
        raise ValueError(f"'arguments' must be a JSON object, got {_type_name(value)}")
    return value


def call_from_object(value: Any) -> ToolCall:
    """`{"name": ..., "arguments": {...}}` (ms-swift's `tool_call` content, a hermes call body); `parameters` is
    accepted for `arguments` (Llama 3's spelling)."""
    if isinstance(value, str):
        value = loads_lenient(value)
    if not isinstance(value, dict):
        raise ValueError(f"a call must be a JSON object with 'name' and 'arguments', got {_type_name(value)}")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a call needs a 'name' string, got {_type_name(name)}")
    arguments = value.get("arguments", value.get("parameters", {}))
    return ToolCall(name, parse_arguments(arguments))


def tool_name(tool: dict) -> str:
    return tool["function"]["name"]


def normalize_tools(tools: Any) -> list[dict]:
    """The tool list as OpenAI function schemas, each `{"type": "function", "function": {name, ...}}`.

    Accepts a JSON string of the list (ms-swift's `tools` column), a list of schemas or of JSON strings, wrapped
    in `{"type": "function", "function": ...}` or bare."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as error:
            raise ValueError(f"'tools' is not valid JSON ({error.msg} at column {error.colno})") from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list):
        raise ValueError(f"'tools' must be a list of function schemas, got {_type_name(tools)}")
    out = []
    for i, tool in enumerate(tools):
        if isinstance(tool, str):
            try:
                tool = json.loads(tool)
            except json.JSONDecodeError:
                raise ValueError(f"tools[{i}] is not valid JSON") from None
        if not isinstance(tool, dict):
            raise ValueError(f"tools[{i}] must be a function schema object, got {_type_name(tool)}")
        function = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"tools[{i}] needs a function 'name' (OpenAI schema: "
                             '{"type": "function", "function": {"name": ..., "description": ..., "parameters": ...}})')
        out.append({"type": "function", "function": function})
    names = [tool_name(tool) for tool in out]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"'tools' lists {', '.join(duplicates)} more than once")
    return out


def _text(value: Any, label: str) -> str:
    """Tool results are text; ms-swift also takes a JSON value and writes it as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        raise ValueError(f"{label} has no content")
    return json.dumps(value, ensure_ascii=False)


def _openai_calls(value: Any, label: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{label} 'tool_calls' must be a non-empty list, got {_type_name(value)}")
    calls = []
    for j, item in enumerate(value):
        where = f"{label} tool_calls[{j}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object, got {_type_name(item)}")
        function = item.get("function", item)
        try:
            call = call_from_object(function)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        entry = call.as_message_call()
        if isinstance(item.get("id"), str):
            entry["id"] = item["id"]
        calls.append(entry)
    return calls


POSITION = "_position"  # with keep_positions: where a canonical message or call stood in the input


def canonical_messages(messages: list[dict], keep_positions: bool = False) -> list[Message]:
    """ms-swift's and OpenAI's tool turns in the canonical shape; other messages are returned as they are.

    Consecutive `tool_call` messages join the assistant message before them (or a new one with empty content):
    ms-swift writes a call turn as an optional assistant text then one message per call. `keep_positions`
    marks each message and call with its index in `messages` (under POSITION), for errors that name it."""
    out: list[Message] = []
    for i, message in enumerate(messages):
        label = f"messages[{i}]"
        role = message.get("role")
        if role in CALL_ROLES:
            try:
                call = call_from_object(message.get("content")).as_message_call()
            except ValueError as error:
                raise ValueError(f"{label} ({role}): {error}") from None
            if keep_positions:
                call[POSITION] = i
            previous = out[-1] if out else None
            if previous is not None and previous["role"] == "assistant":
                previous.setdefault("tool_calls", []).append(call)
                continue
            out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif role in RESULT_ROLES:
            result = {"role": "tool", "content": _text(message.get("content"), f"{label} ({role})")}
            for key in ("tool_call_id", "name"):
                if isinstance(message.get(key), str):
                    result[key] = message[key]
            out.append(result)
        elif role == "assistant" and message.get("tool_calls") is not None:
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise ValueError(f"{label} (assistant) content must be a string or null, got {_type_name(content)}")
            calls = _openai_calls(message["tool_calls"], label)
            if keep_positions:
                for call in calls:
                    call[POSITION] = i
            out.append({"role": "assistant", "content": content or "", "tool_calls": calls})
        else:
            out.append(dict(message))
        if keep_positions:
            out[-1][POSITION] = i
    return out


def drop_positions(messages: list[Message]) -> list[Message]:
    for message in messages:
        message.pop(POSITION, None)
        for call in message.get("tool_calls") or ():
            call.pop(POSITION, None)
    return messages


def has_tool_turns(messages: list[Message]) -> bool:
    return any(m["role"] == "tool" or m.get("tool_calls") for m in messages)


def check_tool_turns(messages: list[Message], tools: list[dict] | None) -> None:
    """What a training row must hold to: each call names a listed tool; tool results answer the calls of the
    assistant message right before them, one result per call, each `tool_call_id` naming one of those calls;
    and the conversation goes on only after every call before it was answered. Errors name messages by their
    POSITION where canonical_messages kept it."""
    def at(item: dict, index: int) -> str:
        return f"messages[{item.get(POSITION, index)}]"

    known = None if tools is None else {tool_name(tool) for tool in tools}
    pending: list[dict] = []  # calls of the last calling assistant message not answered yet
    caller = -1
    for i, message in enumerate(messages):
        label = at(message, i)
        if message["role"] == "tool":
            if caller < 0:
                raise ValueError(f"{label} is a tool result with no tool call before it; a tool_response must "
                                 "follow the tool_call (or the assistant message with tool_calls) it answers")
            made = len(messages[caller]["tool_calls"])
            if not pending:
                raise ValueError(f"{label} is one tool result too many: the {made} call(s) before it are all "
                                 "answered already")
            call_id = message.get("tool_call_id")
            match = [call for call in pending if call.get("id") == call_id] if call_id is not None else pending[:1]
            if not match:
                raise ValueError(f"{label} answers tool_call_id {call_id!r}, which none of the open calls before "
                                 "it has")
            pending.remove(match[0])
            continue
        if pending:
            made = len(messages[caller]["tool_calls"])
            raise ValueError(f"{at(messages[caller], caller)} made {made} tool call(s) but only "
                             f"{made - len(pending)} tool result(s) follow before {label} ({message['role']}); "
                             "give one result per call")
        calls = message.get("tool_calls") or []
        for call in calls:
            name = call["function"]["name"]
            if known is not None and name not in known:
                raise ValueError(f"{at(call, i)} calls tool {name!r}, which is not in 'tools' "
                                 f"({', '.join(sorted(known)) or 'empty'})")
        if calls:
            pending, caller = list(calls), i
