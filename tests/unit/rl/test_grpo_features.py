"""GRPO options beyond the first slice: dynamic sampling, overlong filter, off-policy sequence mask, metric gating,
GPU-only memory options, reward models and the GRPO curves (the GRPO run that reports processed pt log-probs,
dynamic sampling and its curves is tests/e2e/test_rl_runs.py)."""
import json

import pytest
import torch
from model_ids import TINY

from swiftlike.arguments import RlhfArguments
from swiftlike.rl.core.advantages import select_groups
from swiftlike.rl.online.grpo_batch import completion_logps, full_sequences, tensorize
from swiftlike.rl.online.grpo_trainer import corrected_policy_loss
from swiftlike.rl.online.memory import ColocateMemory
from swiftlike.rl.online.rollout_worker import Rollout
from swiftlike.train.outputs import plot_curves


def grpo_args(**kw):
    base = dict(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=2, per_device_train_batch_size=2,
                gradient_accumulation_steps=1, beta=0.0)
    return RlhfArguments(**{**base, **kw})


def memory_groups(args: RlhfArguments):
    return args.rollout_options(), args.vllm_options()


def loss_groups(args: RlhfArguments):
    """The option groups `corrected_policy_loss` reads."""
    return args.grpo_options(), args.rollout_options(), args.sampling_options()


# ---------------------------------------------------------------- dynamic sampling: which groups are kept


def test_select_groups_prefers_signal_in_pool_order_then_fills():
    # 2 original groups (no signal, signal), then a resampled round of 2 (signal, signal)
    assert select_groups(torch.tensor([False, True, True, True]), 2) == [1, 2]
    # still short after resampling: the zero-std groups fill the batch, first ones first
    assert select_groups(torch.tensor([False, True, False, False]), 2) == [1, 0]
    assert select_groups(torch.tensor([False, False]), 2) == [0, 1]
    with pytest.raises(ValueError, match="cannot fill"):
        select_groups(torch.tensor([True]), 2)


# ---------------------------------------------------------------- overlong filter


