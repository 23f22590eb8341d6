"""Server-mode pieces without a server: bucket checks, bucketing, arguments, async lookahead and the
staleness bound, the client's give-up path and the OpenAI conversions."""
import socket
import time

import pytest
import torch
from safetensors.torch import save, save_file
from model_ids import TINY

from swiftlike.arguments import RlhfArguments
from swiftlike.infer import openai_api
from swiftlike.rl.core.staleness import (min_async_staleness, prefetch_depth, prefetch_lag, stale_groups, steps_left,
                                         trained_steps)
from swiftlike.rl.online.prefetch import EpochLoader, GenerationRows, LookaheadBatches, Prefetch, spliced_index
from swiftlike.rl.online.grpo_trainer import RepeatSampler
from swiftlike.rollout.client.remote_engine import RolloutServerError, ServerClient
from swiftlike.rollout.client.transport import buckets
from swiftlike.rollout.wire.buckets import WeightStager, WeightUpdateError, read_header

SHAPES = {"a.weight": (2, 3), "b.weight": (4,)}


def test_stager_applies_a_complete_update_only_at_take():
    stager = WeightStager(SHAPES)
    uid = stager.begin()
    assert stager.add_bytes(uid, save({"a.weight": torch.ones(2, 3)})) == 1
    assert stager.add_bytes(uid, save({"b.weight": torch.zeros(4)})) == 1
    got = stager.take(uid)[1]
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
    assert stager.take(uid)[1]["b.weight"].tolist() == [0, 1, 2, 3]
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
    base = dict(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=4,
                per_device_train_batch_size=4, use_vllm=True, vllm_mode="server")
    return RlhfArguments(**{**base, **kw})


def test_server_mode_arguments():
    assert server_args().rollout_options().server_addresses() == [("127.0.0.1", 8000)]
    assert server_args(vllm_server_port=[8000, 8001]).rollout_options().server_addresses() == [("127.0.0.1", 8000),
                                                                             ("127.0.0.1", 8001)]
    assert server_args(vllm_server_host=["a", "b"], vllm_server_port=[1, 2]).rollout_options().server_addresses() == [("a", 1),
                                                                                                   ("b", 2)]
    with pytest.raises(ValueError, match="give one host for all ports"):
        server_args(vllm_server_host=["a", "b"], vllm_server_port=[1, 2, 3])
    with pytest.raises(ValueError, match="--async_generate true .* needs --use_vllm true --vllm_mode server"):
        server_args(vllm_mode="colocate", async_generate=True)
    assert server_args().max_staleness == 0 and server_args(async_generate=True).max_staleness == 1
    assert server_args(async_generate=True, max_staleness=0).max_staleness == 0  # synchronous
    # a generation batch serving 2 optimizer steps: one batch ahead is last used 3 steps after it was sampled
    for two_steps in ({"steps_per_generation": 4, "gradient_accumulation_steps": 2}, {"num_iterations": 2}):
        assert server_args(async_generate=True, **two_steps).max_staleness == 3
        assert server_args(async_generate=True, max_staleness=3, **two_steps).max_staleness == 3
        with pytest.raises(ValueError, match=r"--max_staleness 2 leaves no room to generate ahead: .* last trained "
                                             r"on 3 optimizer steps after it was sampled. Set --max_staleness 3"):
            server_args(async_generate=True, max_staleness=2, **two_steps)
    assert server_args(steps_per_generation=4, gradient_accumulation_steps=2).max_staleness == 0
    with pytest.raises(ValueError, match="--max_staleness 2 lets samples lag .* --async_generate true"):
        server_args(max_staleness=2)
    with pytest.raises(ValueError, match="--max_staleness must be >= 0"):
        server_args(async_generate=True, max_staleness=-1)
    with pytest.raises(ValueError, match="leave them off"):
        server_args(sleep_level=1)
    with pytest.raises(ValueError, match="--vllm_server_timeout must be > 0"):
        server_args(vllm_server_timeout=0)


