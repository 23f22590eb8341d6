"""The chunked log-probs from hidden states (rl/core/chunked_logps.py) against the logits path they replace:
the autograd function on random tensors, and GRPO's `completion_logps` on the tiny model with LoRA and in full."""
import pytest
import torch
from model_ids import TINY

from swiftlike.rl.core.chunked_logps import linear_selected_logps
from swiftlike.rl.core.sampling import filters_vocabulary, selected_logps
from swiftlike.rl.online import grpo_batch
from swiftlike.rl.online.grpo_batch import completion_logps, linear_head, tensorize
from swiftlike.rl.online.rollout_worker import Rollout


def close(a, b, tol=1e-5):
    assert (a - b).abs().max() <= tol * max(1.0, b.abs().max()), (a - b).abs().max()


# ---------------------------------------------------------------- the autograd function


def _hidden_head(n=13, h=8, v=37, bias=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=gen, requires_grad=True)
    weight = (torch.randn(v, h, generator=gen) * 0.7).requires_grad_()
    b = torch.randn(v, generator=gen).requires_grad_() if bias else None
    ids = torch.randint(0, v, (n,), generator=gen)
    upstream = torch.randn(n, generator=gen)
    return hidden, weight, b, ids, upstream


def _grads(out, upstream, *tensors):
    (out * upstream).sum().backward()
    grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return grads


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
@pytest.mark.parametrize("chunk", [1, 4, 5, 13, 64])
def test_chunked_logps_equal_selected_logps_values_entropy_and_gradients(temperature, chunk):
    hidden, weight, _, ids, upstream = _hidden_head()
    ref = selected_logps(hidden @ weight.T, ids, temperature, with_entropy=True, with_unfiltered=True)
    ref_grads = _grads(ref.logps + ref.unfiltered, upstream, hidden, weight)
    out = linear_selected_logps(hidden, weight, None, ids, temperature, with_entropy=True, with_unfiltered=True,
                                chunk_rows=chunk)
    close(out.logps, ref.logps)
    close(out.unfiltered, ref.unfiltered)
    close(out.entropy, ref.entropy)
    assert not out.forced.any() and not out.entropy.requires_grad
    for got, want in zip(_grads(out.logps + out.unfiltered, upstream, hidden, weight), ref_grads):
        close(got, want)


def test_chunked_logps_with_a_bias_a_frozen_head_and_batched_shapes():
    hidden, weight, bias, ids, upstream = _hidden_head(n=12, bias=True)
    hidden3, ids3, upstream3 = hidden.reshape(3, 4, -1), ids.reshape(3, 4), upstream.reshape(3, 4)
    ref = selected_logps(torch.nn.functional.linear(hidden3, weight, bias), ids3, 0.7)
    ref_grads = _grads(ref.logps, upstream3, hidden, weight, bias)
    out = linear_selected_logps(hidden3, weight, bias, ids3, 0.7, chunk_rows=5)
    assert out.logps.shape == (3, 4) and out.entropy is None and out.unfiltered is None
    close(out.logps, ref.logps)
    for got, want in zip(_grads(out.logps, upstream3, hidden, weight, bias), ref_grads):
        close(got, want)
    # a frozen head (LoRA): only the hidden states get a gradient, and they get the same one
    weight.requires_grad_(False)
    bias.requires_grad_(False)
    (out_frozen,) = _grads(linear_selected_logps(hidden3, weight, bias, ids3, 0.7, chunk_rows=5).logps, upstream3,
                           hidden)
    close(out_frozen, ref_grads[0])
    assert weight.grad is None and bias.grad is None


def test_chunked_logps_without_gradients_precomputes_nothing():
    hidden, weight, _, ids, _ = _hidden_head()
    with torch.no_grad():
        out = linear_selected_logps(hidden, weight, None, ids, 0.7)
    assert out.logps.grad_fn is None
    close(out.logps, selected_logps(hidden.detach() @ weight.detach().T, ids, 0.7).logps)
    with pytest.raises(ValueError, match="temperature"):
        linear_selected_logps(hidden, weight, None, ids, -1.0)


def test_only_unfiltered_sampling_skips_the_vocabulary_filter():
    assert not filters_vocabulary(0.7, -1, 1.0, 37)
    assert not filters_vocabulary(0.7, 37, 1.0, 37)  # top-k of the whole vocabulary keeps it all
    assert not filters_vocabulary(0.0, 5, 0.9, 37)  # greedy: vLLM reports the unfiltered log-probs
    assert filters_vocabulary(0.7, 5, 1.0, 37) and filters_vocabulary(1.0, 0, 0.9, 37)
    with pytest.raises(ValueError, match="top_p"):
        filters_vocabulary(0.7, -1, 0.0, 37)


