"""Server-mode pieces without a server: bucket checks, bucketing, arguments, async lookahead, the client's
give-up path and the OpenAI conversions."""
import socket
import time

import pytest
import torch
from safetensors.torch import save, save_file

from swiftlike.arguments import RlhfArguments
from swiftlike.infer import openai_api
from swiftlike.rl.grpo_trainer import LookaheadBatches, RepeatSampler
from swiftlike.rollout.client import RolloutServerError, ServerClient
from swiftlike.rollout.transport import buckets
from swiftlike.rollout.weights import WeightStager, WeightUpdateError, read_header

SHAPES = {"a.weight": (2, 3), "b.weight": (4,)}


def test_stager_applies_a_complete_update_only_at_take():
    stager = WeightStager(SHAPES)
    uid = stager.begin()
    assert stager.add_bytes(uid, save({"a.weight": torch.ones(2, 3)})) == 1
    assert stager.add_bytes(uid, save({"b.weight": torch.zeros(4)})) == 1
    got = dict(stager.take(uid))
    assert set(got) == {"a.weight", "b.weight"} and got["a.weight"].sum() == 6
    with pytest.raises(WeightUpdateError, match="no open weight update"):
        stager.take(uid)  # closed


def test_one_bad_bucket_rejects_the_whole_update():
    stager = WeightStager(SHAPES)
    uid = stager.begin()
    stager.add_bytes(uid, save({"a.weight": torch.ones(2, 3)}))
    with pytest.raises(WeightUpdateError, match=r"'b.weight' has shape \[5\], the served model's is \[4\]"):
        stager.add_bytes(uid, save({"b.weight": torch.zeros(5)}))
    with pytest.raises(WeightUpdateError, match="already rejected"):
        stager.add_bytes(uid, save({"b.weight": torch.zeros(4)}))
    with pytest.raises(WeightUpdateError, match="previous weights keep serving"):
        stager.take(uid)
    uid = stager.begin()
    with pytest.raises(WeightUpdateError, match="unknown tensor 'c.weight'"):
        stager.add_bytes(uid, save({"c.weight": torch.zeros(1)}))


def test_stager_shared_path_buckets_and_bad_input(tmp_path):
    stager = WeightStager(SHAPES)
    uid = stager.begin()
    path = tmp_path / "bucket.safetensors"
    save_file({"b.weight": torch.arange(4.0)}, str(path))
    assert stager.add_file(uid, path) == 1
    assert dict(stager.take(uid))["b.weight"].tolist() == [0, 1, 2, 3]
    uid = stager.begin()
    with pytest.raises(WeightUpdateError, match="does not exist on the rollout server"):
        stager.add_file(uid, tmp_path / "missing.safetensors")
    with pytest.raises(WeightUpdateError, match="fewer than 8 bytes"):
        read_header(b"abc")
    with pytest.raises(WeightUpdateError, match="not valid JSON"):
        read_header((5).to_bytes(8, "little") + b"\xff\xfe{{{")
    uid = stager.begin()
    with pytest.raises(WeightUpdateError, match="has no tensors"):
        stager.take(uid)


def test_buckets_group_by_size_and_cast_to_the_server_dtype():
    named = [("x", torch.ones(10)), ("y", torch.ones(10)), ("big", torch.ones(100)), ("z", torch.ones(5))]
    out = list(buckets(named, "bfloat16", bucket_bytes=45))  # 20 bytes per 10 bf16 values
    assert [list(b) for b in out] == [["x", "y"], ["big"], ["z"]]
    assert all(t.dtype == torch.bfloat16 for b in out for t in b.values())
    assert [list(b) for b in buckets(named, "float32", bucket_bytes=1 << 20)] == [["x", "y", "big", "z"]]


def server_args(**kw) -> RlhfArguments:
    base = dict(model="tiny-random/qwen2_5", dataset=["d"], reward_funcs=["format"], num_generations=4,
                per_device_train_batch_size=4, use_vllm=True, vllm_mode="server")
    return RlhfArguments(**{**base, **kw})


def test_server_mode_arguments():
    assert server_args().server_addresses() == [("127.0.0.1", 8000)]
    assert server_args(vllm_server_port=[8000, 8001]).server_addresses() == [("127.0.0.1", 8000),
                                                                             ("127.0.0.1", 8001)]
    assert server_args(vllm_server_host=["a", "b"], vllm_server_port=[1, 2]).server_addresses() == [("a", 1),
                                                                                                   ("b", 2)]
    with pytest.raises(ValueError, match="give one host for all ports"):
        server_args(vllm_server_host=["a", "b"], vllm_server_port=[1, 2, 3])
    with pytest.raises(ValueError, match="--async_generate true .* needs --use_vllm true --vllm_mode server"):
        server_args(vllm_mode="colocate", async_generate=True)
    with pytest.raises(ValueError, match="leave them off"):
        server_args(sleep_level=1)
    with pytest.raises(ValueError, match="--vllm_server_timeout must be > 0"):
        server_args(vllm_server_timeout=0)


def test_lookahead_batches_carry_the_next_distinct_batch():
    # 3 prompts per generation batch -> 6 prompts = 2 distinct batches, each served twice (repeat 2)
    sampler = RepeatSampler(n_rows=6, num_generations=1, per_batch=3, repeat=2, seed=0)
    batches = list(LookaheadBatches(sampler, batch_size=3))
    sampler.epoch = 0
    plain = list(sampler)
    assert len(batches) == len(LookaheadBatches(sampler, 3)) == 4
    first, second = plain[:3], plain[6:9]
    assert batches[0] == first + second  # the first copy of batch 1 carries batch 2
    assert batches[1] == first  # a repeat does not prefetch again
    assert batches[2] == second and batches[3] == second  # the epoch's last batch has nothing ahead


def test_client_gives_up_with_a_clear_error_when_no_server_answers():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    client = ServerClient("127.0.0.1", port, timeout=1.0)
    start = time.monotonic()
    with pytest.raises(RolloutServerError, match=rf"rollout server http://127.0.0.1:{port} is not answering "
                                                 r"GET /info .*gave up after 1 s \(--vllm_server_timeout\)"):
        client.get("/info")
    assert time.monotonic() - start < 5


def test_openai_conversions():
    config = openai_api.request_config({"max_tokens": 7, "stop": "##", "temperature": 0}, default_max_tokens=99)
    assert config.max_tokens == 7 and config.stop == ["##"] and config.greedy
    assert openai_api.request_config({}, 99).max_tokens == 99
    completions = openai_api.request_config({"logprobs": 3}, 99)
    assert completions.logprobs and completions.top_logprobs == 3
    with pytest.raises(openai_api.OpenAIRequestError, match="stream=true"):
        openai_api.request_config({"stream": True}, 99)
    with pytest.raises(ValueError, match="top_p must be in"):
        openai_api.request_config({"top_p": 2}, 99)
    with pytest.raises(openai_api.OpenAIRequestError, match="each needs a role"):
        openai_api.chat_request({"messages": [{"role": "robot", "content": "x"}]})
    assert openai_api.chat_request({"messages": [{"role": "user", "content": "x"}]}).messages[0]["content"] == "x"
