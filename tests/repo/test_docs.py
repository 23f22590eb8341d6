"""The registry tables in docs/ are generated; a registry change without regenerating fails here."""
import subprocess
import sys
from pathlib import Path
from paths import REPO

ROOT = REPO


def test_docs_tables_match_registries():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs_tables.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def missing_modules(package: Path, doc: str) -> list[str]:
    """Module names a package docstring mentions that the package does not have: the `name:` (or
    `name / name:`) keys that open a line after the summary line or follow a `;`, and every `something.py` it
    names (looked up in the package, then from swiftlike/)."""
    import re
    names = set()
    body = doc.partition("\n")[2]
    for key in re.findall(r"(?:^|;)\s*([a-z_]\w*(?:\s*/\s*\w+)*):", body, flags=re.M):
        names.update(part.strip() for part in key.split("/"))
    missing = [n for n in sorted(names) if not (package / f"{n}.py").exists() and not (package / n).is_dir()]
    for path in re.findall(r"([\w/]+\.py)\b", doc):
        if not (package / path).exists() and not (ROOT / "swiftlike" / path).exists() and not (ROOT / path).exists():
            missing.append(path)
    return missing


def test_every_module_a_package_docstring_names_exists():
    import ast
    wrong = {}
    for init in (ROOT / "swiftlike").rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        missing = missing_modules(init.parent, doc)
        if missing:
            wrong[str(init.relative_to(ROOT))] = missing
    assert not wrong, f"package docstrings naming modules that do not exist: {wrong}"


def test_the_docstring_check_sees_a_missing_module():
    rl = ROOT / "swiftlike" / "rl" / "online"
    assert missing_modules(rl, "Online.\ngrpo_trainer / grpo_batch: the step") == []
    assert missing_modules(rl, "Online.\nmemory: sleep; rollout: the worker\nserver.py holds it") == ["rollout", "server.py"]


def test_every_test_file_the_docs_name_exists():
    """A docs page, a docstring or a script naming tests/<path>.py that moved or went fails here."""
    import re
    named = {}
    for folder in ("docs", "swiftlike", "scripts", "examples", "benchmarks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".md", ".py", ".sh"} and path.is_file():
                for ref in re.findall(r"tests/[\w/]+\.(?:py|sh)", path.read_text(encoding="utf-8")):
                    if not (ROOT / ref).exists():
                        named.setdefault(ref, []).append(str(path.relative_to(ROOT)))
    for ref in re.findall(r"tests/[\w/]+\.(?:py|sh)", (ROOT / "README.md").read_text(encoding="utf-8")):
        if not (ROOT / ref).exists():
            named.setdefault(ref, []).append("README.md")
    assert not named, f"test files named but not there: {named}"


def test_the_readme_and_commands_md_list_every_command_as_built():
    """Every command in cli/main.py's table is in README.md's command table as built, named in its opening
    paragraph (which once said "eight commands ... the others are listed but not built yet" when all were built)
    and has a section in docs/commands.md."""
    import re
    from swiftlike.cli.main import COMMANDS
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Commands", 1)[1].split("\n## ", 1)[0]
    table = dict(re.findall(r"^\| `([\w-]+)` \| ([^|]+) \|", section, flags=re.M))
    assert sorted(table) == sorted(COMMANDS)
    assert {name: status for name, status in table.items() if not status.strip().startswith("built")} == {}
    opening = readme.split("\n## ", 1)[0]
    assert [name for name in COMMANDS if f"`{name}`" not in opening] == [] and "not built" not in opening
    headings = re.findall(r"^## ([\w-]+)$", (ROOT / "docs" / "commands.md").read_text(encoding="utf-8"), flags=re.M)
    assert [name for name in COMMANDS if name not in headings] == []
