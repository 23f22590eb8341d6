"""The built-in schedulers, under ms-swift's names: `tool_call_scheduler`, `math_tip_trick`, `gym_scheduler`.

Model output is untrusted input here: a call that does not parse, names a tool that was not offered, raises,
times out or answers with something other than text becomes a tool result saying so (a JSON `{"error": ...}`,
as the tools themselves report bad calls), and the trajectory goes on. An environment that raises ends only its
own trajectory (`EnvFailure` -> `Trajectory.env_error`).

Messages, counts and ids agree: a call turn's assistant message lists every call the model made, in order, one
tool result each (a call that did not parse as `{"type": "function", "function": {"name": "", "arguments": {}},
"text": <what the model wrote>, "error": <why it did not parse>}`), `tool_calls` counts them and `tool_errors` the
results that are errors; a call turn that cannot be continued (cut, or ended on another token than the end of a
call turn) runs nothing and counts nothing.
"""
from __future__ import annotations

import asyncio
import copy
import json

from ...infer.protocol import Choice
from ...rl.rewards.functions import MathAccuracy
from ...template import ParsedCall, Template, normalize_tools
from ...tools.sandbox import ToolLimits, run_tool_isolated
from ...utils import get_logger
from .envs import Env, get_env
from .scheduler import EnvFailure, MultiTurnScheduler, tool_turn_ids
from .trajectory import RolloutRequest

logger = get_logger("swiftlike.rollout")


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


class ToolCallScheduler(MultiTurnScheduler):
    """Tool loops with the agent template: each assistant turn's calls are parsed (`template.parse_tool_calls`),
    run, and their results appended as a tool turn; a turn without calls ends the trajectory.

    Tools are those the row offers (`tools` column) that are registered (built-ins, and `register_tool` in
    `--external_plugins` files); each call runs in the tool sandbox (`swiftlike.tools.sandbox`: a separate
    process with no network and limits on time, CPU and memory, `tool_limits`). ReAct-style agent templates
    stop each turn at their observation keyword (`stop_words`), where the results go; a ReAct turn that ended
    otherwise made no calls to run."""

    def __init__(self, template: Template, max_turns: int | None = None, gym_env: str | None = None,
                 tool_limits: ToolLimits = ToolLimits()):
        super().__init__(template, max_turns, gym_env)
        self.tool_limits = tool_limits
        if template.tool_parser is None:
            raise ValueError(f"tool_call_scheduler parses calls with the agent template, and template "
                             f"{template.meta.name!r} has none; pass --agent_template (hermes, react_en, qwen_en)")
        if template.meta.strip_content and not template.tool_parser.results_turn:
            raise ValueError(f"template {template.meta.name!r} trims every message, so tool results written inside "
                             f"the assistant's turn (--agent_template {template.tool_parser.name}) lose their "
                             "trailing newline in a prompt but keep it in the whole conversation, and cannot be "
                             "appended as ids between sampled turns; use --agent_template hermes")

    @property
    def stop_words(self) -> tuple[str, ...]:
        return tuple(self.template.tool_parser.stop_words)

    def _calls_submitted(self, choice: Choice) -> bool:
        """Whether the turn ended where the template ends a call turn (hermes: its end-of-turn token, ReAct:
        `Observation:`), so that results can follow it; a turn that stopped on another token (the model's
        end-of-document) submitted nothing, and its calls are not run."""
        text = self.tokenizer.decode(list(choice.token_ids), skip_special_tokens=False)
        return text.rstrip().endswith(self.template.tool_call_turn_end)

    def check_finished(self, request: RolloutRequest, choice: Choice, current_turn: int) -> bool:
        text = request.messages[-1]["content"]
        if not self._calls_submitted(choice) or not self.template.parse_tool_calls(text).calls:
            return True
        return super().check_finished(request, choice, current_turn)

    def least_next_ids(self, request: RolloutRequest, choice: Choice) -> int:
        """The ids of the results turn with every result empty: no call runs unless its results could fit."""
        calls = self.template.parse_tool_calls(request.messages[-1]["content"]).calls
        return len(tool_turn_ids(self.template, [""] * len(calls)))

    async def step(self, request: RolloutRequest, choice: Choice, current_turn: int) -> dict:
        parsed = self.template.parse_tool_calls(request.messages[-1]["content"])
        offered = {tool["function"]["name"] for tool in normalize_tools(request.tools)} if request.tools else set()
        results, errors = [], 0
        for call in parsed.calls:
            if call.call is None:
                text, problem = _error(f"the tool call did not parse: {call.error}"), call.error
            elif call.call.name not in offered:
                problem = f"tool {call.call.name!r} is not offered; the tools are: {', '.join(sorted(offered)) or 'none'}"
                text = _error(problem)
            else:
                text, problem = await self.run_tool(call.call.name, call.call.arguments)
            errors += problem is not None
            results.append({"role": "tool", "content": text, **({"name": call.call.name} if call.call else {})})
        request.messages[-1] = {"role": "assistant", "content": parsed.content,
                                "tool_calls": [_message_call(call) for call in parsed.calls]}
        request.messages.extend(results)
        return {"infer_request": request, "tool_calls": len(parsed.calls), "tool_errors": errors}

    async def run_tool(self, name: str, arguments: dict) -> tuple[str, str | None]:
        """(the result text the model sees, None or why the call failed), from a sandboxed process."""
        outcome = await asyncio.to_thread(run_tool_isolated, name, arguments, self.tool_limits)
        return outcome.text, outcome.error


