"""Built-in tools for agent data and tool loops: a safe calculator (no eval) and a letter counter."""
from .builtin import TOOL_REGISTRY, Tool, call_tool
from .calculator import CalculatorError, evaluate

__all__ = ["TOOL_REGISTRY", "CalculatorError", "Tool", "call_tool", "evaluate"]
