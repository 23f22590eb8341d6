"""Token in, token out on every registered chat template and the tokenizer's own: 3-turn trajectories through the
loop's own per-turn code (`TrajectoryRun.after_turn`), fed the ids a model would sample for a known conversation
(a random model never writes a tool call), with the real schedulers and the real tools.

Each trajectory must hold exactly the sampled ids with the inserted ids between them, equal the template's
rendering of the whole conversation at once, and carry loss (mask 1) on exactly the tokens the template trains.
"""
import asyncio
import json
from pathlib import Path

import pytest
import trl
from trajectories import VERSION, drive
from model_ids import TINY

from swiftlike.model import load_tokenizer, resolve_model
from swiftlike.rollout.multi_turn import Env, RolloutRequest, build_scheduler, envs, register_env
from swiftlike.template import IGNORE_INDEX, TEMPLATE_REGISTRY, get_template
from swiftlike.tools import TOOL_REGISTRY, call_tool

# Each registered template with the tokenizer of a tiny model that has its special tokens (test_template.py's).
TOKENIZER_FOR = {"chatml": "smollm2", "qwen": "qwen2", "qwen2_5": "qwen2_5", "qwen3": "qwen3",
                 "llama3": "llama3", "smollm2": "smollm2"}
QWEN2_5_JINJA = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
# (chat template, agent template): every registered one with every agent template, and the tokenizer's own
# template (the tiny model's ChatML, which does not render tools, and Qwen2.5's, which does). llama3 trims every
# message, which results inside the assistant's turn cannot survive (test_trimming_template_refuses_inline_results).
CASES = [(name, agent) for name in sorted(TOKENIZER_FOR) for agent in ("hermes", "react_en", "qwen_en")
         if name != "llama3" or agent == "hermes"] + \
    [("tokenizer", "hermes"), ("tokenizer", "react_en"), ("tokenizer:qwen2_5", None)]
# The tiny llama3 model has SmolLM2's BPE, whose pre-tokenizer gives the last of the "\n\n" that ends a Llama 3
# header to the word after it when both are tokenized together: a prompt ending in a header (what a model is
# given, and what it samples after) is then tokenized differently from the same text inside a whole conversation,
# so ids can match the whole rendering only as text there. (Llama 3's own tokenizer keeps newlines apart.)
SPLITS_AFTER_HEADERS = {"llama3"}
TOOLS = [tool.schema() for tool in TOOL_REGISTRY.values()]


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result(name, **arguments):
    return {"role": "tool", "content": call_tool(name, arguments), "name": name}


QUESTION = {"role": "user", "content": "What is 347 * 5821 + 12, and how many r in strawberry?"}
# What the model is made to sample, and the real tools' answers: the trajectory the tool scheduler must build.
TOOL_CONVERSATION = [
    QUESTION,
    {"role": "assistant", "content": "", "tool_calls": [call("calculator", expression="347 * 5821"),
                                                        call("count_letters", word="strawberry", letter="r")]},
    tool_result("calculator", expression="347 * 5821"),
    tool_result("count_letters", word="strawberry", letter="r"),
    {"role": "assistant", "content": "Now the sum.", "tool_calls": [call("calculator", expression="2019887 + 12")]},
    tool_result("calculator", expression="2019887 + 12"),
    {"role": "assistant", "content": "The sum is 2019899 and strawberry has 3 r.\n#### 2019899"},
]


@pytest.fixture(scope="module")
def tokenizers():
    cache = {}

    def get(model):
        if model not in cache:
            cache[model] = load_tokenizer(resolve_model(f"tiny-random/{model}"))
        return cache[model]
    return get


