"""The hashed LoRA dropout (train/lora_dropout.py) is torch's dropout with another random stream: the kept
values and the gradient are exactly torch's formula for the mask it drew, the mask is Bernoulli(1 - p) with
masks unrelated from call to call, `torch.manual_seed` repeats it, and every LoRA layer that training builds
gets it."""
import math

import pytest
import torch
from model_ids import TINY

from swiftlike.train.lora_dropout import HashedDropout, keep_bits, use_hashed_lora_dropout


def no_zeros(*shape, dtype=torch.float32):
    x = torch.randn(*shape)
    return (x + torch.where(x >= 0, 0.5, -0.5)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_kept_values_and_gradient_are_torchs_formula_for_the_drawn_mask(dtype):
    p = 0.1
    x = no_zeros(3, 37, 65, dtype=dtype).requires_grad_()
    out = HashedDropout(p).train()(x)
    kept = out != 0
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out, torch.where(kept, x.detach() * (1 / (1 - p)), 0).to(dtype))
    upstream = no_zeros(*x.shape, dtype=dtype)
    out.backward(upstream)
    assert torch.equal(x.grad, torch.where(kept, upstream * (1 / (1 - p)), 0).to(dtype))


@pytest.mark.parametrize("p", [0.05, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("count", [1_000_001, 400_000])
def test_the_mask_keeps_one_minus_p_of_the_elements(p, count):
    keep = keep_bits(count, p)
    assert keep.shape == (count,) and set(keep.unique().tolist()) <= {0, -1}
    kept = (keep != 0).double().mean().item()
    sigma = math.sqrt(p * (1 - p) / count)
    assert abs(kept - (1 - p)) < 5 * sigma + 2 ** -16, (p, kept)


def test_masks_are_unrelated_between_calls_between_halves_and_under_shifts():
    """Agreement of two independent Bernoulli(0.5) masks is 0.5; a shifted copy (what seeding the raw index
    would give) or a reused hash would agree far more."""
    count, p = 200_000, 0.5
    first, second = (keep_bits(count, p) != 0 for _ in range(2))
    sigma = math.sqrt(0.25 / count)
    for a, b in [(first, second), (first[:-1], second[1:]), (first[: count // 2], first[count // 2:]),
                 (first[:-7], first[7:])]:
        agreement = (a == b).double().mean().item()
        assert abs(agreement - 0.5) < 6 * sigma, agreement


def test_manual_seed_repeats_the_mask_and_a_new_draw_changes_it():
    drop = HashedDropout(0.2).train()
    x = no_zeros(8, 128)
    torch.manual_seed(11)
    first = drop(x)
    torch.manual_seed(11)
    assert torch.equal(drop(x), first)
    assert not torch.equal(drop(x), first)


def test_eval_mode_zero_p_and_non_float_inputs_are_torchs_dropout():
    x = no_zeros(4, 16)
    assert torch.equal(HashedDropout(0.3).eval()(x), x)
    assert torch.equal(HashedDropout(0.0).train()(x), x)
    ints = torch.arange(10)
    with pytest.raises(RuntimeError):  # torch's own refusal, not a silently wrong mask
        HashedDropout(0.3).train()(ints)


def test_training_lora_layers_get_it_and_code_that_zeroes_dropouts_still_finds_them(tmp_path):
    from swiftlike.arguments import TrainArguments
    from swiftlike.model import resolve_model
    from swiftlike.train.tuner import prepare_model

    args = TrainArguments(model=TINY, dataset=["swiftlike/alpaca-mini"], tuner_type="lora", lora_dropout=0.05,
                          output_dir=str(tmp_path), torch_dtype="float32")
    model = prepare_model(args, resolve_model(TINY), "cpu")
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p == 0.05]
    assert dropouts and all(type(m) is HashedDropout for m in dropouts)
    assert use_hashed_lora_dropout(model) == 0  # already swapped: nothing left to swap

    ids = torch.randint(0, model.config.vocab_size, (2, 24))
    model.eval()
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    for module in dropouts:  # what TRL's disable_dropout and our --disable_dropout do
        module.p = 0.0
    model.train()
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, reference, atol=1e-6)
