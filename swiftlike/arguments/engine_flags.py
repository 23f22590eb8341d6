"""Command-line flags built from an engine's options dataclass.

Each inference backend declares its construction settings once, in its options dataclass (`VllmOptions`,
`SglangOptions`, `LmdeployOptions`), with type, default and help text. A field with help text is a user-facing
setting and becomes the flag `--<prefix><name>` of every command that composes the group; a field without help
is set by swiftlike itself (e.g. vLLM's logprobs_mode for RL). The group's `<prefix>options()` turns the flags
back into the options object, so a flag reaches the engine as that one typed object, and a new engine setting
needs one line in one place.
"""
from __future__ import annotations

import dataclasses
import typing

from ..utils.fields import arg

# Settings that every command already has under the same name and meaning (BaseArguments), passed through.
SHARED_SETTINGS = ("torch_dtype", "seed")


def user_settings(options_cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(options_cls) if f.metadata.get("help")]


def engine_flags(options_cls: type, prefix: str, name: str, doc: str, module: str) -> type:
    """A dataclass mixin with one `--{prefix}{field}` flag per user setting of `options_cls` and a
    `{prefix}options()` method that builds `options_cls` from them."""
    hints = typing.get_type_hints(options_cls)
    fields = []
    for f in user_settings(options_cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        fields.append((prefix + f.name, hints[f.name], arg(default, f.metadata["help"], f.metadata["aliases"])))

    def build_options(self):
        values = {f.name: getattr(self, prefix + f.name) for f in user_settings(options_cls)}
        values.update({s: getattr(self, s) for s in SHARED_SETTINGS
                       if hasattr(self, s) and s in {f.name for f in dataclasses.fields(options_cls)}})
        return options_cls(**values)

    build_options.__doc__ = f"The {options_cls.__name__} these --{prefix}* flags describe (validated there)."
    flags = dataclasses.make_dataclass(name, fields, namespace={"__doc__": doc, f"{prefix}options": build_options})
    flags.__module__ = module  # make_dataclass takes `module=` only from Python 3.12
    return flags
