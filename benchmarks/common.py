"""What the benchmark scripts share: running one side in a fresh process with its output kept in a log, and
waiting for a server process to answer."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import requests

from swiftlike.utils.net import free_port  # noqa: F401  (the benchmarks take it from here)


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
