"""Turn a typed argument dataclass into a command-line parser, and `--config` files into args.

Why not `transformers.HfArgumentParser`: it accepts abbreviations, has no aliases
(`--train_type` for `--tuner_type`), and its bool/list handling differs from ms-swift's
`--flag true|false` and space-separated lists. This keeps the dataclass as the one schema:
the CLI, YAML/JSON configs and the Python API all fill the same object.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import traceback
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from ..utils import get_logger
from ..utils.errors import UsageError

TRUE_VALUES = ("true", "1", "yes", "y", "on")
FALSE_VALUES = ("false", "0", "no", "n", "off")


def str2bool(value: str) -> bool:
    lowered = str(value).lower()
    if lowered in TRUE_VALUES:
        return True
    if lowered in FALSE_VALUES:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _unwrap_optional(tp: Any) -> Any:
    if get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in get_args(tp) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return tp


def json_object(value: str) -> dict:
    """The value of a flag that takes a JSON object (ms-swift's --vllm_engine_kwargs)."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"key\": 1}}', got {value!r} ({e})")
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r}")
    return parsed


def field_kind(tp: Any) -> tuple[str, Any]:
    """('bool'|'list'|'choice'|'json'|'scalar', element type or choices)."""
    tp = _unwrap_optional(tp)
    if tp is bool:
        return "bool", bool
    if tp is dict or get_origin(tp) is dict:
        return "json", dict
    if get_origin(tp) is Literal:
        return "choice", get_args(tp)
    if get_origin(tp) in (list, tuple):
        args = get_args(tp)
        return "list", args[0] if args else str
    return "scalar", tp


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        message = message.replace("unrecognized arguments", "unknown argument(s)")
        self.exit(2, f"{self.prog}: error: {message}\nRun `{self.prog} --help` for the valid arguments.\n")


def build_parser(cls: type, prog: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=(cls.__doc__ or "").strip().split("\n")[0],
                     allow_abbrev=False)
    parser.add_argument("--config", default=None,
                        help="YAML or JSON file of arguments; flags given on the command line override it")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    # One help section per argument class: shared parts first, the command's own last.
    for part in [*cls.__mro__[1:], cls]:
        own = [n for n in part.__dict__.get("__annotations__", {}) if n in fields]
        if not own:
            continue
        group = parser.add_argument_group(part.__name__, (part.__doc__ or "").strip().split("\n")[0])
        for name in own:
            _add_field(group, fields.pop(name), hints[name])
    return parser


def _add_field(group, f: dataclasses.Field, hint: Any) -> None:
    kind, extra = field_kind(hint)
    names = [f"--{f.name}", *f.metadata.get("aliases", ())]
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    kwargs: dict[str, Any] = {"dest": f.name, "help": f"{f.metadata.get('help', '')} (default: {default})",
                              "default": argparse.SUPPRESS}
    if kind == "bool":
        kwargs.update(type=str2bool, metavar="true|false")
    elif kind == "choice":
        kwargs.update(choices=extra, type=type(extra[0]))
    elif kind == "list":
        kwargs.update(nargs="+", type=extra)
    elif kind == "json":
        kwargs.update(type=json_object, metavar="JSON")
    else:
        kwargs.update(type=extra)
    group.add_argument(*names, **kwargs)


def load_config_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise SystemExit(f"error: --config {path}: no such file")
    text = file.read_text(encoding="utf-8")
    try:
        if file.suffix in (".yaml", ".yml"):
            import yaml
            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
    except Exception as e:
        raise SystemExit(f"error: --config {path}: cannot parse: {e}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: --config {path}: expected a mapping of argument names to values")
    return data


def settings_to_argv(data: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for key, value in data.items():
        if value is None:
            continue
        argv.append(f"--{key}")
        if isinstance(value, (list, tuple)):
            argv.extend(str(v) for v in value)
        elif isinstance(value, dict):
            argv.append(json.dumps(value))
        elif isinstance(value, bool):
            argv.append("true" if value else "false")
        else:
            argv.append(str(value))
    return argv


class SavedDefaults:
    """A mixin for arguments whose flags, when not given, may come from a saved run (TrainArguments: the args.json
    of the run `--resume_from_checkpoint` continues); `parse_args` asks it before building the object."""

    @classmethod
    def saved_defaults(cls, given: dict) -> dict:
        return {}


def canonical_settings(cls: type, settings: dict[str, Any], where: str) -> dict[str, Any]:
    """`settings` (a `--config` file's, a Ray job YAML's) with every alias the command line accepts for `cls`
    (`train_type` for `tuner_type`, `batch_size` for `per_device_train_batch_size`) under its field's name, so a
    file takes the names a command line takes. Both names of one argument at once is refused (`where` names the
    file)."""
    field_of = {alias.lstrip("-"): f.name for f in dataclasses.fields(cls) for alias in f.metadata.get("aliases", ())}
    out: dict[str, Any] = {}
    for key, value in settings.items():
        name = field_of.get(key, key)
        if name in out:
            first = next(k for k in settings if field_of.get(k, k) == name)
            raise UsageError(f"{where}: `{first}` and `{key}` are one argument ({name}); give it once")
        out[name] = value
    return out


def parse_args(cls: type, argv: list[str] | None = None, prog: str | None = None):
    """Parse `argv` (default sys.argv[1:]) into `cls`, a command's arguments class (`prog` defaults to its
    `command`); a `--config` file fills values first."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or f"swiftlike {cls.command}"
    parser = build_parser(cls, prog)
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config:
        try:
            settings = canonical_settings(cls, load_config_file(known.config), f"--config {known.config}")
        except UsageError as e:
            parser.error(str(e))
        unknown = [f"--{k}" for k in settings if k not in {f.name for f in dataclasses.fields(cls)} | {"config"}]
        if unknown:
            parser.error(f"--config {known.config}: unknown argument(s): {' '.join(unknown)}")
        argv = settings_to_argv(settings) + argv
    namespace = parser.parse_args(argv)
    values = {k: v for k, v in vars(namespace).items() if k != "config"}
    if issubclass(cls, SavedDefaults):  # e.g. a resumed run takes what the user did not repeat from its args.json
        values = {**cls.saved_defaults(values), **values}
    try:
        return cls(**values)
    except ValueError as e:  # the arguments' own checks: a usage error (UsageError, or a check's plain ValueError)
        if get_logger().isEnabledFor(logging.DEBUG):
            traceback.print_exception(e, file=sys.stderr)
        parser.exit(2, f"{prog}: error: {e}\n")


def check_choices(obj: Any) -> None:
    """Literal fields are checked here too, so the Python API rejects what the CLI rejects."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        kind, extra = field_kind(hints[f.name])
        value = getattr(obj, f.name)
        if kind == "choice" and value is not None and value not in extra:
            raise UsageError(f"invalid choice for --{f.name}: {value!r} (choose from {', '.join(map(str, extra))})")
