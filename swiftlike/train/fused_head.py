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
