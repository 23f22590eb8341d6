"""SGLang engine (`sglang.Engine`, in-process) for deploy and, later, colocated RL rollout.

Written against sglang's Python API as read in sgl-project/sglang (python/sglang/srt/entrypoints/engine.py,
managers/io_struct.py, managers/tokenizer_manager.py, sampling/sampling_params.py, server_args.py; the 0.5 line
up to the main branch of 2026): `sgl.Engine(**server_args)`, `async_generate(input_ids=..., sampling_params=...,
return_logprob=..., top_logprobs_num=..., lora_path=..., rid=..., stream=...)`, `async_load_lora_adapter`,
`update_weights_from_tensor`, `release_memory_occupation` / `resume_memory_occupation(tags=...)`, `shutdown`.
Not yet run on a GPU.

Prompts go in as token ids from our Template, so chat formatting is identical on every backend; sglang keeps its
own tokenizer only to detokenize and to match stop strings.
"""
from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from ...model import ResolvedModel, check_adapter_dir, load_tokenizer
from ...template import Template, get_template
from ...utils.errors import UsageError
from ...utils.fields import arg
from ..protocol import (Choice, FinishReason, InferRequest, InferResponse, RequestConfig, StreamDelta, TokenLogprob,
                        TopLogprob, Usage)
from .async_engine import AsyncInferEngine, LoggedDelta, LoopThread, import_backend

Decode = Callable[[list[int]], str]


@dataclass
class SglangOptions:
    """SGLang engine settings (NVIDIA GPU only); each maps to the sglang server argument without the prefix.

    The fields with help text are the `--sglang_*` flags (arguments/option_flags.py, ms-swift's names); the others
    swiftlike sets."""

    tp_size: int = arg(1, "GPUs per model replica (tensor parallel).")
    pp_size: int = arg(1, "Pipeline-parallel stages.")
    dp_size: int = arg(1, "Model replicas (data parallel).")
    ep_size: int = arg(1, "Expert-parallel size for MoE models.")
    mem_fraction_static: float | None = arg(None, "Fraction of GPU memory for weights and KV cache; "
                                            "None lets sglang choose.")
    context_length: int | None = arg(None, "Longest sequence the engine plans for; None: the model's.")
    disable_cuda_graph: bool = arg(False, "Run without CUDA graphs (faster start, slower decoding).")
    quantization: str | None = arg(None, "Weight quantization method, e.g. fp8, awq, gptq.")
    kv_cache_dtype: str = arg("auto", "KV cache data type, e.g. auto, fp8_e5m2, fp8_e4m3.")
    enable_dp_attention: bool = arg(False, "Data-parallel attention (with --sglang_dp_size, for MoE models).")
    disable_custom_all_reduce: bool = arg(True, "Use NCCL all-reduce instead of sglang's custom kernel.")
    torch_dtype: str = "auto"
    seed: int = 0
    # LoRA with no adapter at start-up (they come later through add_adapter): sglang sizes its LoRA memory now.
    enable_lora: bool = False
    max_lora_rank: int | None = None
    # sglang's memory saver (needs the torch_memory_saver package): what lets `sleep` free GPU memory.
    enable_memory_saver: bool = False

    def __post_init__(self) -> None:
        for name in ("tp_size", "pp_size", "dp_size", "ep_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--sglang_{name} must be >= 1, got {getattr(self, name)}")
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise UsageError(f"--sglang_mem_fraction_static must be in (0, 1), got {self.mem_fraction_static}")
        if self.context_length is not None and self.context_length < 1:
            raise UsageError(f"--sglang_context_length must be >= 1, got {self.context_length}")


def engine_kwargs(model_dir, opts: SglangOptions, adapters: dict[str, str]) -> dict:
    """`sgl.Engine` keyword arguments (sglang's ServerArgs names). Adapters are registered as `name=path`, so
    requests select them by name."""
    kwargs = dict(model_path=str(model_dir), dtype=opts.torch_dtype, random_seed=opts.seed, tp_size=opts.tp_size,
                  pp_size=opts.pp_size, dp_size=opts.dp_size, ep_size=opts.ep_size,
                  mem_fraction_static=opts.mem_fraction_static, context_length=opts.context_length,
                  disable_cuda_graph=opts.disable_cuda_graph, quantization=opts.quantization,
                  kv_cache_dtype=opts.kv_cache_dtype, enable_dp_attention=opts.enable_dp_attention,
                  disable_custom_all_reduce=opts.disable_custom_all_reduce,
                  enable_memory_saver=opts.enable_memory_saver)
    if adapters:
        kwargs.update(enable_lora=True, lora_paths=[f"{name}={path}" for name, path in adapters.items()])
    elif opts.enable_lora:
        kwargs.update(enable_lora=True, lora_target_modules=["all"])
    if opts.max_lora_rank is not None:
        kwargs["max_lora_rank"] = opts.max_lora_rank
    return kwargs


