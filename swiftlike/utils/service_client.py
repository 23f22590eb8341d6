"""Calls to a model served over HTTP for a reward (a reward model's `/classify`, a judge's `/v1/chat/completions`),
retried with backoff until a deadline, with errors that name the server, the call and the flag of the deadline.

A reward server that stops answering must neither hang a run nor turn into silent zero rewards. A transient
failure (connection refused or reset, no answer before the deadline, HTTP 502-504) is retried with exponential
backoff until `timeout` seconds have passed since the call began; then `ServerUnavailable` is raised, which a caller
may choose to survive (`--reward_on_error skip`). Any other error answer (a wrong key, a bad request, a 500) is not
transient: `ServerError` at once, with the server's own message. It sits in utils because both the engine layer
(the clients) and the rewards (which decide what a failure means for a sample) need these types.
"""
from __future__ import annotations

import time

import requests
from requests.adapters import HTTPAdapter

RETRY_STATUSES = (502, 503, 504)
CONNECT_TIMEOUT = 5.0  # seconds to open a connection, at most: a refused one fails at once and is retried


class ServerError(RuntimeError):
    """A server refused a call or answered something unusable; the message names the server and the call."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status of a refusal; None when the server did not answer


class ServerUnavailable(ServerError):
    """A server did not answer a call within the deadline (down, killed, overloaded or hung)."""


class ServiceClient:
    """One server at `url`: JSON calls through a pooled session, each retried until `timeout` seconds have passed.

    `timeout_flag` names the flag that sets `timeout`, `hint` says what to check and `name` what the server is, all
    for the error message. By default one attempt waits for an answer only until the deadline, so a server that
    accepts and never answers costs `timeout` seconds, not more; `read_timeout` lets one answer take longer than
    the retry deadline (a rollout server's generation batch may run for minutes, while a server that is down
    should be given up on sooner)."""

    def __init__(self, url: str, timeout: float, api_key: str | None = None, *, timeout_flag: str, hint: str = "",
                 pool_size: int = 32, name: str = "", read_timeout: float | None = None):
        self.url, self.timeout, self.timeout_flag, self.hint = url.rstrip("/"), timeout, timeout_flag, hint
        self.label = f"{name} {self.url}" if name else self.url
        self.read_timeout = read_timeout
        self.http = requests.Session()
        self.http.mount("http://", HTTPAdapter(pool_maxsize=pool_size))
        self.http.mount("https://", HTTPAdapter(pool_maxsize=pool_size))
        if api_key:
            self.http.headers["Authorization"] = f"Bearer {api_key}"

    def request(self, method: str, path: str, **kwargs) -> dict:
        """The JSON answer of `method path`; `ServerUnavailable` once the deadline passes, `ServerError` on a
        non-transient error answer."""
        started = time.monotonic()
        deadline = started + self.timeout
        delay = 0.2
        while True:
            left = max(deadline - time.monotonic(), 0.05)
            try:
                response = self.http.request(method, self.url + path, timeout=(
                    min(CONNECT_TIMEOUT, left), self.read_timeout or left), **kwargs)
            except (requests.ConnectionError, requests.Timeout) as e:
                problem = f"{type(e).__name__}: {e}"
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise ServerError(f"{self.label} answered {method} {path} with something that is not JSON: "
                                          f"{response.text[:300]!r}") from None
                message = error_message(response)
                if response.status_code not in RETRY_STATUSES:
                    raise ServerError(f"{self.label} refused {method} {path} (HTTP {response.status_code}): "
                                      f"{message}", response.status_code)
                problem = f"HTTP {response.status_code}: {message}"
            now = time.monotonic()
            if now >= deadline:
                raise ServerUnavailable(
                    f"{self.label} is not answering {method} {path} ({problem}); gave up after {now - started:.1f} s "
                    f"({self.timeout_flag} {self.timeout:g}). {self.hint}".rstrip())
            time.sleep(min(delay, deadline - now))  # the last attempt is made at the deadline
            delay = min(delay * 2, 5.0)

    def get(self, path: str, **kwargs) -> dict:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> dict:
        return self.request("POST", path, **kwargs)

    def close(self) -> None:
        self.http.close()


def error_message(response: requests.Response) -> str:
    """The server's own words in an error answer: OpenAI's `{"error": {"message"}}`, FastAPI's `detail`, or text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message"))[:1000]
    return str(body.get("message") or body.get("detail") or body)[:1000] if isinstance(body, dict) else str(body)
