"""Agent templates (`--agent_template`): how one model family writes the tool list, its calls and their results.

ms-swift's design, under its names: the dataset format is one for every model, and an agent template decides
the text. Each template here does three things with plain strings, so that it composes with any chat template
(a registered one, or the tokenizer's own):

- `format_tools(tools, system)`: the system turn's text with the tool list in it;
- `format_calls(content, calls)`: the assistant turn's text for an answer that makes calls;
- `format_results(results)`: the text of the results, which either is a turn of its own (`results_turn`: hermes
  writes a user turn of `<tool_response>` blocks) or continues the assistant's turn (ReAct's `Observation:`);

and parses generated text back into calls (`parse`, ms-swift's `get_toolcall`), reporting a call that does not
parse instead of dropping it. `call_start` and `call_markup(name)` give the literal text around a call, for a
server that streams calls or constrains decoding to them; `stop_words` end generation after a call where the
format has no end-of-turn of its own.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..utils.registry import Registry
from .toolcall import ParsedCall, ParsedCompletion, ToolCall, call_from_object, parse_arguments, tool_name


def _dumps(value) -> str:
    """The JSON of the Qwen chat templates' `tojson` (transformers: json.dumps, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False)


def _with_system(system: str | None, block: str) -> str:
    """A system prompt, if any, then a blank line, then the tool block (Qwen2.5's and Qwen3's layout)."""
    return block if system is None else f"{system}\n\n{block}"


def _describe(tool: dict) -> tuple[str, str, str]:
    function = tool["function"]
    parameters = function.get("parameters") or {}
    return (function["name"], function.get("description") or "",
            parameters if isinstance(parameters, str) else _dumps(parameters))


class AgentTemplate:
    """The interface every agent template implements; see the module docstring."""

    name: str = ""
    description: str = ""
    call_start: str = ""
    results_turn: bool = True
    stop_words: tuple[str, ...] = ()

    def format_tools(self, tools: list[dict], system: str | None) -> str:
        raise NotImplementedError

    def format_calls(self, content: str, calls: list[ToolCall]) -> str:
        raise NotImplementedError

    def format_results(self, results: list[str]) -> str:
        raise NotImplementedError

    def call_markup(self, name: str) -> tuple[str, str]:
        """The text before and after the arguments' JSON in a call to `name`."""
        raise NotImplementedError

    def parse(self, text: str) -> ParsedCompletion:
        raise NotImplementedError

    def get_toolcall(self, text: str) -> list[ParsedCall]:
        """ms-swift's name: the calls in a completion, in order; a malformed one has `ok` False and an `error`."""
        return self.parse(text).calls