def test_tensorize_lays_out_each_prompt_once_and_completions_in_columns():
    part = [Rollout([1, 2], [3, 4], "a", "stop", [-0.1, -0.2]),
            Rollout([1], [5, 6, 7], "b", "length", [-0.3, -0.4, -0.5]),
            Rollout([1, 2], [8], "c", "stop", [-0.6])]
    plain = tensorize(part, pad_id=0)
    # each distinct prompt once, left-padded; rows point at their prompt
    assert plain["prompt_ids"].tolist() == [[1, 2], [0, 1]]
    assert plain["prompt_attention_mask"].tolist() == [[1, 1], [0, 1]]
    assert plain["prompt_index"].tolist() == [0, 1, 0]
    # completions right-padded: column j is the j-th completion token
    assert plain["completion_ids"].tolist() == [[3, 4, 0], [5, 6, 7], [8, 0, 0]]
    assert plain["completion_mask"].tolist() == [[True, True, False], [True, True, True], [True, False, False]]
    assert plain["rollout_logps"].tolist() == [pytest.approx([-0.1, -0.2, 0.0]), pytest.approx([-0.3, -0.4, -0.5]),
                                               pytest.approx([-0.6, 0.0, 0.0])]
    ids, attn, positions = full_sequences(plain)
    assert ids.tolist() == [[1, 2, 3, 4, 0], [0, 1, 5, 6, 7], [1, 2, 8, 0, 0]]
    assert attn.tolist() == [[1, 1, 1, 1, 0], [0, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert positions.tolist() == [[0, 1, 2, 3, 3], [0, 0, 1, 2, 3], [0, 1, 2, 2, 2]]
    # overlong filter: the truncated completion keeps its tokens but leaves the loss mask
    filtered = tensorize(part, pad_id=0, overlong_filter=True)
    assert filtered["completion_mask"].tolist() == [[True, True, False], [False, False, False], [True, False, False]]
    assert filtered["completion_attention_mask"].tolist() == plain["completion_attention_mask"].tolist()


@pytest.mark.parametrize("model_type", ["qwen2_5", "llama3"])
@pytest.mark.parametrize("share", [True, False])
def test_completion_logps_equal_each_sequence_alone_and_both_paths_agree(model_type, share):
    """Both forward paths (a group's prompt once with its KV cache shared, or one row per sequence) give each
    completion token the log-prob an unpadded forward of its own sequence gives, and the same gradients."""
    from swiftlike.model import load_model, resolve_model
    from swiftlike.rl.online.grpo_batch import shared_prefix
    torch.manual_seed(0)
    model = load_model(resolve_model(f"tiny-random/{model_type}"), "float32", "cpu")
    part = [Rollout([11, 12, 13, 14, 15], [21, 22], "a", "stop", None),
            Rollout([11, 12, 13, 14, 15], [23, 24, 25, 26], "b", "stop", None),
            Rollout([31, 32], [41, 42, 43, 44], "c", "stop", None),
            Rollout([31, 32], [61], "d", "stop", None)]
    batch = tensorize(part, pad_id=0)
    assert shared_prefix(model, batch, share) == (0 if share else None)  # no common prefix here
    out = completion_logps(model, batch, 0.7, 5, 0.9, share_prompts=share, with_unfiltered=True)
    assert out.logps.shape == (4, 4)
    for i, r in enumerate(part):
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(r.prompt_ids) - 1:-1]
        alone = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(r.completion_ids)[:, None])[:, 0]
        assert torch.allclose(out.unfiltered[i, :len(r.completion_ids)], alone, atol=1e-5)
    torch.where(batch["completion_mask"], out.logps, torch.zeros_like(out.logps)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert grads and all(torch.isfinite(g).all() for g in grads.values())
    model.zero_grad()
    other = completion_logps(model, batch, 0.7, 5, 0.9, share_prompts=not share)
    torch.where(batch["completion_mask"], other.logps, torch.zeros_like(other.logps)).sum().backward()
    for n, p in model.named_parameters():
        if n in grads:
            assert (p.grad - grads[n]).norm() <= 1e-5 * grads[n].norm() + 1e-8, n


def test_gradient_checkpointing_in_training_takes_the_full_path(tiny_resolved):
    from swiftlike.model import load_model
    from swiftlike.rl.online.grpo_batch import shared_prefix
    model = load_model(tiny_resolved, "float32", "cpu")
    batch = tensorize([Rollout([1, 2], [3], "a", "stop", None), Rollout([1, 2], [4], "b", "stop", None)], 0)
    model.gradient_checkpointing_enable()
    model.train()
    assert shared_prefix(model, batch, True) is None
    model.eval()  # no-grad passes keep the cache under checkpointing
    assert shared_prefix(model, batch, True) == 0
    distinct = tensorize([Rollout([1, 2], [3], "a", "stop", None), Rollout([5], [4], "b", "stop", None)], 0)
    assert shared_prefix(model, distinct, True) is None


# ---------------------------------------------------------------- loss wiring: OPSM and metric gating


def _inputs(logps, rollout_logps, advantages):
    mask = torch.ones_like(logps, dtype=torch.bool)
    return {"completion_mask": mask, "old_logps": logps.clone(), "rollout_logps": rollout_logps,
            "advantages": advantages, "num_items_in_batch": int(mask.sum())}


def test_off_policy_sequence_mask_drops_stale_negative_sequences_from_the_loss():
    logps = torch.tensor([[-2.0, -2.0], [-1.0, -1.0]])
    # sequence 0: the sampler found it 1 nat/token likelier than the policy does now, and A < 0 -> dropped;
    # sequence 1 drifted as much but has A > 0 -> kept
    rollout = torch.tensor([[-1.0, -1.0], [0.0, 0.0]])
    inputs = _inputs(logps, rollout, torch.tensor([-1.0, 1.0]))
    # ratio 1 (one update per generation): per-token loss is -A; grpo = mean over sequences of token means
    loss, metrics = corrected_policy_loss(logps, inputs, *loss_groups(grpo_args()), reused=False)
    assert float(loss) == pytest.approx(0.0)  # (1 + -1) / 2
    loss, metrics = corrected_policy_loss(logps, inputs, *loss_groups(grpo_args(off_policy_sequence_mask_delta=0.5)), reused=False)
    assert float(loss) == pytest.approx(-0.5)  # (0 + -1) / 2: the dropped row still counts in the batch mean
    assert float(metrics["off_policy_sequence_mask/masked_frac"]) == pytest.approx(0.5)
    # a drift of exactly delta is kept
    loss, _ = corrected_policy_loss(logps, inputs, *loss_groups(grpo_args(off_policy_sequence_mask_delta=1.0)), reused=False)
    assert float(loss) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="off_policy_sequence_mask_delta"):
        grpo_args(off_policy_sequence_mask_delta=-0.1)


