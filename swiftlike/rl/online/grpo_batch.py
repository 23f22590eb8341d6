"""A GRPO micro-batch as tensors, and the trainer's log-probs of its completion tokens.

Layout (`tensorize`): each distinct prompt once, left-padded (`prompt_ids`, (prompts, P)); each completion
right-padded (`completion_ids`, (rows, C)); `prompt_index` maps a row to its prompt. Every per-token tensor is
(rows, C), column j holding the j-th completion token, so the LM head runs on completion positions only.

Two ways to run the model over it (`completion_logps`), the same numbers up to float rounding:

- *shared prompt*: the G completions of a group share one prompt, so the prompt is run once, its KV cache
  copied to the group's rows, and the completions run on top of it. Gradients flow back through the cache
  into the prompt pass, so the update is exact. With GRPO's long shared prompts and short answers this
  scores about half the tokens a row-per-sequence forward does (1.5x-2x faster trainer steps on SmolLM2,
  docs/benchmarks.md). Neither TRL nor ms-swift does this for GRPO; a library could not serve because it is
  a property of how the batch is laid out, not of the model.
  Distinct prompts share a prefix too: the chat template's system prompt and header, the same on every row.
  When every prompt of the micro-batch starts with the same `MIN_SHARED_PREFIX` tokens or more, that prefix is
  run once (one row) before the prompt pass, which runs the rest of each prompt on a copy of its cache. This is
  what makes the path pay for PPO, whose rows all have prompts of their own.
- *full*: one row per sequence (prompt + completion), for gradient checkpointing, under which transformers
  drops the KV cache in training passes (`GradientCheckpointingLayer`), for micro-batches whose prompts are
  all distinct and share fewer than `MIN_SHARED_PREFIX` leading tokens, and for `--share_prompt_prefix false`.

The LM head over a 49k-token vocabulary and the log-softmax after it are a small model's largest cost per
position, which is why the logits are taken at completion positions only in both (`logits_to_keep`). With
unfiltered sampling not even those are held whole: both paths return the decoder's hidden states there, and the
log-probs come from them and the head's weight a chunk of rows at a time (rl/core/chunked_logps.py).
"""
from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from .rollout_worker import Rollout
from ..core.chunked_logps import linear_selected_logps
from ..core.sampling import SampledLogps, filters_vocabulary, selected_logps


def tensorize(part: list[Rollout], pad_id: int, overlong_filter: bool = False,
              valid: torch.Tensor | None = None) -> dict:
    """The micro-batch `part` in the layout above.

    `completion_mask` marks the tokens the loss, its normalisers and every per-token metric count: the ids the
    engine sampled. A multi-turn trajectory's inserted ids (tool results, observations, next-turn headers; its
    `loss_mask` 0) are context only, and so is every id of a trajectory whose environment raised (`env_error`).
    With `overlong_filter` (DAPO), a completion cut by a length limit (`truncated`: the engine's max_tokens, or a
    trajectory's per-round or total limit) keeps its tokens in the batch but gets an all-false
    `completion_mask`: a truncated answer's reward says little about its tokens, so it neither contributes loss
    nor counts in the loss normaliser. `completion_attention_mask` still marks all of them.

    `valid` (bool per row, default all True): which completions have a valid reward (`ScoredRewards.valid` less
    the dropped groups). The others are out of the batch as if never generated: an all-false `completion_mask`
    (no loss, no place in a token count, the KL or the entropy) and False in `reward_valid`, which takes them out
    of grpo's mean over sequences and dr_grpo's batch size (`losses.aggregate`'s `rows`). Their advantage of 0
    alone would leave them in every normaliser and in the KL term.
    """
    if valid is None:
        valid = torch.ones(len(part), dtype=torch.bool)
    if valid.shape != (len(part),):
        raise ValueError(f"valid must hold one flag per rollout ({len(part)}), got shape {tuple(valid.shape)}")
    prompts: dict[tuple[int, ...], int] = {}
    prompt_index = [prompts.setdefault(tuple(r.prompt_ids), len(prompts)) for r in part]
    prompt_width = max(len(p) for p in prompts)
    completion_width = max(1, max(len(r.completion_ids) for r in part))
    prompt_ids = torch.full((len(prompts), prompt_width), pad_id, dtype=torch.long)
    prompt_attn = torch.zeros_like(prompt_ids)
    for ids, i in prompts.items():
        prompt_ids[i, prompt_width - len(ids):] = torch.tensor(ids)
        prompt_attn[i, prompt_width - len(ids):] = 1
    completion_ids = torch.full((len(part), completion_width), pad_id, dtype=torch.long)
    completion_attn = torch.zeros_like(completion_ids)
    cmask = torch.zeros((len(part), completion_width), dtype=torch.bool)
    rollout_lp = torch.zeros((len(part), completion_width), dtype=torch.float32)
    have_lp = all(r.rollout_logps is not None for r in part)
    for i, r in enumerate(part):
        c = len(r.completion_ids)
        completion_ids[i, :c] = torch.tensor(r.completion_ids, dtype=torch.long)
        completion_attn[i, :c] = 1
        if not (overlong_filter and r.truncated) and r.env_error is None and valid[i]:
            cmask[i, :c] = True if r.loss_mask is None else torch.tensor(r.loss_mask, dtype=torch.bool)
        if have_lp:
            rollout_lp[i, :c] = torch.tensor(r.rollout_logps)
    return {"prompt_ids": prompt_ids, "prompt_attention_mask": prompt_attn,
            "prompt_index": torch.tensor(prompt_index, dtype=torch.long), "completion_ids": completion_ids,
            "completion_attention_mask": completion_attn, "completion_mask": cmask,
            "reward_valid": valid.bool().clone(), "rollout_logps": rollout_lp if have_lp else None}


