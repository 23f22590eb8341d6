"""The chat pages' tool turns from fixed OpenAI `tool_calls` (a random model writes none by itself; the page's full
loop against a real deploy server, with the call forced, is tests/e2e/test_app.py -k tool): each call runs with
the built-in tool, the call and its result become bubbles of their own, and the page's history reads back into
the OpenAI turns they stand for, also after a trip through Gradio's Chatbot."""
import json

import pytest

from swiftlike.ui.chat import chat_messages
from swiftlike.ui.tool_chat import offered_tools, openai_messages, run_tool_calls

CALLS = [{"id": "call_a", "type": "function",
          "function": {"name": "calculator", "arguments": '{"expression": "347 * 5821"}'}},
         {"id": "call_b", "type": "function",
          "function": {"name": "count_letters", "arguments": '{"word": "strawberry", "letter": "r"}'}}]


def test_calls_run_with_the_builtin_tools_and_show_as_their_own_bubbles():
    bubbles, results = run_tool_calls(CALLS)
    assert results == [{"role": "tool", "tool_call_id": "call_a", "content": '{"result": 2019887}'},
                       {"role": "tool", "tool_call_id": "call_b", "content": '{"count": 3}'}]
    assert [b["metadata"]["title"] for b in bubbles] == [
        '🛠 calculator({"expression": "347 * 5821"})', '🛠 count_letters({"word": "strawberry", "letter": "r"})',
        "📎 calculator →", "📎 count_letters →"]
    assert all(b["role"] == "assistant" for b in bubbles)
    assert bubbles[2]["content"] == '```json\n{"result": 2019887}\n```'


def test_bad_calls_get_results_the_model_can_read_and_the_tools_keep_their_limits():
    bad = [("calculator", "not json"), ("calculator", '{"expression": "__import__(\'os\')"}'),
           ("calculator", json.dumps({"expression": "1+" * 150 + "1"})), ("weather", '{"city": "Paris"}')]
    _, results = run_tool_calls([{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, (n, a) in enumerate(bad)])
    errors = [json.loads(r["content"])["error"] for r in results]
    assert errors[0].startswith("the arguments are not JSON (Expecting value at column 1)")
    assert errors[1].startswith("only numbers and + - * / // % ** ( ) are allowed")
    assert errors[2] == "the expression is longer than 200 characters"
    assert errors[3] == "unknown tool 'weather'; available: calculator, count_letters"
    # a long call is cut in the title only
    assert run_tool_calls([{"id": "c", "function": {"name": "calculator", "arguments": json.dumps(
        {"expression": "9" * 100})}}])[0][0]["metadata"]["title"].endswith("…)")


def test_offered_tools_are_the_registrys_schemas():
    assert offered_tools([]) is None and offered_tools(None) is None
    assert [t["function"]["name"] for t in offered_tools(["count_letters"])] == ["count_letters"]
    with pytest.raises(ValueError, match="unknown tool.*weather.*calculator, count_letters"):
        offered_tools(["weather"])


def test_history_with_tool_bubbles_reads_back_as_openai_tool_turns():
    import gradio as gr
    bubbles, _ = run_tool_calls(CALLS)
    history = [{"role": "user", "content": "What is 347 * 5821, and how many r in strawberry?"},
               {"role": "assistant", "content": "Let me compute."}, *bubbles,
               {"role": "assistant", "content": "2019887, and 3."}]
    # what the page hands back on the next turn: the history after Gradio's Chatbot post- and preprocessing
    chatbot = gr.Chatbot()
    returned = [m if isinstance(m, dict) else m.model_dump() for m in chatbot.preprocess(
        chatbot.postprocess(history))]
    for shown in (history, returned):
        assert chat_messages("thanks", shown, "be brief") == [
            {"role": "system", "content": "be brief"}, history[0],
            {"role": "assistant", "content": "Let me compute.", "tool_calls": CALLS},
            {"role": "tool", "tool_call_id": "call_a", "content": '{"result": 2019887}'},
            {"role": "tool", "tool_call_id": "call_b", "content": '{"count": 3}'},
            {"role": "assistant", "content": "2019887, and 3."}, {"role": "user", "content": "thanks"}]
    # calls with no text before them are an assistant message of their own
    assert openai_messages([history[0], *bubbles[:1], *bubbles[2:3]])[1] == {
        "role": "assistant", "content": None, "tool_calls": CALLS[:1]}
