"""OpenAI `tools` / `tool_choice` / `response_format` on `swiftlike deploy` (issue 29, inference and serving), with
the real `openai` client over loopback against deploy's app on the vLLM CPU engine and the pt engine (uvicorn on a
thread, sharing the session's engines), and with langchain-openai's ChatOpenAI, a client nobody here wrote.

The tiny model is random, so it never writes a call by itself: `tool_choice` required / named must be enforced
(constrained decoding) for a call to come back at all, which is what these tests check. Reading a call the model
wrote itself is checked on fixed texts (tests/unit/infer/test_tool_answers.py)."""
import copy
import json
from pathlib import Path

import jsonschema
import openai
import pytest
from model_ids import TINY
from test_openai_fields import _serve, client

# A random model never closes a string of its own accord, so the strings are bounded (maxLength is enforced too).
TOOLS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 12}},
                       "required": ["expression"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "count_letters", "description": "Count a letter in a word.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string", "maxLength": 8},
                                                      "letter": {"type": "string", "maxLength": 1}},
                       "required": ["word", "letter"], "additionalProperties": False}}},
]
ASK = [{"role": "user", "content": "What is 123 * 4567?"}]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}


@pytest.fixture(scope="module")
def servers(vllm_tiny, pt_tiny):
    from swiftlike.deploy.server import ServeSettings, create_app
    started = {name: _serve(create_app(engine, ServeSettings(max_new_tokens=24)))
               for name, engine in (("vllm", vllm_tiny), ("pt", pt_tiny))}
    yield {name: port for name, (port, _, _) in started.items()}
    for _, http, thread in started.values():
        http.should_exit = True
        thread.join(30)
    vllm_tiny.stop_concurrent_serving()


def qwen2_5_ids(tokenizer, messages, tools):
    """The ids Qwen2.5's own chat template gives (TRL keeps it byte for byte)."""
    import trl
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    return tok.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=True, return_dict=False)


def chat(port, **body):
    return client(port).chat.completions.create(model=TINY, **{"messages": ASK, "max_tokens": 24, **body})


def check_call(call, allowed):
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name in allowed
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return call.function.name, arguments


def test_tools_are_rendered_as_qwen2_5s_own_chat_template(servers, vllm_tiny):
    for name, port in servers.items():
        answer = chat(port, tools=TOOLS, max_tokens=2, extra_body={"return_token_ids": True})
        assert answer.model_extra["prompt_token_ids"] == qwen2_5_ids(vllm_tiny.tokenizer, ASK, TOOLS), name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_named_tool_choice_is_enforced_on_vllm(servers, seed):
    answer = chat(servers["vllm"], tools=TOOLS, temperature=1.0, seed=seed, max_tokens=48,
                  tool_choice={"type": "function", "function": {"name": "count_letters"}})
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert [check_call(c, {"count_letters"})[0] for c in choice.message.tool_calls] == ["count_letters"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_required_tool_choice_is_enforced_on_vllm(servers, seed):
    answer = chat(servers["vllm"], tools=TOOLS, temperature=1.0, seed=seed, max_tokens=48, tool_choice="required")
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert len(choice.message.tool_calls) == 1
    check_call(choice.message.tool_calls[0], set(SCHEMAS))


def test_tool_choice_auto_and_none_answer_text_from_a_random_model(servers):
    for tool_choice in ("auto", "none"):
        choice = chat(servers["vllm"], tools=TOOLS, tool_choice=tool_choice, temperature=0).choices[0]
        assert choice.finish_reason in ("stop", "length") and not choice.message.tool_calls


def test_a_full_tool_loop_is_rendered_turn_by_turn(servers, vllm_tiny):
    """call (forced) -> the tool's result as a `tool` message -> the final answer's request, whose prompt is
    Qwen2.5's own template over the whole conversation."""
    from swiftlike.tools import call_tool
    port = servers["vllm"]
    first = chat(port, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "calculator"}},
                 max_tokens=48, temperature=0).choices[0].message
    call = first.tool_calls[0]
    result = call_tool(call.function.name, json.loads(call.function.arguments))
    messages = [*ASK, first.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": result}]
    final = chat(port, messages=messages, tools=TOOLS, extra_body={"return_token_ids": True})
    assert final.choices[0].finish_reason in ("stop", "length")
    expected_messages = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": call.function.name,
                                          "arguments": json.loads(call.function.arguments)}}]},
        {"role": "tool", "content": result}]
    assert final.model_extra["prompt_token_ids"] == qwen2_5_ids(vllm_tiny.tokenizer, expected_messages, TOOLS)


