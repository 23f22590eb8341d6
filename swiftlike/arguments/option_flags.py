"""Command-line flags built from an options dataclass.

A component declares its settings once, in a frozen options dataclass, with type, default and help text: each
inference backend (`VllmOptions`, `SglangOptions`, `LmdeployOptions`) and each RL option group
(rl/core/options.py). A field with help text is a user-facing setting and becomes the flag `--<prefix><name>`
of every command that composes the group (the help, aliases and `only=` metadata travel with it); a field
without help is set by swiftlike itself (e.g. vLLM's logprobs_mode for RL, GRPO's loss type from --loss_type).
So a flag reaches its code as one typed object, and a new setting needs one line in one place.
"""
from __future__ import annotations

import dataclasses
import typing

from ..utils.fields import arg, field_default

# Settings that every command already has under the same name and meaning (BaseArguments), passed through.
SHARED_SETTINGS = ("torch_dtype", "seed")


def user_settings(options_cls: type, names: tuple[str, ...] | None = None) -> list[dataclasses.Field]:
    """The fields of `options_cls` that are flags (they have help), or those of them in `names`."""
    settings = [f for f in dataclasses.fields(options_cls) if f.metadata.get("help")]
    if names is None:
        return settings
    unknown = set(names) - {f.name for f in settings}
    if unknown:
        raise ValueError(f"{options_cls.__name__} has no settings {sorted(unknown)}")
    return [f for f in settings if f.name in names]


def option_flags(options_cls: type, prefix: str, name: str, doc: str, module: str,
                 namespace: dict | None = None, names: tuple[str, ...] | None = None) -> type:
    """A dataclass mixin named `name` with one `--{prefix}{field}` flag per user setting of `options_cls` (those in
    `names` only, for a command that reads part of a group; the others keep their defaults there)."""
    hints = typing.get_type_hints(options_cls)
    fields = []
    for f in user_settings(options_cls, names):
        default = field_default(f)
        fields.append((prefix + f.name, hints[f.name],
                       arg(default, f.metadata["help"], f.metadata["aliases"], f.metadata.get("only", ()))))
    flags = dataclasses.make_dataclass(name, fields, namespace={"__doc__": doc, **(namespace or {})})
    flags.__module__ = module  # make_dataclass takes `module=` only from Python 3.12
    return flags


def flag_values(args, options_cls: type, prefix: str = "", names: tuple[str, ...] | None = None) -> dict:
    """The values of `options_cls`'s flags on `args` (those in `names` only, as `option_flags`), by field name."""
    return {f.name: getattr(args, prefix + f.name) for f in user_settings(options_cls, names)}


def engine_flags(options_cls: type, prefix: str, name: str, doc: str, module: str) -> type:
    """`option_flags` for an engine, with a `{prefix}options()` method that builds `options_cls` from the flags
    and the shared settings (--torch_dtype, --seed) the engine takes."""
    shared = [s for s in SHARED_SETTINGS if s in {f.name for f in dataclasses.fields(options_cls)}]

    def build_options(self):
        return options_cls(**flag_values(self, options_cls, prefix), **{s: getattr(self, s) for s in shared})

    build_options.__doc__ = f"The {options_cls.__name__} these --{prefix}* flags describe (validated there)."
    return option_flags(options_cls, prefix, name, doc, module, {f"{prefix}options": build_options})
