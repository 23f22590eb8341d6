"""What the benchmark scripts share: running one side in a fresh process with its output kept in a log, the
rounds in which the sides alternate, the TRL baseline scripts' result line, swiftlike's end-of-run record, and
waiting for a server process to answer."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's swiftlike, not an installed one
from swiftlike.utils.net import free_port  # noqa: E402, F401  (the benchmarks take it from here)

TRL_PREFIX = "TRL_RESULT "  # the line each trl_*_baseline.py prints its figures on, as JSON


def swiftlike_cli() -> str:
    """The venv's `swiftlike` console script beside this Python, else the one on PATH."""
    local = Path(sys.executable).parent / "swiftlike"
    return str(local) if local.exists() else "swiftlike"


def run_logged(cmd: list[str], log_path: Path, timeout: float, env: dict[str, str]) -> str:
    """Run `cmd` with `env` added to the environment; its output goes to `log_path` and is returned.

    A failure or a timeout ends the benchmark with the command and the log's last lines: a half-measured
    side must not be compared.
    """
    start = time.perf_counter()
    with open(log_path, "w") as log:  # written as it runs: `tail -f` it to follow a slow run
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            sys.exit(f"command ran past --timeout {timeout:.0f} s: {shlex.join(cmd)}\n(output in {log_path})")
    out = log_path.read_text(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-40:])
        sys.exit(f"command failed (exit {proc.returncode}, {time.perf_counter() - start:.0f} s): {shlex.join(cmd)}\n"
                 f"--- last lines of {log_path} ---\n{tail}")
    return out


def run_trl_baseline(cmd: list[str], log_path: Path, timeout: float, env: dict[str, str]) -> dict:
    """Run a trl_*_baseline.py script and return the figures of its TRL_RESULT line."""
    out = run_logged(cmd, log_path, timeout, env)
    lines = [line for line in out.splitlines() if line.startswith(TRL_PREFIX)]
    if not lines:
        sys.exit(f"no {TRL_PREFIX.strip()} line in the TRL output; see {log_path}")
    return json.loads(lines[-1][len(TRL_PREFIX):])


def final_record(run_dir: Path) -> dict | None:
    """The Trainer's end-of-training record in a swiftlike run's logging.jsonl (train_runtime, train_loss,
    tokens seen, step), or None when the run wrote none."""
    log_file = Path(run_dir) / "logging.jsonl"
    if not log_file.is_file():
        return None
    final = [e for e in map(json.loads, log_file.read_text().splitlines()) if "train_runtime" in e]
    return final[-1] if final else None


def mean_over_steps(run_dir: Path, key: str) -> float:
    """The mean of `key` (e.g. `completions/mean_length`) over a swiftlike run's steps, from its logging.jsonl:
    each record holds the mean since the previous record, so it weighs as many steps as it covers (with
    --logging_steps 1000 the records are the first step's and the last step's)."""
    entries = map(json.loads, (Path(run_dir) / "logging.jsonl").read_text().splitlines())
    total, last = 0.0, 0
    for e in entries:
        if e.get(key) is not None:
            total, last = total + e[key] * (e["step"] - last), e["step"]
    return total / last


def in_turn(sides: Sequence, round_index: int) -> Sequence:
    """The sides in the order they run in round `round_index`: who goes first flips every round, so that machine
    noise (a warming cache, a neighbour's load) hits them alike."""
    return sides if round_index % 2 == 0 else sides[::-1]


def alternating_rounds(rounds: int, sides: Sequence[tuple[str, Callable[[str], dict]]],
                       describe: Callable[[dict], str], width: int = 9) -> dict[str, list[dict]]:
    """Each side's results over `rounds` rounds, the sides alternating (`in_turn`); each run is given its tag
    (`r1`, `r2`, ...) and printed as it finishes."""
    results: dict[str, list[dict]] = {name: [] for name, _ in sides}
    for r in range(rounds):
        for name, run in in_turn(sides, r):
            result = run(f"r{r + 1}")
            results[name].append(result)
            print(f"round {r + 1}  {name:<{width}}  {describe(result)}", flush=True)
    return results


def run_side_process(child: list[str], side: str) -> dict:
    """One side of an in-script comparison in a fresh process (`child` + `--side=<side>`, offline), so neither
    side's caches or compiled graphs reach the other: the JSON object its last line prints."""
    out = subprocess.run([*child, f"--side={side}"], capture_output=True, text=True,
                         env={**os.environ, "SWIFTLIKE_OFFLINE": "1"})
    if out.returncode:
        sys.exit(f"the {side} side failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def add_run_options(parser, quick: dict, steps_key: str, timeout: float) -> None:
    """The options every benchmark has: --quick (a tiny-model smoke test), --timeout, --keep, --json."""
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: {quick['model']}, {quick[steps_key]} steps, {quick['rounds']} round "
                        "(explicit options still win)")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds allowed for one training run")
    parser.add_argument("--keep", default=None, help="keep run directories and logs here (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")


def fill_defaults(args, defaults: dict, quick: dict) -> None:
    """Options left unset take the defaults, or the --quick values when asked for."""
    for key, value in {**defaults, **(quick if args.quick else {})}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def wait_until_ready(proc: subprocess.Popen, url: str, log_path: Path, timeout: float) -> None:
    """Return once GET `url` answers 200; exit the benchmark if the server died or never answered."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited ({proc.returncode}); see {log_path}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    proc.kill()
    sys.exit(f"server not ready in {timeout:.0f} s; see {log_path}")
