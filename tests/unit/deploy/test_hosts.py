"""The Host-header check of the web UI and the app page (DNS rebinding), as pure rules and over a real FastAPI
app; `tests/e2e/test_webui.py` and `tests/e2e/test_app.py` send foreign Host headers to the real servers."""
import socket

import pytest
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from fastapi.responses import PlainTextResponse
from fastapi.testclient import TestClient

from swiftlike.deploy.hosts import HostCheck, allowed_host_names, host_allowed, host_of


@pytest.mark.parametrize("header, host", [("127.0.0.1:7860", "127.0.0.1"), ("[::1]:7860", "::1"), ("LocalHost", "localhost"),
                                          ("ui.example.:443", "ui.example"), ("::1", "::1")])
def test_host_of_strips_port_brackets_case_and_final_dot(header, host):
    assert host_of(header) == host


def test_names_follow_the_bind_and_the_flag():
    loopback = allowed_host_names("127.0.0.1")
    assert loopback == {"localhost"}  # a loopback bind answers to localhost and to addresses only
    assert allowed_host_names("localhost", ["Proxy.Example."]) == {"localhost", "proxy.example"}
    wide = allowed_host_names("0.0.0.0")
    assert {"localhost", socket.gethostname().lower()} <= wide
    assert "ui.lan" in allowed_host_names("ui.lan")


@pytest.mark.parametrize("header, served", [
    ("127.0.0.1:7860", True), ("localhost:7860", True), ("[::1]:7860", True), ("10.1.2.3", True), (None, True),
    ("evil.example:7860", False), ("127.0.0.1.evil.example", False), ("localhost.evil.example", False),
    ("", False)])
def test_only_known_names_and_addresses_are_served(header, served):
    assert host_allowed(header, allowed_host_names("127.0.0.1")) is served
    assert host_allowed(header, allowed_host_names("127.0.0.1", ["*"]))


def test_middleware_refuses_http_and_websockets_with_a_foreign_host():
    app = FastAPI()

    @app.get("/")
    async def hello():
        return PlainTextResponse("hello")

    @app.websocket("/ws")
    async def echo(websocket: WebSocket):
        await websocket.accept()
        await websocket.send_text("hi")
        await websocket.close()
    app.add_middleware(HostCheck, names=allowed_host_names("127.0.0.1"))
    client = TestClient(app, base_url="http://127.0.0.1:7860")
    assert client.get("/").text == "hello"
    refused = client.get("/", headers={"host": "evil.example:7860"})
    assert refused.status_code == 400 and "--allowed_hosts" in refused.json()["error"]["message"]
    with client.websocket_connect("ws://127.0.0.1:7860/ws") as ws:
        assert ws.receive_text() == "hi"
    with pytest.raises(WebSocketDisconnect):
        with client.websocket_connect("/ws", headers={"host": "evil.example"}) as ws:
            ws.receive_text()
