"""tests/unit holds unit tests only: the tier `make test-fast` runs, in minutes, before every commit (issue 51).

A unit test here uses tiny models in this process. It starts no vLLM engine (50-75 s each on CPU), runs no
`swiftlike` command as a subprocess (each pays ~6-15 s of imports and engine start before it does anything), starts
no server process (a `swiftlike rollout` or `deploy` of its own, or the session's shared ones), and trains nothing:
those are end-to-end tests and live in tests/e2e/, which `make test` runs. One such test in tests/unit costs the
contributor's loop as much as a hundred unit tests, so the tier is kept by this static check over the sources, not
by a marker someone must remember: an AST walk of every file under tests/unit.

What it refuses, in a file under tests/unit:
- the vLLM engine: `VllmEngine` (or vLLM's own LLM engines), the session fixtures that hold one (`vllm_tiny`,
  `vllm_serve_tiny`), and an engine-building call (a RolloutWorker, build_engine, EngineSpec, a command) in a
  function that asks for vLLM (`use_vllm=True`, `--use_vllm true`, `--infer_backend vllm`, `EngineSpec("vllm")`);
- `subprocess` (or os.system / os.exec* / asyncio's subprocesses) in a file that names the swiftlike command
  (`swiftlike.cli.main`, `-m swiftlike`, the `swiftlike` script); a subprocess that runs something else (a busy
  loop beside a thread test, the sandbox's drivers) is a unit test's business;
- a server process: `servers.start` / `start_vllm_serve` (tests/helpers/servers.py) and the session's server
  fixtures `rollout_server`, `pt_deploy`;
- `run_cli(..., in_process=False)` (tests/helpers/cli.py runs the command in this process by default);
- a training run: `sft_main` / `pt_main` / `rlhf_main` / `megatron_main`, or `run_cli("sft" | "pt" | "rlhf" |
  "megatron", ...)`, unless it is a usage-error check (run_cli's `check=False`, or the call inside
  `pytest.raises`): an in-process run of a few steps still takes seconds, and its place is tests/e2e/.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import TESTS

UNIT = TESTS / "unit"
ENGINE_NAMES = {"VllmEngine", "AsyncLLMEngine", "LLMEngine", "AsyncLLM", "start_vllm_serve"}
ENGINE_FIXTURES = {"vllm_tiny", "vllm_serve_tiny"}
SERVER_FIXTURES = {"rollout_server", "pt_deploy"}
ENGINE_BUILDERS = {"RolloutWorker", "build_engine", "build_classifier", "EngineSpec", "run_cli", "main", "infer_main",
                   "rollout_main", "deploy_main", "sample_main", "eval_main", "sft_main", "pt_main", "rlhf_main",
                   "megatron_main", "app_main"}
SUBPROCESS_CALLS = {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
                    "subprocess.check_output", "Popen", "os.system", "os.popen", "os.execv", "os.execvp", "os.execve",
                    "os.execl", "os.execlp", "os.spawnv", "asyncio.create_subprocess_exec",
                    "asyncio.create_subprocess_shell", "create_subprocess_exec", "create_subprocess_shell"}
TRAINING_MAINS = {"sft_main", "pt_main", "rlhf_main", "megatron_main"}
TRAINING_COMMANDS = {"sft", "pt", "rlhf", "megatron"}


def dotted(node: ast.AST) -> str:
    """`a.b.c` for a Name / Attribute chain, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else node.attr
    return ""


def strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def names_the_command(tree: ast.AST) -> bool:
    """The source names the `swiftlike` command as a process would run it: the module `swiftlike.cli...`, `-m
    swiftlike`, an argv or shell line that starts with `swiftlike`, or `which("swiftlike")` (not a path such as
    REPO / "swiftlike")."""
    if any(s.startswith(("swiftlike.cli", "swiftlike ")) for s in strings(tree)):
        return True
    for n in ast.walk(tree):
        if isinstance(n, (ast.List, ast.Tuple)):
            values = [e.value if isinstance(e, ast.Constant) else None for e in n.elts]
            if values[:1] == ["swiftlike"] or any(a == "-m" and str(b).startswith("swiftlike")
                                                   for a, b in zip(values, values[1:])):
                return True
        if isinstance(n, ast.Call) and dotted(n.func).split(".")[-1] == "which" and n.args and \
                isinstance(n.args[0], ast.Constant) and n.args[0].value == "swiftlike":
            return True
    return False


def asks_for_vllm(node: ast.AST) -> bool:
    """`use_vllm=True`, `infer_backend="vllm"`, `--use_vllm true`, `--infer_backend vllm` or `EngineSpec("vllm")`
    anywhere inside `node`."""
    for n in ast.walk(node):
        if isinstance(n, ast.keyword) and isinstance(n.value, ast.Constant) and (
                (n.arg == "use_vllm" and n.value.value is True) or (n.arg in ("infer_backend", "backend")
                                                                     and n.value.value == "vllm")):
            return True
        if isinstance(n, ast.Call) and dotted(n.func).endswith("EngineSpec") and n.args and \
                isinstance(n.args[0], ast.Constant) and n.args[0].value == "vllm":
            return True
        if isinstance(n, (ast.List, ast.Tuple, ast.Call)):
            items = n.args if isinstance(n, ast.Call) else n.elts
            values = [i.value if isinstance(i, ast.Constant) else None for i in items]
            for flag, value in zip(values, values[1:]):
                if (flag, str(value).lower()) in (("--use_vllm", "true"), ("--infer_backend", "vllm")):
                    return True
    return False


def in_pytest_raises(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    node = call
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.With) and any(dotted(item.context_expr.func if isinstance(item.context_expr, ast.Call)
                                                     else item.context_expr) == "pytest.raises"
                                              for item in node.items):
            return True
    return False