def sampling_params(config: RequestConfig, stop_token_ids: list[int]) -> dict:
    """RequestConfig as sglang's sampling_params dict. sglang reads temperature 0 as greedy and top_k -1 as all
    tokens, like ours; stop strings are matched (and cut from the text) by sglang itself."""
    params = dict(max_new_tokens=config.max_tokens, temperature=config.temperature, top_p=config.top_p,
                  top_k=config.top_k, repetition_penalty=config.repetition_penalty, n=config.n,
                  stop_token_ids=list(stop_token_ids), skip_special_tokens=True)
    if config.stop:
        params["stop"] = list(config.stop)
    if config.seed is not None:
        params["sampling_seed"] = config.seed
    return params


def generate_kwargs(prompt_ids: list[int], config: RequestConfig, stop_token_ids: list[int], adapter: str | None,
                    rid: str | None) -> dict:
    """`Engine.async_generate` keyword arguments for one request. `rid` names it so it can be aborted; sglang
    derives its own ids for the n > 1 fan-out, so a rid is only given when n is 1."""
    kwargs = dict(input_ids=list(prompt_ids), sampling_params=sampling_params(config, stop_token_ids),
                  return_logprob=config.logprobs, lora_path=adapter)
    if config.logprobs:
        kwargs["top_logprobs_num"] = config.top_logprobs or 0
    if rid is not None:
        kwargs["rid"] = rid
    return kwargs


def finish_reason(meta: dict) -> FinishReason | None:
    """sglang's meta_info finish_reason ({"type": "stop" | "length" | "abort", ...} or None while running)."""
    reason = meta.get("finish_reason")
    if reason is None:
        return None
    kind = reason.get("type") if isinstance(reason, dict) else str(reason)
    if kind == "abort":
        message = reason.get("message") if isinstance(reason, dict) else None
        raise ValueError(f"sglang aborted the request: {message or reason}")
    return "length" if kind == "length" else "stop"


def token_logprobs(meta: dict, top: int, decode: Decode, start: int = 0) -> list[TokenLogprob]:
    """meta_info's output_token_logprobs [(logprob, token_id, text)] and output_top_logprobs (one such list per
    token), from token `start` on; token texts come from our tokenizer (sglang sends none unless asked)."""
    chosen = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or []
    out = []
    for i in range(start, len(chosen)):
        logprob, token_id, _ = chosen[i]
        ranked = (tops[i] if i < len(tops) else None) or []
        alternatives = [TopLogprob(t, decode([t]), float(lp)) for lp, t, _ in ranked[:top]]
        out.append(TokenLogprob(token_id, decode([token_id]), float(logprob), alternatives))
    return out


def choice_from_output(out: dict, index: int, config: RequestConfig, decode: Decode) -> Choice:
    meta = out["meta_info"]
    logprobs = token_logprobs(meta, config.top_logprobs or 0, decode) if config.logprobs else None
    return Choice(index=index, text=out["text"], token_ids=list(out["output_ids"]),
                  finish_reason=finish_reason(meta) or "length", logprobs=logprobs)


@dataclass
class StreamProgress:
    """What one choice of a stream has sent so far; sglang's stream outputs are cumulative."""

    text: str = ""
    tokens: int = 0


def stream_delta(progress: StreamProgress, index: int, out: dict, config: RequestConfig,
                 decode: Decode) -> LoggedDelta | None:
    """The new part of a cumulative stream output, or None when nothing new arrived. Text ending in an
    incomplete UTF-8 character waits for the next output."""
    meta = out["meta_info"]
    finish = finish_reason(meta)
    text = out.get("text")
    new_text = ""
    if text is not None and text.startswith(progress.text) and (finish is not None or not text.endswith("\ufffd")):
        new_text, progress.text = text[len(progress.text):], text
    ids = out["output_ids"]
    new_ids = list(ids[progress.tokens:])
    logprobs = token_logprobs(meta, config.top_logprobs or 0, decode, progress.tokens) if config.logprobs else None
    progress.tokens = len(ids)
    if not new_text and not new_ids and finish is None:
        return None
    return StreamDelta(index, new_text, new_ids, finish), logprobs


