"""The layer order of docs/architecture.md, enforced over the real imports of every module in swiftlike/.

An AST walk rather than import-linter: it sees every import statement, including the lazy ones inside
functions (which import-linter's graph also counts), and needs no extra dependency. Relative imports are
resolved the way Python does. Each folder of swiftlike/ is in one layer, named here by the folder; a module
is in its folder's layer.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from paths import REPO

ROOT = REPO / "swiftlike"

# bottom (0) to top; a module may import only modules of its own layer or lower ones
LAYERS: list[tuple[str, list[str]]] = [
    ("utils", ["utils"]),
    ("RL core", ["rl/core"]),
    ("registries and wire format", ["template", "model", "dataset", "tools", "rl/rewards", "rollout/wire"]),
    ("engines", ["infer", "infer/engine", "rollout/client"]),
    ("arguments", ["arguments"]),
    ("trainers and servers", ["train", "train/megatron", "rl", "rl/online", "rl/preference", "rollout",
                              "rollout/server", "rollout/multi_turn", "sample", "deploy", "eval", "export", "ui", "ui/pages", "ray"]),
    ("commands", ["commands", "cli", ""]),
]
FOLDER_LAYER = {folder: rank for rank, (_, folders) in enumerate(LAYERS) for folder in folders}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(mod: str, is_package: bool, source: str) -> set[str]:
    """Every swiftlike module the module `mod` imports, at module level or inside a function."""
    package = mod.split(".") if is_package else mod.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module) if p)
            found.add(target)
            # `from . import x` / `from .pkg import mod` may name a submodule
            found.update(f"{target}.{a.name}" for a in node.names)
    return {name for name in found if name == "swiftlike" or name.startswith("swiftlike.")}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    edges = {}
    for mod, path in files.items():
        found = imports_of(mod, path.name == "__init__.py", path.read_text(encoding="utf-8"))
        edges[mod] = {name for name in found if name in files and name != mod}
    return edges


def folder_of(mod: str) -> str:
    """The folder (relative to swiftlike/) that holds module `mod`, a package being its own folder."""
    path = ROOT.parent.joinpath(*mod.split("."))
    return (path if (path / "__init__.py").exists() else path.parent).relative_to(ROOT).as_posix().replace(".", "")


def layer_of(mod: str) -> int:
    folder = folder_of(mod)
    assert folder in FOLDER_LAYER, f"swiftlike/{folder} is in no layer; add it to LAYERS and docs/architecture.md"
    return FOLDER_LAYER[folder]


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the cycles of a graph, as its strongly connected components of size > 1."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the other packages its modules import. A package is a folder of swiftlike/ together with its
    sub-folders of the same layer (infer/engine is part of infer; rl/core, a layer of its own, is not part of rl)."""
    def package(mod: str) -> str:
        folder = folder_of(mod)
        parts = folder.split("/")
        for depth in range(1, len(parts)):
            outer = "/".join(parts[:depth])
            if FOLDER_LAYER.get(outer) == FOLDER_LAYER.get(folder):
                return outer
        return folder
    packages = defaultdict(set)
    for mod, targets in edges.items():
        src = package(mod)
        packages[src].update(package(t) for t in targets)
        packages[src].discard(src)
    return packages


def test_every_import_goes_down_or_sideways():
    edges = graph()
    upward = [f"{mod} ({LAYERS[layer_of(mod)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
              for mod, targets in sorted(edges.items()) for t in sorted(targets) if layer_of(t) > layer_of(mod)]
    assert not upward, "imports that go up the layer order:\n" + "\n".join(upward)


def test_no_file_cycle():
    assert strongly_connected(graph()) == []


def test_no_package_cycle():
    assert strongly_connected(package_graph(graph())) == []


def test_every_folder_has_a_layer():
    folders = {p.parent.relative_to(ROOT).as_posix().replace(".", "") for p in ROOT.rglob("__init__.py")}
    assert folders == set(FOLDER_LAYER), (folders - set(FOLDER_LAYER), set(FOLDER_LAYER) - folders)


