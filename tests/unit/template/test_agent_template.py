"""Agent templates: tools, calls and results rendered as the models' own chat templates render them, parsed back
exactly, tool-result turns appendable as ids after sampled ids, and loss only on what the assistant writes."""
import json
import random
from pathlib import Path

import pytest
import trl
from model_ids import TINY

from swiftlike.model import load_tokenizer, resolve_model
from swiftlike.template import (AGENT_TEMPLATE_REGISTRY, IGNORE_INDEX, ToolCall, get_agent_template, get_template,
                                parse_loss_scale)
from swiftlike.utils.errors import NotBuiltError

# The chat templates Qwen2.5 and Qwen3 ship, as TRL keeps them byte for byte to recognise those models.
CHAT_TEMPLATES = Path(trl.__file__).parent / "chat_templates"
TOOLS = [
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic exactly.",
                                      "parameters": {"type": "object", "properties": {"expression": {
                                          "type": "string"}}, "required": ["expression"]}}},
    {"type": "function", "function": {"name": "weather", "description": "Météo: the weather in a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                                       "days": {"type": "integer"}}}}},
]


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


THREE_ROUNDS = [
    {"role": "user", "content": "What is 347 * 5821 + 12 * 13, and the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [call("calculator", expression="347 * 5821"),
                                                         call("calculator", expression="12 * 13")]},
    {"role": "tool", "content": '{"result": 2019887}'},
    {"role": "tool", "content": '{"result": 156}'},
    {"role": "assistant", "content": "Now the sum.", "tool_calls": [call("calculator", expression="2019887 + 156")]},
    {"role": "tool", "content": '{"result": 2020043}'},
    {"role": "assistant", "content": "Let me check the weather.",
     "tool_calls": [call("weather", city="Paris", days=1)]},
    {"role": "tool", "content": "Sunny, 21 °C"},
    {"role": "assistant", "content": "The sum is 2020043, and Paris is sunny.\n#### 2020043"},
]
CONVERSATIONS = [
    THREE_ROUNDS,
    [{"role": "system", "content": "You are terse."}, *THREE_ROUNDS[:4],
     {"role": "assistant", "content": "2019887 and 156."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! Ask me anything."}],
    [*THREE_ROUNDS[:1], {"role": "assistant", "content": "", "tool_calls": [call("weather", city="Zürich")]}],
    # reasoning in a call turn after the last query: Qwen3 keeps it there, and drops it from earlier rounds
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nGreet.\n</think>\n\nHello."},
     THREE_ROUNDS[0], {"role": "assistant", "content": "<think>\nNeeds a tool.\n</think>\n\n",
                       "tool_calls": [call("calculator", expression="347 * 5821")]},
     {"role": "tool", "content": '{"result": 2019887}'},
     {"role": "assistant", "content": "<think>\nDone.\n</think>\n\n2019887"}],
]
PROMPTS = [THREE_ROUNDS[:1], THREE_ROUNDS[:4], THREE_ROUNDS[:8],
           [{"role": "system", "content": "Use tools."}, *THREE_ROUNDS[:6]]]


@pytest.fixture(scope="module")
def qwen2_5_tokenizer():
    """The tiny model's tokenizer carrying Qwen2.5's real chat template, which renders tools."""
    tokenizer = load_tokenizer(resolve_model(TINY))
    tokenizer.chat_template = (CHAT_TEMPLATES / "qwen2_5.jinja").read_text()
    return tokenizer


@pytest.fixture(scope="module")
def qwen3_tokenizer():
    tokenizer = load_tokenizer(resolve_model("tiny-random/qwen3"))
    tokenizer.chat_template = (CHAT_TEMPLATES / "qwen3.jinja").read_text()
    return tokenizer


# --- rendering equals the models' own chat templates ----------------------------------------------

@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_hermes_ids_equal_qwen2_5_chat_template(qwen2_5_tokenizer, messages):
    template = get_template("qwen2_5", qwen2_5_tokenizer)
    assert template.agent.name == "hermes"  # ms-swift's default for the Qwen templates
    expected = qwen2_5_tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=True, return_dict=False)
    assert template.encode(messages, tools=TOOLS).input_ids == list(expected)


