"""The SGLang and LMDeploy adapters without their libraries (CPU): the pure mappings of our RequestConfig and
options onto theirs, their outputs onto our protocol, the async bridge both engines share (with a fake engine), and
the errors a user sees when a library or a GPU is missing."""
import asyncio
import sys
import time
from types import SimpleNamespace

import pytest
from cli import run_cli
from model_ids import TINY

from swiftlike.arguments import parse_args
from swiftlike.arguments.deploy_args import DeployArguments
from swiftlike.infer.engine import lmdeploy_engine as lmd
from swiftlike.infer.engine import sglang_engine as sgl
from swiftlike.infer.engine.async_engine import AsyncInferEngine, LoopThread, collect
from swiftlike.infer.engine.base import InferEngine
from swiftlike.infer.protocol import (Choice, InferRequest, InferResponse, InvalidSamplingParam, RequestConfig,
                                      StreamDelta, TokenLogprob, TopLogprob, Usage)


def decode(ids):
    return f"<{ids[0]}>"


# --- SGLang mappings -------------------------------------------------------------------------------------------

def test_sglang_sampling_params_greedy_with_stop_and_seed():
    config = RequestConfig(max_tokens=16, temperature=0, stop=["\n\n"], seed=7)
    assert sgl.sampling_params(config, [2, 5]) == {
        "max_new_tokens": 16, "temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "n": 1,
        "stop_token_ids": [2, 5], "skip_special_tokens": True, "stop": ["\n\n"], "sampling_seed": 7}


def test_sglang_sampling_params_sampled_n3():
    config = RequestConfig(max_tokens=4, temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.1, n=3)
    assert sgl.sampling_params(config, [2]) == {
        "max_new_tokens": 4, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.1, "n": 3,
        "stop_token_ids": [2], "skip_special_tokens": True}


