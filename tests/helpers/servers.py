"""Starting a `swiftlike` server command as a real process for a test, and waiting until it answers."""
import os
import subprocess
import sys
import time

import httpx

from swiftlike.utils.net import free_port  # noqa: F401  (the tests take it from here with start())

ENV = {**os.environ, "SWIFTLIKE_OFFLINE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def start(argv: list[str], port: int, log_path, timeout: float = 300) -> subprocess.Popen:
    """`python -m swiftlike.cli.main *argv`, returned once GET /health answers 200 on `port`."""
    proc = subprocess.Popen([sys.executable, "-m", "swiftlike.cli.main", *argv], env=ENV,
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited ({proc.returncode}):\n{open(log_path).read()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(1)
    proc.kill()
    raise TimeoutError(f"{argv[0]} did not answer /health within {timeout:.0f} s")
