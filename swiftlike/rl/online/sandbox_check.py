"""The check every command that runs model output makes at its start: is the tool sandbox isolated here?

A GRPO / PPO run with a code reward, a GRPO / GKD run or a rollout server with a tool-calling scheduler, and
`sample --orm_model code_exec` execute model-written code or tool calls in the tool sandbox (swiftlike/tools/).
Where the machine allows the sandbox no isolation, the sandbox refuses to run anything (fail closed); this check
asks before the model loads, so such a run stops at once with the reason and the remedies, not at its first
reward or episode. `--allow_unisolated_execution` (saved in args.json) runs it anyway, with a loud warning.
"""
from __future__ import annotations

from collections.abc import Iterable

from ...rollout.multi_turn import multi_turns
from ...rollout.multi_turn.schedulers import ToolCallScheduler
from ...tools.sandbox import require_isolation
from ...utils import get_logger
from ..rewards import REWARD_REGISTRY
from ..rewards.code_exec import CodeExecReward

logger = get_logger("swiftlike.rl")


def _runs_code(entry) -> bool:
    """A registered reward that runs completions' code: CodeExecReward, its subclasses and their instances (a
    plugin's `register_reward("code_exec_slow", CodeExecReward(limits=...))`)."""
    return isinstance(entry, CodeExecReward) or (isinstance(entry, type) and issubclass(entry, CodeExecReward))


def sandbox_users(reward_names: Iterable[str], scheduler_name: str | None) -> list[str]:
    """What of a run executes model output in the tool sandbox, by the flag that chose it."""
    users = [f"--reward_funcs {name}" for name in reward_names
             if name in REWARD_REGISTRY and _runs_code(REWARD_REGISTRY[name])]
    if scheduler_name is not None and scheduler_name in multi_turns and \
            issubclass(multi_turns[scheduler_name], ToolCallScheduler):
        users.append(f"--multi_turn_scheduler {scheduler_name}")
    return users


def require_sandbox(allow_unisolated: bool, reward_names: Iterable[str] = (),
                    scheduler_name: str | None = None) -> None:
    """Stop now (SandboxUnavailable, a usage error naming why and how to get isolation) where this run would
    execute model output and the sandbox cannot isolate it, unless `allow_unisolated`. Nothing starts when
    nothing of the run uses the sandbox."""
    users = sandbox_users(reward_names, scheduler_name)
    if users:
        report = require_isolation(allow_unisolated)
        logger.info("tool sandbox for %s: %s", ", ".join(users), "; ".join(f"{k}: {v}" for k, v in report.items()))
