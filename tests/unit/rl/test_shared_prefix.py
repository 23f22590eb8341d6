"""The prompts' common prefix (a chat template's system prompt and header) run once: by hand, and the same
log-probs, values and gradients as one row per sequence, for distinct prompts (PPO's batches) and for groups."""
import pytest
import torch
from model_ids import TINY

from swiftlike.rl.online.grpo_batch import (MIN_SHARED_PREFIX, _without_prefix, common_prefix_length,
                                            completion_logps, shared_prefix, tensorize)
from swiftlike.rl.online.rollout_worker import Rollout

HEADER = [7, 8, 9, 10, 11, 12, 13, 14, 15]  # 9 tokens every prompt starts with


def rollouts(prompts: list[list[int]], completions: list[list[int]]) -> list[Rollout]:
    return [Rollout(p, c, "x", "stop", None) for p, c in zip(prompts, completions)]


def test_common_prefix_by_hand():
    batch = tensorize(rollouts([[1, 2, 3, 4, 5, 6], [1, 2, 3, 9], [1, 2, 3, 4, 7]], [[20], [21], [22]]), 0)
    assert common_prefix_length(batch) == 3
    ids, attn = _without_prefix(batch, 3)
    assert ids.tolist() == [[4, 5, 6], [0, 0, 9], [0, 4, 7]]
    assert attn.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    # one prompt inside another: each keeps a token of its own
    assert common_prefix_length(tensorize(rollouts([[1, 2, 3], [1, 2, 3, 4]], [[20], [21]]), 0)) == 2
    # one distinct prompt (a GRPO group): nothing to share beyond the prompt itself
    assert common_prefix_length(tensorize(rollouts([[1, 2, 3], [1, 2, 3]], [[20], [21]]), 0)) == 0
    assert common_prefix_length(tensorize(rollouts([[1, 2], [5, 2]], [[20], [21]]), 0)) == 0


def _lora_tiny(model_type: str):
    from peft import LoraConfig, get_peft_model

    from swiftlike.model import load_model, resolve_model
    torch.manual_seed(0)
    resolved = resolve_model(f"tiny-random/{model_type}")
    model = get_peft_model(load_model(resolved, "float32", "cpu"),
                           LoraConfig(r=4, lora_alpha=8, target_modules=list(resolved.meta.lora_target_modules)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.1)
    return model


def _logps_and_grads(model, batch, share: bool, sampling):
    model.zero_grad()
    out = completion_logps(model, batch, *sampling, share_prompts=share, with_entropy=True)
    weights = torch.linspace(-1, 1, batch["completion_ids"].numel()).view_as(out.logps)
    (torch.where(batch["completion_mask"], out.logps + 0.1 * out.entropy, 0.0) * weights).sum().backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


CASES = {  # distinct prompts, one completion each (PPO); two groups of two (GRPO)
    "distinct": ([HEADER + [31, 32], HEADER + [41], HEADER + [51, 52, 53], HEADER + [61, 62]],
                 [[71, 72], [73, 74, 75], [76], [77, 78, 79, 80]]),
    "groups": ([HEADER + [31, 32], HEADER + [31, 32], HEADER + [51, 52, 53], HEADER + [51, 52, 53]],
               [[71, 72], [73, 74, 75], [76], [77, 78, 79, 80]]),
}


@pytest.mark.parametrize("model_type", ["qwen2_5", "llama3"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("sampling", [(0.7, -1, 1.0), (0.7, 5, 0.9)])
def test_the_prefix_once_gives_each_sequences_own_logps_and_the_same_gradients(model_type, case, sampling):
    model = _lora_tiny(model_type)
    prompts, completions = CASES[case]
    batch = tensorize(rollouts(prompts, completions), 0)
    assert shared_prefix(model, batch, True) == len(HEADER) >= MIN_SHARED_PREFIX
    embedded = []
    model.get_input_embeddings().register_forward_hook(lambda _m, args, _o: embedded.append(tuple(args[0].shape)))
    shared, grads = _logps_and_grads(model, batch, True, sampling)
    assert embedded[0] == (1, len(HEADER))  # the header ran once, on one row
    assert sum(rows * width for rows, width in embedded) < sum(len(p) + len(c) for p, c in zip(prompts, completions))
    full, full_grads = _logps_and_grads(model, batch, False, sampling)
    mask = batch["completion_mask"]
    torch.testing.assert_close(shared.logps[mask], full.logps[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(shared.entropy[mask], full.entropy[mask], rtol=0, atol=1e-5)
    for i, (p, c) in enumerate(zip(prompts, completions)):  # and each sequence alone, unpadded
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1].float()
        alone = torch.log_softmax(logits / sampling[0], -1).gather(-1, torch.tensor(c)[:, None])[:, 0]
        if sampling[1] == -1:
            torch.testing.assert_close(shared.logps[i, :len(c)], alone, rtol=0, atol=1e-5)
    assert grads.keys() == full_grads.keys() and grads
    for name, g in grads.items():
        assert (g - full_grads[name]).norm() <= 1e-5 * full_grads[name].norm() + 1e-8, name


def test_the_critic_values_the_same_through_the_shared_prefix():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    from swiftlike.model import resolve_model
    from swiftlike.rl.online.critic import completion_values
    torch.manual_seed(0)
    resolved = resolve_model(TINY)
    base = AutoModelForSequenceClassification.from_pretrained(resolved.model_dir, num_labels=1, dtype=torch.float32)
    critic = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, task_type="SEQ_CLS",
                                             target_modules=list(resolved.meta.lora_target_modules)))
    with torch.no_grad():
        for name, p in critic.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.1)
    prompts, completions = CASES["distinct"]
    batch = tensorize(rollouts(prompts, completions), 0)
    mask = batch["completion_mask"]

    def values_and_grads(share: bool):
        critic.zero_grad()
        values = completion_values(critic, batch, share)
        (torch.where(mask, values, 0.0) ** 2).sum().backward()
        return values.detach(), {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}

    shared, grads = values_and_grads(True)
    full, full_grads = values_and_grads(False)
    torch.testing.assert_close(shared[mask], full[mask], rtol=0, atol=1e-5)
    assert any("score" in n for n in grads) and any("lora_" in n for n in grads)
    for name, g in grads.items():
        assert (g - full_grads[name]).norm() <= 1e-5 * full_grads[name].norm() + 1e-8, name
    with torch.no_grad():  # column t: the value of the sequence before completion token t
        ids = torch.tensor([prompts[0] + completions[0]])
        hidden = critic.get_base_model().model(input_ids=ids).last_hidden_state
        alone = critic.get_base_model().score(hidden).squeeze(-1)[0, len(prompts[0]) - 1:-1]
    torch.testing.assert_close(shared[0, :len(completions[0])], alone, rtol=0, atol=1e-5)
    # --local_rollout_forward_batch_size: slices of rows, each with only its own prompts, value alike
    from swiftlike.rl.online.ppo_trainer import _row_slice
    first = _row_slice(batch, slice(0, 3))
    assert first["prompt_ids"].shape[0] == 3 and first["prompt_index"].tolist() == [0, 1, 2]
    with torch.no_grad():
        sliced = torch.cat([completion_values(critic, _row_slice(batch, s)) for s in (slice(0, 3), slice(3, 4))])
    torch.testing.assert_close(sliced[mask], shared[mask], rtol=0, atol=1e-5)