@pytest.mark.parametrize("messages", PROMPTS)
def test_hermes_prompt_ids_equal_qwen2_5_chat_template(qwen2_5_tokenizer, messages):
    template = get_template("qwen2_5", qwen2_5_tokenizer)
    expected = qwen2_5_tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=True, add_generation_prompt=True,
                                                     return_dict=False)
    assert template.encode_prompt(messages, tools=TOOLS) == list(expected)


@pytest.mark.parametrize("messages", CONVERSATIONS + PROMPTS)
def test_hermes_on_qwen3_equals_qwen3_chat_template(qwen3_tokenizer, messages):
    template = get_template("qwen3", qwen3_tokenizer)
    prompt = messages[-1]["role"] != "assistant"
    expected = qwen3_tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=prompt)
    assert template.render(messages, tools=TOOLS, add_generation_prompt=prompt)[0] == expected


def test_tokenizer_template_renders_tools_itself_and_parses_them_as_hermes(qwen2_5_tokenizer):
    """--template tokenizer: Qwen2.5's own template writes the tools; its calls are found to be hermes calls."""
    native = get_template("tokenizer", qwen2_5_tokenizer)
    assert native.native_tools and native.agent is None and native.tool_parser.name == "hermes"
    registered = get_template("qwen2_5", qwen2_5_tokenizer)
    for messages in CONVERSATIONS:
        ours, theirs = registered.encode(messages, tools=TOOLS), native.encode(messages, tools=TOOLS)
        assert (theirs.input_ids, theirs.labels) == (ours.input_ids, ours.labels)
    assert native.tool_call_turn_end == "<|im_end|>"


def test_tokenizer_template_without_tool_rendering_needs_agent_template(tiny_template):
    """The tiny model's own template (plain ChatML) ignores tools: it must not drop them silently."""
    tokenizer = tiny_template.tokenizer
    plain = get_template("tokenizer", tokenizer)
    assert not plain.native_tools and plain.tool_parser is None
    with pytest.raises(ValueError, match="does not render tools.*--agent_template"):
        plain.encode(THREE_ROUNDS, tools=TOOLS)
    written = get_template("tokenizer", tokenizer, agent_template="hermes")
    assert written.encode(THREE_ROUNDS, tools=TOOLS).input_ids == \
        get_template("chatml", tokenizer, agent_template="hermes").encode(THREE_ROUNDS, tools=TOOLS).input_ids


def test_template_without_default_agent_template_asks_for_one(tiny_template):
    chatml = get_template("chatml", tiny_template.tokenizer)
    assert chatml.agent is None
    with pytest.raises(ValueError, match="has no agent template.*--agent_template"):
        chatml.encode(THREE_ROUNDS, tools=TOOLS)
    with pytest.raises(ValueError, match="unknown --agent_template 'hermez'"):
        get_template("chatml", tiny_template.tokenizer, agent_template="hermez")


def test_ms_swift_and_openai_shapes_render_alike(tiny_template):
    ms_swift = [THREE_ROUNDS[0],
                {"role": "tool_call", "content": json.dumps({"name": "calculator",
                                                             "arguments": {"expression": "347 * 5821"}})},
                {"role": "tool_call", "content": {"name": "calculator", "arguments": {"expression": "12 * 13"}}},
                {"role": "tool_response", "content": '{"result": 2019887}'},
                {"role": "tool_response", "content": {"result": 156}}]
    openai = [THREE_ROUNDS[0], {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "347 * 5821"}'}},
        {"id": "b", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12 * 13"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": '{"result": 2019887}'},
        {"role": "tool", "tool_call_id": "b", "content": '{"result": 156}'}]
    expected = tiny_template.render(THREE_ROUNDS[:4], tools=TOOLS, add_generation_prompt=True)[0]
    assert tiny_template.render(ms_swift, tools=json.dumps(TOOLS), add_generation_prompt=True)[0] == expected
    assert tiny_template.render(openai, tools=TOOLS, add_generation_prompt=True)[0] == expected


# --- render -> parse round trip --------------------------------------------------------------------

_WORDS = ["alpha", "Zürich", "a \"quoted\" word", "line\nbreak", "tab\there", "</tool_call> inside", "Action: x",
          "✿FUNCTION✿: y", "{braces}", "emoji 🙂", "", "back\\slash", "Observation: z"]


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.randint(-10 ** 6, 10 ** 6)
    if kind == 1:
        return rng.choice([0.5, -2.25, 1e-3, 3.0e10])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return rng.choice(_WORDS)
    if kind in (4, 5):
        return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def random_calls(rng: random.Random) -> list[ToolCall]:
    names = ["calculator", "weather", "get_time", "search_web"]
    return [ToolCall(rng.choice(names), {f"arg_{j}": random_value(rng) for j in range(rng.randint(0, 3))})
            for _ in range(rng.randint(1, 3))]


