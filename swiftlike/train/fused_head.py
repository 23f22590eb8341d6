"""The LM head projected only at the positions that carry a label.

Why: a causal LM's forward projects every position through the vocabulary-wide head, and transformers'
loss then throws away the positions without a label: the prompt (sft trains the answers), padding. On
SmolLM2 the head is about a fifth of a token's forward FLOPs, and as much again in the backward. TRL's
`add_fused_lm_head` already computes per-token log-probs from the hidden states, in tiles and only at
labelled positions, but only on CUDA/XPU: elsewhere it projects every position so that compilers (Neuron)
see fixed tile shapes. On CPU nothing is compiled, so `score_only_labelled_positions_on_cpu` makes its one
decision helper say "compact" there too. The loss is transformers' (the mean over labelled tokens, or their
sum over `num_items_in_batch`), equal within 1e-5 (tests/unit/train/test_fused_head.py); DPO and KTO, which
run through the same head inside TRL, get the same cut.
"""
from __future__ import annotations

from ..utils import get_logger

logger = get_logger("swiftlike.train")


def score_only_labelled_positions_on_cpu() -> None:
    """Patch, process-wide and idempotently, the helper TRL's fused head asks whether to project only the
    labelled positions (`trl.trainer.utils._use_triton`, utils/contact_points.py), to answer yes for CPU tensors.
    TRL's kernel choice, made in its own module, is untouched."""
    import trl.trainer.utils as trl_utils
    decide = trl_utils._use_triton
    if getattr(decide, "compacts_on_cpu", False):
        return

    def compact_on_cpu_too(device) -> bool:
        return device.type == "cpu" or decide(device)

    compact_on_cpu_too.compacts_on_cpu = True
    trl_utils._use_triton = compact_on_cpu_too


def add_compact_lm_head(model) -> bool:
    """Give a plain causal LM (before PEFT wraps it) TRL's fused head; the forward is unchanged unless called
    with `fused_lm_head=True`. False, and nothing changed, for other models (classifiers, vision-language
    wrappers), which keep transformers' loss."""
    if not type(model).__name__.endswith("ForCausalLM") or model.get_output_embeddings() is None:
        return False
    from trl.trainer.utils import add_fused_lm_head
    add_fused_lm_head(model)
    score_only_labelled_positions_on_cpu()
    return True


PER_TOKEN_FIELDS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1", "label_mask")


def _right_padded(attention_mask) -> bool:
    """Every row's real tokens are a prefix of it (TRL's preference collators pad on the right)."""
    import torch
    lengths = attention_mask.sum(1, keepdim=True)
    positions = torch.arange(attention_mask.shape[1], device=lengths.device)
    return bool((attention_mask.bool() == (positions < lengths)).all())


def pack_padded_rows(model) -> None:
    """Run right-padded batches that go through the fused head (`fused_lm_head=True`) as one packed row: the
    rows' real tokens end to end, attended one row at a time (segment attention), and the per-token outputs put
    back in the padded layout, so the caller (TRL's `DPOTrainer`, for the policy's and the reference's forward)
    sees what the padded forward gives. Why: a preference batch pads every chosen and rejected sequence to the
    longest of the batch, 14% of its positions on the built-in pairs (`make padding-waste`), and TRL 1.16 turned
    its own `padding_free` off. For a model on segment attention only: a packed row under a row-wide mask would
    cost more attention than the padding saves. Idempotent."""
    import torch

    from ..model.segment_attention import on_segment_attention, segment_bounds
    padded_forward = model.forward
    if getattr(padded_forward, "packs_rows", False) or not on_segment_attention(model):
        return

    def packed_forward(*args, fused_lm_head=False, input_ids=None, attention_mask=None, labels=None, **kwargs):
        if (args or not fused_lm_head or input_ids is None or attention_mask is None or labels is None
                or input_ids.shape[0] < 2 or kwargs.get("position_ids") is not None or "shift_labels" in kwargs
                or not _right_padded(attention_mask)):
            return padded_forward(*args, fused_lm_head=fused_lm_head, input_ids=input_ids,
                                  attention_mask=attention_mask, labels=labels, **kwargs)
        real = attention_mask.bool()
        lengths = real.sum(1).tolist()
        if min(lengths) < 1:  # an all-padding row has no place in a packed row
            return padded_forward(fused_lm_head=True, input_ids=input_ids, attention_mask=attention_mask,
                                  labels=labels, **kwargs)
        flat_labels = labels[real].clone()
        starts = torch.tensor([0, *lengths[:-1]], device=labels.device).cumsum(0)
        flat_labels[starts] = -100  # a row's first token is predicted by the row before it: never a label
        positions = torch.cat([torch.arange(n, device=input_ids.device) for n in lengths])
        out = padded_forward(input_ids=input_ids[real][None], position_ids=positions[None],
                             labels=flat_labels[None], fused_lm_head=True,
                             **segment_bounds(lengths, input_ids.device), **kwargs)
        # flat position j predicts token j + 1; the last position of each row predicts the next row's first token
        within_row = torch.ones(real.sum() - 1, dtype=torch.bool, device=real.device)
        within_row[(starts[1:] - 1)] = False
        targets = real[:, 1:]
        fields = {}
        for name in PER_TOKEN_FIELDS:
            value = getattr(out, name, None)
            if value is not None:
                fields[name] = value.new_zeros(targets.shape).masked_scatter(targets, value[0][within_row])
        return type(out)(**{**{k: v for k, v in out.items() if k not in PER_TOKEN_FIELDS}, **fields})

    packed_forward.packs_rows = True
    model.forward = packed_forward
