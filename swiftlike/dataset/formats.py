"""Turn every supported row shape into one: `messages` plus the row's other columns.

Trainers, templates and reward functions then handle a single shape. Columns a format does
not consume (`solution`, `label`, ...) pass through untouched, because RL reward functions
receive them as keyword arguments.

A row is checked as it is converted, and every error names where the row came from, so a
bad line in a 100k-row file is found without a debugger.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..template.toolcall import (CALL_ROLES, RESULT_ROLES, canonical_messages, check_tool_turns, drop_positions,
                                 normalize_tools)
from ..utils.errors import UsageError

Message = dict  # {"role", "content"}; agent rows add "tool_calls" (assistant) and tool messages (template/toolcall.py)

_ROLE_ALIASES = {"system": "system", "user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant",
                 **{role: role for role in CALL_ROLES + RESULT_ROLES}}
_TOOL_KEYS = ("tool_calls", "tool_call_id", "name")


class DatasetRowError(UsageError):
    """A row that no format accepts; the message says where it is and what the format needs."""


@dataclass(frozen=True)
class RowFormat:
    """One accepted row shape: the columns that identify it and the columns it turns into messages."""
    name: str
    required: tuple[str, ...]
    consumed: tuple[str, ...]
    convert: Callable[[dict, str], dict]

    def needs(self) -> str:
        return " and ".join(f"'{column}'" for column in self.required)


def _fail(where: str, problem: str) -> DatasetRowError:
    return DatasetRowError(f"{where}: {problem}")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _string(row: dict, field: str, where: str) -> str:
    value = row.get(field)
    if not isinstance(value, str):
        raise _fail(where, f"field '{field}' must be a string, got {_type_name(value)}")
    return value


def _optional_string(row: dict, field: str, where: str) -> str | None:
    """Many datasets store absent optional text as null or an empty csv cell; both mean 'none'."""
    if row.get(field) in (None, ""):
        return None
    return _string(row, field, where)


def _message(item: Any, label: str, where: str) -> Message:
    if not isinstance(item, dict):
        raise _fail(where, f"{label} must be an object with 'role' and 'content', got {_type_name(item)}")
    role = item.get("role", item.get("from"))
    if role not in _ROLE_ALIASES:
        raise _fail(where, f"{label} has role {role!r}; roles must be system, user or assistant "
                           "(ShareGPT: system, human or gpt), or tool_call and tool_response / tool for agent rows")
    content = item.get("content", item.get("value"))
    tool_turn = role in CALL_ROLES + RESULT_ROLES  # JSON content: canonical_messages checks and writes it
    calls_only = role == "assistant" and item.get("tool_calls") is not None and content is None
    if not (isinstance(content, str) or tool_turn or calls_only):
        raise _fail(where, f"{label} content must be a string, got {_type_name(content)}")
    message = {"role": _ROLE_ALIASES[role], "content": content}
    message.update({key: item[key] for key in _TOOL_KEYS if item.get(key) is not None
                    and (key != "tool_calls" or message["role"] == "assistant")})
    return message


def _messages(value: Any, field: str, where: str, tools: list[dict] | None = None) -> list[Message]:
    """Accept role/content and ShareGPT from/value keys alike: datasets on the hubs mix both. Tool turns, in
    ms-swift's agent shape or OpenAI's, become the canonical shape of template/toolcall.py."""
    if not isinstance(value, list):
        raise _fail(where, f"field '{field}' must be a list of messages, got {_type_name(value)}")
    if not value:
        raise _fail(where, f"field '{field}' is empty")
    raw = [_message(item, f"{field}[{i}]", where) for i, item in enumerate(value)]
    try:
        messages = canonical_messages(raw, keep_positions=True)
        check_tool_turns(messages, tools)
    except ValueError as error:
        raise _fail(where, str(error).replace("messages[", f"{field}[")) from None
    drop_positions(messages)
    if tools is None and any(m.get("tool_calls") for m in messages):
        raise _fail(where, f"field '{field}' has tool calls but the row has no 'tools' column listing the tools")
    for i, message in enumerate(messages[1:], start=1):
        if message["role"] == "system":
            raise _fail(where, f"{field}[{i}] is a system message; a system message may only come first")
    if not any(m["role"] == "user" for m in messages):
        raise _fail(where, f"field '{field}' has no user message")
    return messages


def _ending_with_assistant(messages: list[Message], field: str, where: str) -> list[Message]:
    if messages[-1]["role"] != "assistant":
        raise _fail(where, f"field '{field}' must end with the assistant answer, "
                           f"but ends with a {messages[-1]['role']} message")
    return messages


def _history(row: dict, where: str) -> list[Message]:
    history = row.get("history")
    if history is None:
        return []
    if not isinstance(history, list):
        raise _fail(where, "field 'history' must be a list of [query, response] pairs, "
                           f"got {_type_name(history)}")
    turns: list[Message] = []
    for i, pair in enumerate(history):
        is_pair = isinstance(pair, (list, tuple)) and len(pair) == 2
        if not (is_pair and all(isinstance(text, str) for text in pair)):
            raise _fail(where, f"history[{i}] must be a [query, response] pair of strings, got {pair!r}")
        turns += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    return turns


def _system(row: dict, where: str) -> list[Message]:
    system = _optional_string(row, "system", where)
    return [] if system is None else [{"role": "system", "content": system}]


def _prompt(row: dict, user_text: str, where: str) -> list[Message]:
    return _system(row, where) + _history(row, where) + [{"role": "user", "content": user_text}]


def _from_query_response(row: dict, where: str) -> dict:
    messages = _prompt(row, _string(row, "query", where), where)
    if row.get("response") is None:
        return {"messages": messages}
    messages.append({"role": "assistant", "content": _string(row, "response", where)})
    rejected = _optional_string(row, "rejected_response", where)
    if rejected is None:
        return {"messages": messages}
    return {"messages": messages, "rejected_response": rejected}


def _from_alpaca(row: dict, where: str) -> dict:
    instruction = _string(row, "instruction", where)
    extra_input = _optional_string(row, "input", where)
    user_text = instruction if extra_input is None else f"{instruction}\n{extra_input}"
    answer = {"role": "assistant", "content": _string(row, "output", where)}
    return {"messages": _prompt(row, user_text, where) + [answer]}


def _from_messages(row: dict, where: str) -> dict:
    return {"messages": _messages(row["messages"], "messages", where, row.get("tools"))}


def _from_conversations(row: dict, where: str) -> dict:
    messages = _messages(row["conversations"], "conversations", where, row.get("tools"))
    if messages[0]["role"] != "system":
        messages = _system(row, where) + messages
    return {"messages": messages}


def _answered(row: dict, field: str, where: str) -> list[Message]:
    """The messages of `field`, which must end with the assistant's answer."""
    return _ending_with_assistant(_messages(row[field], field, where, row.get("tools")), field, where)