class SglangEngine(AsyncInferEngine):
    """sglang's request handling runs on the engine's event loop, driven by our LoopThread; its synchronous
    methods (weights, memory) drive that loop themselves, so they run while the thread is paused."""

    def __init__(self, resolved: ResolvedModel, template: Template | None = None,
                 options: SglangOptions | None = None, adapters: dict[str, str] | None = None):
        sgl = import_backend("sglang", "sglang")
        self.model_name = resolved.model_id
        self.model_dir = resolved.model_dir
        self.template = template or get_template(resolved.meta.template, load_tokenizer(resolved))
        self.options = options or SglangOptions()
        self._adapters = {name: str(check_adapter_dir(path)) for name, path in (adapters or {}).items()}
        self._sleep_tags: list[str] | None = None
        self.engine = sgl.Engine(**engine_kwargs(resolved.model_dir, self.options, self._adapters))
        self._loop = self.engine.loop
        self._loop_thread = LoopThread(self._loop, "swiftlike-sglang")
        # The first request starts sglang's response loop on the loop's thread, which is not the main thread, so
        # sglang installs no signal handlers over the server's own.
        warm_up = InferRequest(messages=[{"role": "user", "content": "hi"}])
        try:
            self._submit(self._agenerate(warm_up, RequestConfig(max_tokens=1))).result()
        except BaseException:
            self.close()
            raise

    @property
    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    def add_adapter(self, name: str, path: str) -> None:
        path = str(check_adapter_dir(path))
        result = self._submit(self.engine.async_load_lora_adapter(name, path)).result()
        if not result.success:
            raise ValueError(f"sglang could not load adapter {name!r}: {result.error_message} (LoRA must be enabled "
                             "at start-up: adapters given then, or SglangOptions(enable_lora=True, max_lora_rank=R))")
        self._adapters[name] = path

    def update_weights(self, named_tensors: Iterable[tuple[str, object]]) -> None:
        """In place from tensors (sglang flushes its prefix cache afterwards)."""
        with self._loop_thread.paused():
            success, message = self.engine.update_weights_from_tensor(list(named_tensors), flush_cache=True)
        if not success:
            raise RuntimeError(f"sglang update_weights_from_tensor failed: {message}")

    def sleep(self, level: int = 1) -> None:
        """Level 1 frees the KV cache and keeps the weights; level 2 frees both, and the weights must then be sent
        again with update_weights after wake_up."""
        if not self.options.enable_memory_saver:
            raise ValueError("sleep needs the sglang engine started with SglangOptions(enable_memory_saver=True)")
        self._sleep_tags = ["kv_cache"] if level == 1 else None
        with self._loop_thread.paused():
            self.engine.release_memory_occupation(tags=self._sleep_tags)

    def wake_up(self) -> None:
        with self._loop_thread.paused():
            self.engine.resume_memory_occupation(tags=self._sleep_tags)

    def _abort(self, rids: Iterable[str]) -> None:
        for rid in rids:
            self.engine.tokenizer_manager.abort_request(rid)

    async def _agenerate(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        prompt = self.prompt_ids(request)
        rid = uuid.uuid4().hex if config.n == 1 else None
        try:
            out = await self.engine.async_generate(
                **generate_kwargs(prompt, config, self.template.stop_token_ids, request.adapter, rid))
        except asyncio.CancelledError:
            self._abort([rid] if rid else [])
            raise
        outs = out if isinstance(out, list) else [out]  # n > 1: one output per choice
        choices = [choice_from_output(o, i, config, self.tokenizer.decode) for i, o in enumerate(outs)]
        return InferResponse(choices, Usage(len(prompt), sum(len(c.token_ids) for c in choices)), prompt)

    async def _astream(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[LoggedDelta]:
        prompt = self.prompt_ids(request)
        rid = uuid.uuid4().hex if config.n == 1 else None
        seen = {rid} if rid else set()
        progress: dict[int, StreamProgress] = {}
        outputs = await self.engine.async_generate(
            **generate_kwargs(prompt, config, self.template.stop_token_ids, request.adapter, rid), stream=True)
        finished = False
        try:
            async with contextlib.aclosing(outputs):
                async for out in outputs:
                    seen.add(out["meta_info"]["id"])
                    index = out.get("index", 0)  # n > 1: which choice this output belongs to
                    item = stream_delta(progress.setdefault(index, StreamProgress()), index, out, config,
                                        self.tokenizer.decode)
                    if item is not None:
                        yield item
            finished = True
        finally:
            if not finished:  # the consumer went away or failed: stop generating for it
                self._abort(seen)

    def close(self) -> None:
        self._loop_thread.close()
        self.engine.shutdown()
