"""The two ways a tool's function tells its caller something other than an answer.

`ToolRefusal` is the function's own word for a call it cannot serve (the calculator's "division by zero"):
the model reads the message as the tool's answer, `{"error": message}`. Any other exception is a tool that
broke, which the sandbox reports as `<tool> raised <Type>: ...`. `ToolResultNotText` is a function that
answered with something a model cannot be shown (bytes, an object JSON cannot write).
"""
from __future__ import annotations


class ToolRefusal(ValueError):
    """Raised by a tool's function to answer a call it cannot serve; the message is what the model reads."""


class ToolResultNotText(TypeError):
    """A tool's function returned a value that is neither text nor JSON."""