def test_lookahead_batches_carry_the_next_distinct_batches():
    # 3 prompts per generation batch -> 9 prompts = 3 distinct batches, each served twice (repeat 2)
    sampler = RepeatSampler(n_rows=9, num_generations=1, per_batch=3, repeat=2, seed=0)
    one = list(LookaheadBatches(sampler, batch_size=3, depth=1))
    two = list(LookaheadBatches(sampler, batch_size=3, depth=2))
    plain = list(sampler)
    assert len(one) == len(LookaheadBatches(sampler, 3, 1)) == 6
    first, second, third = plain[:3], plain[6:9], plain[12:15]
    assert one[0] == first + second  # the first copy of batch 1 carries batch 2
    assert one[1] == first + second  # so does the repeat (a run resumed there prefetches at once)
    assert one[2] == second + third and one[4] == one[5] == third  # the epoch's last batch has nothing ahead
    assert two[0] == first + second + third and two[2] == second + third
    assert list(LookaheadBatches(sampler, 3, 0)) == [plain[k:k + 3] for k in range(0, 18, 3)]  # synchronous
    rows = GenerationRows.collate(3)(list(range(9)))
    assert rows == [0, 1, 2] and rows.ahead == [[3, 4, 5], [6, 7, 8]]


def test_each_epoch_draws_its_own_order_and_a_resumed_run_the_same_one():
    from accelerate.data_loader import skip_first_batches
    sampler = RepeatSampler(n_rows=12, num_generations=2, per_batch=2, repeat=2, seed=0)
    loader = EpochLoader(list(range(12)), batch_sampler=LookaheadBatches(sampler, 4, 1), collate_fn=list)
    epochs = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)  # what the Trainer does before each epoch
        epochs.append([list(b) for b in loader])
    assert epochs[0] != epochs[1] and sorted(map(tuple, epochs[0])) != sorted(map(tuple, epochs[1]))
    # a fresh process resumed 3 batches into epoch 1: the Trainer skips them and sets the epoch on the batch
    # sampler that the skipping loader wraps
    fresh = RepeatSampler(n_rows=12, num_generations=2, per_batch=2, repeat=2, seed=0)
    resumed = skip_first_batches(EpochLoader(list(range(12)), batch_sampler=LookaheadBatches(fresh, 4, 1),
                                             collate_fn=list), 3)
    resumed.batch_sampler.batch_sampler.set_epoch(1)
    assert [list(b) for b in resumed] == epochs[1][3:]


def test_prefetch_depth_fills_the_staleness_bound_at_the_last_use():
    assert prefetch_depth(0, 1, 1) == 0  # synchronous
    # one optimizer step per generation batch: K batches ahead
    assert [prefetch_depth(k, 2, 2) for k in (1, 2, 4)] == [1, 2, 4]
    # two steps per batch (steps_per_generation 2 at accumulation 1, or num_iterations 2): a batch started one
    # batch ahead is last trained on 3 steps later, two ahead 5 (ceil(K / 2) would be 2 at K = 3, then 4 late)
    assert [prefetch_depth(k, 2, 1) for k in (1, 2, 3, 4, 5)] == [0, 0, 1, 1, 2]
    assert min_async_staleness(2, 1) == min_async_staleness(4, 2) == 3 and min_async_staleness(2, 2) == 1
    # two generation batches per optimizer step (steps_per_generation 2, accumulation 4)
    assert prefetch_depth(1, 2, 4) == 2 and min_async_staleness(2, 4) == 1
    # steps_per_generation 3 at accumulation 2: batches straddle optimizer steps
    assert [trained_steps(m, 3, 2) for m in (0, 3, 6)] == [(0, 1), (1, 2), (3, 4)]
    assert min_async_staleness(3, 2) == 3 and prefetch_depth(3, 3, 2) == 1 and prefetch_depth(4, 3, 2) == 2
    assert [steps_left(m, 3, 2) for m in range(6)] == [1, 1, 0, 1, 0, 0]


