"""Calls to a reward server (utils/service_client.py) and the judge's chat client over it, against small HTTP servers
in this process: a transient failure is retried until it answers, a server that is not listening or never answers
fails within about the deadline with the server, the call and the flag named, a refusal fails at once, and a judge
replica that goes away loses only its own calls."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swiftlike.infer.engine.chat_client import ChatClient, base_url
from swiftlike.utils.net import free_port
from swiftlike.utils.service_client import ServerError, ServerUnavailable, ServiceClient

FLAG = "--reward_server_timeout"


class Handler(BaseHTTPRequestHandler):
    """/flaky: 503 twice, then 200; /hang: no answer for 5 s; /bad: 400; the OpenAI routes of a judge that replies
    with its server's name and the last user message."""

    calls: dict[str, int] = {}

    def log_message(self, *args):
        pass

    def answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        count = self.calls[self.path] = self.calls.get(self.path, 0) + 1
        if self.path == "/flaky":
            self.answer(503 if count <= 2 else 200, {"count": count})
        elif self.path == "/hang":
            time.sleep(5)
        elif self.path == "/bad":
            self.answer(400, {"error": {"message": "no such thing"}})
        elif self.path == "/v1/models":
            self.answer(200, {"data": [{"id": "judge"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = f"{self.server.server_port}: {body['messages'][-1]['content']}"
        self.answer(200, {"choices": [{"message": {"role": "assistant", "content": reply}}]})


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
    assert client.chat(conversations, temperature=0.0, max_tokens=4) == [f"{ports[i % 2]}: q{i}" for i in range(4)]
    first.shutdown()
    first.server_close()  # the first replica goes away: its calls fail after the deadline, the others answer
    replies = client.chat(conversations, temperature=0.0, max_tokens=4)
    assert [type(r) for r in replies[::2]] == [ServerUnavailable] * 2
    assert "POST /v1/chat/completions" in str(replies[0]) and replies[1::2] == [f"{ports[1]}: q1", f"{ports[1]}: q3"]
    with pytest.raises(ServerError, match=r"does not serve the judge model 'other' .* name one with --judge_model"):
        ChatClient([second_url], timeout=1.0, model="other")
