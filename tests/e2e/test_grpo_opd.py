"""On-policy distillation inside GRPO (OPD-RL, `--rlhf_type grpo --teacher_model` or `--teacher_model_server`):
with no task reward the teacher's per-token log-ratio is the whole signal (the per-token advantage itself is
checked by hand in tests/unit/rl/test_advantage_estimators.py). The served teacher and the 2026 options run
against one real `swiftlike rollout` server, which is also the teacher (its base model, asked without the
student's adapter): the session's shared `rollout_server` (tests/conftest.py; the student syncs its LoRA adapter
only, so the served base weights stay the checkpoint's). The trainers run in this process (`run_cli`)."""
from __future__ import annotations

import math

import pytest
import torch
from cli import run_cli
from model_ids import TINY

from swiftlike.train.outputs import read_log

OPD = ["--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#16", "--num_generations", "1",
       "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--max_completion_length", "16",
       "--logging_steps", "1", "--learning_rate", "5e-2", "--lr_scheduler_type", "constant", "--tuner_type", "full",
       "--beta", "0", "--gradient_checkpointing", "false", "--torch_dtype", "float32", "--report_to", "none",
       "--save_steps", "100"]


def opd(tmp_path, *extra, steps=3):
    return opd_run(tmp_path, *extra, steps=steps)[0]


def opd_run(tmp_path, *extra, steps=3):
    run_cli("rlhf", *OPD, "--max_steps", steps, "--output_dir", tmp_path, *extra)
    run_dir = next(tmp_path.glob("v0-*"))
    return [e for e in read_log(run_dir) if "loss" in e], run_dir


def test_pure_distillation_trains_on_the_teacher_signal_alone(tmp_path, tiny_adapter):
    """No --reward_funcs, one completion per prompt: every advantage is the teacher's log-ratio, so the loss and
    gradient are non-zero with --teacher_kl_coef 1 and exactly zero with 0 (nothing else gives a signal)."""
    teacher = ("--teacher_model", TINY, "--teacher_adapters", str(tiny_adapter))
    log = opd(tmp_path / "on", *teacher, steps=3)
    assert all(math.isfinite(e["loss"]) and e["reward"] == 0 and e["teacher_kl"] > 0.1 for e in log), log
    assert all(e["grad_norm"] > 0 for e in log)
    off = opd(tmp_path / "off", *teacher, "--teacher_kl_coef", "0", steps=2)
    assert all(e["loss"] == 0 and e["grad_norm"] == 0 for e in off), off


def test_a_few_steps_move_the_student_toward_the_teacher(tmp_path, tiny_resolved):
    """With zero task reward, ten steps of OPD-RL cut the exact KL(student || teacher) (full vocabulary, on fixed
    token sequences the run never saw) to under half. The teacher is the student with its final norm scaled by
    0.3, a flatter copy the student can reach exactly (the embeddings are tied, so the logits scale by 0.3).
    Plain SGD: under Adam every parameter moves by about the learning rate whatever its gradient, and the
    single-sample teacher signal over a 49k vocabulary is noisy enough for that random walk to win in ten
    steps. (A sharper teacher, x3, is not learnt this way in ten steps: sampling a near-uniform student rarely
    hits the teacher's few likely tokens.)"""
    from transformers import AutoModelForCausalLM
    from swiftlike.model import load_model, load_tokenizer
    teacher_dir = tmp_path / "flat_teacher"
    teacher = load_model(tiny_resolved, "float32", "cpu")
    with torch.no_grad():
        teacher.model.norm.weight.mul_(0.3)
    teacher.save_pretrained(teacher_dir)
    load_tokenizer(tiny_resolved).save_pretrained(teacher_dir)
    sequences = torch.randint(100, 49000, (8, 24), generator=torch.Generator().manual_seed(0))

    def exact_kl(student) -> float:
        with torch.no_grad():
            s = student(input_ids=sequences).logits.float().log_softmax(-1)
            t = teacher(input_ids=sequences).logits.float().log_softmax(-1)
        return float((s.exp() * (s - t)).sum(-1).mean())

    before = exact_kl(load_model(tiny_resolved, "float32", "cpu"))
    log, run_dir = opd_run(tmp_path / "run", "--teacher_model", str(teacher_dir), "--optim", "sgd",
                           "--learning_rate", "1.0", "--per_device_train_batch_size", "8", "--save_steps", "10",
                           steps=10)
    after = exact_kl(AutoModelForCausalLM.from_pretrained(run_dir / "checkpoint-10", dtype=torch.float32))
    assert after < 0.5 * before, (before, after)
    first, last = [sum(e["teacher_kl"] for e in part) / 3 for part in (log[:3], log[-3:])]
    assert last < 0.6 * first, [e["teacher_kl"] for e in log]


def test_a_student_identical_to_its_reference_and_teacher_reads_zero_with_top_k_top_p(tmp_path):
    """LoRA at its initialisation is its base exactly, and the base is both the reference (adapter disabled) and
    the OPD-RL teacher (the same --model under LoRA): every comparison reads 0 at the first step. With --top_k /
    --top_p the old log-probs of the ratio are the filtered ones; --kl_in_reward's sequence KL and the teacher term
    compare the temperature-scaled ones on both sides, as the reference and teacher are scored (was: the filter
    itself read as KL, 63 nats a 16-token sequence here and a teacher_kl of 3.0, the teacher term pushed
    negative)."""
    log = opd(tmp_path, "--tuner_type", "lora", "--teacher_model", TINY, "--beta", "0.04", "--kl_in_reward", "true",
              "--temperature", "0.8", "--top_k", "40", "--top_p", "0.9", steps=1)
    assert abs(log[0]["kl_in_reward/kl"]) < 1e-5 and abs(log[0]["teacher_kl"]) < 1e-6, log
    assert log[0]["sampling/forced_keep_frac"] == 0  # the filter is on, and the trainer rebuilds the engine's set


