"""`--reward_funcs code_exec`: the share of a row's test cases that the completion's Python code passes, each case
run in the tool sandbox (`swiftlike/tools/sandbox.py`: no network, its own pid namespace, a read-only root of its own
without the project or its data, a throw-away tmpfs, a uid of its own, a seccomp filter, CPU / memory / output
limits; docs/rewards.md says what holds where, and the run stops at its start where nothing isolates).

The code is the last ```python (or ```py, ```python3) fenced block of the completion, else its last fenced block
of any language, else the whole completion; a fence left open (a completion cut at --max_completion_length) runs to
the end of the text. ms-swift's `external_code_reward` takes only a block tagged with the row's language; we take
more, since a small model often leaves the tag out.

Test cases come from a dataset column, per row a list or its JSON text:

- `test_cases`: items of two kinds, mixed at will:
  - a string: Python statements (`"assert add(1, 2) == 3"`) run after the code, in its namespace; the case
    passes when both run to the end;
  - `{"input": str, "output": str}`: the code runs as a script with `input` on stdin; the case passes when it ends
    normally (exit code 0) and its stdout equals `output`, both stripped (ms-swift's rule).
- `verification_info`: ms-swift's (and open-r1's) layout, `{"language": "python", "test_cases": [{"input",
  "output"}, ...]}`, each case a stdin/stdout case as above. A row in another language is not applicable (None):
  this reward runs Python only.

`test_cases` wins when a row has both. A malformed row raises (a data error, like a missing column); whatever
the completion does (no code, a syntax error, an exception, a timeout, running out of memory, a crash) fails the
cases it fails and is never an exception here.

An assert case's verdict is decided by a test runner the code cannot reach, on plain values it cannot fake
(`swiftlike/tools/verdict.py`); a stdin/stdout case's here, against an expected output that never enters the
sandbox. When the sandbox itself fails on a case (its server died or did not answer, it could not set the call up,
the call spent its wall clock waiting for a CPU on a busy machine: `ProgramOutcome.infra_error`), there is no
verdict on the code, so the completion's reward is MISSING (as a judge's unreadable reply is): left out of its
group's advantage statistics, counted in the trainer's `rewards/code_exec/missing`, and logged as a warning with
the reason. Never 0: a correct program on a sick machine is not a wrong answer.

Each case is its own sandbox call (about 30 ms of CPU; docs/rewards.md has the measured cost), run from a pool of
threads, which the sandbox server serves at once. One call per case rather than one per completion: the cases of
a completion cannot disturb each other (a loop in one case costs that case only, state does not leak), the
sandbox's per-call wall clock and CPU limits are per case (and so is the process budget: a fork bomb beside a case
cannot fail it), and the expected output of a stdin/stdout case never enters the sandbox. Identical (code, case)
pairs, frequent in a GRPO group, run once.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ...tools.sandbox import ToolLimits, run_program_isolated
from ...utils import get_logger
from .functions import MISSING, Unscored, register_reward

logger = get_logger("swiftlike.rl")

# The tool sandbox's defaults (5 s wall clock, 2 s CPU, 256 MB above the forked process) with room for 64 KiB of
# output: ample for function-writing tasks, and a completion that loops in every case costs at most 3 CPU-seconds
# a case (the hard limit, a second past the soft one, ends pid 1 of the sandbox's namespace). ms-swift has no
# flags for its code reward; for other limits register an instance in a plugin file:
# register_reward("code_exec_slow", CodeExecReward(limits=ToolLimits(timeout_s=20, cpu_s=10))).
CODE_LIMITS = ToolLimits(max_output_chars=65536)
# Sandbox calls at once: most of a call is the kernel making and tearing down namespaces, so a few per core keep
# the cores busy without leaving the trainer waiting on one call at a time.
WORKERS = min(32, 4 * len(os.sched_getaffinity(0)))
PYTHON = ("python", "python3", "py")

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(completion: str) -> str:
    """The code a completion answers with (see the module docstring for which)."""
    blocks = _FENCE.findall(completion)
    python = [code for language, code in blocks if language.lower() in PYTHON]
    if python or blocks:
        return (python or [code for _, code in blocks])[-1]
    return completion


@dataclass(frozen=True)
class CodeCase:
    statement: str | None = None  # assert statements run after the code; None for a stdin/stdout case
    stdin: str = ""
    expected: str | None = None  # the stdout a stdin/stdout case must print (compared stripped)


def _as_value(value: Any, column: str, row: int) -> Any:
    """A column's value, parsed when it is JSON text (hub datasets often store nested values so)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise ValueError(f"code_exec: row {row}'s {column!r} is text but not JSON: {value[:80]!r}") from None


