"""A sequence classifier served elsewhere: `swiftlike deploy` of a reward model, or vLLM's own server for a
classification model, spoken to through vLLM's `/classify` route.

Each conversation is one `/classify` request in vLLM's chat form (`messages`, `use_activation: false`: the raw
logits); vLLM's chat form takes one conversation per request, so a batch goes out as concurrent requests, which
the server runs together (continuous batching on vLLM, `LocalClassifier`'s request batching on ours). Calls are
retried until `--reward_server_timeout` (utils/service_client.py), and `classify_each` keeps each conversation's
failure in its place, so a conversation the server refuses as too long costs only its own score.
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ...utils.service_client import RequestRejected, ServerError, ServerUnavailable, ServiceClient
from .classifier import Classifier, Conversation

REQUESTS_IN_FLIGHT = 32  # concurrent /classify requests one client keeps open


class ClassifyClient(Classifier):
    """The classifier behind `url`, reached and probed here: a server that is down, or does not classify, fails at
    start. A transient failure (429 and 503 included) is retried with backoff until `timeout` seconds have passed
    since the call began (`ServerUnavailable`), a 400 is `RequestRejected` at once, any other 4xx or a 500 is raised
    at once with the server's message (`ServerError`)."""

    def __init__(self, url: str, timeout: float, api_key: str | None = None,
                 timeout_flag: str = "--reward_server_timeout"):
        self.service = ServiceClient(url, timeout, api_key, timeout_flag=timeout_flag, pool_size=REQUESTS_IN_FLIGHT,
                                     hint="Is the reward model served there (`swiftlike deploy --model RM --port "
                                          "PORT`) and reachable?")
        self.url = self.service.url
        models = self.service.request("GET", "/v1/models").get("data") or []
        if not models:
            raise ServerError(f"{self.url} lists no model at GET /v1/models")
        self.model_name = models[0]["id"]
        probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
        self.num_labels = len(self._classify_one(probe))  # a server that does not classify fails here, at start

    def classify(self, conversations: Sequence[Conversation]) -> list[list[float]]:
        outcomes = self.classify_each(conversations)
        failed = next((o for o in outcomes if isinstance(o, ServerError)), None)
        if failed is not None:
            raise failed
        return outcomes

    def classify_each(self, conversations: Sequence[Conversation]
                      ) -> list[list[float] | ServerUnavailable | RequestRejected]:
        """Each conversation's logits, or in its place the `ServerUnavailable` of a call that got no answer within
        the deadline or the `RequestRejected` of one refused as invalid; any other refusal is raised."""
        def one(conversation: Conversation) -> list[float] | ServerUnavailable | RequestRejected:
            try:
                return self._classify_one(conversation)
            except (ServerUnavailable, RequestRejected) as e:
                return e
        if len(conversations) <= 1:
            return [one(c) for c in conversations]
        with ThreadPoolExecutor(min(REQUESTS_IN_FLIGHT, len(conversations))) as pool:
            return list(pool.map(one, conversations))

    def _classify_one(self, conversation: Conversation) -> list[float]:
        body = {"model": self.model_name, "messages": list(conversation), "use_activation": False}
        data = self.service.request("POST", "/classify", json=body).get("data") or []
        if len(data) != 1:
            raise ServerError(f"{self.url} answered POST /classify with {len(data)} results for one conversation")
        return [float(x) for x in data[0]["probs"]]

    def close(self) -> None:
        self.service.close()