def make_template(tokenizers, name, agent):
    if name == "tokenizer:qwen2_5":
        tokenizer = load_tokenizer(resolve_model(TINY))
        tokenizer.chat_template = QWEN2_5_JINJA.read_text()
        return get_template("tokenizer", tokenizer)
    if name == "tokenizer":  # the tiny model's own chat template, on a tokenizer no other case changes
        return get_template("tokenizer", load_tokenizer(resolve_model(TINY)), agent_template=agent)
    tokenizer = tokenizers(TOKENIZER_FOR[name])
    tokenizer.chat_template = TEMPLATE_REGISTRY[name].chat_template
    return get_template(name, tokenizer, agent_template=agent)


def sampled_turns(template, conversation, tools):
    """The text of each turn a model samples for `conversation`: its trained pieces as the template renders the
    whole conversation (each ends where the template ends a turn: `<|im_end|>`, `Observation:`)."""
    text, spans = template.render(conversation, tools=tools)
    return [text[start:end] for start, end in spans]


def runs_of(mask):
    """[(value, length), ...] of consecutive equal mask values."""
    out = []
    for value in mask:
        if out and out[-1][0] == value:
            out[-1][1] += 1
        else:
            out.append([value, 1])
    return [tuple(run) for run in out]


def check_exact(template, trajectory, choices, conversation, tools):
    """trained ids == sampled ids + inserted ids; == the whole conversation rendered at once; mask == its labels."""
    sampled = [choice.token_ids for choice in choices]
    ids = trajectory.completion_ids
    assert len(trajectory.loss_mask) == len(trajectory.logprobs) == len(ids)
    assert [tid for tid, m in zip(ids, trajectory.loss_mask) if m] == [tid for turn in sampled for tid in turn]
    ones = [length for value, length in runs_of(trajectory.loss_mask) if value == 1]
    assert ones == [len(turn) for turn in sampled]  # each turn's sampled ids in one piece, inserted ids between
    assert runs_of(trajectory.loss_mask)[-1][0] == 1  # the trajectory ends on sampled ids
    assert [lp for lp, m in zip(trajectory.logprobs, trajectory.loss_mask) if m] == \
        [entry.logprob for choice in choices for entry in choice.logprobs]
    assert all(lp == 0.0 for lp, m in zip(trajectory.logprobs, trajectory.loss_mask) if not m)
    assert trajectory.version_spans == [(VERSION, len(ids))]

    whole = template.encode(conversation, tools=tools)
    first_answer = next(i for i, m in enumerate(conversation) if m["role"] == "assistant")
    prompt = template.encode_prompt(conversation[:first_answer], tools=tools)
    assert trajectory.prompt_ids == prompt
    full = trajectory.prompt_ids + ids
    text = template.tokenizer.decode(full)
    assert whole.text.startswith(text) and whole.text[len(text):].strip() == ""
    if template.meta.name in SPLITS_AFTER_HEADERS:
        # Not even the generation prompt's ids begin the whole conversation's: see SPLITS_AFTER_HEADERS.
        assert prompt != whole.input_ids[:len(prompt)]
        return
    assert full == whole.input_ids[:len(full)]
    assert template.tokenizer.decode(whole.input_ids[len(full):]).strip() == ""  # the separator after the end
    labels = whole.labels[len(prompt):len(full)]
    assert trajectory.loss_mask == [int(label != IGNORE_INDEX) for label in labels]
    # the recorded conversation renders as the one sampled
    assert template.render(trajectory.messages, tools=tools)[0] == template.render(conversation, tools=tools)[0]


@pytest.mark.parametrize("name,agent", CASES)
def test_three_turn_tool_trajectory_is_exact(tokenizers, name, agent):
    template = make_template(tokenizers, name, agent)
    scheduler = build_scheduler("tool_call_scheduler", max_turns=None, gym_env=None, template=template)
    turns = sampled_turns(template, TOOL_CONVERSATION, TOOLS)
    assert len(turns) == 3
    request = RolloutRequest(messages=[QUESTION], tools=TOOLS, data_dict={"solution": "2019899"})
    trajectory, choices = asyncio.run(drive(template, scheduler, request, turns))
    check_exact(template, trajectory, choices, TOOL_CONVERSATION, TOOLS)
    assert trajectory.turns == 3 and trajectory.tool_calls == 3 and trajectory.tool_errors == 0
    assert not trajectory.truncated and trajectory.finish_reason == "stop"
    assert [m["content"] for m in trajectory.messages if m["role"] == "tool"] == \
        ['{"result": 2019887}', '{"count": 3}', '{"result": 2019899}']


