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
    continuing = False  # the last assistant message is still open: results were written into it
    for message in body:
        role = message["role"]
        if role == "tool":
            group_start = not out or out[-1].get("_tool_group") is None
            if agent.results_turn:
                if group_start:
                    out.append({"role": "user", "content": "", "_tool_group": []})
                out[-1]["_tool_group"].append(message["content"])
            else:
                if not out or out[-1]["role"] != "assistant":
                    raise ValueError(f"a tool result must follow an assistant message with tool calls for "
                                     f"--agent_template {agent.name}")
                out[-1].setdefault("_tool_group", []).append(message["content"])
                continuing = True
            continue
        _close_group(out, agent, lowered)
        if role == "assistant":
            text = agent.format_calls(message["content"], _calls(message)) if message.get("tool_calls") \
                else message["content"]
            if continuing:
                out[-1]["content"] += text
            else:
                out.append({"role": "assistant", "content": text})
            continuing = False
        else:
            out.append({"role": role, "content": message["content"]})
            continuing = False
    _close_group(out, agent, lowered)
    lowered.open_turn = continuing
    return lowered


def _close_group(out: list[Message], agent: AgentTemplate, lowered: Lowered) -> None:
    """Write the pending results of the last message: as the user turn's text, or appended to the assistant's."""
    if not out or out[-1].get("_tool_group") is None:
        return
    results = agent.format_results(out[-1].pop("_tool_group"))
    if agent.results_turn:
        out[-1]["content"] = results
    else:
        lowered.masked.append((len(out) - 1, results))
        out[-1]["content"] += results


def needs_agent(messages: list[Message], tools: list[dict] | None) -> bool:
    return bool(tools) or has_tool_turns(messages)
