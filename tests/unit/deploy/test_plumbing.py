"""The HTTP plumbing deploy and the rollout server share, over a real FastAPI app: the error shape, the key, the
body limit, the status of each kind of failure, and that the server keeps serving after each."""
import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from swiftlike.deploy import plumbing


class Conflict(ValueError):
    pass


class Body(BaseModel):
    n: int


@pytest.fixture
def client():
    app = FastAPI()
    plumbing.install(app, api_key="k", logger=logging.getLogger("test"), guarded=lambda path: path.startswith("/v1"),
                     body_limit=lambda path: 1 << 20 if path == "/v1/small" else None, errors={Conflict: 409},
                     validation_hint=lambda exc: " (see the docs)", health=lambda: {"policy_version": 3})

    @app.post("/v1/small")
    async def small(body: Body):
        return {"n": body.n}

    @app.get("/v1/fail/{kind}")
    async def fail(kind: str):
        raise {"value": ValueError("bad temperature -1"), "conflict": Conflict("stale base"),
               "fault": RuntimeError("engine died")}[kind]
    return TestClient(app, raise_server_exceptions=False)


KEY = {"authorization": "Bearer k"}


def test_health_is_open_and_carries_the_servers_fields(client):
    assert client.get("/health").json() == {"status": "ok", "policy_version": 3}


def test_the_key_guards_the_guarded_paths(client):
    refused = client.post("/v1/small", json={"n": 1})
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert client.post("/v1/small", json={"n": 1}, headers={"authorization": "Bearer kk"}).status_code == 401
    assert client.post("/v1/small", json={"n": 1}, headers=KEY).json() == {"n": 1}


@pytest.mark.parametrize("kind, status, kind_name, text", [
    ("value", 400, "invalid_request_error", "bad temperature -1"), ("conflict", 409, "conflict_error", "stale base"),
    ("fault", 500, "server_error", "RuntimeError: engine died")])
def test_each_failure_has_its_status_in_openais_error_shape(client, kind, status, kind_name, text):
    answer = client.get(f"/v1/fail/{kind}", headers=KEY)
    assert answer.status_code == status
    assert answer.json() == {"error": {"message": text, "type": kind_name, "param": None, "code": status}}
    assert client.get("/health").status_code == 200  # and the server keeps serving


def test_a_body_over_the_limit_is_refused_before_it_is_read_and_a_bad_one_is_named(client):
    big = client.post("/v1/small", content=b"x" * (2 << 20), headers={**KEY, "content-type": "application/json"})
    assert big.status_code == 413 and "exceeds this endpoint's limit of 1 MiB" in big.json()["error"]["message"]
    bad = client.post("/v1/small", json={"n": "many"}, headers=KEY)
    assert bad.status_code == 422
    assert bad.json()["error"]["message"].startswith("invalid request body for /v1/small: body.n:")
    assert bad.json()["error"]["message"].endswith(" (see the docs)")
