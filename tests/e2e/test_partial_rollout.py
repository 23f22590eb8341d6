"""Partial rollout on a real `swiftlike rollout` server (tiny model, fp32): a weight update that arrives while a
request is generating cuts it, and the request continues under the new weights. Each token's reported
log-prob must be what the weights of the version that sampled it give (a transformers forward pass).

The server is the session's shared `rollout_server` (tests/conftest.py). The updates here are full-weight ones, so
every test leaves the checkpoint's weights served again (an update that pushes them back), as the other users of
that server expect."""
import threading
import time

import httpx
import pytest
import torch
from model_ids import TINY

from test_rollout_server import remote_engine

TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def server(rollout_server):
    """The session's rollout server (fp32, LoRA enabled, contexts of 1024): its port."""
    return rollout_server


def token_logps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log softmax(logits / T) of each completion token: vLLM's processed log-probs without top-k / top-p."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float() / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def test_request_spanning_an_update_reports_two_versions_and_their_logprobs(server):
    from swiftlike.model import load_model, resolve_model
    old = load_model(resolve_model(TINY), "float32", "cpu").eval()
    new = load_model(resolve_model(TINY), "float32", "cpu").eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    http = httpx.Client(base_url=f"http://127.0.0.1:{server}", timeout=300)
    engine = remote_engine(server)
    body = {"prompts": [{"messages": [{"role": "user", "content": "Count to a thousand."}]}],
            "config": {"max_tokens": 8, "temperature": TEMPERATURE, "logprobs": True}}
    assert http.post("/generate", json=body).status_code == 200  # the engine's first steps are slow
    info = http.get("/info").json()
    base, before = info["policy_version"], info["tokens_generated"]
    body["config"]["max_tokens"] = 900
    answer = {}
    worker = threading.Thread(target=lambda: answer.update(httpx.post(f"http://127.0.0.1:{server}/generate", json=body,
                                                                      timeout=300).json()))
    worker.start()
    deadline = time.time() + 120
    while http.get("/info").json()["tokens_generated"] < before + 20 and time.time() < deadline:
        time.sleep(0.005)
    try:
        engine.update_weights(list(new.named_parameters()))
        worker.join(300)
    finally:  # the checkpoint's weights served again
        engine.update_weights(list(old.named_parameters()))
        engine.close()
    result = answer["results"][0]
    choice = result["choices"][0]
    spans = choice["version_spans"]
    assert [v for v, _ in spans] == [base, base + 1], f"the request did not span the update: {spans}"
    assert sum(n for _, n in spans) == len(choice["token_ids"]) == len(choice["logprobs"])
    assert result["policy_version"] == base  # the oldest version in the answer
    assert http.get("/info").json()["partial_rollouts"] >= 1
    cut = spans[0][1]
    reported = torch.tensor(choice["logprobs"])
    under_old = token_logps(old, result["prompt_ids"], choice["token_ids"])
    under_new = token_logps(new, result["prompt_ids"], choice["token_ids"])
    assert torch.allclose(reported[:cut], under_old[:cut], atol=1e-4), (reported[:cut] - under_old[:cut]).abs().max()
    assert torch.allclose(reported[cut:], under_new[cut:], atol=1e-4), (reported[cut:] - under_new[cut:]).abs().max()
    # the versions really differ on these tokens, so the check above could fail
    assert (reported[cut:] - under_old[cut:]).abs().max() > 1e-2
    assert (reported[:cut] - under_new[:cut]).abs().max() > 1e-2


PROMPT = [{"role": "user", "content": "Count to a thousand."}]


@pytest.fixture(scope="module")
def checkpoint_served(server):
    """The server holds the checkpoint's weights, and `update()` pushes them again: an update that changes nothing,
    so a request cut by it continues as it would have without it (greedy: token for token)."""
    from swiftlike.model import load_model, resolve_model
    weights = list(load_model(resolve_model(TINY), "float32", "cpu").named_parameters())
    engine = remote_engine(server)
    engine.update_weights(weights)
    yield lambda: engine.update_weights(weights)
    engine.close()


