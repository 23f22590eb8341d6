"""A generated text read into OpenAI's answer shape (non-streamed and as stream deltas): the tiny random model
never writes a call by itself, so the parsing of a real answer is checked on fixed texts here."""
import json

import pytest

from swiftlike.infer.tool_serving import ToolCallStream, ToolChoice, tool_answer, tool_choice_of
from swiftlike.template import get_agent_template

HERMES = get_agent_template("hermes")
REACT = get_agent_template("react_en")
AUTO = ToolChoice("auto")
TWO_CALLS = ('Let me compute both.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 * 3"}}\n'
             '</tool_call>\n<tool_call>\n{"name": "count_letters", "arguments": {"word": "apple", "letter": "p"}}\n'
             '</tool_call>')


def test_calls_become_tool_calls_with_the_text_outside_them_as_content():
    answer = tool_answer(TWO_CALLS, "stop", HERMES, AUTO)
    assert answer.finish_reason == "tool_calls" and answer.content == "Let me compute both."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in answer.tool_calls] == [
        ("calculator", {"expression": "2 * 3"}), ("count_letters", {"word": "apple", "letter": "p"})]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in answer.tool_calls)
    assert len({c["id"] for c in answer.tool_calls}) == 2


def test_only_calls_give_null_content_and_react_parses_too():
    answer = tool_answer(TWO_CALLS.split("\n", 1)[1], "stop", HERMES, AUTO)
    assert answer.content is None and len(answer.tool_calls) == 2
    react = tool_answer('Thought: add\nAction: calculator\nAction Input: {"expression": "1+1"}\n', "stop", REACT, AUTO)
    assert react.finish_reason == "tool_calls" and react.content == "Thought: add"
    assert json.loads(react.tool_calls[0]["function"]["arguments"]) == {"expression": "1+1"}


@pytest.mark.parametrize("text", ['<tool_call>\n{"name": "calculator", "arguments": {"expression": "2',
                                  "<tool_call>\nnot json\n</tool_call>",
                                  '<tool_call>\n{"arguments": {}}\n</tool_call>', TWO_CALLS + "<tool_call>\n{"])
def test_malformed_calls_are_answered_as_text(text):
    answer = tool_answer(text, "length", HERMES, AUTO)
    assert (answer.content, answer.tool_calls, answer.finish_reason) == (text, None, "length")


def test_tool_choice_none_parses_nothing():
    assert tool_answer(TWO_CALLS, "stop", HERMES, ToolChoice("none")).tool_calls is None


@pytest.mark.parametrize("pieces", [1, 3, 7])
def test_stream_deltas_reassemble_to_the_whole_answer(pieces):
    stream = ToolCallStream(HERMES, AUTO)
    sent = "".join(stream.feed(TWO_CALLS[i:i + pieces]) for i in range(0, len(TWO_CALLS), pieces))
    rest, calls, finish = stream.finish("stop")
    whole = tool_answer(TWO_CALLS, "stop", HERMES, AUTO)
    assert finish == "tool_calls" and (sent + rest).strip() == whole.content
    assert [c["index"] for c in calls] == [0, 1]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls]


def test_a_stream_holds_back_what_may_open_a_call_and_sends_it_if_it_does_not():
    stream = ToolCallStream(HERMES, AUTO)
    assert stream.feed("x <tool_c") == "x "
    assert stream.feed("hair") == "<tool_chair"
    assert stream.finish("stop") == ("", None, "stop")
    broken = ToolCallStream(HERMES, AUTO)
    assert broken.feed("hi <tool_call>\n{oops") == "hi "
    assert broken.finish("length") == ("<tool_call>\n{oops", None, "length")


def test_tool_choice_is_checked_against_the_tools():
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
    assert tool_choice_of(tools, None) == AUTO and tool_choice_of(None, None) == ToolChoice("none")
    assert tool_choice_of(tools, {"type": "function", "function": {"name": "calculator"}}).forced
    for bad, message in (("always", "not one of auto"), ({"type": "function", "function": {"name": "x"}},
                                                         "'x', which is not in `tools` \\(calculator\\)"),
                         ({"name": "calculator"}, "as an object must be")):
        with pytest.raises(ValueError, match=message):
            tool_choice_of(tools, bad)
    with pytest.raises(ValueError, match="needs `tools`"):
        tool_choice_of(None, "required")
