"""`--reward_funcs llm_judge`: a generative judge. Any OpenAI-compatible chat server (`--judge_model_server`) is asked
about each completion with a prompt template, and a score is read from its reply. Also the interface of other
judges (plugins), after ms-swift's GenRM plugin (`swift/rewards/rm_plugin.py`: `GenRMPlugin` subclasses its
reward-model plugin and overrides how the judge is asked and how its reply is read).

`LlmJudge` is both the built-in judge and the base class of judge plugins. Its two hooks are
`build_messages(sample)`, the conversation sent to the judge about one completion, and `extract_reward(reply)`, the
reward a reply holds, or None when it holds none (ms-swift's `extract_reward`). ms-swift turns None into 0; here it
is MISSING: the completion has no valid reward, is left out of its group's advantage statistics and is counted in
`rewards/<name>/missing`, so a judge that cannot answer neither rewards nor punishes. A plugin subclasses `LlmJudge`,
overrides either hook and registers with `register_judge(name, cls)` from an `--external_plugins` file;
`--reward_funcs name` then runs it against the same `--judge_model_server`, with the same flags. ms-swift selects
its plugins with `--reward_model_plugin`, one per in-process `--reward_model`; a judge here is served, so it is
selected by its reward name instead, and two judges (say, one for correctness and one for tone) can score one run.

The built-in judge: the template (`--judge_prompt_template PATH`, else DEFAULT_TEMPLATE) filled from the sample is
the judge's one user message; the score is the last `Score: N` or `[[N]]` of the reply with N in [0, `max_score`]
(10), divided by `max_score`; anything else is missing.
"""
from __future__ import annotations

import inspect
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ...utils import get_logger
from ...utils.service_client import ServerUnavailable
from .functions import FAILED, MISSING, REWARD_REGISTRY, Unscored, register_reward

logger = get_logger("swiftlike.rl")

DEFAULT_TEMPLATE = """You are grading an AI assistant's answer to a user's request.

[Request]
{prompt}

[Answer]
{completion}

Judge whether the answer is correct, complete and relevant to the request. Explain briefly, then end your reply \
with one line of the form "Score: N", where N is an integer from 0 (wrong or useless) to 10 (excellent)."""
PLACEHOLDER = re.compile(r"\{(\w+)\}")
NUMBER = r"(-?\d+(?:\.\d+)?)"
# `[[N]]` (ms-swift's AsyncGenRMReward, MT-Bench) or `Score: N` / `score = N`, with markdown bold allowed around N
SCORE = re.compile(rf"\[\[\s*{NUMBER}\s*\]\]|\bscore\s*[:=]\s*\**\s*{NUMBER}", re.IGNORECASE)
# batch columns that are not the row's: the judge's sample holds the row's own columns
NOT_ROW_COLUMNS = ("completion_ids", "completion_lengths", "prompts", "messages")


class JudgeServer(Protocol):
    """What a judge asks: `ChatClient` (infer/engine/chat_client.py), one or more OpenAI-compatible servers."""

    model_name: str

    def chat(self, conversations: Sequence[list[dict]], *, temperature: float,
             max_tokens: int) -> list[str | ServerUnavailable]: ...


