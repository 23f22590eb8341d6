"""Agent rows: ms-swift's format and OpenAI's load to the same canonical rows; a malformed row is named by file,
line and message; the built-in calculator data is correct, held out, and what the tools answer."""
import json
import re

import pytest

from swiftlike.dataset import DatasetRowError, load_dataset
from swiftlike.tools import call_tool

TOOLS = [{"type": "function", "function": {"name": "realtime_aqi", "description": "Air quality of a city.",
                                           "parameters": {"type": "object", "properties": {"city": {
                                               "type": "string"}}, "required": ["city"]}}}]


def ms_swift_row(**extra):
    """The parallel-call example of ms-swift's Agent-support docs, in its shape (tools as a JSON string)."""
    return {"tools": json.dumps(TOOLS), "messages": [
        {"role": "user", "content": "What is the air like in Beijing and Shanghai today?"},
        {"role": "tool_call", "content": '{"name": "realtime_aqi", "arguments": {"city": "Beijing"}}'},
        {"role": "tool_call", "content": '{"name": "realtime_aqi", "arguments": {"city": "Shanghai"}}'},
        {"role": "tool_response", "content": '{"city": "Beijing", "aqi": "10"}'},
        {"role": "tool", "content": '{"city": "Shanghai", "aqi": "72"}'},
        {"role": "assistant", "content": "Beijing's AQI is 10; Shanghai's is 72."}], **extra}


def openai_row():
    return {"tools": TOOLS, "messages": [
        {"role": "user", "content": "What is the air like in Beijing and Shanghai today?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "realtime_aqi",
                                                              "arguments": '{"city": "Beijing"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "realtime_aqi",
                                                              "arguments": '{"city": "Shanghai"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Beijing", "aqi": "10"}'},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"city": "Shanghai", "aqi": "72"}'},
        {"role": "assistant", "content": "Beijing's AQI is 10; Shanghai's is 72."}]}