@pytest.mark.parametrize("name", sorted(AGENT_TEMPLATE_REGISTRY))
def test_format_then_parse_gives_back_the_calls(name):
    agent = get_agent_template(name)
    for seed in range(300):
        rng = random.Random(seed)
        calls = random_calls(rng)
        content = rng.choice(["", "Let me compute that.", "Thought: I need a tool.", "Two lines\nof thought."])
        parsed = agent.parse(agent.format_calls(content, calls))
        assert [p.call for p in parsed.calls] == calls, seed
        assert parsed.content == content.strip(), seed
        assert all(p.ok and p.error is None for p in parsed.calls)


@pytest.mark.parametrize("name", sorted(AGENT_TEMPLATE_REGISTRY))
def test_trained_tokens_of_a_call_turn_parse_back_to_its_calls(tiny_template, name):
    """Through the whole template: the tokens that carry loss in a call turn hold exactly its calls."""
    template = get_template("qwen2_5", tiny_template.tokenizer, agent_template=name)
    for seed in range(40):
        calls = random_calls(random.Random(seed))
        messages = [THREE_ROUNDS[0], {"role": "assistant", "content": "",
                                      "tool_calls": [c.as_message_call() for c in calls]}]
        encoded = template.encode(messages, tools=TOOLS)
        trained = template.tokenizer.decode([t for t in encoded.labels if t != IGNORE_INDEX])
        assert trained.endswith("<|im_end|>")
        assert template.parse_tool_calls(trained.removesuffix("<|im_end|>")).valid_calls == calls, seed


@pytest.mark.parametrize("name", sorted(AGENT_TEMPLATE_REGISTRY))
def test_junk_never_raises_and_bad_calls_are_reported(name):
    agent = get_agent_template(name)
    rng = random.Random(0)
    pieces = [agent.format_calls("", random_calls(rng)) for _ in range(20)] + _WORDS
    for _ in range(500):
        text = "".join(rng.choice(pieces)[rng.randrange(5):] for _ in range(rng.randint(1, 4)))
        cut = text[:rng.randrange(len(text) + 1)]
        parsed = agent.parse(cut)
        for found in parsed.calls:
            assert found.ok != (found.error is not None) and found.text
            if found.ok:
                assert found.call.name in found.text


def test_hermes_reports_each_malformed_call():
    agent = get_agent_template("hermes")
    text = ('Sure.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>\n'
            "<tool_call>\nnot json at all\n</tool_call>\n"
            '<tool_call>{"arguments": {}}</tool_call>\n'
            '<tool_call>{"name": "calculator", "arguments": [1, 2]}</tool_call>\n'
            '<tool_call>{"name": "weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call>\n'
            '<tool_call>\n{"name": "calculator", "argu')
    parsed = agent.parse(text)
    assert parsed.content == "Sure."
    assert [p.ok for p in parsed.calls] == [True, False, False, False, True, False]
    assert parsed.calls[0].call == ToolCall("calculator", {"expression": "1+1"})
    assert "not JSON" in parsed.calls[1].error
    assert "'name'" in parsed.calls[2].error
    assert "JSON object" in parsed.calls[3].error
    assert parsed.calls[4].call == ToolCall("weather", {"city": "Oslo"})  # OpenAI-style string arguments
    assert "without a closing </tool_call>" in parsed.calls[5].error
    assert agent.get_toolcall(text) == parsed.calls  # ms-swift's name for the same


