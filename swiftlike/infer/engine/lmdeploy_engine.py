"""LMDeploy engine (`lmdeploy.pipeline`, in-process) for deploy and, later, colocated RL rollout.

Written against lmdeploy's Python API as read in InternLM/lmdeploy (lmdeploy/api.py, pipeline.py, messages.py,
serve/core/async_engine.py, serve/openai/endpoints/management.py, docs/en/advance/update_weights.md; the main
branch of 2026, after the AsyncEngine / Pipeline split of PR #4253, and the 0.7-0.11 AsyncEngine it replaced):
`pipeline(model_path, backend_config=TurbomindEngineConfig | PytorchEngineConfig(...))`, `GenerationConfig`,
`AsyncEngine.generate(None, session_id, gen_config=..., input_ids=..., adapter_name=..., stream_response=True)`,
`AsyncEngine.sleep` / `wakeup`, `engine.update_params(UpdateParamsRequest(...))`, `close`. Not yet run on a GPU.

Backend choice: TurboMind (lmdeploy's fastest) unless adapters are given; TurboMind has no LoRA, so adapters
select the PyTorch engine, which loads them at start-up (`PytorchEngineConfig.adapters`) and cannot add more
later. lmdeploy generates one answer per call (its `n` must be 1), so n > 1 runs n calls side by side.
Stop strings are cut here: lmdeploy's `stop_words` stop on any token that contains the word, which is not
OpenAI's rule.
"""
from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from ...model import ResolvedModel, check_adapter_dir, load_tokenizer
from ...template import Template, get_template
from ...utils.errors import UsageError
from ...utils.fields import arg
from ..protocol import (InferRequest, InferResponse, InvalidSamplingParam, RequestConfig, StreamDelta, TokenLogprob,
                        TopLogprob)
from .async_engine import AsyncInferEngine, LoggedDelta, collect, import_backend, merge_streams
from .base import cut_at_stop

Decode = Callable[[list[int]], str]


@dataclass
class LmdeployOptions:
    """LMDeploy engine settings (NVIDIA GPU only); TurboMind engine, or the PyTorch engine when --adapters are given.

    The fields with help text are the `--lmdeploy_*` flags (arguments/option_flags.py, ms-swift's names)."""

    tp: int = arg(1, "GPUs per model (tensor parallel).")
    session_len: int | None = arg(None, "Longest sequence (prompt + answer); None: the model's.")
    cache_max_entry_count: float = arg(0.8, "Fraction of free GPU memory for the KV cache.")
    quant_policy: Literal[0, 4, 8] = arg(0, "KV cache quantization: 0 (none), 4 or 8 bits.")
    torch_dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise UsageError(f"--lmdeploy_tp must be >= 1, got {self.tp}")
        if self.session_len is not None and self.session_len < 1:
            raise UsageError(f"--lmdeploy_session_len must be >= 1, got {self.session_len}")
        if not 0 < self.cache_max_entry_count < 1:
            raise UsageError(f"--lmdeploy_cache_max_entry_count must be in (0, 1), got {self.cache_max_entry_count}")
        if self.quant_policy not in (0, 4, 8):
            raise UsageError(f"--lmdeploy_quant_policy must be 0, 4 or 8, got {self.quant_policy}")
        if self.torch_dtype == "float32":
            raise UsageError("--infer_backend lmdeploy runs float16 or bfloat16 weights; use --torch_dtype auto, "
                             "bfloat16 or float16")


def backend_config(opts: LmdeployOptions, adapters: dict[str, str]) -> tuple[str, dict]:
    """("turbomind" | "pytorch", keyword arguments of its EngineConfig); both configs share these fields."""
    kwargs = dict(dtype=opts.torch_dtype, tp=opts.tp, session_len=opts.session_len,
                  cache_max_entry_count=opts.cache_max_entry_count, quant_policy=opts.quant_policy)
    if adapters:
        return "pytorch", {**kwargs, "adapters": dict(adapters)}
    return "turbomind", kwargs


def generation_config(config: RequestConfig, stop_token_ids: list[int], index: int = 0) -> dict:
    """GenerationConfig keyword arguments for choice `index` of a request. lmdeploy samples only with
    do_sample=True (else greedy), disables top-k with 0, caps temperature at 2 and returns `logprobs` alternatives
    plus the chosen token; a seed is offset by the choice index so n > 1 choices differ."""
    if config.temperature > 2:
        raise InvalidSamplingParam("temperature", f"must be <= 2 on the lmdeploy engine, got {config.temperature}")
    kwargs = dict(n=1, max_new_tokens=config.max_tokens, do_sample=not config.greedy, temperature=config.temperature,
                  top_p=config.top_p, top_k=max(config.top_k, 0), repetition_penalty=config.repetition_penalty,
                  stop_token_ids=list(stop_token_ids), skip_special_tokens=True)
    if config.seed is not None:
        kwargs["random_seed"] = config.seed + index
    if config.logprobs:
        kwargs["logprobs"] = max(1, config.top_logprobs or 0)
    return kwargs


