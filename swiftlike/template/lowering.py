"""An agent conversation written as a plain one (system, user and assistant turns only), by an agent template.

This is how ms-swift composes the two: the agent template writes the tool list into the system turn, calls into
the assistant's text and results into a turn of their own or into the assistant's turn, and the chat template
then renders plain turns as always. What stays to tell is which characters of an assistant message are tool
results, and so carry no loss: `Lowered.masked` lists them, by message index, for the renderer to cut out of
the message's trained span.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .agent import AgentTemplate
from .toolcall import Message, ToolCall, has_tool_turns


@dataclass
class Lowered:
    messages: list[Message]
    masked: list[tuple[int, str]] = field(default_factory=list)  # (message index, text carrying no loss)
    open_turn: bool = False  # ends inside the assistant's turn (results that continue it): generate on from there
    result_turns: set[int] = field(default_factory=set)  # user messages that hold tool results, not a user's query


def _calls(message: Message) -> list[ToolCall]:
    return [ToolCall(call["function"]["name"], call["function"]["arguments"]) for call in message["tool_calls"]]


def lower(messages: list[Message], tools: list[dict] | None, agent: AgentTemplate,
          default_system: str | None) -> Lowered:
    """`messages` in the canonical shape (see toolcall.py); `default_system` is what the chat template would
    add when the conversation has no system message, so that the tool list joins it rather than replacing it."""
    out: list[Message] = []
    lowered = Lowered(out)
    body = list(messages)
    if tools:
        system = body.pop(0)["content"] if body and body[0]["role"] == "system" else default_system
        out.append({"role": "system", "content": agent.format_tools(tools, system)})
    results: list[str] = []  # the tool results read since the last other message
    inline = False  # the last assistant message is still open: results were written into it

    def flush() -> None:
        nonlocal inline
        if not results:
            return
        text = agent.format_results(results)
        results.clear()
        if agent.results_turn:
            lowered.result_turns.add(len(out))
            out.append({"role": "user", "content": text})
            return
        if not out or out[-1]["role"] != "assistant":
            raise ValueError(f"a tool result must follow an assistant message with tool calls for "
                             f"--agent_template {agent.name}")
        lowered.masked.append((len(out) - 1, text))
        out[-1]["content"] += text
        inline = True

    for message in body:
        if message["role"] == "tool":
            results.append(message["content"])
            continue
        flush()
        if message["role"] == "assistant":
            text = agent.format_calls(message["content"], _calls(message)) if message.get("tool_calls") \
                else message["content"]
            if inline:
                out[-1]["content"] += text
            else:
                out.append({"role": "assistant", "content": text})
        else:
            out.append({"role": message["role"], "content": message["content"]})
        inline = False
    flush()
    lowered.open_turn = inline
    return lowered


def needs_agent(messages: list[Message], tools: list[dict] | None) -> bool:
    return bool(tools) or has_tool_turns(messages)
