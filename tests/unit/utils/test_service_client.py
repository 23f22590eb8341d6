"""Calls to a reward server (utils/service_client.py) and the judge's chat client over it, against small HTTP servers
in this process: a transient failure (503, and 429 after its Retry-After) is retried until it answers, a server that
is not listening or never answers fails within about the deadline with the server, the call and the flag named, a
refusal fails at once, and a judge replica that goes away loses only its own calls. Through the real judge and
reward-model code: a 400 for one completion makes that reward missing (counted with the missing ones) and the run
goes on; any other 4xx stops it, named."""
import email.utils
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swiftlike.infer.engine.chat_client import ChatClient, base_url
from swiftlike.infer.engine.classify_client import ClassifyClient
from swiftlike.rl.rewards.functions import MISSING, combine_rewards
from swiftlike.rl.rewards.judge import LlmJudge
from swiftlike.rl.rewards.reward_model import RewardModel
from swiftlike.utils.net import free_port
from swiftlike.utils.service_client import RequestRejected, ServerError, ServerUnavailable, ServiceClient

FLAG = "--reward_server_timeout"


class Handler(BaseHTTPRequestHandler):
    """/flaky: 503 twice, then 200; /hang: no answer for 5 s; /bad: 400; /retry-after: 429 with `Retry-After: 1`,
    then 200; /retry-date: 503 with Retry-After as an HTTP date 2 s ahead, then 200; /too-busy: 429 asking for an
    hour. The OpenAI routes of a judge that replies with its server's name and the last user message, or, asked for
    a labelled verdict, with the verdict 7; and vLLM's /classify, scoring 0.25. On the POST routes a message holding
    "busy" is answered 429 (Retry-After: 1) the first time, one holding "too long" 400 (vLLM's words for a prompt
    over the context length), one holding "gone" 404."""

    calls: dict[str, int] = {}

    def log_message(self, *args):
        pass

    def answer(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def count(self, key: str) -> int:
        count = self.calls[key] = self.calls.get(key, 0) + 1
        return count

    def do_GET(self):
        count = self.count(self.path)
        if self.path == "/flaky":
            self.answer(503 if count <= 2 else 200, {"count": count})
        elif self.path == "/hang":
            time.sleep(5)
        elif self.path == "/bad":
            self.answer(400, {"error": {"message": "no such thing"}})
        elif self.path == "/retry-after":
            self.answer(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}) if count == 1 else \
                self.answer(200, {"count": count})
        elif self.path == "/retry-date":
            when = email.utils.formatdate(time.time() + 2, usegmt=True)
            self.answer(503, {"detail": "warming up"}, {"Retry-After": when}) if count == 1 else \
                self.answer(200, {"count": count})
        elif self.path == "/too-busy":
            self.answer(429, {"error": {"message": "quota"}}, {"Retry-After": "3600"})
        elif self.path == "/v1/models":
            self.answer(200, {"data": [{"id": "judge"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][-1]["content"]
        if "busy" in content and self.count(f"{self.path} busy") == 1:
            return self.answer(429, {"error": {"message": "rate limited"}}, {"Retry-After": "1"})
        if "too long" in content:
            self.count(f"{self.path} too long")
            return self.answer(400, {"error": {"message": "This model's maximum context length is 64 tokens. However, "
                                                          "you requested 90 tokens in the messages"}})
        if "gone" in content:
            return self.answer(404, {"detail": "Not Found"})
        if self.path == "/classify":
            return self.answer(200, {"data": [{"probs": [0.25]}]})
        label = re.search(r'"(Score-[A-Z0-9]{6}): N"', content)
        reply = f"Good enough.\n{label.group(1)}: 7" if label else f"{self.server.server_port}: {content}"
        self.answer(200, {"choices": [{"message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]})


@pytest.fixture
def server():
    servers = []

    def start() -> tuple[ThreadingHTTPServer, str]:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return httpd, f"http://127.0.0.1:{httpd.server_port}"
    Handler.calls = {}
    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def test_a_transient_failure_is_retried_and_a_refusal_is_not(server):
    _, url = server()
    client = ServiceClient(url, 10, timeout_flag=FLAG)
    assert client.request("GET", "/flaky") == {"count": 3}
    with pytest.raises(ServerError, match=rf"{url} refused GET /bad \(HTTP 400\): no such thing") as refused:
        client.request("GET", "/bad")
    assert not isinstance(refused.value, ServerUnavailable) and Handler.calls["/bad"] == 1


@pytest.mark.parametrize("route", ["/hang", "/missing-server"])
def test_a_server_that_never_answers_fails_within_the_deadline_naming_it_and_the_call(server, route):
    _, url = server()
    if route == "/missing-server":
        url = f"http://127.0.0.1:{free_port()}"
    client = ServiceClient(url, 1.0, timeout_flag=FLAG, hint="Is it up?")
    started = time.monotonic()
    problem = "ReadTimeout" if route == "/hang" else "ConnectionError"
    with pytest.raises(ServerUnavailable, match=rf"{url} is not answering GET {route} \({problem}.*\); gave up after "
                                                rf"1\.\d s \({FLAG} 1\)\. Is it up\?"):
        client.request("GET", route)
    assert time.monotonic() - started < 2.5


def test_the_judge_client_spreads_calls_over_replicas_and_loses_only_a_dead_ones(server):
    first, first_url = server()
    _, second_url = server()
    assert base_url(first_url + "/v1/") == first_url
    client = ChatClient([first_url + "/v1", second_url], timeout=1.0)
    assert client.model_name == "judge"
    conversations = [[{"role": "user", "content": f"q{i}"}] for i in range(4)]
    ports = [url.rsplit(":", 1)[1] for url in (first_url, second_url)]
    replies = client.chat(conversations, temperature=0.0, max_tokens=4)
    assert [r.text for r in replies] == [f"{ports[i % 2]}: q{i}" for i in range(4)]
    assert {r.finish_reason for r in replies} == {"stop"}
    first.shutdown()
    first.server_close()  # the first replica goes away: its calls fail after the deadline, the others answer
    replies = client.chat(conversations, temperature=0.0, max_tokens=4)
    assert [type(r) for r in replies[::2]] == [ServerUnavailable] * 2
    assert "POST /v1/chat/completions" in str(replies[0])
    assert [r.text for r in replies[1::2]] == [f"{ports[1]}: q1", f"{ports[1]}: q3"]
    with pytest.raises(ServerError, match=r"does not serve the judge model 'other' .* name one with --judge_model"):
        ChatClient([second_url], timeout=1.0, model="other")


def test_429_and_503_wait_for_the_servers_retry_after_within_the_deadline(server):
    _, url = server()
    client = ServiceClient(url, 10, timeout_flag=FLAG)
    started = time.monotonic()
    assert client.request("GET", "/retry-after") == {"count": 2}
    assert 1.0 <= time.monotonic() - started < 3  # waited the second it was asked to, not the 0.2 s backoff
    started = time.monotonic()
    assert client.request("GET", "/retry-date") == {"count": 2}
    assert 0.9 <= time.monotonic() - started < 4  # an HTTP date 2 s ahead, to the second
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match=rf"{url} is not answering GET /too-busy \(HTTP 429: quota; "
                                                rf"Retry-After 3600 s\); gave up after 0\.\d s \({FLAG} 10\)"):
        client.request("GET", "/too-busy")  # asked to wait past the deadline: given up at once, not in 10 s
    assert time.monotonic() - started < 2 and Handler.calls["/too-busy"] == 1


def test_the_judge_over_http_retries_429_scores_a_400_missing_and_stops_on_a_404(server):
    _, url = server()
    judge = LlmJudge(ChatClient([url], timeout=10))  # --reward_on_error stop: none of this is a timeout
    prompts = [[{"role": "user", "content": "Answer."}]] * 3
    started = time.monotonic()
    rewards = judge(["a busy answer", "fine", "too long " * 20], prompts=prompts)
    assert rewards == [pytest.approx(0.7), pytest.approx(0.7), MISSING]
    assert time.monotonic() - started >= 1.0  # the 429's Retry-After was honoured
    assert Handler.calls == {**Handler.calls, "/v1/chat/completions busy": 2, "/v1/chat/completions too long": 1}
    scored = combine_rewards({"llm_judge": judge}, None, ["a busy answer", "fine", "too long"], prompts=prompts)
    assert scored.missing["llm_judge"].tolist() == [False, False, True]  # rewards/llm_judge/missing counts it
    with pytest.raises(ServerError, match=rf"{url} refused POST /v1/chat/completions \(HTTP 404\): Not Found") as e:
        judge(["gone"], prompts=prompts[:1])
    assert not isinstance(e.value, (ServerUnavailable, RequestRejected))


def test_a_served_reward_model_scores_a_400_missing_and_retries_a_429(server):
    _, url = server()
    model = RewardModel(ClassifyClient(url, 10), "--reward_model_server")
    prompts = [[{"role": "user", "content": "Answer."}]] * 3
    assert model(["busy", "fine", "too long"], prompts=prompts) == [0.25, 0.25, MISSING]
    assert Handler.calls["/classify busy"] == 2
    with pytest.raises(RequestRejected, match=r"refused POST /classify \(HTTP 400\): This model's maximum context"):
        model.classifier.classify([[*prompts[0], {"role": "assistant", "content": "too long"}]])
    with pytest.raises(ServerError, match=r"refused POST /classify \(HTTP 404\)"):
        model(["gone"], prompts=prompts[:1])