def _message_call(parsed: ParsedCall) -> dict:
    """A call as the assistant message lists it; one that did not parse keeps what the model wrote and why."""
    if parsed.call is not None:
        return parsed.call.as_message_call()
    return {"type": "function", "function": {"name": "", "arguments": {}}, "text": parsed.text, "error": parsed.error}


class MathTipScheduler(MultiTurnScheduler):
    """ms-swift's MathTipsScheduler: a wrong answer is cut before its `<answer>` or `</think>` and continued
    after a tip ("But wait... It seems I made a mistake,") in the same assistant turn, once.

    The tip's ids carry no loss; the sampled ids after the cut (and the turn's end-of-turn token, since the
    turn goes on) are not kept. Correctness is the `accuracy` reward against the row's `solution`."""

    tips_prompt = "But wait... It seems I made a mistake,"

    def __init__(self, template: Template, max_turns: int | None = None, gym_env: str | None = None):
        super().__init__(template, max_turns, gym_env)
        self.accuracy = MathAccuracy()
        self.tip_ids = list(self.tokenizer(self.tips_prompt, add_special_tokens=False)["input_ids"])

    def check_finished(self, request: RolloutRequest, choice: Choice, current_turn: int) -> bool:
        completion = request.messages[-1]["content"]
        if self.tips_prompt in completion:
            return True
        if "solution" not in request.data_dict:
            raise ValueError("math_tip_trick checks answers against the row's 'solution' column, which this row "
                             f"lacks (columns: {', '.join(sorted(request.data_dict)) or 'none'})")
        if self.accuracy([completion], [request.data_dict["solution"]])[0] == 1:
            return True
        return super().check_finished(request, choice, current_turn)

    def step(self, request: RolloutRequest, choice: Choice, current_turn: int) -> dict:
        sampled = list(choice.token_ids)
        if sampled and sampled[-1] in self.template.stop_token_ids:
            sampled.pop()
        kept = self._ids_before_answer(sampled)
        message = request.messages[-1]
        turn_start = len(message["content"]) - len(self.tokenizer.decode(sampled, skip_special_tokens=False))
        message["content"] = message["content"][:turn_start] + \
            self.tokenizer.decode(kept, skip_special_tokens=False) + self.tips_prompt
        return {"infer_request": request, "response_token_ids": kept + self.tip_ids,
                "response_loss_mask": [1] * len(kept) + [0] * len(self.tip_ids)}

    def _ids_before_answer(self, ids: list[int]) -> list[int]:
        """The ids up to the token that reaches `<answer>` or `</think>` (ms-swift's cut), or all of them."""
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        cut = min((text.index(mark) for mark in ("<answer>", "</think>") if mark in text), default=None)
        if cut is None:
            return ids
        for count in range(1, len(ids) + 1):
            if len(self.tokenizer.decode(ids[:count], skip_special_tokens=False)) >= cut:
                return ids[:count]
        return ids


