"""The compact LM head (train/fused_head.py): sft's training loss projected at labelled positions only is
transformers' loss, value and gradients, within 1e-5 in fp32; on CPU TRL's head really projects only those
positions once patched; the Trainer routes training batches (not evaluation) through it."""
import pytest
import torch
from model_ids import TINY

from swiftlike.model import load_model, resolve_model
from swiftlike.train.fused_head import add_compact_lm_head, score_only_labelled_positions_on_cpu


def lora_model(compact: bool):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    model = load_model(resolve_model(TINY), "float32", "cpu")
    model.compact_lm_head = compact and add_compact_lm_head(model)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                             init_lora_weights=False))  # B != 0: the adapter changes the loss
    return model.train()


def sft_batch(vocab: int):
    """Right-padded rows whose prompts carry no label: what sft's collator hands the Trainer."""
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (3, 40))
    attention = torch.ones_like(ids)
    attention[1, 31:] = 0
    attention[2, 22:] = 0
    labels = ids.masked_fill(attention == 0, -100)
    labels[0, :25], labels[1, :12], labels[2, :18] = -100, -100, -100
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


def loss_and_grads(model, batch, **kwargs):
    model.zero_grad()
    loss = model(**batch, **kwargs).loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), grads


@pytest.mark.parametrize("num_items_in_batch", [None, 57])
def test_the_compact_loss_and_its_gradients_are_transformers(num_items_in_batch):
    plain, compact = lora_model(False), lora_model(True)
    batch = sft_batch(plain.config.vocab_size)
    extra = {} if num_items_in_batch is None else {"num_items_in_batch": torch.tensor(num_items_in_batch)}
    expected, expected_grads = loss_and_grads(plain, batch, **extra)
    got, got_grads = loss_and_grads(compact, batch, fused_lm_head=True, **extra)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), (got, expected)
    assert expected_grads.keys() == got_grads.keys()
    for name, grad in expected_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5, rtol=1e-4), name


def test_on_cpu_only_the_labelled_positions_are_projected(monkeypatch):
    import trl.trainer.utils as trl_utils
    score_only_labelled_positions_on_cpu()
    score_only_labelled_positions_on_cpu()  # idempotent: one wrapper, not two
    assert trl_utils._use_triton(torch.device("cpu")) is True
    decided_by = trl_utils._use_triton.__closure__[0].cell_contents
    assert not getattr(decided_by, "compacts_on_cpu", False)

    projected_rows = []
    kernel = trl_utils._ChunkedLogProbFunction

    class Recording(kernel):
        @staticmethod
        def forward(ctx, hidden, *rest):
            projected_rows.append(hidden.shape[0])
            return kernel.forward(ctx, hidden, *rest)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Recording)
    model = lora_model(True)
    batch = sft_batch(model.config.vocab_size)
    model(**batch, fused_lm_head=True).loss.backward()
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    assert projected_rows == [labelled] and labelled < batch["input_ids"][:, 1:].numel() / 2


def test_the_trainer_routes_training_batches_through_it_and_evaluation_around_it(tmp_path, monkeypatch):
    from transformers import TrainingArguments

    from swiftlike.train.trainer import SwiftlikeTrainer
    model = lora_model(True)
    trainer = SwiftlikeTrainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to=[],
                                                                   use_cpu=True))
    calls = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda **kw: calls.append("fused_lm_head" in kw) or forward(**kw))
    batch = sft_batch(model.config.vocab_size)
    trained = trainer.compute_loss(model, dict(batch))
    model.eval()
    evaluated = trainer.compute_loss(model, dict(batch))
    assert calls == [True, False]
    assert torch.allclose(trained, evaluated, atol=1e-5)


def test_in_bf16_the_compact_loss_is_as_close_to_fp32_as_transformers_is():
    """Where users train: in bf16 the head's tiles accumulate in fp32 (TRL), transformers' logits are rounded to
    bf16 first; the compact loss must be no further from the fp32 loss than transformers' own."""
    exact_model = lora_model(False)
    batch = sft_batch(exact_model.config.vocab_size)
    with torch.no_grad():
        exact = exact_model(**batch).loss
        plain, compact = lora_model(False).bfloat16(), lora_model(True).bfloat16()
        plain_error = (plain(**batch).loss.float() - exact).abs()
        compact_error = (compact(**batch, fused_lm_head=True).loss.float() - exact).abs()
    assert compact_error <= plain_error + 2e-3, (compact_error, plain_error)


def preference_batch(vocab: int):
    """TRL's DPO collator layout: prompt + answer rows, right-padded, labels only on the answers."""
    torch.manual_seed(5)
    lengths, prompts = [19, 12, 25, 9], [11, 8, 11, 6]
    ids = torch.randint(0, vocab, (4, max(lengths)))
    attention = (torch.arange(ids.shape[1]) < torch.tensor(lengths)[:, None]).long()
    labels = ids.masked_fill(attention == 0, -100)
    for row, prompt in enumerate(prompts):
        labels[row, :prompt] = -100
    return {"input_ids": ids, "attention_mask": attention}, labels


def test_a_packed_preference_batch_gives_the_padded_batchs_outputs_and_gradients():
    from trl.trainer.utils import add_fused_lm_head

    from swiftlike.model.segment_attention import use_segment_attention
    from swiftlike.train.fused_head import pack_padded_rows

    def dpo_model(packed: bool):
        torch.manual_seed(0)
        model = load_model(resolve_model(TINY), "float32", "cpu")
        add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
        if packed:
            assert use_segment_attention(model)
            pack_padded_rows(model)
            pack_padded_rows(model)  # idempotent
        return model.train()

    padded, packed = dpo_model(False), dpo_model(True)
    inputs, labels = preference_batch(padded.config.vocab_size)
    backbone_rows = []
    packed.model.register_forward_pre_hook(lambda _, args, kwargs: backbone_rows.append(kwargs["input_ids"].shape),
                                           with_kwargs=True)
    outputs = {}
    for name, model in (("padded", padded), ("packed", packed)):
        model.zero_grad()
        out = model(**inputs, labels=labels, fused_lm_head=True, use_cache=False)
        (out.log_probs.sum() + out.loss).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        outputs[name] = (out, grads)
    (expected, expected_grads), (got, got_grads) = outputs["padded"], outputs["packed"]
    assert got.log_probs.shape == expected.log_probs.shape == (4, labels.shape[1] - 1)
    assert torch.equal(got.label_mask, expected.label_mask)
    for field in ("log_probs", "entropy", "mean_logits", "loss"):
        assert torch.allclose(getattr(got, field), getattr(expected, field), atol=1e-5, rtol=0), field
    assert torch.equal(got.is_top1, expected.is_top1)
    assert backbone_rows == [(1, int(inputs["attention_mask"].sum()))]  # one row, no padding
    for name, grad in expected_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5, rtol=1e-4), name
