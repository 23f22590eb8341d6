"""Multi-turn trajectories in the GRPO trainer: only sampled ids count (loss, normalisers, KL, entropy, mismatch
metrics, IS weights), an inserted id with a -inf trainer log-prob makes no NaN, rewards over whole trajectories
with the environment's return as a column, dropped trajectories, metrics and completions.jsonl records."""
import math

import pytest
import torch
from model_ids import TINY

from swiftlike.arguments import RlhfArguments
from swiftlike.rl.core.correction import mismatch_metrics, rollout_is_weights
from swiftlike.rl.core.advantages import group_advantages
from swiftlike.rl.rewards.functions import ENV_REWARD, ScoredRewards, combine_rewards, environment_return
from swiftlike.rl.online.grpo_batch import tensorize
from swiftlike.rl.online.grpo_trainer import corrected_policy_loss
from swiftlike.rl.online.rollout_worker import Rollout
from swiftlike.rl.online.trajectories import (drop_failed_trajectories, multi_turn_metrics, trajectory_record,
                                               turn_segments)

INF = float("inf")


def grpo_args(**kw):
    base = dict(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=2,
                per_device_train_batch_size=2, gradient_accumulation_steps=1, beta=0.0)
    return RlhfArguments(**{**base, **kw})


def loss_groups(args: RlhfArguments):
    return args.grpo_options(), args.rollout_options(), args.sampling_options()


def trajectory(**kw) -> Rollout:
    """Turn 1 sampled [10, 11], a tool result inserted [12], turn 2 sampled [13]."""
    base = dict(prompt_ids=[1, 2], completion_ids=[10, 11, 12, 13], text="a<r>b", finish_reason="stop",
                rollout_logps=[-0.5, -1.0, 0.0, -2.0], row={"messages": [{"role": "user", "content": "q"}]},
                loss_mask=[1, 1, 0, 1], turns=2, tool_calls=1,
                messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                          {"role": "tool", "content": "r"}, {"role": "assistant", "content": "b"}])
    return Rollout(**{**base, **kw})


def single(**kw) -> Rollout:
    return Rollout(**{**dict(prompt_ids=[1, 2], completion_ids=[20, 21], text="c", finish_reason="stop",
                             rollout_logps=[-0.25, -0.75]), **kw})


# ---------------------------------------------------------------- the batch: sampled ids only