def problems(source: str) -> list[str]:
    """What makes this test file's source no unit test, one line each ('line N: ...'); [] for a unit test file."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[str] = []
    names_swiftlike = names_the_command(tree)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted(node).split(".")[-1] in ENGINE_NAMES:
            found.append(f"line {line}: the vLLM engine ({dotted(node)})")
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in ENGINE_NAMES:
            found.append(f"line {line}: the vLLM engine (imports {node.name})")
        elif isinstance(node, ast.ImportFrom) and node.module == "vllm" and any(a.name == "LLM" for a in node.names):
            found.append(f"line {line}: the vLLM engine (from vllm import LLM)")
        elif isinstance(node, ast.ImportFrom) and node.module == "servers" and \
                any(a.name in ("start", "start_vllm_serve") for a in node.names):
            found.append(f"line {line}: a server process (from servers import start)")
        elif isinstance(node, ast.Call):
            name = dotted(node.func)
            if name in ("servers.start", "servers.start_vllm_serve"):
                found.append(f"line {line}: a server process ({name})")
            if name in SUBPROCESS_CALLS and names_swiftlike:
                found.append(f"line {line}: runs swiftlike as a subprocess ({name})")
            keywords = {k.arg: k.value for k in node.keywords}
            if name.split(".")[-1] == "run_cli" and "in_process" in keywords and not (
                    isinstance(keywords["in_process"], ast.Constant) and keywords["in_process"].value is True):
                found.append(f"line {line}: run_cli(..., in_process=False) runs swiftlike as a subprocess")
            usage_check = in_pytest_raises(node, parents) or (
                isinstance(keywords.get("check"), ast.Constant) and keywords["check"].value is False)
            command = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if not usage_check and (name.split(".")[-1] in TRAINING_MAINS or (
                    name.split(".")[-1] == "run_cli" and command in TRAINING_COMMANDS)):
                found.append(f"line {line}: a training run ({name}{f' {command!r}' if command else ''})")
    for function in functions:
        fixtures = {a.arg for a in function.args.args + function.args.kwonlyargs}
        for fixture in sorted(fixtures & ENGINE_FIXTURES):
            found.append(f"line {function.lineno}: the vLLM engine (fixture {fixture} of {function.name})")
        for fixture in sorted(fixtures & SERVER_FIXTURES):
            found.append(f"line {function.lineno}: a server process (fixture {fixture} of {function.name})")
        builds = [n for n in ast.walk(function) if isinstance(n, ast.Call)
                  and dotted(n.func).split(".")[-1] in ENGINE_BUILDERS]
        if builds and asks_for_vllm(function):
            found.append(f"line {function.lineno}: the vLLM engine ({function.name} builds "
                         f"{dotted(builds[0].func)} and asks for vLLM)")
    return sorted(set(found), key=lambda p: int(p.split(":")[0].split()[1]))


UNIT_FILES = sorted(UNIT.rglob("*.py"))


def test_the_unit_tier_has_files():
    assert len(UNIT_FILES) > 40 and all(p.name.startswith(("test_", "conftest")) for p in UNIT_FILES)


@pytest.mark.parametrize("path", UNIT_FILES, ids=lambda p: str(p.relative_to(UNIT)))
def test_each_unit_test_file_is_a_unit_test(path: Path):
    found = problems(path.read_text())
    assert not found, (f"{path.relative_to(TESTS.parent)} is not a unit test file: " + "; ".join(found) +
                       ". Move the test to tests/e2e/ (see this file's docstring), or run it in-process and without "
                       "vLLM.")


# Each rule, seen on a small source that breaks it, and not on its unit-test twin.
CASES = {
    "vllm engine class": ("from swiftlike.infer.engine.vllm_engine import VllmEngine\n", None),
    "vllm fixture": ("def test_x(vllm_tiny):\n    pass\n", "def test_x(pt_tiny):\n    pass\n"),
    "worker on vLLM": ("def test_x(a):\n    args = A(use_vllm=True)\n    RolloutWorker(args)\n",
                       "def test_x(a):\n    args = A(use_vllm=True)\n    assert args.use_vllm\n"),
    "cli on vLLM": ("def test_x():\n    run_cli('infer', '--infer_backend', 'vllm')\n",
                    "def test_x():\n    parse_args(A, ['--infer_backend', 'vllm'])\n"),
    "subprocess of swiftlike": ("import subprocess, sys\n"
                                "subprocess.run([sys.executable, '-m', 'swiftlike.cli.main', 'infer'])\n",
                                "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'pass'])\n"),
    "argv built apart": ("import subprocess\nARGV = ['swiftlike', 'sft']\nsubprocess.Popen(ARGV)\n",
                         "import subprocess\nROOT = REPO / 'swiftlike'\nsubprocess.run(['rm', '-rf', ROOT])\n"),
    "shell line": ("import os\nos.system('swiftlike sft --model m')\n", None),
    "server start": ("import servers\nservers.start(['deploy'], 1, 'log')\n", None),
    "server import": ("from servers import free_port, start\n", "from servers import FaultyProxy\n"),
    "server fixture": ("def test_x(rollout_server):\n    pass\n", None),
    "subprocess run_cli": ("run_cli('infer', '--help', in_process=False)\n", "run_cli('infer', '--help')\n"),
    "training run": ("run_cli('rlhf', '--rlhf_type', 'grpo')\n", "run_cli('rlhf', '--rlhf_type', 'nope', check=False)\n"),
    "training api": ("sft_main(['--model', 'm'])\n",
                     "import pytest\nwith pytest.raises(ValueError):\n    sft_main(['--model', 'm'])\n"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_check_sees_each_kind(case):
    bad, good = CASES[case]
    assert problems(bad), case
    if good is not None:
        assert problems(good) == [], (case, problems(good))