def update_while_generating(server, update, send) -> dict:
    """`send()` runs on a thread; once it is generating, one weight update. Returns its answer, whether the update
    waited for it, and how many requests the update cut."""
    http = httpx.Client(base_url=f"http://127.0.0.1:{server}", timeout=300)
    cut_before = http.get("/info").json()["partial_rollouts"]
    out = {}

    def request():
        out["answer"] = send()
        out["answered"] = time.monotonic()
    worker = threading.Thread(target=request)
    worker.start()
    deadline = time.time() + 120
    while http.get("/info").json()["in_flight"] == 0 and time.time() < deadline:
        time.sleep(0.005)
    time.sleep(0.2)  # a few tokens in
    assert worker.is_alive(), "the request finished before the update"
    update()
    updated = time.monotonic()
    worker.join(300)
    return {"answer": out["answer"], "update_waited": updated >= out["answered"],
            "cut": http.get("/info").json()["partial_rollouts"] - cut_before}


def generate(server, **config) -> dict:
    body = {"prompts": [{"messages": PROMPT}], "config": {"max_tokens": 400, "logprobs": True, **config}}
    resp = httpx.post(f"http://127.0.0.1:{server}/generate", json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()["results"][0]


def test_request_with_a_stop_string_is_not_cut_and_stops_before_it(server, checkpoint_served):
    """A cut request's text is decoded anew from all its tokens, which would keep a stop string the resumed piece
    hit (and one split across the cut would go unseen): such a request makes the update wait instead."""
    reference = generate(server, temperature=0.0)["choices"][0]["text"]
    # a stop string that first occurs in the second half of the greedy answer, well after the update comes
    stop = next((reference[i:i + n] for i in range(len(reference) // 2, len(reference) - 4) for n in (3, 4, 5)
                 if reference[i:i + n].strip() == reference[i:i + n] and reference.find(reference[i:i + n]) == i),
                None)
    assert stop, f"the greedy answer repeats itself, no late stop string in it: {reference!r}"
    run = update_while_generating(server, checkpoint_served, lambda: generate(server, temperature=0.0, stop=[stop]))
    choice = run["answer"]["choices"][0]
    assert stop not in choice["text"], f"the answer contains its stop string {stop!r}: {choice['text']!r}"
    assert choice["text"] == reference[:reference.index(stop)] and choice["finish_reason"] == "stop"
    assert run["cut"] == 0 and run["update_waited"] and len(choice["version_spans"]) == 1


@pytest.mark.parametrize("case", ["penalties", "plain", "openai"])
def test_only_requests_that_resume_exactly_are_cut(server, checkpoint_served, case):
    """Presence / frequency penalties count the generated tokens only, so a resumed piece would forget the
    prefix's: the update waits. So it does for the OpenAI routes, whose answers carry no version spans. A plain
    request is cut and resumed."""
    from openai import OpenAI
    sends = {
        "penalties": lambda: generate(server, temperature=0.7, presence_penalty=0.5, frequency_penalty=0.5),
        "plain": lambda: generate(server, temperature=0.7),
        "openai": lambda: OpenAI(base_url=f"http://127.0.0.1:{server}/v1", api_key="unused").chat.completions.create(
            model=TINY, messages=PROMPT, max_tokens=400, temperature=0.7)}
    run = update_while_generating(server, checkpoint_served, sends[case])
    if case == "plain":
        spans = run["answer"]["choices"][0]["version_spans"]
        assert run["cut"] == 1 and not run["update_waited"] and len(spans) == 2, run
        assert sum(n for _, n in spans) == len(run["answer"]["choices"][0]["token_ids"])
    else:
        assert run["cut"] == 0 and run["update_waited"], {k: v for k, v in run.items() if k != "answer"}
        if case == "penalties":
            assert len(run["answer"]["choices"][0]["version_spans"]) == 1