def _from_messages_with_rejected(row: dict, where: str) -> dict:
    messages = _answered(row, "messages", where)
    return {"messages": messages, "rejected_response": _string(row, "rejected_response", where)}


def _from_messages_with_rejected_messages(row: dict, where: str) -> dict:
    """ms-swift's other pair shape: a whole second conversation that shares all turns but the last answer."""
    chosen = _answered(row, "messages", where)
    rejected = _answered(row, "rejected_messages", where)
    if chosen[:-1] != rejected[:-1]:
        raise _fail(where, "'messages' and 'rejected_messages' must share every turn before their last answer")
    return {"messages": chosen, "rejected_response": rejected[-1]["content"]}


def _from_chosen_rejected(row: dict, where: str) -> dict:
    chosen, rejected = row["chosen"], row["rejected"]
    if isinstance(chosen, str) and isinstance(rejected, str):
        if row.get("query") is None:
            raise _fail(where, "missing field 'query' (chosen/rejected rows with string answers need "
                               "'query' or 'prompt' for the question)")
        messages = _prompt(row, _string(row, "query", where), where)
        messages.append({"role": "assistant", "content": chosen})
        return {"messages": messages, "rejected_response": rejected}
    if isinstance(chosen, list) and isinstance(rejected, list):
        chosen_messages = _answered(row, "chosen", where)
        rejected_messages = _answered(row, "rejected", where)
        if chosen_messages[:-1] != rejected_messages[:-1]:
            raise _fail(where, "'chosen' and 'rejected' must share the conversation before their last answer")
        return {"messages": chosen_messages, "rejected_response": rejected_messages[-1]["content"]}
    raise _fail(where, "'chosen' and 'rejected' must both be strings or both be message lists, "
                       f"got {_type_name(chosen)} and {_type_name(rejected)}")


def _from_text(row: dict, where: str) -> dict:
    """Plain text for pre-training (`swiftlike pt`): one assistant turn holding the text."""
    return {"messages": [{"role": "assistant", "content": _string(row, "text", where)}]}


