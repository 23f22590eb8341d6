"""The argument of every command that runs model output (tool calls, code rewards) in the tool sandbox."""
from __future__ import annotations

from dataclasses import dataclass

from ..utils.fields import arg


@dataclass
class SandboxArguments:
    """How the tool sandbox (docs/agent.md#tool-isolation) may run where the machine allows it no isolation."""

    allow_unisolated_execution: bool = arg(
        False, "Run tool calls (--multi_turn_scheduler tool_call_scheduler) and code rewards (--reward_funcs / "
        "--orm_model code_exec) even where the machine allows the tool sandbox no isolation (no namespaces: "
        "Docker's default seccomp profile, a kernel without unprivileged user namespaces): model-written code can "
        "then read what this process can read, write where it can and reach the network. Default: such a run "
        "stops at its start with an error saying how to get isolation. Logged loudly and saved in args.json.")