@pytest.mark.parametrize("loss_type", ["bnpo", "dapo"])
def test_off_policy_sequence_mask_keeps_dropped_tokens_in_the_token_normalisers(loss_type):
    logps = torch.tensor([[-2.0, -2.0], [-1.0, -1.0]])
    inputs = _inputs(logps, torch.tensor([[-1.0, -1.0], [0.0, 0.0]]), torch.tensor([-1.0, 1.0]))
    loss, _ = corrected_policy_loss(logps, inputs, *loss_groups(grpo_args(loss_type=loss_type, off_policy_sequence_mask_delta=0.5)),
                                    reused=False)
    # row 0 is dropped; the count the trainer passed (all 4 tokens, taken before the mask) still divides
    assert inputs["num_items_in_batch"] == 4 and float(loss) == pytest.approx((0 + 0 - 1 - 1) / 4)


def invalid_row_case():
    """Three completions, the second without a valid reward (a judge reply without a score; advantage 0), and the
    same batch without it. Trainer and reference log-probs differ by up to 0.5 nats, token by token, so the KL term
    and its mean depend on which tokens count."""
    part = [Rollout([1, 2], [3, 4, 5, 9], "a", "stop", [-0.1, -0.2, -0.3, -0.4]),
            Rollout([1, 2], [6, 7, 8], "b", "stop", [-0.5, -0.6, -0.7]),
            Rollout([1, 2], [8], "c", "stop", [-0.8])]
    gen = torch.Generator().manual_seed(0)
    logps = -torch.rand(3, 4, generator=gen) - 0.5
    ref = logps - 0.5 * torch.rand(3, 4, generator=gen)
    with_it = tensorize(part, pad_id=0, valid=torch.tensor([True, False, True]))
    with_it.update(advantages=torch.tensor([1.0, 0.0, -0.5]), old_logps=None, ref_logps=ref)
    without = tensorize([part[0], part[2]], pad_id=0)
    kept = torch.tensor([0, 2])
    without.update(advantages=torch.tensor([1.0, -0.5]), old_logps=None, ref_logps=ref[kept])
    return with_it, without, logps, kept


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"])
def test_a_completion_without_a_valid_reward_leaves_the_loss_and_every_normaliser(loss_type):
    """Advantage 0 alone left a completion without a reward in every token count (bnpo, dapo), in grpo's mean over
    sequences and dr_grpo's batch size, and in the KL term: it trains as if it had not been generated."""
    from swiftlike.rl.online.grpo_trainer import loss_tokens
    with_it, without, logps, kept = invalid_row_case()
    assert not with_it["completion_mask"][1].any() and with_it["reward_valid"].tolist() == [True, False, True]
    assert loss_tokens(with_it) == loss_tokens(without) == 5
    args = grpo_args(loss_type=loss_type, beta=0.1, max_completion_length=4, epsilon_high=3.0)
    losses, grads, kls = [], [], []
    for batch, rows in ((with_it, logps), (without, logps[kept])):
        batch["num_items_in_batch"] = loss_tokens(batch)
        mine = rows.clone().requires_grad_(True)
        loss, metrics = corrected_policy_loss(mine, batch, *loss_groups(args), reused=False, kl_logps=mine)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(mine.grad)
        kls.append(float(metrics["kl"]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert kls[0] == pytest.approx(kls[1], rel=1e-6)
    assert torch.equal(grads[0][kept], grads[1]) and grads[0][1].abs().sum() == 0


def test_rejected_tokens_leave_the_normalisers_as_verls_do():
    """--rollout_rs narrows the mask, as verl's modified response mask does: a rejected token has no loss and no
    place in a denominator (was: weight 0 and still counted, so the kept tokens were scaled down). Checked
    against verl's `agg_loss` token-mean and seq-mean-token-mean on the mask `compute_rollout_rejection_mask`
    returns (token_k1 at 0.8_1.25: pi_rollout / pi_train of e^0.5 is out, of e^-0.1 is in)."""
    from swiftlike.rl.core.rejection import rollout_rejection_mask
    logps = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -0.2]])
    rollout = logps + torch.tensor([[0.0, 0.5, -0.1], [0.5, 0.0, 0.0]])
    advantages = torch.tensor([1.0, -2.0])
    keep = torch.tensor([[True, False, True], [False, True, True]])  # verl's mask, by hand
    per_token = -advantages.unsqueeze(-1).expand_as(logps)  # ratio 1: one update per generation
    verl_token_mean = float((per_token * keep).sum() / keep.sum())
    verl_seq_mean = float(((per_token * keep).sum(-1) / keep.sum(-1)).mean())
    for loss_type, expected in (("grpo", verl_seq_mean), ("bnpo", verl_token_mean), ("dapo", verl_token_mean)):
        args = grpo_args(loss_type=loss_type, use_vllm=True, rollout_rs="token_k1", rollout_rs_threshold="0.8_1.25")
        inputs = _inputs(logps, rollout, advantages)
        # what the trainer stores when it prepares the batch, and counts for the bnpo/dapo normalisers
        inputs["rollout_rs_keep"], _ = rollout_rejection_mask(logps, rollout, inputs["completion_mask"],
                                                              args.rollout_options().rejection())
        assert inputs["rollout_rs_keep"].tolist() == keep.tolist()
        if loss_type != "grpo":  # grpo's per-sequence counts come from the mask alone
            from swiftlike.rl.online.grpo_trainer import loss_tokens
            inputs["num_items_in_batch"] = loss_tokens(inputs)
        loss, metrics = corrected_policy_loss(logps, inputs, *loss_groups(args), reused=False)
        assert float(loss) == pytest.approx(expected), loss_type
        assert float(metrics["rollout_rs/masked_fraction"]) == pytest.approx(2 / 6)
    # GSPO: the sequence ratio is taken over the kept tokens (verl's modified mask), so a rejected token gets no
    # gradient through it either; each kept one gets -A * s / |kept| / rows (s = 1 here), 2 kept in each row
    args = grpo_args(importance_sampling_level="sequence", use_vllm=True, rollout_rs="token_k1",
                     rollout_rs_threshold="0.8_1.25")
    mine = logps.clone().requires_grad_(True)
    corrected_policy_loss(mine, _inputs(logps, rollout, advantages), *loss_groups(args), reused=False)[0].backward()
    expected = torch.where(keep, -advantages.unsqueeze(-1) / 2 / 2, torch.zeros_like(logps))
    assert mine.grad.tolist() == [pytest.approx(row) for row in expected.tolist()]