def unpadded_sequences(batch: dict) -> list[tuple[list[int], list[int]]]:
    """Each row's (prompt ids, completion ids) without padding: what a served model is asked about."""
    prompts = [ids[mask.bool()].tolist() for ids, mask in zip(batch["prompt_ids"], batch["prompt_attention_mask"])]
    return [(prompts[p], ids[mask.bool()].tolist()) for p, ids, mask in
            zip(batch["prompt_index"].tolist(), batch["completion_ids"], batch["completion_attention_mask"])]


def per_token_rows(values: list[list[float]], like: torch.Tensor) -> torch.Tensor:
    """Per-row lists of per-completion-token values as a (rows, completion width) tensor shaped and placed like
    `like`, zero after each row's end."""
    out = torch.zeros(like.shape, dtype=torch.float32)
    for i, row in enumerate(values):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.float32)
    return out.to(like.device)


def full_sequences(batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids) of one row per sequence: the row's prompt, then its completion.
    Position ids count from each row's first real token, so left padding moves no token's position."""
    index = batch["prompt_index"]
    ids = torch.cat([batch["prompt_ids"][index], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_attention_mask"][index], batch["completion_attention_mask"]], dim=1)
    return ids, attn, (attn.cumsum(-1) - 1).clamp(min=0)


# Causal LMs whose logits are exactly `lm_head(decoder output)`, checked in transformers' modelling code: the
# decoder's last hidden state goes to the head unchanged and nothing is applied after it. The others keep the logits
# path, among them Gemma 2/3 (`final_logit_softcapping`), Cohere (`logit_scale`) and Granite (`logits_scaling`).
LINEAR_HEAD_MODEL_TYPES = frozenset({"gemma", "llama", "mistral", "mixtral", "olmo2", "phi3", "qwen2", "qwen2_moe",
                                     "qwen3", "qwen3_moe"})


def linear_head(model) -> tuple[torch.nn.Linear, torch.nn.Module] | None:
    """(output head, decoder body) of a causal LM (PEFT-wrapped or not) whose logits are a plain linear head over the
    decoder's last hidden state, else None (other model types, a LoRA-wrapped, `modules_to_save` or quantised head,
    a head ZeRO-3 holds partitioned outside the forward pass, models not from transformers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not isinstance(base, PreTrainedModel) or base.config.model_type not in LINEAR_HEAD_MODEL_TYPES:
        return None
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.weight.shape != (head.out_features, head.in_features):
        return None
    return head, base.get_decoder()