def simulate(max_staleness: int, micro_steps: int, accumulation: int, batches: int = 12):
    """The trainer's schedule, step by step: take each batch at its first micro-step right after the step's
    sync (prefetched at the version it was started, else fresh), drop what the bound does not allow, top up
    the batches ahead. Returns (samples dropped, staleness at every micro-step that trains)."""
    depth = prefetch_depth(max_staleness, micro_steps, accumulation)
    started: dict[int, int] = {}  # batch -> the optimizer step whose weights it is generated with
    dropped, staleness = 0, []
    for m in range(batches * micro_steps):
        step, batch = m // accumulation, m // micro_steps
        if m % micro_steps == 0:
            version = started.pop(batch, step)
            bound = max(max_staleness - steps_left(m, micro_steps, accumulation), 0)
            if stale_groups([version], step, bound, 1):
                dropped, version = dropped + 1, step
            started[batch] = version
            for ahead in range(batch + 1, min(batch + 1 + depth, batches)):
                started.setdefault(ahead, step)
        staleness.append(step - started[batch])
    return dropped, staleness


@pytest.mark.parametrize("max_staleness,micro_steps,accumulation", [
    (3, 2, 1),  # the issue's case: K = 3, steps_per_generation 2 (or num_iterations 2) at accumulation 1
    (3, 4, 2), (4, 4, 2), (5, 4, 2), (1, 1, 1), (2, 2, 2), (1, 2, 4), (3, 3, 2), (4, 3, 2), (7, 6, 4)])
def test_prefetched_batches_stay_within_the_bound_at_every_use(max_staleness, micro_steps, accumulation):
    dropped, staleness = simulate(max_staleness, micro_steps, accumulation)
    assert dropped == 0 and max(staleness) <= max_staleness
    assert prefetch_depth(max_staleness, micro_steps, accumulation) >= 1
    deeper = prefetch_depth(max_staleness, micro_steps, accumulation) + 1  # one batch more would break it
    assert prefetch_lag(deeper, micro_steps, accumulation) > max_staleness


def test_spliced_index_puts_the_new_groups_in_the_places_of_the_stale_ones():
    # 3 groups of 2; groups 0 and 2 stale: their replacements are items 6-7 (for group 0) and 8-9 (group 2)
    assert spliced_index(6, [0, 2], 2) == [6, 7, 2, 3, 8, 9]
    assert spliced_index(6, [2, 0], 2) == [8, 9, 2, 3, 6, 7]  # in the order the stale groups were regenerated
    assert spliced_index(4, [], 2) == [0, 1, 2, 3]
    items = ["a0", "a1", "b0", "b1"]
    stale = stale_groups([0, 0, 5, 5], current=5, max_staleness=2, group_size=2)
    assert [(items + ["A0", "A1"])[i] for i in spliced_index(4, stale, 2)] == ["A0", "A1", "b0", "b1"]


def test_stale_groups_are_those_with_any_sample_over_the_bound():
    # trainer at step 5, bound 2, groups of 2: version 3 is 2 behind (kept), 1 is 4 behind; None is the current policy
    versions = [5, 3, 3, 3, 1, 5, None, None]
    assert stale_groups(versions, current=5, max_staleness=2, group_size=2) == [2]
    assert stale_groups(versions, current=5, max_staleness=4, group_size=2) == []
    assert stale_groups(versions, current=5, max_staleness=0, group_size=2) == [0, 1, 2]
    assert stale_groups(versions, current=5, max_staleness=0, group_size=4) == [0, 1]


def test_prefetch_takes_in_order_and_discards_a_batch_for_other_rows():
    from concurrent.futures import Future
    submitted = []

    def submit(rows):
        submitted.append(rows)
        future = Future()
        future.set_result([f"rollout of {r}" for r in rows])
        return future
    prefetch = Prefetch(submit)
    prefetch.top_up([[1], [2]])
    prefetch.top_up([[1], [2], [3]])  # only the new one is submitted
    assert submitted == [[1], [2], [3]] and len(prefetch) == 3
    assert prefetch.take([1]) == ["rollout of 1"]
    assert prefetch.take([9]) is None and len(prefetch) == 0  # not what was prefetched: all dropped


