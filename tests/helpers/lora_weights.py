"""A LoRA policy's weights as the tests of train/engine_weights.py handle them: a seeded tiny PEFT model, what an
optimizer step does to it, PEFT's own merge, and bit-for-bit comparisons (tests/unit/train/test_engine_weights.py,
tests/e2e/test_train_runs.py)."""
import copy

import torch

from swiftlike.rollout.wire import delta


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