def _last_positions(model, decoder, keep: int, **inputs):
    """`model(**inputs)` and its last `keep` positions: their logits, or with `decoder` (the model's decoder body)
    the hidden states the head takes there, the head then scoring no position. The pass goes through `model`, not
    the decoder alone, so a DDP wrapper sees its one forward per backward and a PEFT wrapper its own forward.
    A `model` that is the decoder itself (the critic's body) gives its hidden states."""
    if decoder is not None and model is decoder:
        out = model(**inputs)
        return out, out.last_hidden_state[:, -keep:]
    if decoder is None:
        out = model(**inputs, logits_to_keep=keep)
        return out, out.logits
    captured = []
    hook = decoder.register_forward_hook(lambda _module, _args, output: captured.append(output.last_hidden_state))
    try:
        out = model(**inputs, logits_to_keep=torch.empty(0, dtype=torch.long, device=inputs["input_ids"].device))
    finally:
        hook.remove()
    return out, captured[0][:, -keep:]


def _full_outputs(model, batch: dict, decoder) -> torch.Tensor:
    """One row per sequence (`full_sequences`); its outputs at the positions that predict the completion tokens."""
    ids, attn, positions = full_sequences(batch)
    width = batch["completion_ids"].shape[1]
    _, kept = _last_positions(model, decoder, width + 1, input_ids=ids, attention_mask=attn, position_ids=positions,
                              use_cache=False)
    return kept[:, :-1]


MIN_SHARED_PREFIX = 8  # a common prompt prefix shorter than this is not worth a forward pass of its own


def common_prefix_length(batch: dict) -> int:
    """How many leading tokens every prompt of a `tensorize`d batch has in common (0 with one prompt), at most the
    shortest prompt's length less one: each prompt keeps a token of its own, whose position predicts its
    completions' first token."""
    lengths = batch["prompt_attention_mask"].sum(1)
    shortest = int(lengths.min()) - 1
    if len(lengths) < 2 or shortest < 1:
        return 0
    starts = batch["prompt_ids"].shape[1] - lengths
    columns = starts[:, None] + torch.arange(shortest, device=starts.device)
    heads = batch["prompt_ids"].gather(1, columns)
    return int((heads == heads[:1]).all(0).long().cumprod(0).sum())


def _without_prefix(batch: dict, prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts' ids and attention mask with their first `prefix` tokens cut out, still left-padded."""
    ids, attn = batch["prompt_ids"], batch["prompt_attention_mask"]
    starts = ids.shape[1] - attn.sum(1)
    kept = torch.arange(ids.shape[1] - prefix, device=ids.device)[None]
    columns = kept + prefix * (kept >= starts[:, None])
    return ids.gather(1, columns), attn.gather(1, columns)


def _prefix_cache(prompt_model, decoder, batch: dict, prefix: int, config) -> DynamicCache:
    """The KV cache of the prompts' common first `prefix` tokens, run once and copied to every prompt's row."""
    ids = batch["prompt_ids"]
    start = ids.shape[1] - int(batch["prompt_attention_mask"][0].sum())
    positions = torch.arange(prefix, device=ids.device)[None]
    out, _ = _last_positions(prompt_model, decoder, 1, input_ids=ids[:1, start:start + prefix],
                             attention_mask=torch.ones_like(positions), position_ids=positions,
                             past_key_values=DynamicCache(config=config), use_cache=True)
    cache = out.past_key_values
    cache.reorder_cache(torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device))
    return cache