def write(tmp_path, rows, name="agent.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def calls(*cities):
    return [{"type": "function", "function": {"name": "realtime_aqi", "arguments": {"city": c}}} for c in cities]


def test_ms_swift_agent_rows_load_in_the_canonical_shape(tmp_path):
    [row] = load_dataset([write(tmp_path, [ms_swift_row(solution="72")])])
    assert row["tools"] == TOOLS and row["solution"] == "72"
    assert row["messages"] == [
        {"role": "user", "content": "What is the air like in Beijing and Shanghai today?"},
        {"role": "assistant", "content": "", "tool_calls": calls("Beijing", "Shanghai")},
        {"role": "tool", "content": '{"city": "Beijing", "aqi": "10"}'},
        {"role": "tool", "content": '{"city": "Shanghai", "aqi": "72"}'},
        {"role": "assistant", "content": "Beijing's AQI is 10; Shanghai's is 72."}]


def test_openai_rows_load_to_the_same_rows(tmp_path):
    [ms_swift] = load_dataset([write(tmp_path, [ms_swift_row()], "a.jsonl")])
    [openai] = load_dataset([write(tmp_path, [openai_row()], "b.jsonl")])
    for message in openai["messages"]:
        message.pop("tool_call_id", None)
        for call in message.get("tool_calls", ()):
            assert call.pop("id").startswith("call_")
    assert openai == ms_swift


def test_assistant_text_before_calls_joins_them_and_rounds_repeat(tmp_path):
    row = ms_swift_row()
    row["messages"][1:1] = [{"role": "assistant", "content": "<think>\nTwo cities.\n</think>\n"}]
    row["messages"][-1:-1] = [
        {"role": "tool_call", "content": {"name": "realtime_aqi", "arguments": {"city": "Wuhan"}}},
        {"role": "tool_response", "content": {"city": "Wuhan", "aqi": 40}}]
    [loaded] = load_dataset([write(tmp_path, [row])])
    roles = [(m["role"], len(m.get("tool_calls", ()))) for m in loaded["messages"]]
    assert roles == [("user", 0), ("assistant", 2), ("tool", 0), ("tool", 0), ("assistant", 1), ("tool", 0),
                     ("assistant", 0)]
    assert loaded["messages"][1]["content"] == "<think>\nTwo cities.\n</think>\n"
    assert loaded["messages"][5]["content"] == '{"city": "Wuhan", "aqi": 40}'


def test_sharegpt_function_call_and_observation_roles(tmp_path):
    row = {"tools": TOOLS, "conversations": [
        {"from": "human", "value": "Air in Beijing?"},
        {"from": "function_call", "value": '{"name": "realtime_aqi", "arguments": {"city": "Beijing"}}'},
        {"from": "observation", "value": '{"aqi": "10"}'},
        {"from": "gpt", "value": "AQI 10."}]}
    [loaded] = load_dataset([write(tmp_path, [row])])
    assert [m["role"] for m in loaded["messages"]] == ["user", "assistant", "tool", "assistant"]


def _broken(tmp_path, row, line=2):
    rows = [ms_swift_row()] * (line - 1) + [row]
    with pytest.raises(DatasetRowError) as error:
        load_dataset([write(tmp_path, rows)])
    assert f"agent.jsonl line {line}: " in str(error.value)
    return str(error.value)


def test_call_content_that_is_not_json_is_named(tmp_path):
    row = ms_swift_row()
    row["messages"][2]["content"] = '{"name": "realtime_aqi", "arguments": {"city": '
    assert re.search(r"messages\[2\] \(tool_call\): not JSON", _broken(tmp_path, row))
    row["messages"][2]["content"] = '{"arguments": {}}'
    assert "messages[2] (tool_call): a call needs a 'name'" in _broken(tmp_path, row)
    row["messages"][2]["content"] = '{"name": "realtime_aqi", "arguments": [1]}'
    assert "'arguments' must be a JSON object" in _broken(tmp_path, row)


def test_tool_response_with_no_call_before_it_is_named(tmp_path):
    row = ms_swift_row()
    del row["messages"][1:3]
    assert "messages[1] is a tool result with no tool call before it" in _broken(tmp_path, row)
    row = ms_swift_row()
    row["messages"].insert(5, {"role": "tool_response", "content": "extra"})
    assert "messages[5] is one tool result too many" in _broken(tmp_path, row)


def test_unanswered_calls_are_named(tmp_path):
    row = ms_swift_row()
    del row["messages"][4]
    assert "messages[1] made 2 tool call(s) but only 1 tool result(s) follow before messages[4]" in \
        _broken(tmp_path, row)


def test_call_to_a_tool_missing_from_tools_is_named(tmp_path):
    row = ms_swift_row()
    row["messages"][2]["content"] = '{"name": "weather", "arguments": {"city": "Shanghai"}}'
    assert "messages[2] calls tool 'weather', which is not in 'tools' (realtime_aqi)" in _broken(tmp_path, row)
    assert "has tool calls but the row has no 'tools' column" in _broken(tmp_path, ms_swift_row(tools=None))


def test_bad_tools_column_and_call_ids_are_named(tmp_path):
    assert "field 'tools': 'tools' is not valid JSON" in _broken(tmp_path, ms_swift_row(tools="[{"))
    assert "tools[0] needs a function 'name'" in _broken(tmp_path, ms_swift_row(tools=[{"type": "function"}]))
    row = openai_row()
    row["messages"][3]["tool_call_id"] = "call_9"
    assert "messages[3] answers tool_call_id 'call_9'" in _broken(tmp_path, row)
    row = openai_row()
    row["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{oops"
    assert "messages[1] tool_calls[0]: not JSON" in _broken(tmp_path, row)


def test_a_row_may_end_with_its_calls(tmp_path):
    """Training the call itself: the last turn is the tool_call, no result yet."""
    row = ms_swift_row()
    del row["messages"][3:]
    [loaded] = load_dataset([write(tmp_path, [row])])
    assert loaded["messages"][-1]["tool_calls"] == calls("Beijing", "Shanghai")


# --- the built-in calculator task --------------------------------------------------------------

def test_calculator_traces_are_what_the_tools_answer():
    rows = load_dataset(["swiftlike/calculator-agent"])
    assert len(rows) == 1000
    tasks = {row["task"] for row in rows}
    assert tasks == {"multiply", "sum_of_products", "refund", "count_letters"}
    parallel = 0
    for row in rows:
        assert {tool["function"]["name"] for tool in row["tools"]} == {"calculator", "count_letters"}
        messages = row["messages"]
        pending = []
        for message in messages:
            if message.get("tool_calls"):
                pending = [call["function"] for call in message["tool_calls"]]
                parallel += len(pending) > 1
            elif message["role"] == "tool":
                function = pending.pop(0)
                assert message["content"] == call_tool(function["name"], function["arguments"])
        assert messages[-1]["role"] == "assistant" and messages[-1]["content"].endswith(f"#### {row['solution']}")
        last_result = json.loads([m for m in messages if m["role"] == "tool"][-1]["content"])
        assert str(last_result.get("result", last_result.get("count"))) == row["solution"]
    assert parallel >= 100  # sum_of_products rows make two calls at once


def test_calculator_products_need_a_tool_and_are_right():
    for row in load_dataset(["swiftlike/calculator-agent"]):
        if row["task"] == "multiply":
            call = row["messages"][1]["tool_calls"][0]["function"]
            a, b = map(int, call["arguments"]["expression"].split(" * "))
            assert 100 <= a <= 9999 and 100 <= b <= 9999 and int(row["solution"]) == a * b


def test_held_out_split_shares_no_question_and_carries_the_answer():
    def questions(name):
        return {row["messages"][0]["content"] for row in load_dataset([name])}
    test_rows = load_dataset(["swiftlike/calculator-agent-test"])
    assert len(test_rows) == 200
    assert all([m["role"] for m in row["messages"]] == ["user"] and row["solution"] for row in test_rows)
    assert not questions("swiftlike/calculator-agent") & questions("swiftlike/calculator-agent-test")