def test_tensorize_ands_the_loss_mask_into_the_completion_mask():
    batch = tensorize([trajectory(), single()], pad_id=0)
    assert batch["completion_ids"].tolist() == [[10, 11, 12, 13], [20, 21, 0, 0]]
    assert batch["completion_mask"].tolist() == [[True, True, False, True], [True, True, False, False]]
    # every id is context (attention) and keeps its place; only the mask says what is trained on
    assert batch["completion_attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["rollout_logps"].tolist() == [[-0.5, -1.0, 0.0, -2.0], [-0.25, -0.75, 0.0, 0.0]]


def test_a_truncated_trajectory_leaves_the_loss_under_the_overlong_filter_and_an_env_error_always():
    cut = trajectory(truncated=True)  # cut by the per-round or total limit, though its last turn stopped
    assert cut.finish_reason == "stop"
    batch = tensorize([cut, single(), trajectory(env_error="RuntimeError: boom")], pad_id=0, overlong_filter=True)
    assert batch["completion_mask"].tolist() == [[False] * 4, [True, True, False, False], [False] * 4]
    assert tensorize([cut], pad_id=0)["completion_mask"].tolist() == [[True, True, False, True]]
    # one turn: truncated is what the engine's finish_reason says
    assert single(finish_reason="length").truncated and not single().truncated


def test_a_loss_mask_must_cover_the_completion():
    with pytest.raises(ValueError, match="loss_mask has 3 entries for 4 completion ids"):
        trajectory(loss_mask=[1, 1, 0])


# ---------------------------------------------------------------- the loss on a hand-computed case


def masked_case():
    """Trainer log-probs of the batch above, -inf at the inserted id (a tool-result token outside the trainer's
    top-k/top-p set) and at the padding."""
    batch = tensorize([trajectory(), single()], pad_id=0)
    logps = torch.tensor([[-0.4, -1.1, -INF, -2.2], [-0.25, -0.65, -INF, -INF]], requires_grad=True)
    batch.update(advantages=torch.tensor([1.0, -0.5]), old_logps=None)
    return batch, logps


@pytest.mark.parametrize("loss_type, expected, normaliser", [
    # per token -A (ratio 1 at one update per generation); row 0 has 3 sampled tokens, row 1 has 2
    ("grpo", (-1.0 + 0.5) / 2, None),
    ("bnpo", (3 * -1.0 + 2 * 0.5) / 5, 5),  # 5 sampled tokens, not the 6 completion ids
    ("dr_grpo", (3 * -1.0 + 2 * 0.5) / (2 * 16), None),
])
def test_loss_counts_sampled_tokens_only_and_stays_finite(loss_type, expected, normaliser):
    batch, logps = masked_case()
    if normaliser is not None:
        batch["num_items_in_batch"] = int(batch["completion_mask"].sum())
        assert batch["num_items_in_batch"] == normaliser
    args = grpo_args(loss_type=loss_type, max_completion_length=16)
    loss, metrics = corrected_policy_loss(logps, batch, *loss_groups(args), reused=False)
    assert float(loss.detach()) == pytest.approx(expected)
    loss.backward()
    grad = logps.grad
    assert torch.isfinite(grad).all()
    assert grad[0, 2] == 0 and grad[1, 2:].abs().sum() == 0  # no gradient reaches the inserted id or padding
    if loss_type == "grpo":  # d loss / d logp_t = -A / (tokens of its row) / rows
        assert grad[0].tolist() == pytest.approx([-1 / 6, -1 / 6, 0.0, -1 / 6])
        assert grad[1].tolist() == pytest.approx([0.125, 0.125, 0.0, 0.0])
    assert all(math.isfinite(float(v)) for v in metrics.values())


def test_reference_kl_counts_sampled_tokens_only():
    batch, logps = masked_case()
    # the reference finds every sampled token 0.1 nats less likely, and the inserted id impossible
    batch["ref_logps"] = torch.where(batch["completion_mask"], logps.detach() - 0.1, torch.full_like(logps, -INF))
    loss, metrics = corrected_policy_loss(logps, batch, *loss_groups(grpo_args(beta=0.04)), reused=False,
                                          kl_logps=logps)
    k3 = math.exp(-0.1) + 0.1 - 1  # every sampled token's k3 estimate; an inserted id would add ~19 (clamped at 10)
    assert float(metrics["kl"]) == pytest.approx(k3, rel=1e-5)
    assert float(loss.detach()) == pytest.approx((-1.0 + 0.5) / 2 + 0.04 * k3, rel=1e-5)
    loss.backward()
    assert torch.isfinite(logps.grad).all()


def test_rollout_correction_counts_sampled_tokens_only():
    batch, logps = masked_case()
    train = logps.detach()
    mask = batch["completion_mask"]
    # train - rollout on the sampled tokens: 0.1, -0.1, -0.2 (row 0), 0, 0.1 (row 1)
    deltas = [0.1, -0.1, -0.2, 0.0, 0.1]
    metrics = mismatch_metrics(train, batch["rollout_logps"], mask)
    assert float(metrics["kl"]) == pytest.approx(-sum(deltas) / 5, abs=1e-6)
    assert float(metrics["k3_kl"]) == pytest.approx(sum(math.exp(d) - d - 1 for d in deltas) / 5, abs=1e-6)
    assert float(metrics["chi2_token"]) == pytest.approx(sum(math.exp(2 * d) for d in deltas) / 5 - 1, abs=1e-6)
    assert float(metrics["is_weight_mean"]) == pytest.approx(sum(math.exp(d) for d in deltas) / 5, abs=1e-6)
    ess = sum(math.exp(d) for d in deltas) ** 2 / (5 * sum(math.exp(2 * d) for d in deltas))
    assert float(metrics["ess_unclamped"]) == pytest.approx(ess, abs=1e-6)
    assert float(metrics["ess"]) == pytest.approx(ess, abs=1e-6)  # every ratio within [1/2, 2]: the clamp is idle
    # per-sequence perplexities over each row's sampled tokens: row 0 (-0.4, -1.1, -2.2), row 1 (-0.25, -0.65)
    assert float(metrics["training_log_ppl"]) == pytest.approx((3.7 / 3 + 0.9 / 2) / 2, abs=1e-6)
    assert float(metrics["rollout_log_ppl"]) == pytest.approx((3.5 / 3 + 1.0 / 2) / 2, abs=1e-6)
    assert all(math.isfinite(float(v)) for v in metrics.values())
    weights, _, _ = rollout_is_weights(train, batch["rollout_logps"], mask, mode="token_truncate", threshold=2.0)
    assert weights[0].tolist() == pytest.approx([math.exp(0.1), math.exp(-0.1), 1.0, math.exp(-0.2)], abs=1e-6)
    # through the loss too: the IS-weighted loss and its metrics stay finite
    loss, out = corrected_policy_loss(logps, batch, *loss_groups(grpo_args(
        rollout_importance_sampling_mode="token_truncate")), reused=False)
    loss.backward()
    assert math.isfinite(float(loss.detach())) and torch.isfinite(logps.grad).all()
    assert float(out["rollout_correction/k3_kl"]) == pytest.approx(float(metrics["k3_kl"]), abs=1e-6)


# ---------------------------------------------------------------- rewards over whole trajectories


def test_reward_functions_see_the_final_answer_and_the_trajectory():
    seen = {}

    def probe(completions, messages, rollout_infos, step_rewards, **kwargs):
        seen.update(completions=completions, messages=messages, infos=rollout_infos, steps=step_rewards)
        return [1.0] * len(completions)

    rollouts = [trajectory(step_rewards=[0.5, 0.25], infos={"moves": 2}), trajectory(step_rewards=[])]
    funcs = {"probe": probe, ENV_REWARD: environment_return}
    scored = combine_rewards(funcs, [0.5, 2.0], [r.answer for r in rollouts],
                             messages=[r.messages for r in rollouts],
                             rollout_infos=[r.infos for r in rollouts],
                             step_rewards=[r.step_rewards for r in rollouts])
    total, per_func = scored.total, scored.per_func
    assert seen["completions"] == ["b", "b"]  # the last assistant turn, not the whole completion text
    assert seen["messages"][0][2] == {"role": "tool", "content": "r"} and seen["infos"][0] == {"moves": 2}
    assert per_func[ENV_REWARD].tolist() == [0.75, 0.0]
    assert total.tolist() == [0.5 + 2.0 * 0.75, 0.5]
    assert single().answer == "c"
    with pytest.raises(ValueError, match="only multi-turn rollouts"):
        environment_return(["x"])


def test_env_reward_column_weights_and_need_for_reward_funcs():
    args = grpo_args(reward_funcs=[], multi_turn_scheduler="gym_scheduler", gym_env="math_env")
    assert args.use_gym_env and args.reward_options().env_reward and args.reward_options().weights() is None
    args = grpo_args(reward_funcs=["format"], multi_turn_scheduler="gym_scheduler", gym_env="math_env",
                     reward_weights=[0.2])
    assert args.reward_options().weights() == [0.2, 1.0]  # the env column weighs 1 unless given
    args = grpo_args(reward_funcs=["format"], multi_turn_scheduler="gym_scheduler", gym_env="math_env",
                     reward_weights=[0.2, 3.0])
    assert args.reward_options().weights() == [0.2, 3.0]
    with pytest.raises(ValueError, match=r"3 --reward_weights .* \(\+ 1 for the environment's reward"):
        grpo_args(multi_turn_scheduler="gym_scheduler", gym_env="math_env", reward_weights=[1, 2, 3])
    with pytest.raises(ValueError, match="--reward_funcs is required"):
        grpo_args(reward_funcs=[], multi_turn_scheduler="tool_call_scheduler")
    # --use_gym_env false keeps the environment's return out of the rewards
    assert not grpo_args(multi_turn_scheduler="gym_scheduler", gym_env="math_env",
                         use_gym_env=False).reward_options().env_reward


def test_a_trajectory_whose_environment_raised_is_dropped_and_logged(caplog):
    rollouts = [trajectory(), trajectory(env_error="ValueError: bad move", row={"messages": [], "seed": 7})]
    scored = drop_failed_trajectories(rollouts, combine_rewards({"acc": lambda completions, **kw: [1.0, 1.0]}, None,
                                                                [r.answer for r in rollouts]))
    assert scored.total[0] == 1.0 and math.isnan(scored.total[1])  # no reward: not a 0, which would be a wrong answer
    assert scored.per_func["acc"][0] == 1.0 and math.isnan(scored.per_func["acc"][1])
    assert scored.valid.tolist() == [True, False] and scored.env_failed.tolist() == [False, True]
    assert "ValueError: bad move" in caplog.text and '"seed": 7' in caplog.text
    # the mark survives the trainer's selections and concatenations (dynamic sampling, stale groups)
    assert ScoredRewards.cat([scored, scored]).select(torch.tensor([3, 0])).valid.tolist() == [False, True]
    kept = [trajectory()]
    same = drop_failed_trajectories(kept, combine_rewards({"acc": lambda completions, **kw: [2.0]}, None, ["b"]))
    assert same.total.tolist() == [2.0] and same.valid.tolist() == [True]


def test_a_failed_environment_leaves_its_groups_statistics_and_the_loss():
    """Three right answers and one trajectory whose environment raised: the group has nothing to compare, so every
    advantage is 0 (was [0.5, 0.5, 0.5, -1.5]: the dropped one counted as a wrong answer of reward 0), and the
    dropped trajectory has no token in the batch."""
    rollouts = [trajectory(), trajectory(), trajectory(env_error="EnvFailure: broke"), trajectory()]
    scored = drop_failed_trajectories(rollouts, combine_rewards({"acc": lambda completions, **kw: [1.0] * 4}, None,
                                                                [r.answer for r in rollouts]))
    advantages, _ = group_advantages(scored.total, 4, "group", valid=scored.valid)
    assert advantages.tolist() == [0.0] * 4
    # one wrong answer among the three others: they are compared among themselves only
    scored = drop_failed_trajectories(rollouts, combine_rewards({"acc": lambda completions, **kw: [1.0, 0.0, 1.0, 1.0]},
                                                                None, [r.answer for r in rollouts]))
    advantages, std = group_advantages(scored.total, 4, "group", valid=scored.valid)
    s = math.sqrt(1 / 3)  # Bessel std of {1, 0, 1}
    assert advantages.tolist() == pytest.approx([(1 - 2 / 3) / (s + 1e-4), (0 - 2 / 3) / (s + 1e-4), 0.0,
                                                 (1 - 2 / 3) / (s + 1e-4)], rel=1e-5)
    batch = tensorize(rollouts, pad_id=0, valid=scored.valid)
    assert not batch["completion_mask"][2].any() and batch["reward_valid"].tolist() == [True, True, False, True]


# ---------------------------------------------------------------- metrics and completions.jsonl


def test_multi_turn_metrics():
    rollouts = [trajectory(turns=3, tool_calls=2, tool_errors=1, truncated=True), trajectory(turns=1, tool_calls=0),
                trajectory(turns=2, env_error="boom"), trajectory(turns=2, tool_calls=1)]
    assert multi_turn_metrics(rollouts) == {
        "multi_turn/turns_mean": 2.0, "multi_turn/turns_max": 3.0, "multi_turn/tool_calls": 1.0,
        "multi_turn/tool_errors": 0.25, "multi_turn/env_errors": 1.0, "multi_turn/truncated": 0.25}
    assert multi_turn_metrics([]) == {}


def test_completions_record_splits_the_trajectory_into_its_turns():
    decode = lambda ids: "".join(f"<{i}>" for i in ids)  # noqa: E731
    record = trajectory_record(trajectory(step_rewards=[1.0]), decode)
    assert record["segments"] == [{"sampled": True, "tokens": 2, "text": "<10><11>"},
                                  {"sampled": False, "tokens": 1, "text": "<12>"},
                                  {"sampled": True, "tokens": 1, "text": "<13>"}]
    assert (record["turns"], record["sampled_tokens"], record["tool_calls"], record["step_rewards"]) == (2, 3, 1, [1.0])
    assert record["messages"][-1] == {"role": "assistant", "content": "b"}
    assert turn_segments(single(), decode) == [{"sampled": True, "tokens": 2, "text": "<20><21>"}]


# ---------------------------------------------------------------- the rollout worker (pt engine, tiny model)


def test_the_worker_rolls_each_row_out_with_its_tools_and_columns(tiny_resolved):
    """Rows become requests (the `tools` column offered, the other columns in data_dict); each Trajectory comes
    back as a Rollout with its mask, turns, step rewards and infos; the ids are the engine's, sampled and
    inserted, in order."""
    from swiftlike.dataset import load_dataset
    from swiftlike.model import load_model, load_tokenizer
    from swiftlike.rl.online.rollout_worker import RolloutWorker
    from swiftlike.rollout.multi_turn import MultiTurnScheduler, build_scheduler, register_scheduler
    from swiftlike.template import get_template

    seen = []

    @register_scheduler("unit_probe")
    class Probe(MultiTurnScheduler):
        def check_finished(self, request, choice, current_turn):
            return current_turn >= self.max_turns

        def step(self, request, choice, current_turn):
            seen.append((request.tools, dict(request.data_dict)))
            request.messages.append({"role": "user", "content": "Next."})
            return {"infer_request": request, "reward": 1.0, "rollout_infos": {"turn": current_turn}}

    args = grpo_args(multi_turn_scheduler="unit_probe", max_turns=2, max_completion_length=4, agent_template="hermes")
    tokenizer = load_tokenizer(tiny_resolved)
    template = get_template(tiny_resolved.meta.template, tokenizer, None, "hermes")
    model = load_model(tiny_resolved, "float32", "cpu")
    scheduler = build_scheduler("unit_probe", max_turns=2, gym_env=None, template=template)
    worker = RolloutWorker(args.rollout_options(), args.sampling_options(), args.vllm_options(), tiny_resolved,
                           template, model, multi_turn=args.multi_turn_options(), scheduler=scheduler)
    rows = load_dataset(["swiftlike/calculator-agent-test#1"]) * 2
    model.train()
    out = worker.generate(rows, model)
    assert model.training  # sampled in eval mode, given back in training mode
    assert len(out) == 2 and len(seen) == 2
    tools, data = seen[0]
    assert [t["function"]["name"] for t in tools] == ["calculator", "count_letters"]
    assert set(data) == {"solution", "task"} and data["solution"] == rows[0]["solution"]
    for r in out:
        assert r.row is rows[0] and r.turns == 2 and r.step_rewards == [1.0]
        assert r.infos == {"turn": 1, "num_turns": 2}
        assert len(r.loss_mask) == len(r.completion_ids) == len(r.rollout_logps)
        sampled = [i for i, m in zip(r.completion_ids, r.loss_mask) if m]
        inserted = [i for i, m in zip(r.completion_ids, r.loss_mask) if not m]
        assert len(sampled) == 8 and "Next." in tokenizer.decode(inserted)
        assert all(lp == 0.0 for lp, m in zip(r.rollout_logps, r.loss_mask) if not m)
        assert all(lp < 0 for lp, m in zip(r.rollout_logps, r.loss_mask) if m)
        assert r.prompt_ids == template.encode_prompt(rows[0]["messages"], tools=rows[0]["tools"])
        assert r.policy_version is None and r.truncated  # pt: always current; every turn hit its 4-token limit
        assert r.messages[-1]["role"] == "assistant" and r.answer == r.messages[-1]["content"]
    with pytest.raises(ValueError, match="takes a scheduler exactly when --multi_turn_scheduler is set"):
        RolloutWorker(args.rollout_options(), args.sampling_options(), args.vllm_options(), tiny_resolved, template,
                      model, multi_turn=args.multi_turn_options(), scheduler=None)