# ---------------------------------------------------------------- completion_logps on the tiny model

PART = [Rollout([11, 12, 13, 14, 15], [21, 22], "a", "stop", None),
        Rollout([11, 12, 13, 14, 15], [23, 24, 25, 26], "b", "stop", None),
        Rollout([31, 32], [41, 42, 43, 44], "c", "stop", None),
        Rollout([31, 32], [61], "d", "stop", None)]


def _tiny(lora: bool):
    from swiftlike.model import load_model, resolve_model
    torch.manual_seed(0)
    resolved = resolve_model(TINY)
    model = load_model(resolved, "float32", "cpu")
    if not lora:
        return model
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                             target_modules=list(resolved.meta.lora_target_modules)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.1)
    return model


def _head_rows(model) -> list[int]:
    """Records how many positions each call of the output head scores."""
    rows = []
    head, _ = linear_head(model)
    head.register_forward_hook(lambda _m, args, _out: rows.append(args[0].shape[:-1].numel()))
    return rows


def _loss_and_grads(model, batch, advantages, sampling, share):
    model.zero_grad()
    out = completion_logps(model, batch, *sampling, share_prompts=share, with_entropy=True, with_unfiltered=True)
    loss = (torch.where(batch["completion_mask"], out.logps + out.unfiltered, 0.0) * advantages[:, None]).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, loss.detach(), grads


@pytest.mark.parametrize("lora", [True, False])
@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("sampling", [(0.7, -1, 1.0), (0.0, 5, 0.9)])
def test_completion_logps_chunked_equal_the_logits_path(lora, share, sampling, monkeypatch):
    """Unfiltered sampling (a temperature, or greedy whatever top-k / top-p say) takes the chunked path, the head
    scoring no position, and gives the logits path's log-probs, entropy, loss and gradients: LoRA's, or with full
    training every parameter's, the tied embedding that is also the head included."""
    model = _tiny(lora)
    batch = tensorize(PART, pad_id=0)
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    rows = _head_rows(model)
    chunked, loss, grads = _loss_and_grads(model, batch, advantages, sampling, share)
    assert sum(rows) == 0  # every log-prob came from the hidden states
    monkeypatch.setattr(grpo_batch, "linear_head", lambda _model: None)
    plain, plain_loss, plain_grads = _loss_and_grads(model, batch, advantages, sampling, share)
    assert sum(rows) > 0
    mask = batch["completion_mask"]
    close(chunked.logps[mask], plain.logps[mask])
    close(chunked.entropy[mask], plain.entropy[mask])
    close(loss, plain_loss)
    assert grads.keys() == plain_grads.keys() and grads
    assert all("lora_" in n for n in grads) is lora
    for name, g in grads.items():
        assert (g - plain_grads[name]).norm() <= 1e-5 * plain_grads[name].norm() + 1e-8, name


@pytest.mark.parametrize("share", [True, False])
def test_filtered_sampling_keeps_the_logits_path(share, monkeypatch):
    """top-k 5 needs the whole rows: the head scores every completion position and the numbers are the logits
    path's, bit for bit."""
    model = _tiny(lora=True)
    batch = tensorize(PART, pad_id=0)
    rows = _head_rows(model)
    out = completion_logps(model, batch, 0.7, 5, 1.0, share_prompts=share, with_entropy=True, with_unfiltered=True)
    assert sum(rows) > 0
    monkeypatch.setattr(grpo_batch, "linear_head", lambda _model: None)
    before = completion_logps(model, batch, 0.7, 5, 1.0, share_prompts=share, with_entropy=True, with_unfiltered=True)
    for got, want in zip(out, before):
        assert torch.equal(got, want)


def test_only_plain_linear_heads_take_the_chunked_path():
    model = _tiny(lora=False)
    head, decoder = linear_head(model)
    assert head is model.lm_head and decoder is model.model
    model.config.model_type = "gemma2"  # a soft-capped head: its logits are not the linear head's
    assert linear_head(model) is None
    model.config.model_type = "qwen2"
    model.lm_head = torch.nn.Sequential(model.lm_head)  # anything but a plain nn.Linear
    assert linear_head(model) is None
    assert linear_head(torch.nn.Linear(2, 3)) is None  # not a transformers model
