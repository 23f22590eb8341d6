"""Transformers engine: batched `generate` with left padding, LoRA via PEFT.

Slower than vLLM but needs nothing beyond transformers, runs any architecture HF knows, and
is the reference the trainer's own forward pass is compared against.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from itertools import groupby
from queue import Queue
from typing import Literal

from tqdm import tqdm

from ...model import ResolvedModel, check_adapter_dir, load_model, load_tokenizer
from ...template import Template, get_template
from ...utils.errors import UsageError
from ..protocol import (DEFAULT_MAX_LOGPROBS, Choice, InferRequest, InferResponse, RequestConfig, StreamDelta, TokenLogprob,
                        TopLogprob, Usage)
from .base import InferEngine, cut_at_stop


LogprobsMode = Literal["raw_logprobs", "processed_logprobs"]


class PtEngine(InferEngine):
    """`logprobs_mode` mirrors vLLM's: "raw_logprobs" are log_softmax of the model's logits;
    "processed_logprobs" are those of the distribution actually sampled from (after repetition penalty,
    temperature, top-k and top-p; filtered tokens get -inf), which is what RL rollout compares the
    trainer's log-probs with."""

    # transformers' generate has these; vLLM's token-list and detokenizer extensions are refused by name
    applied_extensions = frozenset({"min_p", "stop_token_ids", "min_tokens", "ignore_eos",
                                    "include_stop_str_in_output", "skip_special_tokens"})

    def __init__(self, resolved: ResolvedModel, template: Template | None = None, torch_dtype: str = "auto",
                 max_batch_size: int = 16, adapters: dict[str, str] | None = None, device: str | None = None,
                 model=None, logprobs_mode: LogprobsMode = "raw_logprobs", attn_impl: str | None = None,
                 max_logprobs: int = DEFAULT_MAX_LOGPROBS):
        if logprobs_mode not in ("raw_logprobs", "processed_logprobs"):
            raise ValueError(f"logprobs_mode must be 'raw_logprobs' or 'processed_logprobs', got {logprobs_mode!r}")
        if max_batch_size < 1:  # checked before the model loads
            raise UsageError(f"--max_batch_size must be >= 1, got {max_batch_size}")
        self.logprobs_mode = logprobs_mode
        self.model_name = resolved.model_id
        self.model_dir = resolved.model_dir
        self.template = template or get_template(resolved.meta.template, load_tokenizer(resolved))
        self.model = model if model is not None else load_model(resolved, torch_dtype, device, attn_impl)
        self.max_batch_size = max_batch_size
        self.max_logprobs = max_logprobs
        self._adapters: dict[str, str] = {}
        for name, path in (adapters or {}).items():
            self.add_adapter(name, path)

    @property
    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def supports_prompt_logprobs(self) -> bool:
        return True

    def add_adapter(self, name: str, path: str) -> None:
        from peft import PeftModel
        path = str(check_adapter_dir(path))
        if not self._adapters:
            self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name).eval()
        else:
            self.model.load_adapter(path, adapter_name=name)
        self._adapters[name] = path

    def update_weights(self, named_tensors: Iterable[tuple[str, object]]) -> None:
        import torch
        base = self.model.get_base_model() if self._adapters else self.model
        # PEFT moves wrapped weights to `<module>.base_layer.weight`; callers use plain HF names.
        # Tied weights (lm_head = embed_tokens) appear under both names, as in a state_dict.
        params = {n.replace(".base_layer.", "."): p for n, p in base.named_parameters(remove_duplicate=False)
                  if "lora_" not in n}
        updates = list(named_tensors)
        unknown = [n for n, _ in updates if n not in params]
        if unknown:
            raise KeyError(f"update_weights: unknown parameter(s) {unknown[:3]}; nothing was changed")
        with torch.no_grad():
            for name, tensor in updates:
                params[name].copy_(tensor)

    def _stop_ids(self, config: RequestConfig) -> list[int]:
        """The tokens that end an answer: the template's unless ignore_eos (vLLM's rule), and the request's."""
        return [*([] if config.ignore_eos else self.template.stop_token_ids), *config.stop_token_ids]

    def _generate_kwargs(self, config: RequestConfig) -> dict:
        kwargs = dict(max_new_tokens=config.max_tokens, num_return_sequences=config.n,
                      eos_token_id=self._stop_ids(config) or None, pad_token_id=self.tokenizer.pad_token_id,
                      repetition_penalty=config.repetition_penalty, return_dict_in_generate=True,
                      do_sample=not config.greedy, min_new_tokens=config.min_tokens or None)
        # HF's `scores` are the logits after the processors and warpers, `logits` the raw ones.
        kwargs["output_scores" if self.logprobs_mode == "processed_logprobs" else "output_logits"] = True
        if config.greedy:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(temperature=config.temperature, top_p=config.top_p,
                          top_k=config.top_k if config.top_k > 0 else 0, min_p=config.min_p or None)
        if config.stop:
            kwargs.update(stop_strings=config.stop, tokenizer=self.tokenizer)
        return kwargs

    def _run_batch(self, prompts: list[list[int]], config: RequestConfig, adapter: str | None):
        import torch
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        if config.seed is not None:
            torch.manual_seed(config.seed)
        ctx = self._adapter_context(adapter)
        with torch.inference_mode(), ctx:
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **self._generate_kwargs(config))
        generated = out.sequences[:, width:].tolist()
        steps = out.scores if self.logprobs_mode == "processed_logprobs" else out.logits
        logprobs = torch.stack(steps, dim=1).float().log_softmax(-1) if steps else None
        return generated, logprobs

    def _prompt_logprobs(self, prompts: list[list[int]], top: int, adapter: str | None):
        """vLLM's prompt log-probs: at each prompt position after the first, the raw log-prob of the prompt
        token, its rank, and the `top` most likely tokens, from one right-padded forward pass."""
        import torch
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.tensor([p + [pad] * (width - len(p)) for p in prompts], device=self.device)
        mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts], device=self.device)
        with torch.inference_mode(), self._adapter_context(adapter):
            logps = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float().log_softmax(-1)
        out = []
        for b, prompt in enumerate(prompts):
            dist = logps[b, :len(prompt) - 1]
            actual = torch.tensor(prompt[1:], device=dist.device)
            chosen = dist.gather(-1, actual[:, None])[:, 0]
            ranks = (dist > chosen[:, None]).sum(-1) + 1
            values, top_ids = dist.topk(top, dim=-1) if top else (None, None)
            known = sorted(set(prompt) | set(top_ids.flatten().tolist() if top else []))
            names = dict(zip(known, self.tokenizer.convert_ids_to_tokens(known)))
            entries: list[TokenLogprob | None] = [None]
            for t, token_id in enumerate(prompt[1:]):
                alternatives = [TopLogprob(int(i), names.get(int(i), ""), float(v))
                                for v, i in zip(values[t], top_ids[t])] if top else []
                entries.append(TokenLogprob(token_id, names.get(token_id, ""), float(chosen[t]), alternatives,
                                            rank=int(ranks[t])))
            out.append(entries)
        return out

    def _adapter_context(self, adapter: str | None):
        import contextlib
        if not self._adapters:
            return contextlib.nullcontext()
        if adapter is None:
            return self.model.disable_adapter()
        self.model.set_adapter(adapter)
        return contextlib.nullcontext()

    def _make_choice(self, index: int, tokens: list[int], row_logprobs, config: RequestConfig) -> Choice:
        stops = set(self._stop_ids(config))
        end = next((i + 1 for i, t in enumerate(tokens) if t in stops), None)
        finish = "stop" if end is not None else "length"
        tokens = tokens[:end] if end is not None else tokens
        text, hit = cut_at_stop(self.tokenizer.decode(tokens, skip_special_tokens=config.skip_special_tokens),
                                config.stop, config.include_stop_str_in_output)
        if hit:
            finish = "stop"
        logprobs = None
        if config.logprobs and row_logprobs is not None:
            logprobs = [self._token_logprob(t, row_logprobs[i], config.top_logprobs or 0) for i, t in enumerate(tokens)]
        return Choice(index=index, text=text, token_ids=tokens, finish_reason=finish, logprobs=logprobs)

    def _token_logprob(self, token_id: int, dist, top: int) -> TokenLogprob:
        alternatives = []
        if top:
            values, ids = dist.topk(top)
            alternatives = [TopLogprob(int(i), self.tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, ids)]
        return TokenLogprob(token_id, self.tokenizer.decode([token_id]), float(dist[token_id]), alternatives)

    def infer(self, requests: list[InferRequest], config: RequestConfig, use_tqdm: bool = False) -> list[InferResponse]:
        for r in requests:
            self.check_adapter(r)
        prompts = [self.prompt_ids(r) for r in requests]
        results: list[InferResponse | None] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: (requests[i].adapter or "", len(prompts[i])))
        bar = tqdm(total=len(requests), desc="infer (pt)", disable=not use_tqdm)
        for adapter, group in groupby(order, key=lambda i: requests[i].adapter):
            group = list(group)
            for start in range(0, len(group), self.max_batch_size):
                batch = group[start: start + self.max_batch_size]
                generated, logprobs = self._run_batch([prompts[i] for i in batch], config, adapter)
                prompt_logprobs = (self._prompt_logprobs([prompts[i] for i in batch], config.prompt_logprobs, adapter)
                                   if config.prompt_logprobs is not None else [None] * len(batch))
                for b, req_index in enumerate(batch):
                    rows = range(b * config.n, (b + 1) * config.n)
                    choices = [self._make_choice(k, generated[row], logprobs[row] if logprobs is not None else None,
                                                 config) for k, row in enumerate(rows)]
                    usage = Usage(len(prompts[req_index]), sum(len(c.token_ids) for c in choices))
                    results[req_index] = InferResponse(choices, usage, prompts[req_index],
                                                       prompt_logprobs=prompt_logprobs[b])
                bar.update(len(batch))
        bar.close()
        return results

    def stream(self, request: InferRequest, config: RequestConfig) -> Iterator[StreamDelta]:
        """Tokens arrive from a streamer fed by `generate` in a worker thread. However the consumer leaves (the
        last token, an error, or closing this generator when a client hangs up), the thread is stopped at its next
        token and joined before control returns: a `generate` left running would keep its adapter context (PEFT's
        disable_adapter for a base-model request) while the engine, its lock released, serves the next request."""
        if config.n != 1:
            raise ValueError("streaming supports n=1 only in the pt engine")
        self.check_adapter(request)
        prompt = self.prompt_ids(request)
        queue: Queue = Queue()
        cancelled = threading.Event()

        class _Streamer:
            first = True

            def put(self, value):
                if self.first:  # generate() first hands over the prompt
                    self.first = False
                    return
                queue.put(value.reshape(-1).tolist())

            def end(self):
                queue.put(None)

        def work():
            import torch
            from transformers import StoppingCriteria, StoppingCriteriaList

            class _Cancelled(StoppingCriteria):
                def __call__(self, input_ids, scores, **kwargs):
                    return torch.full((input_ids.shape[0],), cancelled.is_set(), dtype=torch.bool,
                                      device=input_ids.device)
            try:
                ids = torch.tensor([prompt], device=self.device)
                kwargs = self._generate_kwargs(config)
                kwargs.update(return_dict_in_generate=False, output_logits=False, output_scores=False,
                              stopping_criteria=StoppingCriteriaList([_Cancelled()]))
                if config.seed is not None:
                    torch.manual_seed(config.seed)
                with torch.inference_mode(), self._adapter_context(request.adapter):
                    self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), streamer=_Streamer(),
                                        **kwargs)
            except Exception as e:  # surfaced to the consumer below
                queue.put(e)

        thread = threading.Thread(target=work, name="pt-engine-stream", daemon=True)
        thread.start()
        try:
            yield from self._stream_deltas(queue, config)
        finally:
            cancelled.set()
            thread.join()

    def _stream_deltas(self, queue: Queue, config: RequestConfig) -> Iterator[StreamDelta]:
        """The deltas of the token lists `queue` carries until None; an exception put there is raised."""
        stops = set(self._stop_ids(config))
        tokens: list[int] = []
        pending: list[int] = []
        sent, finish = "", "length"
        while (item := queue.get()) is not None:
            if isinstance(item, Exception):
                raise item
            tokens.extend(item)
            pending.extend(item)
            if any(t in stops for t in item):
                finish = "stop"
            text, hit = cut_at_stop(self.tokenizer.decode(tokens, skip_special_tokens=config.skip_special_tokens),
                                    config.stop, config.include_stop_str_in_output)
            if hit:
                finish = "stop"
            if text.endswith("\ufffd") and finish != "stop":
                continue  # an incomplete UTF-8 character: wait for the next token
            yield StreamDelta(0, text[len(sent):], pending)
            sent, pending = text, []
        yield StreamDelta(0, "", pending, finish_reason=finish)