def test_react_reports_each_malformed_call():
    agent = get_agent_template("react_en")
    text = ("Thought: two tools.\nAction: calculator\nAction Input: {\"expression\": \"2*3\"}\n"
            "Action: weather\nAction: calculator\nAction Input: {'expression': '4*5'}\n"  # ms-swift's dict repr
            "Action Input: {\"x\": 1}\nAction: calculator\nAction Input: [oops\nObservation: {\"result\": 6}\n"
            "Action: ignored\nAction Input: {}")
    parsed = agent.parse(text)
    assert parsed.content == "Thought: two tools."
    assert [(p.ok, p.call.name if p.ok else None) for p in parsed.calls] == [
        (True, "calculator"), (False, None), (True, "calculator"), (False, None), (False, None)]
    assert parsed.calls[2].call.arguments == {"expression": "4*5"}
    assert "without an Action Input" in parsed.calls[1].error
    assert "without an Action line" in parsed.calls[3].error
    assert "not JSON" in parsed.calls[4].error
    assert agent.parse("Thought: easy.\nFinal Answer: 42").calls == []


def test_call_markup_is_the_text_around_the_arguments():
    """What a server needs to stream calls or constrain decoding: the literal text before and after the JSON."""
    for name in AGENT_TEMPLATE_REGISTRY:
        agent = get_agent_template(name)
        begin, end = agent.call_markup("calculator")
        text = agent.format_calls("", [ToolCall("calculator", {"expression": "1"})])
        assert text.startswith(agent.call_start) and text.startswith(begin + '{"expression": "1"}' + end)
    assert get_agent_template("react_en").stop_words == ("Observation:",)
    assert get_agent_template("hermes").stop_words == ()


# --- tool-result turns as ids after sampled ids (multi-turn RL) ------------------------------------

def _sampled_turn(template, conversation, results, tools):
    """The text a model samples for the calling assistant message (the last of `conversation`): from the prompt
    to the end of its trained span, as the template renders it with the results after it."""
    prompt = template.render(conversation[:-1], add_generation_prompt=True, tools=tools)[0]
    text, spans = template.render(conversation + results, add_generation_prompt=True, tools=tools)
    assert text.startswith(prompt)
    return text[len(prompt):spans[-1][1]]


@pytest.mark.parametrize("name", sorted(AGENT_TEMPLATE_REGISTRY) + ["tokenizer"])
def test_prompt_plus_sampled_plus_tool_turn_ids_equal_the_rendered_conversation(qwen2_5_tokenizer, name):
    template = (get_template("tokenizer", qwen2_5_tokenizer) if name == "tokenizer"
                else get_template("qwen2_5", qwen2_5_tokenizer, agent_template=name))
    tokenizer = template.tokenizer
    for seed in range(20):
        rng = random.Random(seed)
        calls = [ToolCall("calculator", {"expression": f"{rng.randint(100, 999)} * {rng.randint(10, 99)}"})
                 for _ in range(rng.randint(1, 3))]
        conversation = [THREE_ROUNDS[0], {"role": "assistant", "content": rng.choice(["", "Computing."]),
                                          "tool_calls": [c.as_message_call() for c in calls]}]
        results = [{"role": "tool", "content": json.dumps({"result": rng.randint(0, 10 ** 6)})} for _ in calls]
        sampled = _sampled_turn(template, conversation, results, TOOLS)
        assert sampled.endswith(template.tool_call_turn_end)
        ids = (template.encode_prompt(conversation[:1], tools=TOOLS)
               + tokenizer(sampled, add_special_tokens=False)["input_ids"]
               + template.encode_tool_turn(conversation + results, tools=TOOLS))
        assert ids == template.encode_prompt(conversation + results, tools=TOOLS), seed
    piece = template.render_tool_turn(conversation + results, tools=TOOLS)
    assert results[0]["content"] in piece


def test_tool_turn_needs_calls_then_results(tiny_template):
    with pytest.raises(ValueError, match="ends with an assistant message with tool calls"):
        tiny_template.render_tool_turn(THREE_ROUNDS[:1], tools=TOOLS)
    with pytest.raises(ValueError, match="ends with an assistant message with tool calls"):
        tiny_template.render_tool_turn(CONVERSATIONS[2] + [{"role": "tool", "content": "x"}])


# --- loss masks --------------------------------------------------------------------------------

def runs(template, messages, loss_scale="default"):
    """The encoded row as consecutive runs of (carries loss, text), decoded token by token."""
    encoded = template.encode(messages, tools=TOOLS, loss_scale=loss_scale)
    out = []
    for token, label in zip(encoded.input_ids, encoded.labels):
        trained = label != IGNORE_INDEX
        assert label in (IGNORE_INDEX, token)
        piece = template.tokenizer.decode([token])
        if out and out[-1][0] == trained:
            out[-1] = (trained, out[-1][1] + piece)
        else:
            out.append((trained, piece))
    assert "".join(text for _, text in out) == encoded.text
    return out