def _case(item: Any, column: str, row: int) -> CodeCase:
    if isinstance(item, str):
        return CodeCase(statement=item)
    if isinstance(item, Mapping) and isinstance(item.get("input", ""), str) and isinstance(item.get("output"), str):
        if item.get("type", "stdin_stdout") != "stdin_stdout":
            raise ValueError(f"code_exec: row {row}'s {column!r} has a {item['type']!r} case; code_exec runs "
                             "stdin_stdout cases and assert statements")
        return CodeCase(stdin=item.get("input", ""), expected=item["output"])
    raise ValueError(f"code_exec: row {row}'s {column!r} holds {str(item)[:80]!r}; a test case is a string of assert "
                     "statements or {'input': str, 'output': str}")


def row_cases(test_cases: Any = None, verification_info: Any = None, row: int = 0) -> list[CodeCase] | None:
    """A row's test cases from whichever column it has (module docstring); None when it is not Python."""
    if test_cases is not None:
        column, items = "test_cases", _as_value(test_cases, "test_cases", row)
    else:
        column, info = "verification_info", _as_value(verification_info, "verification_info", row)
        if not isinstance(info, Mapping) or "test_cases" not in info:
            raise ValueError(f"code_exec: row {row}'s 'verification_info' must be {{'language': ..., 'test_cases': "
                             f"[...]}}, got {str(info)[:80]!r}")
        if str(info.get("language") or "python").lower() not in PYTHON:
            return None
        items = _as_value(info["test_cases"], column, row)
    if not isinstance(items, list):
        raise ValueError(f"code_exec: row {row}'s {column!r} must be a list of test cases, got {str(items)[:80]!r}")
    return [_case(item, column, row) for item in items]


class CodeExecReward:
    """The share of each row's test cases the completion's code passes, in [0, 1]; None for a row with no cases
    or in another language than Python. See the module docstring."""

    name = "code_exec"

    def __init__(self, limits: ToolLimits = CODE_LIMITS, workers: int = WORKERS):
        if not isinstance(limits, ToolLimits):
            raise TypeError(f"code_exec: limits must be a ToolLimits, got {type(limits).__name__}")
        self.limits, self.workers = limits, max(1, int(workers))

    def _rows(self, n: int, test_cases: Sequence | None, verification_info: Sequence | None,
              kwargs: Mapping[str, Any]) -> list[list[CodeCase] | None]:
        if test_cases is None and verification_info is None:
            have = sorted(k for k in kwargs if k not in ("completion_ids", "completion_lengths", "prompts"))
            raise ValueError(f"reward function 'code_exec' needs a 'test_cases' or a 'verification_info' column in "
                             f"the dataset (each row's tests), but the rows only have: {', '.join(have) or 'messages'}"
                             ". Add one (docs/rewards.md shows the layout), or drop 'code_exec' from --reward_funcs")
        columns = [list(c) if c is not None else [None] * n for c in (test_cases, verification_info)]
        if any(len(c) != n for c in columns):
            raise ValueError(f"reward function 'code_exec' got {[len(c) for c in columns]} test values for {n} "
                             "completions")
        return [row_cases(tests, info, row) for row, (tests, info) in enumerate(zip(*columns))]

    def passes(self, code: str, case: CodeCase) -> bool | str:
        """Whether the code passes the case; a str when the sandbox failed and there is no verdict (why)."""
        outcome = run_program_isolated(code, case.stdin, case.statement, self.limits)
        if outcome.infra_error:
            return outcome.error or "the sandbox failed"
        if outcome.error is not None:
            logger.debug("code_exec: a case failed: %s", outcome.error)
            return False
        return case.expected is None or (not outcome.stdout_cut and outcome.stdout.strip() == case.expected.strip())

    def __call__(self, completions: Sequence[str], test_cases: Sequence | None = None,
                 verification_info: Sequence | None = None, **kwargs: Any) -> list[float | Unscored | None]:
        rows = self._rows(len(completions), test_cases, verification_info, kwargs)
        codes = [extract_code(completion) for completion in completions]
        jobs = list(dict.fromkeys((code, case) for code, cases in zip(codes, rows) for case in cases or ()))
        passed: dict[tuple[str, CodeCase], bool | str] = {}
        if jobs:
            with ThreadPoolExecutor(min(self.workers, len(jobs)), thread_name_prefix="code-exec") as pool:
                passed = dict(zip(jobs, pool.map(lambda job: self.passes(*job), jobs)))
        rewards: list[float | Unscored | None] = []
        failures: list[str] = []
        for code, cases in zip(codes, rows):
            verdicts = [passed[code, case] for case in cases or ()]
            failures += [verdict for verdict in verdicts if isinstance(verdict, str)]
            if not cases:
                rewards.append(None)
            elif any(isinstance(verdict, str) for verdict in verdicts):
                rewards.append(MISSING)
            else:
                rewards.append(sum(verdicts) / len(cases))
        if failures:
            logger.warning("code_exec: the sandbox failed on %d case(s), so %d of %d completions have no reward "
                           "(missing, counted in rewards/code_exec/missing; not scored 0). First: %s",
                           len(failures), rewards.count(MISSING), len(rewards), failures[0])
        return rewards


register_reward("code_exec", CodeExecReward)
