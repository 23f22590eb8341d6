"""A sequence classifier served elsewhere: `swiftlike deploy` of a reward model, or vLLM's own server for a
classification model, spoken to through vLLM's `/classify` route.

Each conversation is one `/classify` request in vLLM's chat form (`messages`, `use_activation: false`: the raw
logits); vLLM's chat form takes one conversation per request, so a batch goes out as concurrent requests, which
the server runs together (continuous batching on vLLM, `LocalClassifier`'s request batching on ours).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import requests
from requests.adapters import HTTPAdapter

from .classifier import Classifier, Conversation

RETRY_STATUSES = (502, 503, 504)
REQUESTS_IN_FLIGHT = 32  # concurrent /classify requests one client keeps open


class ClassifyServerError(RuntimeError):
    """The server refused a request, or stopped answering; the message names the server and the route."""


class ClassifyClient(Classifier):
    """The classifier behind `url`. A transient failure (connection refused or reset, a read timeout, 502-504) is
    retried with exponential backoff until `timeout` seconds have passed since the request was first sent; a 4xx
    or 500 is raised at once with the server's message. `timeout_flag` names the flag that sets `timeout`, for
    the error message."""

    def __init__(self, url: str, timeout: float, api_key: str | None = None,
                 timeout_flag: str = "--reward_model_server_timeout"):
        self.url, self.timeout, self.timeout_flag = url.rstrip("/"), timeout, timeout_flag
        self.http = requests.Session()
        self.http.mount("http://", HTTPAdapter(pool_maxsize=REQUESTS_IN_FLIGHT))
        self.http.mount("https://", HTTPAdapter(pool_maxsize=REQUESTS_IN_FLIGHT))
        if api_key:
            self.http.headers["Authorization"] = f"Bearer {api_key}"
        models = self._request("GET", "/v1/models").get("data") or []
        if not models:
            raise ClassifyServerError(f"{self.url} lists no model at GET /v1/models")
        self.model_name = models[0]["id"]
        probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
        self.num_labels = len(self._classify_one(probe))  # a server that does not classify fails here, at start

    def classify(self, conversations: Sequence[Conversation]) -> list[list[float]]:
        if len(conversations) <= 1:
            return [self._classify_one(c) for c in conversations]
        with ThreadPoolExecutor(min(REQUESTS_IN_FLIGHT, len(conversations))) as pool:
            return list(pool.map(self._classify_one, conversations))

    def _classify_one(self, conversation: Conversation) -> list[float]:
        body = {"model": self.model_name, "messages": list(conversation), "use_activation": False}
        data = self._request("POST", "/classify", json=body).get("data") or []
        if len(data) != 1:
            raise ClassifyServerError(f"{self.url} answered POST /classify with {len(data)} results for one "
                                      "conversation")
        return [float(x) for x in data[0]["probs"]]

    def _request(self, method: str, path: str, **kwargs) -> dict:
        deadline = time.monotonic() + self.timeout
        delay = 0.2
        while True:
            try:
                response = self.http.request(method, self.url + path, timeout=(5.0, self.timeout), **kwargs)
            except (requests.ConnectionError, requests.Timeout) as e:
                problem = f"{type(e).__name__}: {e}"
            else:
                if response.status_code < 400:
                    return response.json()
                message = _error_message(response)
                if response.status_code not in RETRY_STATUSES:
                    raise ClassifyServerError(f"{self.url} refused {method} {path} (HTTP {response.status_code}): "
                                              f"{message}")
                problem = f"HTTP {response.status_code}: {message}"
            if time.monotonic() + delay > deadline:
                raise ClassifyServerError(
                    f"{self.url} is not answering {method} {path} ({problem}); gave up after {self.timeout:g} s "
                    f"({self.timeout_flag}). Is the reward model served there (`swiftlike deploy --model RM "
                    "--port PORT`) and reachable?")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def close(self) -> None:
        self.http.close()


def _error_message(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message"))[:1000]
    return str(body.get("message") or body.get("detail") or body)[:1000] if isinstance(body, dict) else str(body)
