"""An --external_plugins file for multi-turn GRPO with tools (examples/train/grpo/multi_turn/tool_plugin.sh).

It registers, at import time:
- a tool, `percent_of`, that the model may call beside the row's own tools (the calculator ...). Tools run in
  the tool sandbox, a separate process that imports this file again to find the function, so it must live in
  a file like this one;
- a scheduler, `tool_call_with_reminder`: the built-in tool_call_scheduler, which offers `percent_of` with every
  row's tools, and which answers a final reply lacking the '#### N' line the reward reads with one reminder
  instead of ending the trajectory there.

Run it with `--external_plugins examples/train/grpo/multi_turn/tool_plugin.py --multi_turn_scheduler
tool_call_with_reminder --agent_template hermes`.
"""
from __future__ import annotations

from swiftlike.rollout.multi_turn import register_scheduler
from swiftlike.rollout.multi_turn.schedulers import ToolCallScheduler
from swiftlike.template import normalize_tools
from swiftlike.tools import TOOL_REGISTRY, ToolRefusal, register_tool

REMINDER = "Finish with the final answer on its own line after '####', like '#### 42'."


def percent_of(percent: float, amount: float) -> dict:
    """Exactly `percent` percent of `amount` (for discounts, taxes and shares)."""
    if not -1e6 <= percent <= 1e6 or not -1e15 <= amount <= 1e15:
        raise ToolRefusal("percent must be within +-1e6 and amount within +-1e15")  # the model reads this
    value = percent * amount / 100
    return {"result": int(value) if float(value).is_integer() else round(value, 6)}


register_tool("percent_of", percent_of)


@register_scheduler("tool_call_with_reminder")
class ToolCallWithReminder(ToolCallScheduler):
    """tool_call_scheduler with `percent_of` offered to every row and one reminder of the answer format."""

    async def on_trajectory_start(self, requests) -> None:
        for request in requests:
            tools = normalize_tools(request.tools) if request.tools else []
            if all(t["function"]["name"] != "percent_of" for t in tools):
                request.tools = [*tools, TOOL_REGISTRY["percent_of"].schema()]

    def check_finished(self, request, choice, current_turn) -> bool:
        if not super().check_finished(request, choice, current_turn):
            return False  # calls to run
        return not self._needs_reminder(request, choice, current_turn)

    def _needs_reminder(self, request, choice, current_turn) -> bool:
        """A final reply (no calls) without '####', not cut by a limit, not reminded before."""
        text = request.messages[-1].get("content") or ""
        return ("####" not in text and choice.finish_reason != "length"
                and not (self.max_turns and current_turn >= self.max_turns)
                and not self.template.parse_tool_calls(text).calls
                and all(m.get("content") != REMINDER for m in request.messages if m["role"] == "user"))

    async def step(self, request, choice, current_turn) -> dict:
        if self.template.parse_tool_calls(request.messages[-1].get("content") or "").calls:
            return await super().step(request, choice, current_turn)
        request.messages.append({"role": "user", "content": REMINDER})
        return {"infer_request": request, "rollout_infos": {"reminded": True}}