def test_streamed_calls_reassemble_to_the_non_streamed_ones(servers):
    forced = dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "calculator"}}, temperature=0,
                  max_tokens=48)
    whole = chat(servers["vllm"], **forced).choices[0]
    calls, finish, content = {}, None, ""
    for chunk in chat(servers["vllm"], stream=True, **forced):
        for c in chunk.choices:
            content += c.delta.content or ""
            for d in c.delta.tool_calls or ():
                entry = calls.setdefault(d.index, {"id": d.id, "name": "", "arguments": ""})
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls]
    assert all(c["id"].startswith("call_") for c in calls.values())


def test_response_format_json_schema_and_json_object_on_vllm(servers):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}, "unit": {"enum": ["m", "s"]}},
              "required": ["answer", "unit"], "additionalProperties": False}
    for seed in (0, 1):
        text = chat(servers["vllm"], temperature=1.0, seed=seed, max_tokens=64,
                    response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
                    ).choices[0].message.content
        jsonschema.validate(json.loads(text), schema)
    # any object: a random model may run a key's string to max_tokens, so the answer is an object's beginning
    choice = chat(servers["vllm"], temperature=0, max_tokens=64, response_format={"type": "json_object"}).choices[0]
    text = choice.message.content
    assert text.startswith("{") and (choice.finish_reason == "length" or isinstance(json.loads(text), dict)), text


def test_pt_refuses_what_it_cannot_enforce_by_name(servers):
    port = servers["pt"]
    with pytest.raises(openai.BadRequestError, match="tool_choice.*required.*not supported by the PtEngine"):
        chat(port, tools=TOOLS, tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="calculator.*not supported by the PtEngine"):
        chat(port, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "calculator"}})
    with pytest.raises(openai.BadRequestError, match="response_format.*not supported by the PtEngine"):
        chat(port, response_format={"type": "json_object"})
    assert chat(port, tools=TOOLS, tool_choice="auto").choices[0].finish_reason in ("stop", "length")


def test_bad_tool_requests_are_400s_naming_the_field(servers):
    port = servers["vllm"]
    with pytest.raises(openai.BadRequestError, match="'weather', which is not in `tools`"):
        chat(port, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "weather"}})
    with pytest.raises(openai.BadRequestError, match="needs `tools`"):
        chat(port, tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="a tool result must follow the assistant message"):
        chat(port, tools=TOOLS, messages=[*ASK, {"role": "tool", "tool_call_id": "call_1", "content": "6"}])
    assert chat(port, max_tokens=2).choices[0].finish_reason == "length"  # and it keeps serving


def test_langchain_openai_drives_a_tool_loop(servers):
    """langchain-openai's ChatOpenAI with bind_tools (a client nobody here wrote): a forced call, the tool's
    result as a ToolMessage, and the final answer."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    from swiftlike.tools import call_tool
    model = ChatOpenAI(model=TINY, base_url=f"http://127.0.0.1:{servers['vllm']}/v1", api_key="none",
                       max_tokens=48, temperature=0, max_retries=0)
    messages = [HumanMessage(ASK[0]["content"])]
    reply = model.bind_tools(TOOLS, tool_choice="calculator").invoke(messages)
    assert [c["name"] for c in reply.tool_calls] == ["calculator"]
    jsonschema.validate(reply.tool_calls[0]["args"], SCHEMAS["calculator"])
    messages += [reply, ToolMessage(call_tool("calculator", reply.tool_calls[0]["args"]),
                                    tool_call_id=reply.tool_calls[0]["id"])]
    final = model.bind_tools(TOOLS).invoke(messages)
    assert isinstance(final.content, str) and not final.tool_calls