class HermesAgentTemplate(AgentTemplate):
    """Qwen2.5's and Qwen3's format: JSON calls in `<tool_call>` tags, results as a user turn of
    `<tool_response>` blocks. The text is that of their tokenizers' chat templates, token for token."""

    name = "hermes"
    description = ("<tool_call>{json}</tool_call> blocks, results as a user turn of <tool_response> blocks "
                   "(Qwen2.5, Qwen3; ms-swift's default for the qwen templates)")
    call_start = "<tool_call>"
    call_end = "</tool_call>"
    results_turn = True

    def format_tools(self, tools: list[dict], system: str | None) -> str:
        listed = "".join("\n" + _dumps(tool) for tool in tools)
        return _with_system(system, (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" + listed +
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'))

    def call_markup(self, name: str) -> tuple[str, str]:
        return f'<tool_call>\n{{"name": {_dumps(name)}, "arguments": ', "}\n</tool_call>"

    def format_calls(self, content: str, calls: list[ToolCall]) -> str:
        blocks = []
        for call in calls:
            begin, end = self.call_markup(call.name)
            blocks.append(begin + _dumps(call.arguments) + end)
        return (content + "\n" if content else "") + "\n".join(blocks)

    def format_results(self, results: list[str]) -> str:
        return "\n".join(f"<tool_response>\n{result}\n</tool_response>" for result in results)

    def parse(self, text: str) -> ParsedCompletion:
        """Each `<tool_call>` body is read as one JSON value first, so a `</tool_call>` inside a string argument
        does not end it; a body that is not clean JSON runs to the next `</tool_call>` and is reported."""
        calls, kept, position = [], [], 0
        while (start := text.find(self.call_start, position)) >= 0:
            kept.append(text[position:start])
            body = start + len(self.call_start)
            call, end = self._json_call(text, body)
            if call is not None:
                calls.append(ParsedCall(text[start:end], call))
                position = end
                continue
            close = text.find(self.call_end, body)
            if close < 0:  # cut off (max tokens) or never closed
                calls.append(ParsedCall(text[start:], error=f"{self.call_start} without a closing {self.call_end}"))
                position = len(text)
                break
            position = close + len(self.call_end)
            try:
                calls.append(ParsedCall(text[start:position], call_from_object(text[body:close].strip())))
            except ValueError as error:
                calls.append(ParsedCall(text[start:position], error=str(error)))
        kept.append(text[position:])
        return ParsedCompletion("".join(kept).strip(), calls)

    def _json_call(self, text: str, body: int) -> tuple[ToolCall | None, int]:
        """The call whose JSON starts at `body` and is followed by the closing tag, and the end of that tag."""
        at = len(text) - len(text[body:].lstrip())
        try:
            value, after = _DECODER.raw_decode(text, at)
            call = call_from_object(value)
        except ValueError:  # JSONDecodeError included
            return None, body
        close = len(text) - len(text[after:].lstrip())
        if not text.startswith(self.call_end, close):
            return None, body
        return call, close + len(self.call_end)


_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Keywords:
    action: str
    action_input: str
    observation: str


class KeywordAgentTemplate(AgentTemplate):
    """Formats that write a call as keyword lines (ReAct's `Action:` / `Action Input:`) and continue the
    assistant's turn with the results after an observation keyword, which is also where generation stops."""

    keywords = Keywords("Action:", "Action Input:", "Observation:")
    results_turn = False

    @property
    def call_start(self) -> str:  # type: ignore[override]
        return self.keywords.action

    @property
    def stop_words(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.keywords.observation,)

    def call_markup(self, name: str) -> tuple[str, str]:
        return f"{self.keywords.action} {name}\n{self.keywords.action_input} ", "\n"

    def format_calls(self, content: str, calls: list[ToolCall]) -> str:
        lead = content + ("\n" if content and not content.endswith("\n") else "")
        lines = []
        for call in calls:
            begin, end = self.call_markup(call.name)
            lines.append(begin + _dumps(call.arguments) + end)
        return lead + "".join(lines) + self.keywords.observation

    def format_results(self, results: list[str]) -> str:
        """Each result after its observation keyword (the first keyword ends the calls' text), one per line."""
        parts = []
        for i, result in enumerate(results):
            parts.append(("" if i == 0 else self.keywords.observation) + result +
                         ("" if result.endswith("\n") else "\n"))
        return "".join(parts)

    def parse(self, text: str) -> ParsedCompletion:
        """Calls are read up to the first observation keyword: what follows it was not the model's to write.
        Keywords count at the start of a line only, so one inside an argument's JSON string is just text."""
        words = self.keywords
        action, action_input = words.action.rstrip(":"), words.action_input.rstrip(":")
        head = re.split(f"(?m)^{re.escape(words.observation)}", text, maxsplit=1)[0]
        marker = re.compile(f"(?m)^(?:{re.escape(words.action_input)}|{re.escape(words.action)})")
        found = list(marker.finditer(head))
        if not found:
            return ParsedCompletion(text.strip())
        calls: list[ParsedCall] = []
        i = 0
        while i < len(found):
            match = found[i]
            end = found[i + 1].start() if i + 1 < len(found) else len(head)
            if match.group(0) == words.action_input:
                calls.append(ParsedCall(head[match.start():end].rstrip("\n"),
                                        error=f"{action_input} without an {action} line before it"))
                i += 1
                continue
            name = head[match.end():end].strip()
            if i + 1 >= len(found) or found[i + 1].group(0) != words.action_input:
                calls.append(ParsedCall(head[match.start():end].rstrip("\n"),
                                        error=f"{action} {name!r} without an {action_input} line"))
                i += 1
                continue
            arguments_end = found[i + 2].start() if i + 2 < len(found) else len(head)
            raw = head[match.start():arguments_end].rstrip("\n")
            try:
                if not name:
                    raise ValueError("empty tool name")
                arguments = parse_arguments(head[found[i + 1].end():arguments_end].strip())
                calls.append(ParsedCall(raw, ToolCall(name, arguments)))
            except ValueError as error:
                calls.append(ParsedCall(raw, error=str(error)))
            i += 2
        return ParsedCompletion(head[:found[0].start()].strip(), calls)


class ReactEnAgentTemplate(KeywordAgentTemplate):
    name = "react_en"
    description = ("ReAct: Thought / Action / Action Input / Observation lines inside the assistant turn; works "
                   "with any chat template")

    def format_tools(self, tools: list[dict], system: str | None) -> str:
        described = []
        for tool in tools:
            name, description, parameters = _describe(tool)
            described.append(f"{name}: Call this tool to interact with the {name} API. What is the {name} API "
                             f"useful for? {description} Parameters: {parameters} Format the arguments as a JSON "
                             "object.")
        names = ",".join(tool_name(tool) for tool in tools)
        return _with_system(system, (
            "Answer the following questions as best you can. You have access to the following tools:\n\n" +
            "\n\n".join(described) +
            "\n\nUse the following format:\n\n"
            "Question: the input question you must answer\n"
            "Thought: you should always think about what to do\n"
            f"Action: the action to take, should be one of [{names}]\n"
            "Action Input: the input to the action\n"
            "Observation: the result of the action\n"
            "... (this Thought/Action/Action Input/Observation can be repeated zero or more times)\n"
            "Thought: I now know the final answer\n"
            "Final Answer: the final answer to the original input question\n\n"
            "Begin!\n"))


class QwenEnAgentTemplate(KeywordAgentTemplate):
    name = "qwen_en"
    description = "Qwen-Agent's ✿FUNCTION✿ / ✿ARGS✿ / ✿RESULT✿ / ✿RETURN✿ lines inside the assistant turn"
    keywords = Keywords("✿FUNCTION✿:", "✿ARGS✿:", "✿RESULT✿:")

    def format_tools(self, tools: list[dict], system: str | None) -> str:
        described = []
        for tool in tools:
            name, description, parameters = _describe(tool)
            described.append(f"### {name}\n\n{name}: {description} Parameters: {parameters} Format the arguments "
                             "as a JSON object.")
        names = ",".join(tool_name(tool) for tool in tools)
        return _with_system(system, (
            "# Tools\n\n## You have access to the following tools:\n\n" + "\n\n".join(described) +
            "\n\n## When you need to call a tool, please insert the following command in your reply, which can be "
            "called zero or multiple times according to your needs:\n\n"
            f"✿FUNCTION✿: The tool to use, should be one of [{names}]\n"
            "✿ARGS✿: The input of the tool\n"
            "✿RESULT✿: Tool results\n"
            "✿RETURN✿: Reply based on tool results. Images need to be rendered as ![](url)"))


AGENT_TEMPLATE_REGISTRY: Registry[AgentTemplate] = Registry("agent template", "--agent_template")
for _template in (HermesAgentTemplate(), ReactEnAgentTemplate(), QwenEnAgentTemplate()):
    AGENT_TEMPLATE_REGISTRY.register(_template.name, _template)


def get_agent_template(name: str) -> AgentTemplate:
    return AGENT_TEMPLATE_REGISTRY.lookup(name)