def test_client_gives_up_with_a_clear_error_when_no_server_answers():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    client = ServerClient("127.0.0.1", port, timeout=1.0)
    start = time.monotonic()
    with pytest.raises(RolloutServerError, match=rf"rollout server http://127.0.0.1:{port} is not answering "
                                                 r"GET /info .*gave up after 1\.\d s \(--vllm_server_timeout 1\)\. "
                                                 rf"Is `swiftlike rollout --port {port}` running"):
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
    with pytest.raises(openai_api.OpenAIRequestError, match=r"`messages.0`: role 'robot' is not one of assistant, "):
        openai_api.chat_request({"messages": [{"role": "robot", "content": "x"}]})
    with pytest.raises(openai_api.OpenAIRequestError, match=r"`messages.1.content.0.text`: Field required"):
        openai_api.chat_request({"messages": [{"role": "user", "content": "x"},
                                              {"role": "user", "content": [{"type": "text"}]}]})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    assert openai_api.chat_request({"messages": [{"role": "user", "content": "x"}], "tools": tools}).tools == tools
    with pytest.raises(openai_api.OpenAIRequestError, match="`functions` is not supported"):
        openai_api.chat_request({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})
    assert openai_api.chat_request({"messages": [{"role": "user", "content": "x"}]}).messages[0]["content"] == "x"
    parts = openai_api.chat_request({"messages": [{"role": "developer", "content": "be brief"}, {
        "role": "user", "content": [{"type": "text", "text": "2 +"}, {"type": "text", "text": " 3?"}]}]})
    assert parts.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2 + 3?"}]


def test_fingerprint_definition_by_hand():
    import hashlib

    import numpy as np

    from swiftlike.rollout.wire.fingerprint import sample_indices, tensor_digest
    assert sample_indices(10, samples=4).tolist() == [0, 3, 6, 9]  # evenly spaced, first and last included
    assert sample_indices(3, samples=4).tolist() == [0, 1, 2]  # a small tensor: every value
    by_hand = hashlib.sha256(b"w" + b"[2, 1]" + np.array([1.5, -2.0], "<f4").tobytes()).hexdigest()
    assert tensor_digest("w", torch.tensor([[1.5], [-2.0]]), "float32") == by_hand
    with pytest.raises(ValueError, match="serving dtype must be one of"):
        tensor_digest("w", torch.ones(2), "float8")


def test_fingerprint_is_stable_and_sees_values_shapes_but_not_lm_head():
    from swiftlike.rollout.wire.fingerprint import SAMPLES_PER_TENSOR, WeightsFingerprint
    torch.manual_seed(0)
    weights = {"a.weight": torch.randn(64, 64), "b.bias": torch.randn(7)}
    base = WeightsFingerprint.of(weights.items(), "float32")
    assert base.fingerprint == WeightsFingerprint.of(dict(weights).items(), "float32").fingerprint
    assert base.fingerprint == WeightsFingerprint.of(reversed(weights.items()), "float32").fingerprint
    for index in (0, 64 * 64 - 1):  # one sampled value (the grid includes both ends)
        moved = {**weights, "a.weight": weights["a.weight"].clone()}
        moved["a.weight"].view(-1)[index] += 1e-3
        changed = WeightsFingerprint.of(moved.items(), "float32")
        assert changed.fingerprint != base.fingerprint and changed.layout == base.layout
    assert 64 * 64 > SAMPLES_PER_TENSOR  # a sample, not a checksum: an off-grid value goes unseen
    reshaped = WeightsFingerprint.of({**weights, "a.weight": weights["a.weight"].reshape(32, 128)}.items(), "float32")
    assert reshaped.layout != base.layout
    with_head = WeightsFingerprint.of({**weights, "lm_head.weight": torch.randn(9, 64)}.items(), "float32")
    assert (with_head.fingerprint, with_head.layout) == (base.fingerprint, base.layout)