def _shared_prompt_outputs(model, prompt_model, batch: dict, decoder, prefix: int = 0) -> torch.Tensor:
    """The prompts once (their last position predicts each completion's first token), then the completions on
    a copy of the prompt's KV cache per row; with a `prefix`, the prompts' common first tokens once before that.
    `prompt_model` is `model` without a DDP wrapper: DDP expects one forward per backward, and the prompt pass's
    gradients reach the parameters through the completion pass's backward anyway, where DDP's hooks see them
    summed."""
    config = getattr(prompt_model, "config", None)
    prompt_ids, prompt_attn = batch["prompt_ids"], batch["prompt_attention_mask"]
    cache = DynamicCache(config=config)
    if prefix:
        cache = _prefix_cache(prompt_model, decoder, batch, prefix, config)
        prompt_ids, prompt_attn = _without_prefix(batch, prefix)
    prompt_positions = prefix + (prompt_attn.cumsum(-1) - 1).clamp(min=0)
    context_attn = torch.cat([torch.ones_like(prompt_attn[:, :1]).expand(-1, prefix), prompt_attn], dim=1)
    prompt_out, prompt_last = _last_positions(prompt_model, decoder, 1, input_ids=prompt_ids,
                                              attention_mask=context_attn, position_ids=prompt_positions,
                                              past_key_values=cache, use_cache=True)
    index = batch["prompt_index"]
    cache = prompt_out.past_key_values
    cache.reorder_cache(index)  # index_select on every layer's keys and values: differentiable
    width = batch["completion_ids"].shape[1]
    positions = prompt_positions[index, -1:] + 1 + torch.arange(width, device=index.device)
    attn = torch.cat([context_attn[index], batch["completion_attention_mask"]], dim=1)
    _, completion = _last_positions(model, decoder, width, input_ids=batch["completion_ids"], attention_mask=attn,
                                    position_ids=positions, past_key_values=cache, use_cache=True)
    return torch.cat([prompt_last[index], completion[:, :-1]], dim=1)


def shared_prefix(model, batch: dict, enabled: bool) -> int | None:
    """How `completion_outputs` runs this batch on this model: None for one row per sequence, else the shared
    path with this many common prefix tokens run once (0: none)."""
    checkpointing = model.training and bool(getattr(model, "is_gradient_checkpointing", False))
    if not enabled or checkpointing:
        return None
    prefix = common_prefix_length(batch)
    if prefix >= MIN_SHARED_PREFIX:
        return prefix
    return 0 if batch["prompt_ids"].shape[0] < batch["completion_ids"].shape[0] else None


def completion_outputs(model, batch: dict, share_prompts: bool, prompt_model=None, decoder=None) -> torch.Tensor:
    """(rows, completion width, ...): the outputs at the positions that predict each completion token: logits,
    or with `decoder` its hidden states (the shared-prompt path when `shared_prefix` allows, else one row per
    sequence)."""
    unwrapped = prompt_model if prompt_model is not None else model
    prefix = shared_prefix(unwrapped, batch, share_prompts)
    if prefix is None:
        return _full_outputs(model, batch, decoder)
    return _shared_prompt_outputs(model, unwrapped, batch, decoder, prefix)


def completion_logps(model, batch: dict, temperature: float, top_k: int, top_p: float, *, share_prompts: bool = True,
                     prompt_model=None, with_entropy: bool = False, with_unfiltered: bool = False) -> SampledLogps:
    """`selected_logps` of a `tensorize`d batch's completion tokens, (rows, completion width).

    Unfiltered sampling (no top-k / top-p, or greedy) on a model with a plain linear head (`linear_head`) takes
    the log-probs from the decoder's hidden states a chunk of rows at a time (`linear_selected_logps`), never
    holding the (tokens x vocabulary) logits; top-k / top-p need the whole rows and take the logits."""
    unwrapped = prompt_model if prompt_model is not None else model
    head, decoder = linear_head(unwrapped) or (None, None)
    if head is not None and filters_vocabulary(temperature, top_k, top_p, head.out_features):
        head = decoder = None
    outputs = completion_outputs(model, batch, share_prompts, unwrapped, decoder)
    if head is None:
        return selected_logps(outputs, batch["completion_ids"], temperature, top_k, top_p, with_entropy=with_entropy,
                              with_unfiltered=with_unfiltered)
    return linear_selected_logps(outputs, head.weight, head.bias, batch["completion_ids"], temperature,
                                 with_entropy=with_entropy, with_unfiltered=with_unfiltered)
