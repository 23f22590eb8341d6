"""The weights a LoRA policy hands to its engine (train/engine_weights.py): the engine gets exactly what PEFT's own
merge of the same model gives, and the model is left as it was. That in bf16 the base stays bit-identical however
many times it is synced into a colocated vLLM engine is tests/e2e/test_train_runs.py (an engine start).
"""
import pytest
import torch
from lora_weights import assert_bits_equal, lora_model, peft_merged, train_step

from swiftlike.train.engine_weights import engine_weights


@pytest.mark.parametrize("variant", ["lora", "dora", "modules_to_save"])
@pytest.mark.parametrize("engine_dtype", [torch.bfloat16, torch.float32])
def test_engine_weights_equal_peft_merge_and_leave_the_model_as_it_was(tiny_resolved, variant, engine_dtype):
    """Plain LoRA is merged here; DoRA (a PEFT variant) by PEFT one layer at a time and restored; a
    --modules_to_save copy is sent under the module's own name (the original when not merged)."""
    config = {"dora": {"use_dora": True}, "modules_to_save": {"modules_to_save": ["down_proj"],
                                                              "target_modules": ["q_proj", "v_proj"]}}.get(variant, {})
    model = lora_model(tiny_resolved, **config)
    for _ in range(3):
        train_step(model)
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(3):
        got = dict(engine_weights(model, dtype=engine_dtype))
        assert_bits_equal({n: t.to(engine_dtype) for n, t in got.items()}, peft_merged(model, engine_dtype))
    assert_bits_equal({n: p.detach() for n, p in model.named_parameters()}, state)  # adapter and base untouched
    from swiftlike.model import load_model
    plain = {n: p.detach() for n, p in load_model(tiny_resolved, "bfloat16", "cpu").named_parameters()}
    assert_bits_equal(dict(engine_weights(model, merged=False)), plain)  # the checkpoint's weights, HF names