class GymScheduler(MultiTurnScheduler):
    """ms-swift's GYMScheduler: one environment per trajectory, chosen by the row's `env_config["name"]` or
    `--gym_env`. `reset` gives the first user message (and a system message, '' keeping the row's); after each
    turn `step` gives the next observation as a user message, the step's reward and whether it is done.

    Environments are looked up in envs.py's registry (the built-ins, and `register_env` in plugin files). The
    `info` of reset and of every step is kept, in order, as the trajectory's `env_infos` (its rollout_infos,
    which reward functions read and completions.jsonl shows), so an environment can explain its rewards; an
    info must be a JSON object (a dict of JSON values) for that."""

    def __init__(self, template: Template, max_turns: int | None = None, gym_env: str | None = None):
        super().__init__(template, max_turns, gym_env)
        self._live: dict[str, Env] = {}
        self._names: dict[str, str] = {}
        self._pending: dict[str, str] = {}
        self._totals: dict[str, float] = {}
        self._infos: dict[str, list[dict]] = {}

    def _config(self, request: RolloutRequest) -> tuple[str, dict]:
        config = request.data_dict.get("env_config") or {}
        if isinstance(config, str):
            config = json.loads(config)
        if not isinstance(config, dict):
            raise ValueError(f"a row's env_config must be a JSON object, got {type(config).__name__}")
        name = config.get("name") or self.gym_env
        if not name:
            raise ValueError("gym_scheduler needs an environment: give the row an env_config column with a 'name', "
                             "or pass --gym_env NAME")
        return name, config

    async def on_trajectory_start(self, requests: list[RolloutRequest]) -> None:
        for request in requests:
            name, config = self._config(request)
            env_class = get_env(name)
            env = None
            try:
                env = env_class(config)
                observation, info, system = await env.reset(request)
                if not isinstance(observation, str) or not isinstance(system, str):
                    raise TypeError(f"reset must return (observation: str, info, system_message: str), got "
                                    f"({type(observation).__name__}, ..., {type(system).__name__})")
                info = _json_info(info)
            except Exception as error:
                await _close_quietly(env)
                raise EnvFailure(f"environment {name!r} failed in reset: {type(error).__name__}: {error}") from error
            kept = [m for m in request.messages[:1] if m["role"] == "system" and not system]
            request.messages = [*kept, *([{"role": "system", "content": system}] if system else []),
                                {"role": "user", "content": observation}]
            self._live[request.uuid], self._names[request.uuid] = env, name
            self._totals[request.uuid] = 0.0
            self._infos[request.uuid] = [info]

    async def on_turn_end(self, request: RolloutRequest, choice: Choice, current_turn: int) -> dict:
        env = self._live[request.uuid]
        name = self._names[request.uuid]
        try:
            observation, reward, done, info = await env.step(copy.deepcopy(request.messages))
            reward = float(reward)
            if not done and not isinstance(observation, str):
                raise TypeError(f"step returned an observation of type {type(observation).__name__}, not text")
            info = _json_info(info)
        except Exception as error:
            raise EnvFailure(f"environment {name!r} failed in step {current_turn}: {type(error).__name__}: "
                             f"{error}") from error
        self._totals[request.uuid] += reward
        self._infos[request.uuid].append(info)
        if not done:
            self._pending[request.uuid] = observation
        return {"done": bool(done), "reward": reward,
                "rollout_infos": {"total_reward": self._totals[request.uuid], "gym_done": bool(done),
                                  "env_infos": list(self._infos[request.uuid])}}

    def step(self, request: RolloutRequest, choice: Choice, current_turn: int) -> dict:
        request.messages.append({"role": "user", "content": self._pending.pop(request.uuid)})
        return {"infer_request": request}

    async def on_trajectory_end(self, request: RolloutRequest) -> None:
        self._pending.pop(request.uuid, None)
        self._totals.pop(request.uuid, None)
        self._infos.pop(request.uuid, None)
        self._names.pop(request.uuid, None)
        await _close_quietly(self._live.pop(request.uuid, None))


def _json_info(info) -> dict:
    """An environment's `info` as it will be logged: a dict that JSON can write (None counts as empty)."""
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise TypeError(f"info must be a dict, got {type(info).__name__}")
    try:
        return json.loads(json.dumps(info))
    except (TypeError, ValueError) as error:
        raise TypeError(f"info must hold JSON values only (it goes to completions.jsonl): {error}") from None


async def _close_quietly(env) -> None:
    """An environment's close that fails must not hide how the trajectory ended."""
    if env is None:
        return
    try:
        await env.close()
    except Exception:  # closing is best effort; the trajectory's outcome is already decided
        logger.warning("environment %s raised in close", type(env).__name__, exc_info=True)