def test_rollout_correction_metrics_only_with_flag_or_is_mode():
    logps = torch.tensor([[-1.0, -2.0]])
    inputs = _inputs(logps, logps - 0.1, torch.tensor([1.0]))
    _, metrics = corrected_policy_loss(logps, inputs, *loss_groups(grpo_args()), reused=False)
    assert not any(k.startswith("rollout_correction/") for k in metrics)
    _, metrics = corrected_policy_loss(logps, inputs, *loss_groups(grpo_args(log_rollout_offpolicy_metrics=True)), reused=False)
    assert float(metrics["rollout_correction/kl"]) == pytest.approx(-0.1, abs=1e-6)
    _, metrics = corrected_policy_loss(logps, inputs, *loss_groups(grpo_args(rollout_importance_sampling_mode="token_truncate")),
                                       reused=False)
    assert "rollout_correction/k3_kl" in metrics and "rollout_correction/is_weight_mean" in metrics


# ---------------------------------------------------------------- GPU-only options


def test_memory_options_are_reported_no_ops_without_cuda_or_vllm():
    args = grpo_args(sleep_level=1, offload_model=True, vllm_tensor_parallel_size=2)
    off = ColocateMemory(args.rollout_options(), args.vllm_options(), cuda=False)
    assert off.no_ops == ["--sleep_level 1", "--offload_model True", "--vllm_tensor_parallel_size 2"]
    assert (off.sleep_level, off.offload_model, off.offload_optimizer, off.tensor_parallel_size) == (0, False, False, 1)
    assert ColocateMemory(args.rollout_options(), args.vllm_options(), cuda=True).no_ops  # pt rollout: the training model generates itself
    on = ColocateMemory(*memory_groups(grpo_args(sleep_level=1, offload_optimizer=True, use_vllm=True)), cuda=True)
    assert on.no_ops == [] and on.sleep_level == 1 and on.offload_optimizer and not on.offload_model
    assert ColocateMemory(*memory_groups(grpo_args()), cuda=False).no_ops == []
    with pytest.raises(ValueError, match="sleep_level 2"):
        grpo_args(sleep_level=2, use_vllm=True, vllm_enable_lora=True, tuner_type="lora")


# ---------------------------------------------------------------- reward model