class LlmJudge:
    """The built-in generative judge and the base class of judge plugins (see the module docstring).

    Built by `build_reward_funcs` with the judge flags of this run; `judge_server` is the one server connection the
    recipe opens for every judge of the run. `max_score` is the top of the built-in template's scale."""

    max_score = 10.0

    def __init__(self, judge_server: JudgeServer | None = None, judge_prompt_template: str | None = None,
                 judge_temperature: float = 0.0, judge_max_tokens: int = 512, reward_on_error: str = "stop"):
        if judge_server is None:
            raise ValueError(f"{type(self).__name__} is a generative judge: serve a chat model (`swiftlike deploy "
                             "--model JUDGE`, `vllm serve`) and give its URL with --judge_model_server")
        self.server, self.temperature, self.max_tokens = judge_server, judge_temperature, judge_max_tokens
        self.on_error = reward_on_error
        self.template_origin = judge_prompt_template or "the built-in template"
        if judge_prompt_template is None:
            self.template = DEFAULT_TEMPLATE
        else:
            path = Path(judge_prompt_template).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"--judge_prompt_template {judge_prompt_template}: no such file")
            self.template = path.read_text(encoding="utf-8")
        if "{completion}" not in self.template and "{conversation}" not in self.template:
            raise ValueError(f"--judge_prompt_template {judge_prompt_template}: the template has no {{completion}} "
                             "(or {conversation}) placeholder, so the judge would never see the answer it scores")

    # ------------------------------------------------------------------ hooks a plugin may override
    def build_messages(self, sample: dict[str, Any]) -> list[dict]:
        """The conversation the judge answers about one completion. `sample` holds the row's dataset columns,
        `prompt` (the last user message), `completion`, `messages` (the prompt's messages and the completion as the
        assistant turn; a multi-turn trajectory's whole conversation) and `conversation` (`messages` as
        `Role: content` lines, ms-swift's `messages_to_query`). The built-in fills the template with them."""
        return [{"role": "user", "content": self.fill(sample)}]

    def extract_reward(self, reply: str) -> float | None:
        """The reward in the judge's reply, or None when it holds none (the completion's reward is then missing).
        The built-in: the last `Score: N` or `[[N]]`, N in [0, max_score], divided by max_score."""
        matches = SCORE.findall(reply)
        if not matches:
            return None
        value = float(next(group for group in matches[-1] if group))
        return value / self.max_score if 0.0 <= value <= self.max_score else None

    # ------------------------------------------------------------------ the reward
    def fill(self, sample: dict[str, Any]) -> str:
        """The template with each `{name}` replaced by the sample's value (text as is, anything else as JSON); other
        braces are left alone, so a template may show JSON. A name the sample lacks is a data error."""
        def value(match: re.Match) -> str:
            name = match.group(1)
            if name not in sample:
                raise ValueError(f"{self.template_origin}: placeholder {{{name}}} is neither a judge field (prompt, "
                                 "completion, conversation, messages) nor a column of the dataset (its columns: "
                                 f"{', '.join(k for k in sample if k not in JUDGE_FIELDS) or 'none but messages'})")
            text = sample[name]
            return text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
        return PLACEHOLDER.sub(value, self.template)

    def __call__(self, completions: Sequence[str], prompts: Sequence[list[dict]] | None = None,
                 **columns: Any) -> list[float | Unscored]:
        if prompts is None or len(prompts) != len(completions):
            raise ValueError(f"{type(self).__name__} needs one prompt (messages) per completion")
        samples = [judge_sample(i, completion, prompt, columns)
                   for i, (completion, prompt) in enumerate(zip(completions, prompts))]
        replies = self.server.chat([self.build_messages(s) for s in samples], temperature=self.temperature,
                                   max_tokens=self.max_tokens)
        failures = [r for r in replies if isinstance(r, ServerUnavailable)]
        if failures and self.on_error != "skip":
            raise failures[0]
        if failures:
            logger.warning("%s: %d of %d judge calls failed; their groups are dropped (--reward_on_error skip). "
                           "First: %s", type(self).__name__, len(failures), len(replies), failures[0])
        rewards: list[float | Unscored] = []
        for reply in replies:
            if isinstance(reply, ServerUnavailable):
                rewards.append(FAILED)
                continue
            reward = self.extract_reward(reply)
            rewards.append(MISSING if reward is None else float(reward))
        return rewards


JUDGE_FIELDS = ("prompt", "completion", "messages", "conversation")


def judge_sample(i: int, completion: str, prompt: list[dict], columns: dict[str, Any]) -> dict[str, Any]:
    """Completion `i`'s sample for `build_messages`: its row's columns and the judge fields."""
    sample = {k: v[i] for k, v in columns.items() if k not in NOT_ROW_COLUMNS and isinstance(v, Sequence)}
    messages = (columns["messages"][i] if columns.get("messages") is not None
                else [*prompt, {"role": "assistant", "content": completion}])
    user_turns = [m.get("content") for m in prompt if m.get("role") == "user"]
    sample.update(prompt=user_turns[-1] if user_turns else "", completion=completion, messages=messages,
                  conversation="\n".join(f"{str(m.get('role', '')).capitalize()}: {m.get('content')}"
                                         for m in messages if m.get("content")))
    return sample


def register_judge(name: str, judge: type[LlmJudge] | None = None):
    """Register a judge plugin, a subclass of `LlmJudge`, as the reward `name` (`--reward_funcs name`). Without
    `judge` this is a decorator: `@register_judge("my_judge")`."""
    if judge is None:
        return lambda cls: register_judge(name, cls)
    if not (inspect.isclass(judge) and issubclass(judge, LlmJudge)):
        raise ValueError(f"judge {name!r} must be a subclass of LlmJudge (overriding build_messages and/or "
                         f"extract_reward), got {judge!r}; register other rewards with register_reward")
    return register_reward(name, judge)


def judge_names(names: Sequence[str]) -> list[str]:
    """The `--reward_funcs` names that are generative judges (the recipe opens their server)."""
    return [n for n in names if inspect.isclass(REWARD_REGISTRY.get(n)) and issubclass(REWARD_REGISTRY[n], LlmJudge)]


register_reward("llm_judge", LlmJudge)
