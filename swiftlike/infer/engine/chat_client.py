"""A chat model served at one or more OpenAI-compatible URLs, asked one conversation per request: GRPO's generative
judge (`--judge_model_server`, rl/rewards/judge.py).

Not `OpenAIEngine` (the engine interface over the `openai` client): a judge call is retried until
`--reward_server_timeout` and fails with an error naming the server and the route, like a served reward model's
`/classify` (utils/service_client.py), and one call that fails must not lose the answers of the others, which
`--reward_on_error skip` keeps. A request the judge refuses as invalid (HTTP 400: a judge prompt over its context
length, which depends on the completion it holds) is that completion's alone too: it comes back in its place, and the
judge scores that completion as missing. Several URLs are replicas of one judge: request i of a batch goes to URL
i mod n.
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ...utils.service_client import ChatReply, RequestRejected, ServerError, ServerUnavailable, ServiceClient

Conversation = list[dict]


def base_url(url: str) -> str:
    """The server's root: `http://host:port` and ms-swift's `http://host:port/v1` name the same server."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


class ChatClient:
    """The judge behind `urls`, each reached and asked one probe question here: a server that is down, does not
    serve `model` or does not chat (a reward-model deployment) stops the run before the policy loads."""

    def __init__(self, urls: Sequence[str], timeout: float, api_key: str | None = None, model: str | None = None,
                 max_concurrency: int = 32, timeout_flag: str = "--reward_server_timeout"):
        hint = "Is the judge served there (`swiftlike deploy --model JUDGE --port PORT`, `vllm serve`) and reachable?"
        self.services = [ServiceClient(base_url(url), timeout, api_key, timeout_flag=timeout_flag, hint=hint,
                                       pool_size=max_concurrency) for url in urls]
        if not self.services:
            raise ValueError("a judge needs at least one server URL (--judge_model_server)")
        self.max_concurrency = max_concurrency
        self.model_name = model
        for service in self.services:
            listed = [m["id"] for m in service.request("GET", "/v1/models").get("data") or []]
            self.model_name = self.model_name or (listed[0] if listed else None)
            if self.model_name not in listed:
                raise ServerError(f"{service.url} does not serve the judge model {self.model_name!r} (GET /v1/models "
                                  f"lists {listed}); name one with --judge_model")
            self._chat_one(service, [{"role": "user", "content": "ping"}], temperature=0.0, max_tokens=1)

    def chat(self, conversations: Sequence[Conversation], *, temperature: float,
             max_tokens: int) -> list[ChatReply | ServerUnavailable | RequestRejected]:
        """The judge's reply to each conversation, asked concurrently, with its finish reason. A call that got no
        answer within the deadline (429 and 503 included, retried until then) comes back as its `ServerUnavailable`,
        and one refused as invalid (400) as its `RequestRejected`, in its place. Any other refusal (`ServerError`: a
        wrong key, a route or model the server does not have) is raised: it is a configuration error."""
        def one(i: int) -> ChatReply | ServerUnavailable | RequestRejected:
            try:
                return self._chat_one(self.services[i % len(self.services)], conversations[i], temperature,
                                      max_tokens)
            except (ServerUnavailable, RequestRejected) as e:
                return e
        if len(conversations) <= 1:
            return [one(i) for i in range(len(conversations))]
        with ThreadPoolExecutor(min(self.max_concurrency, len(conversations))) as pool:
            return list(pool.map(one, range(len(conversations))))

    def _chat_one(self, service: ServiceClient, conversation: Conversation, temperature: float,
                  max_tokens: int) -> ChatReply:
        body = {"model": self.model_name, "messages": list(conversation), "temperature": temperature,
                "max_tokens": max_tokens}
        choices = service.request("POST", "/v1/chat/completions", json=body).get("choices") or []
        if not choices:
            raise ServerError(f"{service.url} answered POST /v1/chat/completions without a choice")
        return ChatReply(choices[0].get("message", {}).get("content") or "", choices[0].get("finish_reason"))

    def close(self) -> None:
        for service in self.services:
            service.close()
