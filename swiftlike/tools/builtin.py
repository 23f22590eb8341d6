"""Tools the built-in agent datasets call, declared once: each one's schema (what goes into `tools`) and the
function behind it, so data generation, training and tool loops agree on them.

A tool takes its arguments as a JSON object and answers with text (JSON), errors included: arguments come
from a model, so a bad call gets an answer the model can read. A function refuses a call by raising
`ToolRefusal` (its message is the answer); any other exception, and a result that is not text or JSON, is a
broken tool, which `call_tool` lets through and `sandbox.run_tool_isolated` turns into an error answer.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ..utils.registry import Registry
from .calculator import evaluate
from .errors import ToolRefusal, ToolResultNotText

MAX_WORD_CHARS = 100
# JSON schema type -> the Python types json.loads gives for it (bool is an int to Python, not to JSON)
_JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
               "object": (dict,)}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # JSON schema of the arguments object
    function: Callable[..., object]
    # (module name, file) of a plugin tool, so a sandbox process can import it; None for the built-ins
    source: tuple[str, str] | None = None

    def schema(self) -> dict:
        """The OpenAI function schema, as a `tools` list holds it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def __call__(self, arguments: dict) -> str:
        """The result as JSON text: `{...}` from the function, or `{"error": ...}` for a call it cannot serve."""
        problem = self._check(arguments)
        if problem is None:
            try:
                return result_text(self.name, self.function(**arguments))
            except ToolRefusal as refusal:
                problem = str(refusal)
        return json.dumps({"error": problem}, ensure_ascii=False)

    def _check(self, arguments) -> str | None:
        if not isinstance(arguments, dict):
            return "the arguments must be a JSON object"
        properties = self.parameters["properties"]
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return f"unknown argument(s) {', '.join(unknown)}; {self.name} takes {', '.join(properties)}"
        for name in self.parameters.get("required", ()):
            if name not in arguments:
                return f"missing argument {name!r}"
        for name, value in arguments.items():
            expected = properties[name].get("type")
            if expected in _JSON_TYPES and (not isinstance(value, _JSON_TYPES[expected])
                                            or (isinstance(value, bool) and expected != "boolean")):
                return f"argument {name!r} must be a{'n' if expected[0] in 'aeiou' else ''} {expected}"
        return None


def result_text(name: str, value: object) -> str:
    """What the model reads for a function's return: text as it is, anything JSON can write as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        raise ToolResultNotText(f"{name} returned bytes, not text; a tool must return text or a JSON value")
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ToolResultNotText(f"{name} returned {type(value).__name__!r}, which is not JSON ({error}); a tool "
                                "must return text or a JSON value") from None


def _calculator(expression: str) -> dict:
    return {"result": evaluate(expression)}


def _count_letters(word: str, letter: str) -> dict:
    if len(letter) != 1:
        raise ToolRefusal("'letter' must be a single character")
    if len(word) > MAX_WORD_CHARS:
        raise ToolRefusal(f"'word' is longer than {MAX_WORD_CHARS} characters")
    return {"count": word.lower().count(letter.lower())}


TOOL_REGISTRY: Registry[Tool] = Registry("tool", "tool name")
TOOL_REGISTRY.register("calculator", Tool(
    "calculator", "Evaluate an arithmetic expression exactly: numbers, + - * / // % ** and parentheses.",
    {"type": "object", "properties": {"expression": {
        "type": "string", "description": "The expression, e.g. '347 * 5821'"}}, "required": ["expression"]},
    _calculator))
TOOL_REGISTRY.register("count_letters", Tool(
    "count_letters", "Count how many times a letter occurs in a word (case-insensitive).",
    {"type": "object", "properties": {
        "word": {"type": "string", "description": "The word to search"},
        "letter": {"type": "string", "description": "One letter"}}, "required": ["word", "letter"]},
    _count_letters))


def call_tool(name: str, arguments: dict) -> str:
    """Run a built-in tool on a parsed call; an unknown name is answered like any other bad call."""
    if name not in TOOL_REGISTRY:
        return json.dumps({"error": f"unknown tool {name!r}; available: {', '.join(TOOL_REGISTRY)}"})
    return TOOL_REGISTRY[name](arguments)
