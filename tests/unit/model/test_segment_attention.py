"""Segment attention (model/segment_attention.py): a packed row attended one sequence at a time gives each
sequence the logits and gradients it gets alone and under transformers' row-wide mask (1e-5, fp32); without
sequence boundaries the switched model is transformers' SDPA, padded batches included."""
import pytest
import torch
from model_ids import TINY

from swiftlike.model import load_model, resolve_model
from swiftlike.model.segment_attention import (SEGMENT_ATTENTION, on_segment_attention, segment_bounds,
                                               use_segment_attention)

LENGTHS = [7, 13, 5, 11]


@pytest.fixture(scope="module")
def resolved():
    return resolve_model(TINY)


def tiny(resolved, implementation="sdpa"):
    torch.manual_seed(0)
    model = load_model(resolved, "float32", "cpu")
    model.set_attn_implementation(implementation)
    return model


def packed(vocab: int):
    torch.manual_seed(2)
    ids = torch.randint(0, vocab, (1, sum(LENGTHS)))
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    return ids, positions


def logits_and_grads(model, **inputs):
    model.zero_grad()
    logits = model(use_cache=False, **inputs).logits
    logits.pow(2).mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_packed_row_gets_the_masked_rows_and_each_sequences_own_logits_and_gradients(resolved):
    masked, segmented = tiny(resolved), tiny(resolved)
    assert use_segment_attention(segmented) and on_segment_attention(segmented)
    assert segmented.config._attn_implementation == SEGMENT_ATTENTION and not on_segment_attention(masked)
    ids, positions = packed(masked.config.vocab_size)
    expected, expected_grads = logits_and_grads(masked, input_ids=ids, position_ids=positions)
    got, got_grads = logits_and_grads(segmented, input_ids=ids, position_ids=positions, **segment_bounds(LENGTHS))
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    for name, grad in expected_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5, rtol=1e-4), name
    start = 0
    with torch.no_grad():
        one_sequence = segmented(input_ids=ids, position_ids=positions, **segment_bounds([sum(LENGTHS)])).logits
        assert not torch.allclose(one_sequence, expected, atol=1e-3)  # the bounds are what keeps them apart
        for n in LENGTHS:
            alone = masked(input_ids=ids[:, start:start + n], use_cache=False).logits
            assert torch.allclose(got[:, start:start + n], alone, atol=1e-5, rtol=0)
            start += n


def test_without_bounds_it_is_sdpa_padded_batches_and_generation_included(resolved):
    masked, segmented = tiny(resolved), tiny(resolved)
    use_segment_attention(segmented)
    torch.manual_seed(3)
    ids = torch.randint(0, masked.config.vocab_size, (3, 12))
    attention = torch.ones_like(ids)
    attention[1, 8:] = 0
    attention[2, :4] = 0
    with torch.no_grad():
        expected = masked(input_ids=ids, attention_mask=attention).logits
        got = segmented(input_ids=ids, attention_mask=attention).logits
        assert torch.allclose(got, expected, atol=1e-6, rtol=0)
        prompt = ids[:1, :6]
        assert torch.equal(segmented.generate(prompt, max_new_tokens=5, do_sample=False),
                           masked.generate(prompt, max_new_tokens=5, do_sample=False))


def test_models_on_another_implementation_keep_it(resolved):
    eager = tiny(resolved, "eager")
    assert not use_segment_attention(eager) and eager.config._attn_implementation == "eager"


def test_gkd_scores_a_packed_batch_alike_on_either_attention(resolved):
    from swiftlike.rl.online.teacher import PackedSequences, completion_logits
    masked, segmented = tiny(resolved), tiny(resolved)
    use_segment_attention(segmented)
    torch.manual_seed(4)
    sequences = [(torch.randint(0, 500, (p,)).tolist(), torch.randint(0, 500, (a,)).tolist())
                 for p, a in [(6, 4), (9, 2), (3, 7)]]
    batch = PackedSequences.pack(sequences)
    with torch.no_grad():
        assert torch.allclose(completion_logits(segmented, batch), completion_logits(masked, batch), atol=1e-5,
                              rtol=0)


def test_in_bf16_it_is_as_close_to_fp32_as_the_masked_row_is(resolved):
    """Where users train: bf16 rounds both paths; segment attention must not add error of its own."""
    reference = tiny(resolved)
    ids, positions = packed(reference.config.vocab_size)
    with torch.no_grad():
        exact = reference(input_ids=ids, position_ids=positions, use_cache=False).logits
        masked, segmented = tiny(resolved).bfloat16(), tiny(resolved).bfloat16()
        use_segment_attention(segmented)
        masked_error = (masked(input_ids=ids, position_ids=positions, use_cache=False).logits.float() - exact).abs()
        segmented_error = (segmented(input_ids=ids, position_ids=positions, use_cache=False,
                                     **segment_bounds(LENGTHS)).logits.float() - exact).abs()
    assert segmented_error.mean() <= 1.25 * masked_error.mean() + 1e-4, (segmented_error.mean(), masked_error.mean())
    assert segmented_error.max() <= 2 * masked_error.max() + 1e-3