def token_logprobs(token_ids: list[int], dists: list[dict[int, float]], top: int, decode: Decode) -> list[TokenLogprob]:
    """lmdeploy's per-token {token_id: logprob} (its top-k, plus the chosen token when that ranks lower) as ours:
    the chosen token's log-prob and the `top` most likely alternatives."""
    out = []
    for token_id, dist in zip(token_ids, dists):
        ranked = sorted(dist.items(), key=lambda kv: kv[1], reverse=True)[:top]
        alternatives = [TopLogprob(int(t), decode([int(t)]), float(lp)) for t, lp in ranked]
        out.append(TokenLogprob(token_id, decode([token_id]), float(dist.get(token_id, float("-inf"))), alternatives))
    return out


class LmdeployEngine(AsyncInferEngine):
    """Coroutines run on the pipeline's own event-loop thread, the loop lmdeploy bound its engine to."""

    def __init__(self, resolved: ResolvedModel, template: Template | None = None,
                 options: LmdeployOptions | None = None, adapters: dict[str, str] | None = None):
        self._lmdeploy = import_backend("lmdeploy", "lmdeploy")
        self.model_name = resolved.model_id
        self.model_dir = resolved.model_dir
        self.template = template or get_template(resolved.meta.template, load_tokenizer(resolved))
        self.options = options or LmdeployOptions()
        self._adapters = {name: str(check_adapter_dir(path)) for name, path in (adapters or {}).items()}
        kind, kwargs = backend_config(self.options, self._adapters)
        config_cls = self._lmdeploy.PytorchEngineConfig if kind == "pytorch" else self._lmdeploy.TurbomindEngineConfig
        self.pipe = self._lmdeploy.pipeline(str(resolved.model_dir), backend_config=config_cls(**kwargs),
                                            log_level="WARNING")
        # Since PR #4253 pipeline() returns a Pipeline holding the AsyncEngine; before, it returned the AsyncEngine.
        self._async_engine = self.pipe.async_engine if hasattr(self.pipe, "async_engine") else self.pipe
        self._loop = self.pipe.internal_thread.loop
        self._session_ids = itertools.count(1)

    @property
    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    def add_adapter(self, name: str, path: str) -> None:
        raise ValueError("the lmdeploy engine loads LoRA adapters only at start-up (PyTorch engine); pass them with "
                         "--adapters name=path")

    def update_weights(self, named_tensors: Iterable[tuple[str, object]]) -> None:
        """lmdeploy's documented order: offload weights and drop the KV cache, bring the weights back, load the
        new tensors, rebuild the KV cache (KV computed with the old weights must not be reused)."""
        from lmdeploy.serve.openai.protocol import UpdateParamsRequest
        from lmdeploy.utils import serialize_state_dict
        request = UpdateParamsRequest(serialized_named_tensors=serialize_state_dict(dict(named_tensors)),
                                      finished=True)
        self._submit(self._async_engine.sleep(1)).result()
        self._on_loop(self._async_engine.wakeup, ["weights"])
        self._async_engine.engine.update_params(request)
        self._on_loop(self._async_engine.wakeup, ["kv_cache"])

    def sleep(self, level: int = 1) -> None:
        """Level 1 offloads the weights and drops the KV cache; level 2 drops both."""
        self._submit(self._async_engine.sleep(level)).result()

    def wake_up(self) -> None:
        self._on_loop(self._async_engine.wakeup, None)

    async def _choice_stream(self, prompt: list[int], config: RequestConfig, index: int,
                             adapter: str | None) -> AsyncIterator[LoggedDelta]:
        """One choice as deltas. lmdeploy's outputs carry only what is new (text, token ids, their log-probs); the
        last one has the finish reason. Leaving early (a stop string) closes the generator, which cancels the
        session in lmdeploy."""
        gen_config = self._lmdeploy.GenerationConfig(**generation_config(config, self.template.stop_token_ids, index))
        top = config.top_logprobs or 0
        sent = ""
        outputs = self._async_engine.generate(None, next(self._session_ids), gen_config=gen_config,
                                              input_ids=list(prompt), adapter_name=adapter, stream_response=True,
                                              sequence_start=True, sequence_end=True)
        async with contextlib.aclosing(outputs):
            async for out in outputs:
                if out.finish_reason in ("error", "abort"):
                    raise RuntimeError(f"lmdeploy could not generate: {out.response}")
                ids = list(out.token_ids or [])
                logprobs = None
                if config.logprobs:
                    logprobs = token_logprobs(ids, out.logprobs or [], top, self.tokenizer.decode)
                text, hit = cut_at_stop(sent + out.response, config.stop)
                finish = "stop" if hit else out.finish_reason
                if text == sent and not ids and finish is None:
                    continue
                yield StreamDelta(index, text[len(sent):], ids, finish), logprobs
                sent = text
                if hit:
                    return

    def _choices(self, prompt: list[int], request: InferRequest, config: RequestConfig) -> AsyncIterator[LoggedDelta]:
        streams = [self._choice_stream(prompt, config, i, request.adapter) for i in range(config.n)]
        return streams[0] if config.n == 1 else merge_streams(streams)

    async def _agenerate(self, request: InferRequest, config: RequestConfig) -> InferResponse:
        prompt = self.prompt_ids(request)
        return await collect(prompt, self._choices(prompt, request, config), config.n, config.logprobs)

    async def _astream(self, request: InferRequest, config: RequestConfig) -> AsyncIterator[LoggedDelta]:
        async for item in self._choices(self.prompt_ids(request), request, config):
            yield item

    def close(self) -> None:
        self.pipe.close()