def test_the_rl_core_imports_only_torch_and_the_standard_library():
    """The RL core sits below the arguments: nothing of ours but itself and utils, no third-party package but torch."""
    allowed = set(sys.stdlib_module_names) | {"torch"}
    beyond = {}
    for path in (ROOT / "rl" / "core").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                names = [".".join(["swiftlike", "rl", "core"][:4 - node.level] + [node.module or ""])]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module]
            else:
                continue
            for name in names:
                ours = name.startswith("swiftlike")
                if (ours and not name.startswith(("swiftlike.rl.core", "swiftlike.utils"))) or \
                        (not ours and name.split(".")[0] not in allowed):
                    beyond.setdefault(path.name, []).append(name)
    assert not beyond, f"rl/core imports beyond torch, the standard library and utils: {beyond}"


def test_the_checker_sees_an_upward_import_and_a_cycle():
    assert layer_of("swiftlike.infer.engine.vllm_engine") < layer_of("swiftlike.arguments.infer_args")
    assert layer_of("swiftlike.rollout.client.remote_engine") < layer_of("swiftlike.rollout.server.app")
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert package_graph({"swiftlike.rl.online.grpo_trainer": {"swiftlike.rl.core.losses"},
                          "swiftlike.rl.core.losses": {"swiftlike.rl.online"}}) == {
        "rl": {"rl/core"}, "rl/core": {"rl"}}


@pytest.mark.parametrize("is_package, source, expected", [
    (False, "from ..utils import io", "swiftlike.utils.io"),
    (False, "from . import server", "swiftlike.rollout.server"),
    (True, "from .server import x", "swiftlike.rollout.probe.server"),
    (False, "def f():\n    from ..arguments import parse_args", "swiftlike.arguments")])
def test_relative_and_lazy_imports_resolve_as_python_does(is_package, source, expected):
    assert expected in imports_of("swiftlike.rollout.probe", is_package, source)


def test_every_main_lives_in_the_commands_layer():
    misplaced = []
    for path in ROOT.rglob("*.py"):
        mod = module_name(path)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_main") and \
                    not mod.startswith("swiftlike.commands."):
                misplaced.append(f"{mod}.{node.name}")
    assert not misplaced, f"command entry points outside swiftlike/commands/: {misplaced}"


def test_every_cli_command_has_its_python_twin():
    """`swiftlike <command>` and `from swiftlike import <command>_main, <Its>Arguments` run the same code."""
    import importlib

    import swiftlike
    from swiftlike.cli.main import COMMANDS
    built = {name: target for name, (target, _) in COMMANDS.items() if target}
    assert set(built) >= {"infer", "pt", "sft", "rlhf", "rollout", "deploy", "eval", "export", "app"}
    for name, target in built.items():
        module, func = target.split(":")
        twin = getattr(swiftlike, f"{name.replace('-', '_')}_main")
        assert twin is getattr(importlib.import_module(module), func), name
        assert f"{name.replace('-', '_')}_main" in swiftlike.__all__
        hints = twin.__annotations__["args"]
        classes = [c for c in swiftlike.__all__ if c.endswith("Arguments") and c in hints.split(" | ")[0]]
        assert classes, f"{name}_main does not take an arguments class exported from swiftlike: {hints}"
        assert getattr(swiftlike, hints.split(" | ")[0]).command == name
    assert swiftlike.RLHFArguments is swiftlike.RlhfArguments


def test_a_main_takes_the_arguments_object_or_a_cli_list(tmp_path):
    from swiftlike import ExportArguments, export_main
    with pytest.raises(SystemExit):  # a CLI list is parsed as the CLI does: a bad one exits with status 2
        export_main(["--merge_lora", "true"])
    with pytest.raises(TypeError, match="ExportArguments or a list"):
        export_main({"adapters": []})
    with pytest.raises(ValueError, match="no-such-checkpoint"):
        export_main(ExportArguments(adapters=[str(tmp_path / "no-such-checkpoint")], merge_lora=True))


def test_test_file_names_are_unique():
    """tests/ has no __init__.py files, so pytest imports each test file by its base name: two files of one
    name in different folders fail collection when they run in one session."""
    names = [p.name for p in (REPO / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