def test_reward_model_scores_are_its_logits(tiny_reward_model):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from swiftlike.infer.engine import EngineSpec, build_classifier
    from swiftlike.rl.rewards.functions import combine_rewards
    from swiftlike.rl.rewards.reward_model import RewardModel

    rm = RewardModel(build_classifier(EngineSpec("pt", model=str(tiny_reward_model), torch_dtype="float32")),
                     "--reward_model")
    assert rm.name == "tiny_rm"
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}]] * 2 + [[{"role": "user", "content": "Hi"}]]
    completions = ["#### 4", "I think the answer is four, #### 4", "Hello!"]
    scores = rm(completions, prompts=prompts)

    tok = AutoTokenizer.from_pretrained(tiny_reward_model)
    ref = AutoModelForSequenceClassification.from_pretrained(tiny_reward_model, dtype=torch.float32).eval()
    for p, c, score in zip(prompts, completions, scores):  # one unpadded forward per text
        text = tok.apply_chat_template([*p, {"role": "assistant", "content": c}], tokenize=False)
        assert text.endswith(c + "<|im_end|>\n")
        with torch.no_grad():
            logit = ref(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, 0]
        assert score == pytest.approx(float(logit), abs=1e-4)
    assert len(set(scores)) == 3

    scored = combine_rewards({"format": lambda cs, **kw: [0.0] * len(cs), "tiny_rm": rm}, [1.0, 0.5],
                             completions, prompts=prompts)
    assert torch.allclose(scored.per_func["tiny_rm"], torch.tensor(scores))
    assert torch.allclose(scored.total, 0.5 * torch.tensor(scores))


def test_reward_model_arguments_count_in_reward_weights(tiny_reward_model):
    args = grpo_args(reward_model=[str(tiny_reward_model)], reward_weights=[1.0, 0.5])
    assert args.reward_model == [str(tiny_reward_model)]
    grpo_args(reward_funcs=[], reward_model=[str(tiny_reward_model)])  # a reward model alone is enough
    with pytest.raises(ValueError, match="1 --reward_model"):
        grpo_args(reward_model=[str(tiny_reward_model)], reward_weights=[1.0])


def test_reward_weights_order_functions_then_reward_models_then_servers(tiny_reward_model):
    server = "http://127.0.0.1:9"
    reward = grpo_args(reward_model=[str(tiny_reward_model)], reward_model_server=[server],
                       reward_weights=[1.0, 0.5, 2.0]).reward_options()
    assert reward.count == 3 and reward.weights() == [1.0, 0.5, 2.0]
    with pytest.raises(ValueError, match=r"got 2 --reward_weights for 1 --reward_funcs \+ 1 --reward_model \+ 1 "
                                         r"--reward_model_server; give one weight per reward in that order"):
        grpo_args(reward_model=[str(tiny_reward_model)], reward_model_server=[server], reward_weights=[1.0, 0.5])
    assert grpo_args(reward_funcs=[], reward_model_server=[server]).reward_options().weights() is None  # alone is enough
    for bad, message in (({"reward_model_server": ["127.0.0.1:8000"]}, "must be http"),
                         ({"reward_model_server": [server, server]}, "lists a URL twice"),
                         ({"reward_model_server_api_key": "k"}, "this run has no served reward model"),
                         ({"reward_model_server": [server], "reward_server_timeout": 0}, "must be > 0")):
        with pytest.raises(ValueError, match=message):
            grpo_args(**bad)
    with pytest.raises(ValueError, match=r"^--reward_model_server: reward arguments of grpo and ppo, not used by"):
        RlhfArguments(rlhf_type="gkd", model=TINY, dataset=["d"], teacher_model=TINY, reward_model_server=[server])


def test_a_checkpoint_without_a_classification_head_is_no_reward_model(tiny_resolved):
    from swiftlike.infer.engine import EngineSpec, build_classifier
    with pytest.raises(ValueError, match="has no sequence-classification head"):
        build_classifier(EngineSpec("pt", model=TINY))


# ---------------------------------------------------------------- curves


def test_plot_curves_expands_patterns(tmp_path):
    lines = [{"step": s, "loss": 1.0 / s, "reward": 0.1 * s, "timing/generate": 2.0, "timing/train": 1.0,
              "rewards/acc/mean": 0.5} for s in (1, 2)]
    (tmp_path / "logging.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    written = plot_curves(tmp_path, ("loss", "reward", "rewards/*/mean", "timing/*", "kl"))
    assert sorted(p.name for p in written) == ["train_loss.png", "train_reward.png", "train_rewards_acc_mean.png",
                                               "train_timing_generate.png", "train_timing_train.png"]