def test_three_round_hermes_row_trains_on_calls_and_answer_only(tiny_template):
    """Token by token: the tool list, the question and every tool result carry no loss; each call turn and the
    final answer do, with their <|im_end|>."""
    got = runs(tiny_template, THREE_ROUNDS)
    trained = [text for on, text in got if on]
    untrained = [text for on, text in got if not on]
    assert trained == [
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 5821"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 13"}}\n</tool_call><|im_end|>',
        'Now the sum.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2019887 + 156"}}\n'
        '</tool_call><|im_end|>',
        'Let me check the weather.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris", "days": 1}}\n'
        '</tool_call><|im_end|>',
        "The sum is 2020043, and Paris is sunny.\n#### 2020043<|im_end|>"]
    assert untrained[0].startswith("<|im_start|>system\nYou are Qwen") and "# Tools" in untrained[0]
    assert untrained[0].endswith("<|im_start|>user\nWhat is 347 * 5821 + 12 * 13, and the weather in Paris?"
                                 "<|im_end|>\n<|im_start|>assistant\n")
    assert untrained[1:] == [
        '\n<|im_start|>user\n<tool_response>\n{"result": 2019887}\n</tool_response>\n<tool_response>\n'
        '{"result": 156}\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
        '\n<|im_start|>user\n<tool_response>\n{"result": 2020043}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n",
        "\n<|im_start|>user\n<tool_response>\nSunny, 21 °C\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        "\n"]


def test_three_round_react_row_masks_observations_inside_the_assistant_turn(tiny_template):
    template = get_template("qwen2_5", tiny_template.tokenizer, agent_template="react_en")
    trained = [text for on, text in runs(template, THREE_ROUNDS) if on]
    assert trained == [
        'Action: calculator\nAction Input: {"expression": "347 * 5821"}\nAction: calculator\n'
        'Action Input: {"expression": "12 * 13"}\nObservation:',
        'Now the sum.\nAction: calculator\nAction Input: {"expression": "2019887 + 156"}\nObservation:',
        'Let me check the weather.\nAction: weather\nAction Input: {"city": "Paris", "days": 1}\nObservation:',
        "The sum is 2020043, and Paris is sunny.\n#### 2020043<|im_end|>"]
    assert template.tool_call_turn_end == "Observation:"
    last_round = [text for on, text in runs(template, THREE_ROUNDS, "last_round") if on]
    assert last_round == trained[-1:]


def test_last_round_trains_what_follows_the_last_tool_result(tiny_template):
    assert [text for on, text in runs(tiny_template, THREE_ROUNDS, "last_round") if on] == [
        "The sum is 2020043, and Paris is sunny.\n#### 2020043<|im_end|>"]
    everything = runs(tiny_template, THREE_ROUNDS, "all")
    assert len(everything) == 1 and everything[0][0]


def test_ignore_empty_think_and_think_prefix(tiny_template):
    tokenizer = load_tokenizer(resolve_model("tiny-random/qwen3"))
    template = get_template("qwen3", tokenizer)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    assert [t for on, t in runs(template, messages) if on] == ["<think>\n\n</think>\n\nHello.<|im_end|>"]
    assert [t for on, t in runs(template, messages, "ignore_empty_think") if on] == ["Hello.<|im_end|>"]
    thinking = [messages[0], {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello."}]
    assert [t for on, t in runs(template, thinking, "last_round+ignore_think_prefix") if on] == [
        "Greet back.\n</think>\n\nHello.<|im_end|>"]
    assert [t for on, t in runs(template, thinking, "ignore_empty_think") if on] == [
        "<think>\nGreet back.\n</think>\n\nHello.<|im_end|>"]


def test_loss_scale_names():
    assert parse_loss_scale("last_round+ignore_empty_think").refinements == ("ignore_empty_think",)
    assert parse_loss_scale("ignore_think_prefix").base == "default"
    for name in ("hermes", "react", "qwen", "agentflan", "alpha_umi", "last_round+hermes"):
        with pytest.raises(NotBuiltError, match="not built"):
            parse_loss_scale(name)
    with pytest.raises(ValueError, match="unknown part 'bogus'"):
        parse_loss_scale("default+bogus")
