"""Starting a `swiftlike` server command as a real process for a test, and waiting until it answers."""
import os
import signal
import subprocess
import sys
import time

import httpx

from swiftlike.utils.net import free_port  # noqa: F401  (the tests take it from here with start())

ENV = {**os.environ, "SWIFTLIKE_OFFLINE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def start(argv: list[str], port: int, log_path, timeout: float = 300, command: list[str] | None = None
          ) -> subprocess.Popen:
    """`python -m swiftlike.cli.main *argv` (or `command *argv`), returned once GET /health answers 200 on
    `port`."""
    command = command or [sys.executable, "-m", "swiftlike.cli.main"]
    proc = subprocess.Popen([*command, *argv], env=ENV, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
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


def stop(proc: subprocess.Popen) -> None:
    """SIGINT, as Ctrl-C would, then SIGKILL after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_vllm_serve(model_dir: str, port: int, log_path, served_name: str, max_model_len: int = 1024
                     ) -> subprocess.Popen:
    """Bare `vllm serve` (its OpenAI server module: the `vllm` script fails under vllm-cpu, which looks up a
    distribution named "vllm"), fp32, for comparisons with what we serve."""
    return start(["--model", model_dir, "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32",
                  "--max-model-len", str(max_model_len), "--served-model-name", served_name], port, log_path,
                 command=[sys.executable, "-m", "vllm.entrypoints.openai.api_server"])


class FaultyProxy:
    """A reverse proxy in this process in front of a real server (`upstream`) that is slow or dies mid-run.

    Each POST is held `delay` seconds before it is forwarded (a slow judge), on its own thread, so concurrent calls
    are delayed together. With `die_at`, from its `die_at`-th POST on it drops every connection unanswered and
    closes its port, so later calls are refused, as when the server's process is killed. `died_at` is the
    time.monotonic() of its death; `posts` counts the POSTs."""

    def __init__(self, upstream: str, die_at: int | None = None, delay: float = 0.0):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        proxy = self
        self.upstream, self.die_at, self.posts, self.died_at = upstream, die_at, 0, None
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if method == "POST":
                    with proxy.lock:
                        proxy.posts += 1
                        if proxy.die_at is not None and proxy.posts >= proxy.die_at and proxy.died_at is None:
                            proxy.died_at = time.monotonic()
                            threading.Thread(target=proxy.close, daemon=True).start()
                if proxy.died_at is not None:
                    self.close_connection = True  # no answer: the connection just ends
                    return
                if method == "POST":
                    time.sleep(delay)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
                answer = httpx.request(method, proxy.upstream + self.path, content=body, headers=headers, timeout=120)
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def do_GET(self):
                self.forward("GET")

            def do_POST(self):
                self.forward("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