SERVED = ("--teacher_model_server", "http://127.0.0.1:1")


@pytest.mark.parametrize("extra, message", [
    (("--teacher_model", TINY, "--off_policy_sequence_mask_delta", "0.5"),
     "--teacher_model with --off_policy_sequence_mask_delta"),
    (("--teacher_model", TINY, "--dynamic_sample", "true", "--num_generations", "2"),
     "--dynamic_sample true with --teacher_model and no"),
    ((*SERVED, "--temperature", "0.9"), "--teacher_model_server with --temperature 0.9: a served teacher answers"),
    ((*SERVED, "--teacher_model", TINY), "--teacher_model and --teacher_model_server both given"),
    ((*SERVED, "--teacher_adapters", "a"), "describe an in-process teacher"),
    ((*SERVED, "--gkd_logits_topk", "4"), "--gkd_logits_topk: GKD's teacher arguments, not used by --rlhf_type grpo"),
])
def test_what_needs_a_per_sequence_advantage_or_rewards_is_refused(tmp_path, extra, message):
    """Refused before any model loads or any server is asked (the served teacher's URL answers nothing)."""
    result = run_cli("rlhf", *OPD, "--max_steps", "3", "--output_dir", tmp_path / "refused", *extra, check=False)
    assert result.returncode != 0
    assert message in result.stderr and not (tmp_path / "refused").exists()


# ---------------------------------------------------------------- a served teacher, and server mode
# `rollout_server` (tests/conftest.py): the student's rollouts (its LoRA adapter synced there) and, asked without
# the adapter, the teacher.


def test_served_teacher_gives_the_models_log_probs_of_the_sampled_tokens(rollout_server, tiny_resolved,
                                                                         tiny_template):
    """ms-swift's request (prompt_logprobs=0): the token as it stands, whatever its rank, equal to the model's own
    log-softmax at that position (vLLM fp32 against transformers fp32)."""
    from swiftlike.model import load_model
    from swiftlike.rl.online.teacher import ServedTeacher
    model = load_model(tiny_resolved, "float32", "cpu")
    sequences = [([11, 220, 5, 90], [31, 7, 2]), ([42, 43], [1000, 40000, 5, 6, 7])]
    teacher = ServedTeacher(f"http://127.0.0.1:{rollout_server}", None, 60, tiny_template.tokenizer,
                            model.get_output_embeddings().weight.shape[0])
    served = teacher.sampled_logps(sequences)
    teacher.close()
    for (prompt, completion), got in zip(sequences, served):
        with torch.no_grad():
            logps = model(input_ids=torch.tensor([prompt + completion])).logits[0].float().log_softmax(-1)
        want = [float(logps[t - 1, token]) for t, token in enumerate(completion, start=len(prompt))]
        assert len(got) == len(completion)
        assert max(abs(a - b) for a, b in zip(got, want)) < 1e-3, (got, want)
    assert min(min(row) for row in served) < -5  # low-ranked tokens are answered too, not only the top-k


def server_grpo(tmp_path, port, *extra):
    run_cli("rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#16", "--tuner_type",
            "lora", "--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_port", port, "--vllm_enable_lora",
            "true", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
            "--max_completion_length", "12", "--max_steps", "3", "--logging_steps", "1", "--learning_rate", "5e-2",
            "--lr_scheduler_type", "constant", "--beta", "0", "--gradient_checkpointing", "false", "--torch_dtype",
            "float32", "--report_to", "none", "--save_steps", "100", "--output_dir", tmp_path, *extra)
    log = [e for e in read_log(next(tmp_path.glob("v0-*"))) if "loss" in e]
    assert len(log) == 3 and all(math.isfinite(e["loss"]) and "sync/bytes" in e for e in log), log
    return log


def test_opd_rl_in_server_mode_with_the_rollout_server_as_teacher(tmp_path, rollout_server):
    """Rollouts on the server, the teacher the server's base model: at the first step the student is that base
    (a fresh LoRA adapter), so the teacher KL is the engine-trainer mismatch only; after updates it is not."""
    log = server_grpo(tmp_path, rollout_server, "--num_generations", "1", "--teacher_model_server",
                      f"http://127.0.0.1:{rollout_server}")
    assert abs(log[0]["teacher_kl"]) < 1e-3 and log[-1]["teacher_kl"] > 10 * abs(log[0]["teacher_kl"]), log
    assert all(e["reward"] == 0 and e["grad_norm"] > 0 for e in log[1:]), log


def test_the_2026_options_run_in_server_mode(tmp_path, rollout_server):
    """RLOO + CISPO + top-entropy tokens + token rejection on the rollout/train ratio, rollouts from the server."""
    log = server_grpo(tmp_path, rollout_server, "--reward_funcs", "format", "--num_generations", "4",
                      "--advantage_estimator", "rloo", "--loss_type", "cispo", "--epsilon_high", "5.0",
                      "--top_entropy_quantile", "0.5", "--rollout_rs", "token_k1", "--rollout_rs_threshold",
                      "0.5_2.0", "--temperature", "0.9", "--top_k", "20")
    for key in ("cispo_clip_ratio", "token_selection/gradient_frac", "rollout_rs/masked_fraction"):
        assert all(key in e for e in log), (key, sorted(log[0]))
    assert all(0.3 <= e["token_selection/gradient_frac"] <= 0.7 for e in log), log
