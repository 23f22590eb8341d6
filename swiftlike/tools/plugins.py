"""Tools from `--external_plugins` files: `register_tool(name, fn)` adds a Python function to `TOOL_REGISTRY`.

A plugin file registers a tool at import time, beside its rewards or schedulers:

    from swiftlike.tools import ToolRefusal, register_tool

    def word_length(word: str) -> dict:
        \"\"\"The number of characters in a word.\"\"\"
        if len(word) > 100:
            raise ToolRefusal("the word is longer than 100 characters")   # the model reads this as the answer
        return {"length": len(word)}

    register_tool("word_length", word_length)

Model output chooses the arguments, so tool loops run registered tools through `sandbox.run_tool_isolated`,
in another process. That process imports the tool's file again to find it: hence a tool must be defined in
a file (not in `__main__` or an interactive session) and registered when that file is imported.
"""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable

from ..utils.registry import source_of
from .builtin import TOOL_REGISTRY, Tool

# Python annotation -> JSON schema type, for the schema written from a function's signature
_SCHEMA_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def schema_from_signature(fn: Callable) -> dict:
    """The arguments' JSON schema read off `fn`'s parameters: annotated types, and required when no default."""
    properties, required = {}, []
    for parameter in inspect.signature(fn, eval_str=True).parameters.values():
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise ValueError(f"register_tool: {fn.__qualname__} takes *{parameter.name} or a positional-only "
                             "parameter; a tool is called with named JSON arguments only")
        json_type = _SCHEMA_TYPES.get(parameter.annotation)
        properties[parameter.name] = {"type": json_type} if json_type else {}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    return {"type": "object", "properties": properties, "required": required}


def _source_file(name: str, fn: Callable) -> tuple[str, str]:
    module = sys.modules.get(fn.__module__)
    path = module.__dict__.get("__file__") if module is not None else None
    if fn.__module__ == "__main__" or not path:
        raise ValueError(f"register_tool({name!r}): {fn.__qualname__} is defined in {fn.__module__}, which a "
                         "sandbox process cannot import; define the tool in a Python file (an --external_plugins "
                         "file or a module) and register it when that file is imported")
    return fn.__module__, path


def register_tool(name: str, fn: Callable | None = None, schema: dict | None = None, description: str = "",
                  override: bool = False):
    """Register `fn` as tool `name`; without `fn`, a decorator. `schema` is the JSON schema of the arguments
    object (default: from the signature); `description` defaults to the docstring's first line. A name already
    taken (a built-in too) is refused unless `override=True`, as for schedulers and environments."""
    def register(function: Callable) -> Callable:
        if not callable(function):
            raise TypeError(f"register_tool({name!r}): expected a function, got {type(function).__name__}")
        parameters = schema if schema is not None else schema_from_signature(function)
        if parameters.get("type") != "object" or not isinstance(parameters.get("properties"), dict):
            raise ValueError(f"register_tool({name!r}): schema must be the JSON schema of the arguments object, "
                             "{'type': 'object', 'properties': {...}, 'required': [...]}")
        text = description or (inspect.getdoc(function) or "").split("\n")[0]
        TOOL_REGISTRY.register(name, Tool(name, text, parameters, function, _source_file(name, function)),
                               override, origin=lambda tool: source_of(tool.function))
        return function
    return register if fn is None else register(fn)
