"""Delta weight sync on real vLLM engines (tiny model, bf16 and fp32 engine dtype): after deltas the engine
holds what a full sync of the same weights gives it, bit for bit, colocated and behind a rollout server over
every transport; a server holding other weights refuses the delta (409) and the trainer falls back to full.

The weights are those of real AdamW steps. vLLM's CPU linear layers keep their weights prepacked (the
parameter is empty), so "the engine's weights" are read as: every tensor vLLM still exposes (embeddings,
norms, biases), exactly; the engine's greedy tokens and log-probs, exactly; and the tensors the engine was
loaded from, bit for bit against the trainer's weights cast to the engine dtype.

The servers here run in this process (their engines are read), one per engine dtype, and every test syncs full
weights or deltas: none is the session's shared `rollout_server`. The GRPO runs are in this process too
(`run_cli`), the server-mode one against the in-process server.
"""
import asyncio
import threading
import time

import pytest
import torch
from model_ids import TINY
from servers import free_port

from swiftlike.infer.protocol import InferRequest, RequestConfig
from swiftlike.rollout.wire import delta
from swiftlike.rollout.client.transport import cast

PROMPTS = ["What is 2 + 3?", "Name a colour.", "Count to five."]
GREEDY = RequestConfig(max_tokens=12, temperature=0.0, logprobs=True)


@pytest.fixture(scope="module")
def trained(tiny_resolved):
    """The model's weights after each of three AdamW steps (lr 1e-4: in bf16 only part of them move)."""
    from swiftlike.model import load_model
    torch.manual_seed(0)
    model = load_model(tiny_resolved, "float32", "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, model.config.vocab_size, (2, 24))
    states = []
    for _ in range(3):
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        states.append([(n, p.detach().clone()) for n, p in model.named_parameters()])
    return states


@pytest.fixture(scope="module", params=["bfloat16", "float32"])
def dtype(request):
    return request.param


@pytest.fixture(scope="module")
def colocated(dtype, tiny_resolved, tiny_template):
    from swiftlike.infer.engine.vllm_engine import VllmEngine, VllmOptions
    engine = VllmEngine(tiny_resolved, tiny_template, VllmOptions(torch_dtype=dtype, max_model_len=512))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def server(dtype):
    """A rollout server on loopback in this process (uvicorn on a thread), so its engine can be read."""
    import uvicorn

    from swiftlike.arguments.rollout_args import RolloutServerArguments
    from swiftlike.infer.engine import build_engine
    from swiftlike.rollout.server.app import create_app
    from swiftlike.rollout.server.service import RolloutService
    args = RolloutServerArguments(model=TINY, torch_dtype=dtype, port=free_port(), vllm_max_model_len=512)
    spec = args.engine_spec()
    service = RolloutService(args, lambda: build_engine(spec))
    http = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=args.port, log_level="warning"))
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    while not http.started:
        time.sleep(0.1)
    yield service
    http.should_exit = True
    thread.join(30)
    service.close()


def exposed_tensors(worker) -> dict[str, torch.Tensor]:
    model = worker.model_runner.model
    return {n: t.detach().clone() for n, t in [*model.named_parameters(), *model.named_buffers()] if t.numel()}


def greedy(engine) -> list:
    out = engine.infer([InferRequest(messages=[{"role": "user", "content": p}]) for p in PROMPTS], GREEDY)
    return [(r.choices[0].token_ids, [t.logprob for t in r.choices[0].logprobs]) for r in out]


def colocated_state(engine) -> tuple[dict, list]:
    return engine.llm.collective_rpc(exposed_tensors)[0], greedy(engine)


def server_state(service) -> tuple[dict, list]:
    def read():
        return colocated_state(service.engine)
    return asyncio.run(service.on_engine(read))


def assert_same_state(a, b) -> None:
    tensors_a, outputs_a = a
    tensors_b, outputs_b = b
    assert tensors_a.keys() == tensors_b.keys() and len(tensors_a) > 10
    for name in tensors_a:
        assert torch.equal(delta.bits(tensors_a[name].contiguous()), delta.bits(tensors_b[name].contiguous())), name
    assert outputs_a == outputs_b


def assert_holds(synced: delta.SyncedWeights, weights, dtype: str) -> None:
    """The tensors an engine was loaded from are the trainer's weights cast to its dtype, bit for bit."""
    expected = dict(cast(weights, dtype))
    assert synced.tensors.keys() == expected.keys()
    for name, t in expected.items():
        assert torch.equal(delta.bits(synced.tensors[name]), delta.bits(t)), name