class ScriptedEnv(Env):
    """A three-step environment: fixed observations, reward 1 on the step whose answer names the step number."""

    def __init__(self, env_config):
        super().__init__(env_config)
        self.steps = 0

    async def reset(self, request):
        return "Count with me. Say 1.", {}, "You count."

    async def step(self, action):
        self.steps += 1
        reward = float(str(self.steps) in action[-1]["content"])
        return f"Now say {self.steps + 1}.", reward, self.steps == 3, {}


GYM_CONVERSATION = [
    {"role": "system", "content": "You count."}, {"role": "user", "content": "Count with me. Say 1."},
    {"role": "assistant", "content": "1"}, {"role": "user", "content": "Now say 2."},
    {"role": "assistant", "content": "Two."}, {"role": "user", "content": "Now say 3."},
    {"role": "assistant", "content": "3, done."},
]


@pytest.fixture(scope="module")
def scripted_env():
    register_env("test_scripted_count", ScriptedEnv)
    yield "test_scripted_count"
    del envs["test_scripted_count"]


@pytest.mark.parametrize("name", sorted(TOKENIZER_FOR) + ["tokenizer"])
def test_three_turn_environment_trajectory_is_exact(tokenizers, scripted_env, name):
    """Observations come back as user turns (Template.encode_user_turn), rewards per step."""
    template = make_template(tokenizers, name, None)
    scheduler = build_scheduler("gym_scheduler", max_turns=None, gym_env=scripted_env, template=template)
    turns = sampled_turns(template, GYM_CONVERSATION, None)
    request = RolloutRequest(messages=[{"role": "user", "content": "replaced by the environment"}])
    trajectory, choices = asyncio.run(drive(template, scheduler, request, turns))
    check_exact(template, trajectory, choices, GYM_CONVERSATION, None)
    assert trajectory.step_rewards == [1.0, 0.0, 1.0] and trajectory.infos["total_reward"] == 2.0
    assert trajectory.turns == 3 and trajectory.env_error is None


def test_tool_results_turn_text_is_the_templates(tokenizers):
    """The ids between turns are the template's text for the results and the next header, nothing else."""
    template = make_template(tokenizers, "qwen2_5", "hermes")
    scheduler = build_scheduler("tool_call_scheduler", max_turns=None, gym_env=None, template=template)
    turns = sampled_turns(template, TOOL_CONVERSATION, TOOLS)
    request = RolloutRequest(messages=[QUESTION], tools=TOOLS)
    trajectory, _ = asyncio.run(drive(template, scheduler, request, turns))
    inserted = []
    for tid, m in zip(trajectory.completion_ids, trajectory.loss_mask):
        if not m:
            inserted.append(tid)
    text = template.tokenizer.decode(inserted)
    assert text == ('\n<|im_start|>user\n<tool_response>\n{"result": 2019887}\n</tool_response>\n<tool_response>\n'
                    '{"count": 3}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
                    '\n<|im_start|>user\n<tool_response>\n{"result": 2019899}\n</tool_response><|im_end|>\n'
                    '<|im_start|>assistant\n')
    assert json.loads(trajectory.messages[2]["content"]) == {"result": 2019887}


def test_trimming_template_refuses_inline_results(tokenizers):
    template = make_template(tokenizers, "llama3", "react_en")
    with pytest.raises(ValueError, match="trims every message.*use --agent_template hermes"):
        build_scheduler("tool_call_scheduler", max_turns=None, gym_env=None, template=template)