def test_fingerprint_compares_in_the_serving_dtype():
    from swiftlike.rollout.wire.fingerprint import WeightsFingerprint
    torch.manual_seed(0)
    fp32 = {"w": torch.randn(100)}
    bf16 = {"w": fp32["w"].to(torch.bfloat16)}
    # an fp32 trainer and a bf16 checkpoint of the same weights agree when the server serves bf16...
    assert WeightsFingerprint.of(fp32.items(), "bfloat16").fingerprint == \
        WeightsFingerprint.of(bf16.items(), "bfloat16").fingerprint
    # ...but not when it serves fp32, where the rounded values are what it would serve
    assert WeightsFingerprint.of(fp32.items(), "float32").fingerprint != \
        WeightsFingerprint.of(bf16.items(), "float32").fingerprint


def test_fingerprint_after_a_partial_update_describes_all_loaded_weights():
    from swiftlike.rollout.wire.fingerprint import WeightsFingerprint
    weights = {"a": torch.zeros(3), "b": torch.ones(4)}
    loaded = WeightsFingerprint.of(weights.items(), "float32")
    after = loaded.updated([("b", torch.full((4,), 2.0))], "float32")
    assert after.fingerprint == WeightsFingerprint.of({"a": torch.zeros(3), "b": torch.full((4,), 2.0)}.items(),
                                                      "float32").fingerprint
    assert after.layout == loaded.layout and loaded.digests["b"] != after.digests["b"]  # the old one is unchanged


def test_checkpoint_and_peft_trainer_fingerprints_agree():
    """What the server computes from the checkpoint equals what a LoRA trainer computes from its base."""
    from peft import LoraConfig, get_peft_model

    from swiftlike.model import load_model, resolve_model
    from swiftlike.train.engine_weights import engine_weights
    from swiftlike.rollout.wire.fingerprint import WeightsFingerprint, checkpoint_fingerprint
    resolved = resolve_model(TINY)
    server = checkpoint_fingerprint(resolved.model_dir, "bfloat16")
    model = get_peft_model(load_model(resolved, "float32", "cpu"), LoraConfig(r=4, target_modules="all-linear",
                                                                               init_lora_weights=False))
    trainer = WeightsFingerprint.of(engine_weights(model, merged=False), "bfloat16")
    assert (trainer.fingerprint, trainer.layout) == (server.fingerprint, server.layout)
    assert len(trainer.digests) > 10 and not any(n.startswith("lm_head.") for n in trainer.digests)


def test_stager_checks_delta_entries_against_the_served_shapes():
    from swiftlike.rollout.wire.delta import SUFFIXES
    stager = WeightStager(SHAPES)
    full = stager.begin()
    with pytest.raises(WeightUpdateError, match="unknown tensor"):  # delta names mean nothing in a full update
        stager.add_bytes(full, save({"a.weight" + SUFFIXES["values"]: torch.ones(1)}))
    uid = stager.begin(delta_base="w1")
    good = {"a.weight" + SUFFIXES["indices"]: torch.tensor([4], dtype=torch.int32),
            "a.weight" + SUFFIXES["values"]: torch.ones(1), "b.weight": torch.zeros(4)}
    assert stager.add_bytes(uid, save(good)) == 3
    update, tensors = stager.take(uid)
    assert update.delta_base == "w1" and set(tensors) == set(good)
    uid = stager.begin(delta_base="w1")
    with pytest.raises(WeightUpdateError, match="no bitmask"):  # a 2x3 tensor's bitmask is 1 byte
        stager.add_bytes(uid, save({"a.weight" + SUFFIXES["bitmask"]: torch.zeros(2, dtype=torch.uint8)}))
    empty = stager.begin(delta_base="w1")
    assert stager.take(empty)[1] == {}  # nothing changed: an empty delta is a valid update
