"""Partial rollout on a real `swiftlike rollout` server (tiny model, fp32): a weight update that arrives while a
request is generating cuts it, and the request continues under the new weights. Each token's reported
log-prob must be what the weights of the version that sampled it give (a transformers forward pass)."""
import threading
import time

import httpx
import pytest
import torch
from servers import free_port, start

from test_rollout_server import TINY, remote_engine, stop_server

TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    proc = start(["rollout", "--model", TINY, "--port", str(port), "--torch_dtype", "float32",
                  "--vllm_max_model_len", "1024"], port, tmp_path_factory.mktemp("partial") / "server.log")
    yield port
    stop_server(proc)


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
    engine.update_weights(list(new.named_parameters()))
    engine.close()
    worker.join(300)
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