# Checked in order: the first format whose required columns are all present wins, so the
# more specific shapes come before the ones they contain.
FORMATS: tuple[RowFormat, ...] = (
    RowFormat("chosen/rejected", ("chosen", "rejected"), ("chosen", "rejected", "query", "history", "system"),
              _from_chosen_rejected),
    RowFormat("messages/rejected_response", ("messages", "rejected_response"),
              ("messages", "rejected_response"), _from_messages_with_rejected),
    RowFormat("messages/rejected_messages", ("messages", "rejected_messages"),
              ("messages", "rejected_messages"), _from_messages_with_rejected_messages),
    RowFormat("messages", ("messages",), ("messages",), _from_messages),
    RowFormat("ShareGPT conversations", ("conversations",), ("conversations", "system"), _from_conversations),
    RowFormat("alpaca instruction/output", ("instruction", "output"),
              ("instruction", "input", "output", "system"), _from_alpaca),
    RowFormat("query/response", ("query", "response"),
              ("query", "response", "history", "system", "rejected_response"), _from_query_response),
    RowFormat("query (RL prompt)", ("query",), ("query", "history", "system"), _from_query_response),
    RowFormat("text (pre-training)", ("text",), ("text",), _from_text),
)


def _with_query_alias(row: dict) -> dict:
    """`prompt` is the other common name for the question; read it as `query`, keeping column order."""
    if "prompt" not in row or "query" in row:
        return row
    return {("query" if key == "prompt" else key): value for key, value in row.items()}


def _present(row: dict) -> set[str]:
    """Null means absent: hub datasets fill columns a row lacks with null."""
    return {key for key, value in row.items() if value is not None}


def _recognised_formats() -> str:
    return "; ".join(f"{fmt.name} ({' + '.join(fmt.required)})" for fmt in FORMATS)


def detect_format(row: dict, where: str) -> RowFormat:
    if not isinstance(row, dict):
        raise _fail(where, f"a row must be an object of columns, got {_type_name(row)}")
    present = _present(_with_query_alias(row))
    for fmt in FORMATS:
        if present.issuperset(fmt.required):
            return fmt
    raise _fail(where, f"no known row format fits columns {sorted(row)}; recognised formats: "
                       f"{_recognised_formats()} ('prompt' is read as 'query')")


def _format_mismatch(row: dict, where: str, found: RowFormat, expected: RowFormat) -> DatasetRowError:
    missing = [column for column in expected.required if column not in _present(row)]
    if missing:
        return _fail(where, f"missing field '{missing[0]}' ({expected.name} rows need {expected.needs()})")
    return _fail(where, f"has the columns of a {found.name} row, but earlier rows are {expected.name} rows; "
                        "use one format per file")


ROW_KINDS = ("pair", "kto")


def check_row_kind(row: dict, kind: str, where: str) -> None:
    """What a trainer needs of a normalized row beyond its format: `pair` (dpo, cpo, orpo, simpo, rm) a chosen
    answer and a different rejected one; `kto` an answer with a boolean `label`, or a pair (split in two)."""
    messages = row["messages"]
    if messages[-1]["role"] != "assistant":
        raise _fail(where, f"the conversation ends with a {messages[-1]['role']} turn; preference rows need the "
                           "answer as the last assistant message")
    rejected = row.get("rejected_response")
    if kind == "pair" or (kind == "kto" and "label" not in row):
        if rejected is None:
            needs = "a boolean 'label' (KTO) or " if kind == "kto" else ""
            raise _fail(where, f"missing the rejected answer: give {needs}'rejected_response', "
                               "'rejected_messages', or 'chosen'/'rejected' columns")
        if rejected == messages[-1]["content"]:
            raise _fail(where, "the chosen and rejected answers are identical; a preference pair must differ")
        return
    if kind == "kto" and not isinstance(row["label"], bool):
        raise _fail(where, f"field 'label' must be a boolean (true: a desirable answer, false: an undesirable "
                           f"one), got {row['label']!r}")


def normalize_row(row: dict, where: str, *, expected: RowFormat | None = None) -> dict:
    """Convert one row; `expected` is the format of the file's first row, which every row must share.

    Holding a file to one format is what turns a forgotten `response` on line 3 of a
    query/response file into an error instead of a silent RL prompt row.
    """
    found = detect_format(row, where)
    row = _with_query_alias(row)
    if expected is not None and found is not expected:
        raise _format_mismatch(row, where, found, expected)
    if row.get("tools") is not None:
        try:
            row = {**row, "tools": normalize_tools(row["tools"])}
        except ValueError as error:
            raise _fail(where, f"field 'tools': {error}") from None
    converted = found.convert(row, where)
    extras = {key: value for key, value in row.items() if key not in found.consumed and key not in converted}
    return converted | extras
