"""benchmarks/bound.py: a step's model FLOPs from its token lengths, against hand-computed values on a toy shape,
and the fp32 peak measured once where roofline.json is missing."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import bound  # noqa: E402
import roofline  # noqa: E402
from bound import Work, mean_lengths, rollout_work  # noqa: E402

from swiftlike.utils.flops import DecoderShape  # noqa: E402

# 184 matmul weights (144 a layer + a 4 x 10 head), attention 4*1*2*2 = 16 per (token, earlier-or-same token):
# a forward over n tokens is 2*184*n + 16*n(n+1)/2 = 368n + 8n(n+1): n=1 384, 2 784, 3 1200, 4 1632, 5 2080.
# With a one-label head instead (144 + 4 = 148 weights): 296n + 8n(n+1): n=3 984.
TOY = DecoderShape(layers=1, hidden=4, heads=2, kv_heads=1, head_dim=2, intermediate=8, vocab=10)


def test_mean_lengths_keep_the_total_and_split_it_evenly():
    assert mean_lengths(10, 3) == [4, 3, 3]
    assert mean_lengths(7.6, 2) == [4, 4]  # a mean of 3.8 over 2 sequences: 8 tokens
    assert sum(mean_lengths(1234, 32)) == 1234


def test_each_kind_of_pass_by_hand():
    assert Work(train=[3], lora=True).flops(TOY) == 2 * 1200  # forward + LoRA's backward (1x)
    assert Work(train=[3]).flops(TOY) == 3 * 1200  # full backward: 2x
    assert Work(train=[3], lora=True, gradient_checkpointing=True).flops(TOY) == 3 * 1200
    assert Work(forward=[3, 3]).flops(TOY) == 2 * 1200  # e.g. the reference and the old policy
    assert Work(value_train=[3], value_forward=[3]).flops(TOY) == 3 * 984 + 984


def test_generation_prefills_the_prompt_once_then_decodes_over_the_cache():
    # prompt of 2 (784), then completions of 1 and 3 tokens at positions 3 and 3..5: a token at position k costs
    # 368 + 16k, so 416 and 3*368 + 16*(3+4+5) = 1296
    assert Work(generate=[(2, [1, 3])]).flops(TOY) == 784 + 416 + 1296


def test_work_adds_up():
    assert (Work(train=[3], lora=True) + Work(forward=[3])).flops(TOY) == 2 * 1200 + 1200


def test_grpo_like_step_from_its_mean_completion_length():
    # 1 prompt of 2 tokens x 2 completions of mean 1.5: lengths 2 and 1, sequences of 4 and 3 tokens
    work = rollout_work(2, [1.5], prompts=1, group=2, lora=True, forwards=1)
    train = 2 * (1632 + 1200)  # LoRA forward + backward over both
    reference = 1632 + 1200
    generate = 784 + (1632 - 784) + (1200 - 784)
    assert work.flops(TOY) == train + reference + generate == 10544


def test_ppo_like_step_counts_the_critic_and_reward_model_without_the_lm_head():
    # 1 prompt of 2 tokens, 1 completion of 1 token: one sequence of 3
    work = rollout_work(2, [1], prompts=1, lora=False, forwards=2, value_forwards=2, value_train=True)
    assert work.flops(TOY) == 3 * 1200 + 2 * 1200 + 3 * 984 + 2 * 984 + 1200 == 12120


def test_report_prints_the_bound_and_returns_its_figures(monkeypatch, capsys):
    monkeypatch.setattr(bound, "fp32_peak", lambda: 100.0)
    figures = bound.report("swiftlike", TOY, Work(train=[3], lora=True), seconds=1e-6, steps=2, approximate=True)
    assert figures["flop"] == 2400 and figures["flop_per_step"] == 1200
    assert abs(figures["gflop_per_s"] - 2.4) < 1e-9 and abs(figures["fraction_of_fp32_peak"] - 0.024) < 1e-9
    line = capsys.readouterr().out.strip()
    assert line.startswith("bound  swiftlike: ~2.4e-06 GFLOP (~1.2e-06 GFLOP/step x 2) in 0.0 s")
    assert line.endswith("= ~2.4 GFLOP/s = ~2.4% of the fp32 peak (100 GFLOP/s, roofline.py)")


def test_fp32_peak_is_measured_and_written_once_when_roofline_json_is_missing(monkeypatch, tmp_path):
    path = tmp_path / "roofline.json"
    calls = []
    monkeypatch.setattr(roofline, "DEFAULT_JSON", path)
    monkeypatch.setattr(roofline, "measure",
                        lambda repeats: calls.append(repeats) or {"peak_gflops": {"float32": 50.0}})
    assert bound.fp32_peak() == 50.0 and calls == [2]
    assert json.loads(path.read_text())["peak_gflops"]["float32"] == 50.0
    assert bound.fp32_peak() == 50.0 and calls == [2]  # read back, not measured again
