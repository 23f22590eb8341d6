"""Tools a model calls: the built-ins for agent data and tool loops, tools registered by plugin files, and a
sandbox that runs any of them on model-written arguments in a separate, limited process.

builtin: the `Tool` type, `TOOL_REGISTRY` with a safe calculator (no eval) and a letter counter, `call_tool`.
calculator: the arithmetic the calculator evaluates, bounded in size.
errors: `ToolRefusal` (a tool's answer to a call it cannot serve) and `ToolResultNotText`.
plugins: `register_tool` for `--external_plugins` files.
sandbox: `run_tool_isolated`, the call tool loops make: limits on time, memory, processes, files, no network;
    `run_program_isolated`, the same for model-written Python code.
program: what the sandbox's child does to run such code as a script, or as a module under test.
isolation: what the sandbox's child process does to itself before a tool runs (namespaces, limits, uid), and the
    check that it holds.
rootfs: the root of its own the child sees (the interpreter, its standard library, a scratch /tmp).
seccomp: the system calls the child is refused (namespaces, mounts, ptrace, bpf, ...).
sandbox_server: the long-lived process that forks one isolated child per call.
"""
from .builtin import TOOL_REGISTRY, Tool, call_tool
from .calculator import CalculatorError, evaluate
from .errors import ToolRefusal, ToolResultNotText
from .plugins import register_tool

__all__ = ["TOOL_REGISTRY", "CalculatorError", "Tool", "ToolRefusal", "ToolResultNotText", "call_tool", "evaluate",
           "register_tool"]