def test_sglang_generate_kwargs():
    config = RequestConfig(max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    assert sgl.generate_kwargs([1, 2, 3], config, [2], "lora", "r1") == {
        "input_ids": [1, 2, 3], "sampling_params": sgl.sampling_params(config, [2]), "return_logprob": True,
        "lora_path": "lora", "top_logprobs_num": 2, "rid": "r1"}
    plain = RequestConfig(max_tokens=4, n=2)
    assert sgl.generate_kwargs([1], plain, [2], None, None) == {
        "input_ids": [1], "sampling_params": sgl.sampling_params(plain, [2]), "return_logprob": False,
        "lora_path": None}


def test_sglang_engine_kwargs():
    opts = sgl.SglangOptions(tp_size=2, mem_fraction_static=0.5, context_length=2048, disable_cuda_graph=True,
                             torch_dtype="bfloat16", seed=3)
    assert sgl.engine_kwargs("/m", opts, {"a": "/ad/a", "b": "/ad/b"}) == {
        "model_path": "/m", "dtype": "bfloat16", "random_seed": 3, "tp_size": 2, "pp_size": 1, "dp_size": 1,
        "ep_size": 1, "mem_fraction_static": 0.5, "context_length": 2048, "disable_cuda_graph": True,
        "quantization": None, "kv_cache_dtype": "auto", "enable_dp_attention": False,
        "disable_custom_all_reduce": True, "enable_memory_saver": False, "enable_lora": True,
        "lora_paths": ["a=/ad/a", "b=/ad/b"]}
    later = sgl.engine_kwargs("/m", sgl.SglangOptions(enable_lora=True, max_lora_rank=32), {})
    assert later["enable_lora"] and later["lora_target_modules"] == ["all"] and later["max_lora_rank"] == 32
    assert "enable_lora" not in sgl.engine_kwargs("/m", sgl.SglangOptions(), {})


def test_sglang_output_to_choice_with_logprobs():
    out = {"text": "hi", "output_ids": [5, 6],
           "meta_info": {"id": "r1", "finish_reason": {"type": "stop", "matched": 6},
                         "output_token_logprobs": [(-0.1, 5, None), (-0.2, 6, None)],
                         "output_top_logprobs": [[(-0.1, 5, None), (-2.0, 9, None)],
                                                 [(-0.2, 6, None), (-1.5, 8, None)]]}}
    config = RequestConfig(logprobs=True, top_logprobs=1)
    assert sgl.choice_from_output(out, 1, config, decode) == Choice(
        1, "hi", [5, 6], "stop", [TokenLogprob(5, "<5>", -0.1, [TopLogprob(5, "<5>", -0.1)]),
                                  TokenLogprob(6, "<6>", -0.2, [TopLogprob(6, "<6>", -0.2)])])
    long = {"text": "x", "output_ids": [5], "meta_info": {"finish_reason": {"type": "length", "length": 1}}}
    assert sgl.choice_from_output(long, 0, RequestConfig(), decode) == Choice(0, "x", [5], "length", None)
    aborted = {"meta_info": {"finish_reason": {"type": "abort", "message": "prompt too long"}}}
    with pytest.raises(ValueError, match="prompt too long"):
        sgl.finish_reason(aborted["meta_info"])


def test_sglang_cumulative_stream_becomes_deltas():
    config = RequestConfig(logprobs=True, top_logprobs=0)
    outs = [{"text": "h", "output_ids": [5], "meta_info": {"finish_reason": None,
                                                           "output_token_logprobs": [(-0.1, 5, None)]}},
            {"text": "h\ufffd", "output_ids": [5, 6],
             "meta_info": {"finish_reason": None, "output_token_logprobs": [(-0.1, 5, None), (-0.2, 6, None)]}},
            {"text": "hé", "output_ids": [5, 6, 7],
             "meta_info": {"finish_reason": {"type": "stop"},
                           "output_token_logprobs": [(-0.1, 5, None), (-0.2, 6, None), (-0.3, 7, None)]}}]
    progress = sgl.StreamProgress()
    deltas = [sgl.stream_delta(progress, 0, out, config, decode) for out in outs]
    assert deltas == [(StreamDelta(0, "h", [5], None), [TokenLogprob(5, "<5>", -0.1, [])]),
                      (StreamDelta(0, "", [6], None), [TokenLogprob(6, "<6>", -0.2, [])]),  # half a character
                      (StreamDelta(0, "é", [7], "stop"), [TokenLogprob(7, "<7>", -0.3, [])])]
    assert sgl.stream_delta(progress, 0, outs[-1] | {"meta_info": {"finish_reason": None}}, RequestConfig(),
                            decode) is None


def test_sglang_options_validate_with_flag_names():
    with pytest.raises(ValueError, match="--sglang_mem_fraction_static"):
        sgl.SglangOptions(mem_fraction_static=1.5)
    with pytest.raises(ValueError, match="--sglang_tp_size"):
        sgl.SglangOptions(tp_size=0)


# --- LMDeploy mappings -----------------------------------------------------------------------------------------

def test_lmdeploy_generation_config_greedy():
    assert lmd.generation_config(RequestConfig(max_tokens=8, temperature=0), [2]) == {
        "n": 1, "max_new_tokens": 8, "do_sample": False, "temperature": 0, "top_p": 1.0, "top_k": 0,
        "repetition_penalty": 1.0, "stop_token_ids": [2], "skip_special_tokens": True}


def test_lmdeploy_generation_config_sampled_seeded_with_logprobs():
    config = RequestConfig(max_tokens=8, temperature=0.8, top_p=0.95, top_k=40, seed=10, logprobs=True,
                           top_logprobs=3, n=3)
    assert lmd.generation_config(config, [2, 7], index=2) == {
        "n": 1, "max_new_tokens": 8, "do_sample": True, "temperature": 0.8, "top_p": 0.95, "top_k": 40,
        "repetition_penalty": 1.0, "stop_token_ids": [2, 7], "skip_special_tokens": True, "random_seed": 12,
        "logprobs": 3}
    assert lmd.generation_config(RequestConfig(logprobs=True), [2])["logprobs"] == 1  # the chosen token's own
    with pytest.raises(InvalidSamplingParam, match="temperature must be <= 2"):
        lmd.generation_config(RequestConfig(temperature=2.5), [2])


def test_lmdeploy_backend_config_picks_pytorch_for_adapters():
    opts = lmd.LmdeployOptions(tp=2, session_len=4096, cache_max_entry_count=0.5, quant_policy=8,
                               torch_dtype="bfloat16")
    common = {"dtype": "bfloat16", "tp": 2, "session_len": 4096, "cache_max_entry_count": 0.5, "quant_policy": 8}
    assert lmd.backend_config(opts, {}) == ("turbomind", common)
    assert lmd.backend_config(opts, {"a": "/ad/a"}) == ("pytorch", {**common, "adapters": {"a": "/ad/a"}})


def test_lmdeploy_options_validate():
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        lmd.LmdeployOptions(torch_dtype="float32")
    with pytest.raises(ValueError, match="--lmdeploy_cache_max_entry_count"):
        lmd.LmdeployOptions(cache_max_entry_count=1.0)
    with pytest.raises(ValueError, match="--lmdeploy_quant_policy"):
        lmd.LmdeployOptions(quant_policy=5)


def test_lmdeploy_token_logprobs():
    dists = [{5: -0.1, 9: -2.3}, {8: -0.5, 9: -0.9, 7: -3.0}]  # the second chosen token (7) ranks outside top-2
    assert lmd.token_logprobs([5, 7], dists, 1, decode) == [
        TokenLogprob(5, "<5>", -0.1, [TopLogprob(5, "<5>", -0.1)]),
        TokenLogprob(7, "<7>", -3.0, [TopLogprob(8, "<8>", -0.5)])]
    assert lmd.token_logprobs([5], dists[:1], 0, decode) == [TokenLogprob(5, "<5>", -0.1, [])]


# --- Missing libraries, missing GPU, arguments ----------------------------------------------------------------

@pytest.mark.parametrize("backend", ["sglang", "lmdeploy"])
def test_missing_library_names_the_fix(monkeypatch, backend):
    monkeypatch.setitem(sys.modules, backend, None)  # makes `import <backend>` fail even where it is installed
    with pytest.raises(ValueError, match=rf"pip install 'swiftlike\[{backend}\]'"):
        engine_class = sgl.SglangEngine if backend == "sglang" else lmd.LmdeployEngine
        engine_class(SimpleNamespace())


def test_lmdeploy_deploy_on_cpu_exits_with_a_clear_message():
    """sglang's twin is in test_deploy.py."""
    r = run_cli("deploy", "--model", TINY, "--infer_backend", "lmdeploy", check=False)
    assert r.returncode == 1 and "needs an NVIDIA GPU" in r.stderr


def test_deploy_arguments_carry_engine_options():
    assert isinstance(parse_args(DeployArguments, ["--model", "m", "--infer_backend", "sglang"]).engine_spec().options,
                      sgl.SglangOptions)
    args = parse_args(DeployArguments, ["--model", "m", "--infer_backend", "sglang", "--sglang_tp_size", "2",
                                        "--sglang_mem_fraction_static", "0.7", "--sglang_disable_cuda_graph", "true",
                                        "--lmdeploy_quant_policy", "8", "--lmdeploy_session_len", "4096"])
    opts = args.sglang_options()
    assert (opts.tp_size, opts.mem_fraction_static, opts.disable_cuda_graph, opts.seed) == (2, 0.7, True, 42)
    lm = args.lmdeploy_options()
    assert (lm.quant_policy, lm.session_len, lm.cache_max_entry_count) == (8, 4096, 0.8)
    with pytest.raises(SystemExit):
        parse_args(DeployArguments, ["--model", "m", "--lmdeploy_quant_policy", "5"])


# --- The async bridge, with a fake engine ----------------------------------------------------------------------

class WithoutAdaptersOrWeights:
    """The parts of the engine interface the fake engines below do not exercise."""

    @property
    def adapters(self):
        return {}

    def add_adapter(self, name, path):
        raise ValueError("no adapters")

    def update_weights(self, named_tensors):
        raise ValueError("no weights")


class FakeAsyncEngine(WithoutAdaptersOrWeights, AsyncInferEngine):
    """Echoes the prompt ids one token per 10 ms, on its own loop thread as SglangEngine runs."""

    model_name = "fake"

    def __init__(self):
        self._loop = asyncio.new_event_loop()
        self._thread = LoopThread(self._loop, "fake-engine")
        self.active = self.peak = self.cancelled = 0

    async def _agenerate(self, request, config):
        prompt = self.prompt_ids(request)
        return await collect(prompt, self._astream(request, config), config.n, config.logprobs)

    async def _astream(self, request, config):
        tokens = self.prompt_ids(request)[:config.max_tokens]
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            for k, t in enumerate(tokens):
                await asyncio.sleep(0.01)
                yield StreamDelta(0, f"<{t}>", [t], "length" if k == len(tokens) - 1 else None), None
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    def close(self):
        self._thread.close()


@pytest.fixture
def fake():
    engine = FakeAsyncEngine()
    yield engine
    engine.close()


def test_sync_infer_and_stream_run_on_the_engine_loop(fake):
    requests = [InferRequest(input_ids=[i, i + 1]) for i in range(4)]
    responses = fake.infer(requests, RequestConfig(max_tokens=8))
    assert [r.text for r in responses] == [f"<{i}><{i + 1}>" for i in range(4)] and fake.peak == 4
    assert responses[0].usage.completion_tokens == 2 and responses[0].choices[0].finish_reason == "length"
    assert "".join(d.text for d in fake.stream(InferRequest(input_ids=[7, 8, 9]), RequestConfig())) == "<7><8><9>"


def test_async_generation_batches_and_aborts_a_closed_stream(fake):
    async def main():
        answers = await asyncio.gather(*(fake.generate_async(InferRequest(input_ids=[i] * 5), RequestConfig())
                                         for i in range(8)))
        stream = fake.stream_async(InferRequest(input_ids=list(range(50))), RequestConfig(max_tokens=50))
        first = await stream.__anext__()
        await stream.aclose()
        return answers, first
    answers, first = asyncio.run(main())
    assert [a.text for a in answers] == [f"<{i}>" * 5 for i in range(8)] and fake.peak == 8
    assert first.text == "<0>" and first.token_ids == [0]
    deadline = time.time() + 5
    while fake.cancelled == 0 and time.time() < deadline:
        time.sleep(0.01)
    assert fake.cancelled == 1 and fake.active == 0
    with pytest.raises(ValueError, match="unknown adapter"):
        asyncio.run(fake.generate_async(InferRequest(input_ids=[1], adapter="nope"), RequestConfig()))


class FakeSyncEngine(WithoutAdaptersOrWeights, InferEngine):
    """Like the pt engine: synchronous and not thread-safe, so the interface's default async methods must run
    one request at a time."""

    model_name = "fake-sync"

    def __init__(self):
        self.active = self.peak = 0

    def prompt_ids(self, request):
        return list(request.input_ids)

    def infer(self, requests, config, use_tqdm=False):
        return [InferResponse([Choice(0, "".join(d.text for d in self.stream(r, config)), [], "length")],
                              Usage(1, 1), []) for r in requests]

    def stream(self, request, config):
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            for t in request.input_ids[:config.max_tokens]:
                time.sleep(0.01)
                yield StreamDelta(0, f"<{t}>", [t])
        finally:
            self.active -= 1


def test_default_async_methods_serialise_a_synchronous_engine():
    engine = FakeSyncEngine()

    async def main():
        answers = await asyncio.gather(*(engine.generate_async(InferRequest(input_ids=[i] * 3), RequestConfig())
                                         for i in range(4)))
        stream = engine.stream_async(InferRequest(input_ids=list(range(100))), RequestConfig(max_tokens=100))
        first = await stream.__anext__()
        await stream.aclose()  # returns once the engine thread has stopped
        return answers, first
    answers, first = asyncio.run(main())
    assert [a.text for a in answers] == [f"<{i}>" * 3 for i in range(4)]
    assert engine.peak == 1 and engine.active == 0 and first.text == "<0>"


def test_loop_thread_pause_lets_the_caller_drive_the_loop(fake):
    """What SglangEngine does for sglang's synchronous methods: tasks in flight keep running meanwhile."""
    future = fake._submit(asyncio.sleep(0.05, result="done"))
    with fake._thread.paused():
        assert fake._loop.run_until_complete(asyncio.sleep(0.1, result="mine")) == "mine"
        assert future.result(timeout=0) == "done"
    assert fake._submit(asyncio.sleep(0, result="again")).result(timeout=5) == "again"