def test_colocated_delta_sync_equals_full_sync_bit_for_bit(colocated, trained, dtype):
    from swiftlike.rl.online.rollout_worker import push_delta_in_process
    synced, stats = push_delta_in_process(colocated, None, trained[0])
    assert stats.density == 1
    first = colocated_state(colocated)
    densities = []
    for weights in trained[1:]:
        synced, stats = push_delta_in_process(colocated, synced, weights)
        densities.append(stats.density)
    assert all(0 < d <= 1 for d in densities)
    if dtype == "bfloat16":
        assert all(d < 0.9 for d in densities), densities  # a step of 1e-4 leaves many bf16 values as they were
    assert_holds(synced, trained[-1], dtype)
    after_delta = colocated_state(colocated)
    colocated.update_weights(trained[-1])  # a plain full sync of the same weights
    after_full = colocated_state(colocated)
    assert_same_state(after_delta, after_full)
    assert first[1] != after_full[1], "the steps must change the engine's outputs for the check to mean anything"


def remote(port: int, transport: str, weight_sync: str, bucket_mb: int = 1):
    from swiftlike.model import load_tokenizer, resolve_model
    from swiftlike.rollout.client.remote_engine import RemoteEngine, ServerClient
    from swiftlike.rollout.client.transport import make_transport
    from swiftlike.template import get_template
    resolved = resolve_model(TINY)
    template = get_template(resolved.meta.template, load_tokenizer(resolved))
    return RemoteEngine([ServerClient("127.0.0.1", port, 30)], template, make_transport(transport, bucket_mb, None),
                        weight_sync)


@pytest.mark.parametrize("transport", ["http", "path", "gloo", pytest.param(
    "nccl", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL needs a GPU on both sides"))])
def test_server_delta_sync_equals_full_sync_bit_for_bit(server, trained, dtype, transport):
    """1 MiB buckets, so each transport carries a delta in several buckets."""
    engine = remote(server.args.port, transport, "delta")
    engine.update_weights(trained[0])
    full_bytes = engine.last_sync.bytes
    assert engine.last_sync.density == 1 and server.synced is not None
    first = server_state(server)
    for weights in trained[1:]:
        engine.update_weights(weights)
        assert 0 < engine.last_sync.density <= 1
        assert engine.last_sync.bytes <= full_bytes
        if dtype == "bfloat16":
            assert engine.last_sync.bytes < 0.9 * full_bytes
    assert engine.policy_version == 3
    assert_holds(server.synced, trained[-1], dtype)
    after_delta = server_state(server)
    engine.close()
    reference = remote(server.args.port, "http", "full", bucket_mb=512)
    reference.update_weights(trained[-1])
    reference.close()
    assert server.synced is None  # a full update that did not ask for a copy drops it
    after_full = server_state(server)
    assert_same_state(after_delta, after_full)
    assert first[1] != after_full[1]


def test_stale_base_is_refused_and_the_trainer_falls_back_to_a_full_sync(server, trained, dtype, caplog):
    import httpx
    port = server.args.port
    engine = remote(port, "http", "delta")
    engine.update_weights(trained[0])
    base = engine._weights_ids[0]
    other = remote(port, "http", "full")  # another trainer updates the server meanwhile
    other.update_weights(trained[1])
    other.close()
    refused = httpx.post(f"http://127.0.0.1:{port}/update_weights/begin", json={"delta_base": base})
    assert refused.status_code == 409 and "send a full update" in refused.json()["error"]["message"]
    with caplog.at_level("WARNING", logger="swiftlike"):
        engine.update_weights(trained[2])
    assert "sending the full weights instead" in caplog.text
    assert engine.last_sync.density == 1 and server.synced is not None
    version = engine.policy_version
    engine.update_weights(trained[2])  # nothing changed: an empty delta, still a sync
    assert engine.last_sync.changed == 0 and engine.last_sync.bytes == 0 and engine.policy_version == version + 1
    assert_holds(server.synced, trained[2], dtype)
    engine.close()


def test_grpo_server_delta_sync_logs_density_and_sends_less(server, dtype, tmp_path):
    """The real CLI, full fine-tuning at lr 1e-5: the first sync is full, later ones are deltas."""
    from test_rollout_server import grpo
    steps, _ = grpo(tmp_path, [server.args.port], "--tuner_type", "full", "--learning_rate", "1e-5",
                    "--weight_sync", "delta", "--weight_transport", "http")
    assert steps[0]["sync/delta_density"] == 1
    for e in steps[1:]:
        assert 0 < e["sync/delta_density"] <= 1 and e["sync/bytes"] <= steps[0]["sync/bytes"], e
        if dtype == "float32":
            assert e["rollout_correction/k3_kl"] < 1e-4, e  # the server scores what the trainer does
        else:
            assert e["sync/bytes"] < 0.9 * steps[0]["sync/bytes"], e


def test_grpo_colocate_delta_sync_follows_the_trainer(tmp_path):
    from test_grpo import rlhf
    steps, _ = rlhf(tmp_path, "--use_vllm", "true", "--tuner_type", "full", "--learning_rate", "1e-5",
                    "--weight_sync", "delta", steps=3)
    assert steps[0]["sync/delta_density"] == 1
    for e in steps[1:]:
        assert 0 < e["sync/delta_density"] <= 1 and e["sync/bytes"] > 0, e
        assert e["rollout_correction/k3_kl"] < 1e-4, e
