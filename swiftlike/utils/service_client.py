"""Calls to a model served over HTTP for a reward (a reward model's `/classify`, a judge's `/v1/chat/completions`),
retried with backoff until a deadline, with errors that name the server, the call and the flag of the deadline.

A reward server that stops answering must neither hang a run nor turn into silent zero rewards. A transient
failure (connection refused or reset, no answer before the deadline, HTTP 429 "too many requests", 502-504) is
retried with exponential backoff, or after the server's own `Retry-After` when it sends one, until `timeout` seconds
have passed since the call began; then `ServerUnavailable` is raised, which a caller may choose to survive
(`--reward_on_error skip`). A 400 is about the one request, not the server: a judge prompt or a conversation longer
than the served model's context (vLLM's "maximum context length"), which depends on the completion being scored, so
it is `RequestRejected` at once, and a caller scores that one completion as missing. Any other error answer (a wrong
key, a route the server does not have, a 500) is a configuration error: `ServerError` at once, with the server's
own message. It sits in utils because both the engine layer (the clients) and the rewards (which decide what a
failure means for a sample) need these types.
"""
from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass

import requests
from requests.adapters import HTTPAdapter

RETRY_STATUSES = (429, 502, 503, 504)
REJECTED_STATUS = 400
CONNECT_TIMEOUT = 5.0  # seconds to open a connection, at most: a refused one fails at once and is retried
MAX_BACKOFF = 5.0  # seconds between two attempts, at most, unless the server's Retry-After asks for longer


class ServerError(RuntimeError):
    """A server refused a call or answered something unusable; the message names the server and the call."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status of a refusal; None when the server did not answer


class ServerUnavailable(ServerError):
    """A server did not answer a call within the deadline (down, killed, overloaded or hung)."""


class RequestRejected(ServerError):
    """A server refused one request as invalid (HTTP 400), typically an input longer than its model's context: the
    request's content is at fault, not the server, so the other requests of a batch stand."""


@dataclass(frozen=True)
class ChatReply:
    """A chat model's answer: its text and why it stopped (`stop`; `length` for one cut at `max_tokens`, whose
    verdict may be missing or half written; None where the server does not say)."""
    text: str
    finish_reason: str | None = None


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
        """The JSON answer of `method path`; `ServerUnavailable` once the deadline passes, `RequestRejected` on a
        400, `ServerError` on any other error answer that is not transient."""
        started = time.monotonic()
        deadline = started + self.timeout
        delay = 0.2
        while True:
            left = max(deadline - time.monotonic(), 0.05)
            wait = None  # seconds the server asked to be left alone (Retry-After)
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
                self._refuse(method, path, response)
                wait = retry_after(response)
                problem = f"HTTP {response.status_code}: {error_message(response)}"
                if wait is not None:
                    problem += f"; Retry-After {wait:g} s"
            now = time.monotonic()
            pause = min(delay, deadline - now) if wait is None else max(wait, delay)
            if now >= deadline or now + pause > deadline:
                raise ServerUnavailable(
                    f"{self.label} is not answering {method} {path} ({problem}); gave up after {now - started:.1f} s "
                    f"({self.timeout_flag} {self.timeout:g}). {self.hint}".rstrip())
            time.sleep(pause)  # Retry-After is a least wait; without it, the last attempt is made at the deadline
            delay = min(delay * 2, MAX_BACKOFF)

    def _refuse(self, method: str, path: str, response: requests.Response) -> None:
        """Raise for an error answer that is not worth retrying."""
        if response.status_code in RETRY_STATUSES:
            return
        cls = RequestRejected if response.status_code == REJECTED_STATUS else ServerError
        raise cls(f"{self.label} refused {method} {path} (HTTP {response.status_code}): {error_message(response)}",
                  response.status_code)

    def get(self, path: str, **kwargs) -> dict:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> dict:
        return self.request("POST", path, **kwargs)

    def close(self) -> None:
        self.http.close()


def retry_after(response: requests.Response) -> float | None:
    """The seconds a `Retry-After` header asks for (delay-seconds or an HTTP date), None without a usable one."""
    value = (response.headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0) if when.tzinfo is not None else None


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
