"""examples/ stays in sync with the CLI: every `swiftlike <command> --flag` in every example script names a real
command and real flags of that command's arguments class, and every built command has an example.

The scripts are parsed, not run (`make examples` runs them). Flags are checked against the parser the CLI builds
from each command's arguments dataclass (`build_parser`), so aliases such as `--train_type` count.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
import shlex
import subprocess
import typing
from functools import cache
from pathlib import Path

import pytest

from swiftlike.arguments.parser import build_parser
from swiftlike.cli.main import COMMANDS
from paths import REPO

ROOT = REPO
EXAMPLES = ROOT / "examples"
HELPER = EXAMPLES / "_common.sh"
SCRIPTS = sorted(p for p in EXAMPLES.rglob("*.sh") if p != HELPER)
BUILT = sorted(name for name, (target, _) in COMMANDS.items() if target)
SHELL_OPERATORS = {"&", "&&", "|", "||", ";", ">", ">>", "<", "<<", "(", ")", "2>", "2>&1"}


def strip_comment(line: str) -> str:
    """Cut a `# comment` as bash does: a `#` that starts a word, outside quotes (`data#8` is no comment)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def balanced(line: str) -> bool:
    try:
        shlex.split(line, comments=False)
        return True
    except ValueError:
        return False


def logical_lines(text: str) -> list[str]:
    """Shell lines with backslash continuations joined; comments and here-document bodies dropped."""
    lines, current, heredoc_end = [], "", None
    for raw in text.splitlines():
        if heredoc_end is not None:
            if raw.strip() == heredoc_end:
                heredoc_end = None
            continue
        if not current and raw.lstrip().startswith("#"):
            continue
        raw = strip_comment(raw)
        marker = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", raw)
        if marker:
            heredoc_end = marker.group(1)
        if raw.endswith("\\"):
            current += raw[:-1] + " "
            continue
        if not balanced(current + raw):  # a quoted string that goes on over the next lines
            current += raw + "\n"
            continue
        lines.append(current + raw)
        current = ""
    if current:
        lines.append(current)
    return lines


def invocations(script: Path) -> list[tuple[str, list[str]]]:
    """Every (command, [--flag, ...]) that the script runs as `swiftlike <command> ...`."""
    found = []
    for line in logical_lines(script.read_text(encoding="utf-8")):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        tokens = list(lexer)
        for i, token in enumerate(tokens):
            if token != "swiftlike" or i + 1 >= len(tokens):
                continue
            flags = []
            for word in tokens[i + 2:]:
                if word in SHELL_OPERATORS:
                    break
                if word.startswith("--"):
                    flags.append(word.split("=", 1)[0])
            found.append((tokens[i + 1], flags))
    return found


@cache
def arguments_class(command: str) -> type:
    """The arguments dataclass that `<command>_main` takes, read from its signature."""
    module, func = COMMANDS[command][0].split(":")
    hint = typing.get_type_hints(getattr(importlib.import_module(module), func))["args"]
    # the command's own arguments class (rlhf_main also takes a RayJob, which has no CLI of its own)
    classes = [c for c in typing.get_args(hint) if dataclasses.is_dataclass(c) and hasattr(c, "command")]
    assert len(classes) == 1, f"{command}: cannot tell its arguments class from {hint}"
    return classes[0]


@cache
def valid_flags(command: str) -> frozenset[str]:
    parser = build_parser(arguments_class(command), f"swiftlike {command}")
    return frozenset(s for s in parser._option_string_actions if s.startswith("--"))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_there_are_examples_and_the_parser_sees_their_commands():
    assert len(SCRIPTS) >= 10
    sample = invocations(EXAMPLES / "rlhf" / "grpo_two_processes.sh")
    assert sample and sample[0][0] == "rlhf" and "--rlhf_type" in sample[0][1] and "--output_dir" in sample[0][1]


def test_parser_handles_continuations_comments_heredocs_and_operators(tmp_path):
    text = ("# swiftlike infer --not_a_flag\nstart_server log swiftlike deploy \\\n    --port 1 \\\n    --model m  # it's\n"
            "python - <<'PY'\nswiftlike eval --bogus\nPY\nNPROC_PER_NODE=2 swiftlike sft --dataset d#8 --max_steps 2 && echo --x\n")
    path = tmp_path / "check.sh"
    path.write_text(text)
    assert invocations(path) == [("deploy", ["--port", "--model"]), ("sft", ["--dataset", "--max_steps"])]


@pytest.mark.parametrize("script", SCRIPTS, ids=rel)
def test_every_command_and_flag_in_the_script_exists(script):
    calls = invocations(script)
    assert calls, f"{rel(script)} runs no swiftlike command"
    for command, flags in calls:
        assert command in COMMANDS, f"{rel(script)}: unknown command `swiftlike {command}`"
        assert command in BUILT, f"{rel(script)}: `swiftlike {command}` is not built"
        unknown = sorted(set(flags) - valid_flags(command))
        assert not unknown, f"{rel(script)}: `swiftlike {command}` has no flag(s) {unknown}"


def test_every_built_command_has_an_example():
    covered = {command for script in SCRIPTS for command, _ in invocations(script)}
    missing = [c for c in BUILT if c not in covered]
    assert not missing, f"no script under examples/ runs: {missing}"


@pytest.mark.parametrize("script", SCRIPTS, ids=rel)
def test_every_script_is_valid_bash_and_has_a_smoke_size(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    if "_common.sh" not in text:  # a script without the helper must already be smoke-sized
        steps = re.findall(r"--max_steps\s+(\S+)", text)
        assert steps and all(s == "2" for s in steps), f"{rel(script)}: source _common.sh and use $(smoke ...)"


def test_examples_readme_lists_every_script():
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    missing = [rel(s) for s in SCRIPTS if str(s.relative_to(EXAMPLES)) not in readme]
    assert not missing, f"examples/README.md does not list {missing}"
