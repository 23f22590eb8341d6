"""The weights a LoRA policy hands to its engine (train/engine_weights.py): in bf16 the base stays bit-identical
however many times it is synced, and the engine gets exactly what PEFT's own merge of the same model gives.

The synced run is the real one: a RolloutWorker with a colocated vLLM engine in bf16 and --weight_sync delta,
whose copy of what the engine was loaded from (`_synced`) is the engine's weights bit for bit (tests/
test_delta_sync.py shows that copy and the engine agree). Between syncs the adapter moves as training moves it.
"""
import copy

import pytest
import torch

from swiftlike.rollout.wire import delta
from swiftlike.train.engine_weights import engine_weights

TINY = "tiny-random/qwen2_5"
SYNCS = 10


def lora_model(resolved, dtype=torch.bfloat16, **config):
    from peft import LoraConfig, get_peft_model

    from swiftlike.model import load_model
    torch.manual_seed(0)
    model = load_model(resolved, str(dtype).removeprefix("torch."), "cpu")
    return get_peft_model(model, LoraConfig(**{"r": 8, "lora_alpha": 32, "target_modules": "all-linear", **config}))


def train_step(model) -> None:
    """What an optimizer step does to the trained weights: every LoRA matrix (B leaves zero) and every
    --modules_to_save copy moves."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name or "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.05)


def base_snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.get_base_model().named_parameters() if "lora_" not in n}


def peft_merged(model, dtype) -> dict[str, torch.Tensor]:
    """PEFT's own merge, on a copy: what the engine must hold, cast to the engine's dtype."""
    merged = copy.deepcopy(model).merge_and_unload()
    return {n: p.detach().to(dtype) for n, p in merged.named_parameters()}


def assert_bits_equal(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys() and len(expected) > 10
    different = [n for n in expected if not torch.equal(delta.bits(actual[n].contiguous()),
                                                        delta.bits(expected[n].contiguous()))]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def changed_elements(model, before: dict) -> int:
    after = base_snapshot(model)
    return sum(int((delta.bits(after[n]) != delta.bits(before[n])).sum()) for n in before)


def test_merged_weight_syncs_leave_a_bf16_lora_base_bit_identical(tiny_resolved, tiny_template):
    from swiftlike.arguments import RlhfArguments
    from swiftlike.rl.online.rollout_worker import RolloutWorker
    args = RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["unused"], reward_funcs=["format"], num_generations=2,
                         per_device_train_batch_size=2, tuner_type="lora", torch_dtype="bfloat16", use_vllm=True,
                         vllm_mode="colocate", weight_sync="delta", vllm_max_model_len=256)
    model = lora_model(tiny_resolved)
    base = base_snapshot(model)
    worker = RolloutWorker(args.rollout_options(), args.sampling_options(), args.vllm_options(), tiny_resolved, tiny_template, model)
    try:
        assert worker.engine.dtype == "bfloat16"
        for step in range(SYNCS):
            train_step(model)
            worker.sync(model, step)
            assert changed_elements(model, base) == 0, f"sync {step + 1}"
            assert_bits_equal(worker._synced.tensors, peft_merged(model, torch.bfloat16))
    finally:
        worker.close()


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
