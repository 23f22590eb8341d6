"""Tool calls on the chat pages (`swiftlike app` and the web UI's deploy chat): the built-in tools offered as
OpenAI `tools`, each call the model answers with run here with swiftlike/tools' own implementation (pure and
bounded: the calculator has no eval), and the result sent back as a `tool` message until the model answers in
text, within MAX_TOOL_ROUNDS rounds.

A call and its result are bubbles of their own (Gradio "thought" messages, whose metadata carries a title). The
page's history is all a Gradio chat hands back on the next turn, so the bubbles are written so that
`openai_messages` reads them back into the OpenAI turns they stand for (assistant `tool_calls`, `tool` results):
the next turn's model sees the calls and results it relied on, not only the final answers.
"""
from __future__ import annotations

import json

from ..tools import TOOL_REGISTRY, call_tool

MAX_TOOL_ROUNDS = 4  # rounds of calls per message; the answer after the last is asked with tool_choice "none"
TOOL_CHOICES = ("auto", "required")
CALL_ID, RESULT_ID = "tool-call ", "tool-result "  # metadata ids of the two kinds of tool bubble
TITLE_ARGUMENT_CHARS = 60


def text_of(content) -> str:
    """Gradio hands a message's content as a string or as a list of typed parts; the API wants text."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content.get("text") or ""
    return "".join(text_of(part) for part in content or [])


def offered_tools(names) -> list[dict] | None:
    """The OpenAI `tools` for the ticked built-in tools; None (no `tools` in the request) when none is ticked."""
    names = list(names or ())
    unknown = [name for name in names if name not in TOOL_REGISTRY]
    if unknown:
        raise ValueError(f"unknown tool(s) {', '.join(unknown)}; the built-in tools are {', '.join(TOOL_REGISTRY)}")
    return [TOOL_REGISTRY[name].schema() for name in names] or None


def _fenced(text: str) -> str:
    return f"```json\n{text}\n```"


def _unfenced(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text.strip()


def call_title(name: str, arguments: str) -> str:
    shown = arguments if len(arguments) <= TITLE_ARGUMENT_CHARS else arguments[:TITLE_ARGUMENT_CHARS] + "…"
    return f"🛠 {name}({shown})"


def run_tool_calls(tool_calls: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the bubbles, the `tool` messages) for one answer's OpenAI `tool_calls`: each call runs with the built-in
    tool of its name; arguments that are not JSON get an error result the model can read, like any bad call."""
    calls, answers, results = [], [], []
    for call in tool_calls:
        name, arguments = call["function"]["name"], call["function"]["arguments"] or "{}"
        try:
            result = call_tool(name, json.loads(arguments))
        except json.JSONDecodeError as e:
            result = json.dumps({"error": f"the arguments are not JSON ({e.msg} at column {e.colno})"})
        written = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        calls.append({"role": "assistant", "content": _fenced(written),
                      "metadata": {"title": call_title(name, arguments), "id": CALL_ID + call["id"]}})
        answers.append({"role": "assistant", "content": _fenced(result),
                        "metadata": {"title": f"📎 {name} →", "id": RESULT_ID + call["id"]}})
        results.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return calls + answers, results  # the calls, then their results: the order of the OpenAI turns


def openai_messages(history: list[dict]) -> list[dict]:
    """The OpenAI turns a page's history stands for: user and assistant text, and the tool bubbles read back
    into assistant `tool_calls` (merged with the text the assistant wrote just before them) and `tool` results.
    Other bubbles (a system message, thoughts of other kinds) are not sent: the page's system box decides."""
    messages: list[dict] = []
    for turn in history:
        role, metadata = turn.get("role"), turn.get("metadata") or {}
        bubble_id = str(metadata.get("id") or "")
        text = text_of(turn.get("content"))
        if bubble_id.startswith(CALL_ID):
            written = json.loads(_unfenced(text))
            call = {"id": bubble_id[len(CALL_ID):], "type": "function",
                    "function": {"name": written["name"], "arguments": written["arguments"]}}
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant":  # its text (or calls) before this call: the same answer
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif bubble_id.startswith(RESULT_ID):
            messages.append({"role": "tool", "tool_call_id": bubble_id[len(RESULT_ID):], "content": _unfenced(text)})
        elif role in ("user", "assistant") and not metadata.get("title"):
            messages.append({"role": role, "content": text})
    return messages


async def answer_with_tools(client, messages: list[dict], tools: list[dict] | None, tool_choice: str = "auto",
                            **body):
    """Streams one reply through an `openai.AsyncOpenAI` client, running the tools it calls; yields the reply's
    bubbles so far each time they change. `tool_choice` "required" forces the first answer to be a call (the
    server enforces it); the later rounds are "auto", so the model can answer once it has the results."""
    messages, bubbles = list(messages), []
    for round_index in range(MAX_TOOL_ROUNDS + 1):
        request = dict(body, messages=messages, stream=True)
        if tools:
            last = round_index == MAX_TOOL_ROUNDS
            request.update(tools=tools, tool_choice="none" if last else tool_choice if round_index == 0 else "auto")
        text = {"role": "assistant", "content": ""}
        bubbles.append(text)
        calls: dict[int, dict] = {}
        stream = await client.chat.completions.create(**request)
        async with stream:
            async for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                for piece in delta.tool_calls or ():
                    slot = calls.setdefault(piece.index, {"id": "", "type": "function",
                                                          "function": {"name": "", "arguments": ""}})
                    slot["id"] = piece.id or slot["id"]
                    if piece.function is not None:
                        slot["function"]["name"] += piece.function.name or ""
                        slot["function"]["arguments"] += piece.function.arguments or ""
                if delta.content:
                    text["content"] += delta.content
                    yield bubbles
        if not calls:
            yield bubbles
            return
        if not text["content"]:
            bubbles.remove(text)
        tool_calls = [calls[index] for index in sorted(calls)]
        messages.append({"role": "assistant", "content": text["content"] or None, "tool_calls": tool_calls})
        shown, results = run_tool_calls(tool_calls)
        bubbles += shown
        messages += results
        yield bubbles
