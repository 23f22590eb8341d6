"""`swiftlike rlhf --rlhf_type gkd`: the divergence by hand and against TRL, arguments, teachers (in-process,
adapter-disabled, served by a real `swiftlike deploy`), and real runs on a tiny model."""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import httpx
import pytest
import torch

from swiftlike.arguments.rlhf_args import RlhfArguments
from swiftlike.commands.rlhf import rlhf_main
from swiftlike.rl.core.distill import generalized_jsd, teacher_topk, topk_generalized_jsd
from swiftlike.rl.online.gkd_trainer import gkd_loss
from swiftlike.rl.online.teacher import (LocalTeacher, PackedSequences, ServedTeacher, checkpoint_bytes,
                                         completion_logits, fits_in_memory)
from swiftlike.train.outputs import read_log

from cli import CliResult, run_cli
from model_ids import TINY, TINY_LLAMA
from servers import FaultyProxy, free_port, start

ROWS = [
    {"messages": [{"role": "user", "content": "Who are you?"},
                  {"role": "assistant", "content": "I am Tutor, a small model trained by Swiftlike Lab."}]},
    {"messages": [{"role": "user", "content": "What is 6 * 7?"},
                  {"role": "assistant", "content": "6 * 7 = 42.\n#### 42"}]},
    {"messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}]},
    {"messages": [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello there!"}]},
]


def logits_of(*probs: float) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in probs])


# ---------------------------------------------------------------- the divergence, by hand


P, Q = (0.8, 0.2), (0.5, 0.5)  # teacher, student


def test_generalized_jsd_by_hand_for_beta_0_half_1():
    teacher, student = logits_of(*P), logits_of(*Q)
    forward = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)  # KL(P || Q)
    reverse = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)  # KL(Q || P)
    m = (0.5 * 0.8 + 0.5 * 0.5, 0.5 * 0.2 + 0.5 * 0.5)
    jsd = 0.5 * (0.8 * math.log(0.8 / m[0]) + 0.2 * math.log(0.2 / m[1])) + \
        0.5 * (0.5 * math.log(0.5 / m[0]) + 0.5 * math.log(0.5 / m[1]))
    assert abs(float(generalized_jsd(student, teacher, beta=0.0)) - forward) < 1e-6
    assert abs(float(generalized_jsd(student, teacher, beta=1.0)) - reverse) < 1e-6
    assert abs(float(generalized_jsd(student, teacher, beta=0.5)) - jsd) < 1e-6
    assert (forward, reverse, jsd) == pytest.approx((0.192745, 0.223144, 0.050672), abs=1e-6)


def test_temperature_divides_both_logits_and_mask_drops_positions():
    teacher = torch.stack([logits_of(*P), logits_of(0.1, 0.9)])
    student = torch.stack([logits_of(*Q), logits_of(0.6, 0.4)])
    at_two = generalized_jsd(student, teacher, beta=0.5, temperature=2.0)
    assert float(at_two) == pytest.approx(float(generalized_jsd(student / 2, teacher / 2, beta=0.5)), abs=1e-7)
    first_only = generalized_jsd(student, teacher, torch.tensor([True, False]), beta=0.0)
    assert float(first_only) == pytest.approx(0.192745, abs=1e-6)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\]"):
        generalized_jsd(student, teacher, beta=1.5)


def test_topk_renormalises_both_sides_over_the_teachers_top_k():
    teacher = logits_of(0.5, 0.3, 0.15, 0.05)
    student = logits_of(0.25, 0.25, 0.25, 0.25)
    values, ids = teacher_topk(teacher, 2)
    assert ids.tolist() == [0, 1]
    # teacher renormalised over {0, 1}: (0.625, 0.375); student: (0.5, 0.5); the student's other half is dropped
    forward = 0.625 * math.log(0.625 / 0.5) + 0.375 * math.log(0.375 / 0.5)
    assert float(topk_generalized_jsd(student, values, ids, beta=0.0)) == pytest.approx(forward, abs=1e-6)
    # a served teacher's log-probs differ from its logits by a per-position constant: same loss
    assert float(topk_generalized_jsd(student, values - 3.0, ids, beta=0.5)) == \
        pytest.approx(float(topk_generalized_jsd(student, values, ids, beta=0.5)), abs=1e-6)
    # k = the whole vocabulary is the full-vocabulary divergence
    full_values, full_ids = teacher_topk(teacher, 4)
    for beta in (0.0, 0.5, 1.0):
        assert float(topk_generalized_jsd(student, full_values, full_ids, beta=beta, temperature=0.9)) == \
            pytest.approx(float(generalized_jsd(student, teacher, beta=beta, temperature=0.9)), abs=1e-6)


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 0.9])
def test_full_vocabulary_agrees_with_trl(beta, temperature):
    from trl.experimental.gkd import GKDTrainer
    gen = torch.Generator().manual_seed(int(beta * 10) + int(temperature * 10))
    student = torch.randn(3, 7, 50, generator=gen) * 3
    teacher = torch.randn(3, 7, 50, generator=gen) * 3
    labels = torch.randint(0, 50, (3, 7), generator=gen)
    labels[0, :3] = -100
    labels[2, 5:] = -100
    theirs = GKDTrainer.generalized_jsd_loss(student, teacher, labels=labels, beta=beta, temperature=temperature)
    ours = generalized_jsd(student, teacher, labels != -100, beta=beta, temperature=temperature)
    assert abs(float(ours) - float(theirs)) < 1e-6


# ---------------------------------------------------------------- arguments


def args(**kw) -> RlhfArguments:
    return RlhfArguments(**{"rlhf_type": "gkd", "model": TINY, "dataset": ["d"], "teacher_model": TINY, **kw})


def test_defaults_follow_ms_swift():
    a = args()
    assert (a.beta, a.temperature, a.lmbda, a.sft_alpha, a.seq_kd, a.gkd_logits_topk, a.max_completion_length) == \
        (0.5, 0.9, 0.5, 0.0, False, None, 512)
    grpo = RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"])
    assert (grpo.temperature, grpo.beta) == (1.0, 0.04)


@pytest.mark.parametrize("kw, message", [
    ({"teacher_model": None}, "needs a teacher"),
    ({"teacher_model": None, "teacher_model_server": "http://127.0.0.1:1"}, "needs --gkd_logits_topk"),
    ({"teacher_model_server": "http://127.0.0.1:1", "gkd_logits_topk": 5}, "both given"),
    ({"lmbda": 1.5}, r"--lmbda must be in \[0, 1\]"),
    ({"beta": -0.1}, r"--beta must be in \[0, 1\]"),
    ({"gkd_logits_topk": 0}, "--gkd_logits_topk must be >= 1"),
    ({"loss_type": ["sigmoid"]}, "leave --loss_type unset"),
    ({"reward_funcs": ["format"]}, "not used by --rlhf_type gkd"),
    ({"ref_model": "x"}, "preference-training arguments"),
    ({"temperature": 0.0}, "--temperature must be > 0"),
])
def test_bad_arguments_fail_before_anything_loads(kw, message):
    with pytest.raises(ValueError, match=message):
        args(**kw)


def test_teacher_flags_are_refused_elsewhere():
    with pytest.raises(ValueError, match="--teacher_model: rollout and teacher arguments of grpo and gkd"):
        RlhfArguments(rlhf_type="dpo", model=TINY, dataset=["d"], teacher_model=TINY)
    with pytest.raises(ValueError, match="--teacher_model_server: rollout and teacher arguments of grpo and gkd"):
        RlhfArguments(rlhf_type="dpo", model=TINY, dataset=["d"], teacher_model_server=["http://127.0.0.1:1"])
    with pytest.raises(ValueError, match="--gkd_logits_topk: GKD's teacher arguments"):
        RlhfArguments(rlhf_type="dpo", model=TINY, dataset=["d"], gkd_logits_topk=4)


def test_teacher_too_large_for_the_memory_left_is_refused(tiny_resolved):
    model_bytes = checkpoint_bytes(tiny_resolved.model_dir, torch.float32)
    from swiftlike.model import load_model
    model = load_model(tiny_resolved, "float32", "cpu")
    assert model_bytes == sum(p.numel() for p in model.parameters()) * 4
    assert checkpoint_bytes(tiny_resolved.model_dir, torch.bfloat16) == model_bytes // 2
    fits_in_memory("t", 10 << 30, 20 << 30, "cpu")
    with pytest.raises(ValueError, match=r"needs about 19.0 GiB and only 20.0 GiB is free on cpu.*"
                                         r"--teacher_model_server"):
        fits_in_memory("t", 19 << 30, 20 << 30, "cpu")


# ---------------------------------------------------------------- runs on the tiny model


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("gkd") / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(path)


@pytest.fixture(scope="module")
def teacher_dir(tiny_resolved, tiny_adapter, tmp_path_factory) -> str:
    """The tiny model with a random LoRA merged in: a teacher that shares the student's tokenizer but differs."""
    from peft import PeftModel
    from swiftlike.model import load_model, load_tokenizer
    out = tmp_path_factory.mktemp("teacher") / "model"
    merged = PeftModel.from_pretrained(load_model(tiny_resolved, "float32", "cpu"), tiny_adapter).merge_and_unload()
    merged.save_pretrained(out)
    load_tokenizer(tiny_resolved).save_pretrained(out)
    return str(out)


def run_gkd(tmp_path, data_file, *extra, steps: int = 3, batch: int = 2, env: dict | None = None,
            check: bool = True) -> CliResult:
    """`swiftlike rlhf --rlhf_type gkd` in this process (`env` on top of its environment; NPROC_PER_NODE=2
    relaunches itself under torchrun)."""
    return run_cli("rlhf", "--rlhf_type", "gkd", "--model", TINY, "--dataset", data_file, "--max_steps", steps,
                   "--per_device_train_batch_size", batch, "--gradient_accumulation_steps", "1",
                   "--split_dataset_ratio", "0", "--max_completion_length", "12", "--logging_steps", "1",
                   "--report_to", "none", "--output_dir", tmp_path / "out", "--save_steps", "1000", *extra, env=env,
                   check=check)


def gkd_run(tmp_path, data_file, *extra, steps: int = 3, batch: int = 2,
            env: dict | None = None) -> tuple[list[dict], Path]:
    """A GKD run: its logged training steps and its run directory."""
    run_gkd(tmp_path, data_file, *extra, steps=steps, batch=batch, env=env)
    run_dir = next((tmp_path / "out").glob("v*-*"))
    return [e for e in read_log(run_dir) if "loss" in e], run_dir


def assert_refused(result: CliResult, message: str) -> None:
    """The run stopped with status 1 on a ValueError whose message matches `message` (the CLI's error line)."""
    assert result.returncode == 1, result.stderr[-3000:]
    error = result.stderr[result.stderr.rindex("swiftlike rlhf: error: "):]
    assert re.search(message, error), result.stderr[-3000:]


def test_lora_student_with_its_own_base_as_teacher_starts_at_zero(tmp_path, data_file):
    """--teacher_model = --model with LoRA: the teacher is the adapter-disabled student. A fresh adapter (B = 0)
    makes both the same model, so the first divergence is exactly 0; on-policy steps use the pt rollout."""
    logged, run_dir = gkd_run(tmp_path, data_file, "--teacher_model", TINY, "--tuner_type", "lora",
                              "--lmbda", "0.5", "--learning_rate", "1e-2", "--sft_alpha", "0.1", steps=4)
    assert abs(logged[0]["jsd"]) < 1e-6 and logged[0]["teacher_kl"] == 0.0
    assert all(math.isfinite(e["loss"]) for e in logged)
    assert logged[0]["loss"] == pytest.approx(logged[0]["jsd"] + 0.1 * logged[0]["sft_loss"], abs=1e-5)
    assert {e["on_policy"] for e in logged} == {0.0, 1.0}  # seeded draws: both kinds of micro-batch ran
    assert (run_dir / "images").is_dir() and any((run_dir / "images").glob("*jsd*.png"))


def test_two_processes_share_the_coin_and_the_adapter_disabled_teacher(tmp_path, data_file):
    """NPROC_PER_NODE=2 (gloo): the teacher is each rank's DDP-wrapped student with its adapter disabled, so the
    first divergence is 0 on both; both ranks draw the same on-policy coin (a step is all on-policy or all not,
    never a mix of the two in the combined metric), and training goes on from there."""
    logged, _ = gkd_run(tmp_path, data_file, "--teacher_model", TINY, "--tuner_type", "lora", "--lmbda", "0.5",
                        "--learning_rate", "1e-2", steps=4, env={"NPROC_PER_NODE": "2"})
    assert len(logged) == 4 and abs(logged[0]["jsd"]) < 1e-6
    assert all(e["on_policy"] in (0.0, 1.0) for e in logged) and {e["on_policy"] for e in logged} == {0.0, 1.0}
    assert all(math.isfinite(e["loss"]) for e in logged) and logged[-1]["jsd"] > 0


def test_bfloat16_colocated_vllm_with_top_k_top_p(tmp_path, data_file, teacher_dir):
    """At real precision: student, teacher and the colocated vLLM engine in bfloat16, sampling with --top_k 20
    --top_p 0.9, LoRA-only sync; every logged divergence, loss and grad norm is finite."""
    logged, _ = gkd_run(tmp_path, data_file, "--teacher_model", teacher_dir, "--tuner_type", "lora", "--lmbda", "1",
                        "--torch_dtype", "bfloat16", "--use_vllm", "true", "--vllm_mode", "colocate",
                        "--vllm_enable_lora", "true", "--vllm_max_model_len", "512", "--top_k", "20", "--top_p", "0.9",
                        steps=3)
    assert len(logged) == 3 and all(e["on_policy"] == 1.0 for e in logged)
    for e in logged:
        assert all(math.isfinite(e[key]) for key in ("loss", "jsd", "teacher_kl", "grad_norm")), e
        assert e["jsd"] > 0


def test_validation_scores_the_dataset_answers(tmp_path, data_file, teacher_dir):
    """A validation split is scored on its answers by the training divergence: exactly 0 against the student's
    own base before any update (the adapter-disabled teacher, learning rate 0), above 0 against another teacher;
    eval_teacher_kl beside it, and the summary's eval_loss is the last one logged."""
    common = ("--tuner_type", "lora", "--lmbda", "0", "--split_dataset_ratio", "0.5", "--eval_steps", "1")
    same, _ = gkd_eval_run(tmp_path / "same", data_file, "--teacher_model", TINY, "--learning_rate", "0", *common)
    other, result = gkd_eval_run(tmp_path / "other", data_file, "--teacher_model", teacher_dir, *common)
    assert [e["step"] for e in same] == [1, 2] and all(abs(e["eval_loss"]) < 1e-6 for e in same)
    assert all(e["eval_loss"] > 1e-4 and e["eval_teacher_kl"] > 1e-4 for e in other)
    assert result.eval_loss == other[-1]["eval_loss"]


def gkd_eval_run(tmp_path, data_file, *extra):
    argv = ["--rlhf_type", "gkd", "--model", TINY, "--dataset", data_file, "--max_steps", "2",
            "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2", "--max_completion_length", "12",
            "--logging_steps", "1", "--report_to", "none", "--output_dir", str(tmp_path / "out"), "--save_steps",
            "1000", *extra]
    result = rlhf_main(argv)
    return [e for e in read_log(result.run_dir) if "eval_loss" in e], result


def test_full_student_distils_a_different_teacher_on_a_repeated_batch(tmp_path, data_file, teacher_dir):
    logged, _ = gkd_run(tmp_path, data_file, "--teacher_model", teacher_dir, "--tuner_type", "full", "--lmbda", "0",
                        "--learning_rate", "1e-3", steps=12, batch=4)
    jsd = [e["jsd"] for e in logged]
    assert all(math.isfinite(v) for v in jsd) and jsd[0] > 0
    assert jsd[-1] < 0.5 * jsd[0], jsd
    assert all(e["on_policy"] == 0.0 for e in logged)


def test_student_samples_on_colocated_vllm_with_a_top_k_teacher(tmp_path, data_file, teacher_dir):
    logged, _ = gkd_run(tmp_path, data_file, "--teacher_model", teacher_dir, "--tuner_type", "lora", "--lmbda", "1",
                        "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_enable_lora", "true",
                        "--gkd_logits_topk", "5", "--vllm_max_model_len", "512", steps=2)
    assert [e["on_policy"] for e in logged] == [1.0, 1.0]
    assert all(math.isfinite(e["loss"]) and e["completions/mean_length"] > 0 for e in logged)
    assert "sync/bytes" in logged[0]


def test_teacher_with_another_tokenizer_is_refused(tmp_path, data_file):
    assert_refused(run_gkd(tmp_path, data_file, "--teacher_model", TINY_LLAMA, "--tuner_type", "full", steps=1,
                           check=False), "another tokenizer")


# ---------------------------------------------------------------- a served teacher


@pytest.fixture(scope="module")
def teacher_server(teacher_dir, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "deploy.log"
    proc = start(["deploy", "--model", teacher_dir, "--infer_backend", "pt", "--port", str(port),
                  "--max_logprobs", "8", "--torch_dtype", "float32"], port, log)
    yield f"http://127.0.0.1:{port}", proc
    proc.terminate()
    proc.wait(timeout=60)


def encoded_sequences(tiny_template) -> list[tuple[list[int], list[int]]]:
    from swiftlike.rl.preference.data import PreferenceEncoder
    encoder = PreferenceEncoder(tiny_template)
    return [encoder.split(r["messages"]) for r in ROWS]


def encoded_batch(tiny_template) -> PackedSequences:
    return PackedSequences.pack(encoded_sequences(tiny_template))


def test_served_teacher_gives_the_in_process_loss(teacher_server, teacher_dir, tiny_resolved, tiny_template):
    """Same batch, same top-k: the teacher in this process and the same weights behind `swiftlike deploy` give the
    same loss (fp32), and a batch is one HTTP request."""
    from transformers import AutoModelForCausalLM
    from swiftlike.model import load_model
    url, _ = teacher_server
    batch = encoded_batch(tiny_template)
    torch.manual_seed(0)
    student = load_model(tiny_resolved, "float32", "cpu")
    with torch.no_grad():
        student_logits = completion_logits(student, batch)
    local = LocalTeacher(AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32), 8, False, "cpu")
    served = ServedTeacher(url, 8, 60, tiny_template.tokenizer, student_logits.shape[-1])
    local_out = local(student, batch)
    served_out = served(student, batch)
    assert local_out.topk_ids.shape == (len(batch.predict_at), 8)
    assert torch.equal(local_out.topk_ids, served_out.topk_ids)
    for beta in (0.0, 0.5, 1.0):
        a = gkd_loss(student_logits, local_out, None, beta, 0.9)
        b = gkd_loss(student_logits, served_out, None, beta, 0.9)
        assert abs(float(a) - float(b)) < 1e-4, (beta, float(a), float(b))
    served.close()


def test_served_teacher_with_openai_client_and_limits(teacher_server, tiny_template):
    """The route a teacher client uses, through the real openai client: a batch of token-id prompts with
    prompt_logprobs; more alternatives than --max_logprobs is a 400 naming the limit."""
    import openai
    url, _ = teacher_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    out = client.completions.create(model="", prompt=prompts, max_tokens=1, temperature=0,
                                    extra_body={"prompt_logprobs": 3})
    assert len(out.choices) == 2
    first = out.choices[0].model_extra["prompt_logprobs"]
    assert first[0] is None and len(first) == 4
    assert sum(1 for v in first[1].values() if v["rank"] <= 3) == 3 and "2" in first[1]
    with pytest.raises(openai.BadRequestError, match="--max_logprobs 8"):
        client.completions.create(model="", prompt=prompts, max_tokens=1, extra_body={"prompt_logprobs": 9})
    assert httpx.get(f"{url}/health").status_code == 200


def test_gkd_run_against_a_served_teacher(tmp_path, data_file, teacher_server):
    url, _ = teacher_server
    logged, _ = gkd_run(tmp_path, data_file, "--teacher_model_server", url, "--gkd_logits_topk", "8",
                        "--tuner_type", "lora", "--lmbda", "0.5", steps=2)
    assert all(math.isfinite(e["loss"]) and e["jsd"] > 0 for e in logged)


def test_seq_kd_teacher_samples_are_the_same_on_every_placement(teacher_server, teacher_dir, tiny_resolved,
                                                                 tiny_template, tiny_adapter):
    """Greedy, the teacher's answers (stopping at the template's end of turn, or at the length cap) are the same ids
    in-process (one left-padded batch) and behind `swiftlike deploy` (one /v1/completions request); the student's
    base with its adapter disabled answers what the base model answers."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from swiftlike.model import load_model
    from swiftlike.rl.online.teacher import TeacherSampling
    url, _ = teacher_server
    prompts = [p for p, _ in encoded_sequences(tiny_template)]
    stops = tuple(tiny_template.stop_token_ids)
    greedy = TeacherSampling(12, 0.0, 1.0, -1, stops, tiny_template.tokenizer.pad_token_id or stops[0])
    student = load_model(tiny_resolved, "float32", "cpu")
    local = LocalTeacher(AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32), None, False, "cpu")
    served = ServedTeacher(url, 8, 60, tiny_template.tokenizer, student.get_output_embeddings().weight.shape[0])
    in_process = local.generate(student, prompts, greedy)
    assert in_process == served.generate(student, prompts, greedy)
    assert all(1 <= len(a) <= 12 and (len(a) == 12 or a[-1] in stops) for a in in_process)
    lora_student = PeftModel.from_pretrained(load_model(tiny_resolved, "float32", "cpu"), tiny_adapter)
    base = LocalTeacher(load_model(tiny_resolved, "float32", "cpu"), None, False, "cpu")
    assert LocalTeacher(None, None, False, "cpu").generate(lora_student, prompts, greedy) == \
        base.generate(student, prompts, greedy)
    served.close()


def test_seq_kd_trains_on_teacher_samples_without_dataset_answers(tmp_path, teacher_dir, teacher_server):
    """Prompts only (no answers, which --lmbda < 1 otherwise needs): every micro-batch is the teacher's samples,
    in-process and served; the student's own base as teacher gives a divergence of exactly 0."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": r["messages"][:1]}) + "\n" for r in ROWS))
    assert_refused(run_gkd(tmp_path / "refused", str(prompts), "--teacher_model", teacher_dir, "--lmbda", "0",
                           steps=1, check=False), "ends in a 'user' turn, not an assistant answer")
    local, _ = gkd_run(tmp_path / "local", str(prompts), "--teacher_model", teacher_dir, "--tuner_type", "full",
                       "--lmbda", "0", "--seq_kd", "true", steps=2)
    own_base, _ = gkd_run(tmp_path / "own", str(prompts), "--teacher_model", TINY, "--tuner_type", "lora",
                          "--lmbda", "0", "--seq_kd", "true", steps=1)
    url, _ = teacher_server
    served, _ = gkd_run(tmp_path / "served", str(prompts), "--teacher_model_server", url, "--gkd_logits_topk", "8",
                        "--tuner_type", "lora", "--lmbda", "0", "--seq_kd", "true", steps=2)
    for logged in (local, own_base, served):
        assert all(e["on_policy"] == 0.0 and e["timing/teacher_generate"] > 0 for e in logged)
        assert all(math.isfinite(e["loss"]) and e["completions/mean_length"] > 0 for e in logged)
    assert all(e["jsd"] > 0 for e in local + served) and abs(own_base[0]["jsd"]) < 1e-6


def test_served_teacher_refuses_another_tokenizer_and_reports_a_dead_server(teacher_server, tiny_template):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    url, _ = teacher_server
    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(["a tiny corpus for another tokenizer"] * 10,
                            trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    other = PreTrainedTokenizerFast(tokenizer_object=raw)
    with pytest.raises(ValueError, match="another tokenizer"):
        ServedTeacher(url, 8, 30, other, 60)

    # a server that dies after the client connected: the teacher server behind a proxy of this process, closed
    # (its port refuses connections from then on, as a killed server's does)
    doomed = FaultyProxy(url)
    served = ServedTeacher(doomed.url, 8, 30, tiny_template.tokenizer, 10**6)
    doomed.close()
    batch = encoded_batch(tiny_template)
    started = time.time()
    with pytest.raises(RuntimeError, match="not reachable"):
        served(None, batch)
    assert time.time() - started < 10


def test_vllm_prompt_logprobs_match_the_pt_engine(vllm_tiny, pt_tiny):
    """The served teacher's numbers from either backend: vLLM's prompt log-probs agree with the pt engine's."""
    from swiftlike.infer.protocol import InferRequest, RequestConfig
    config = RequestConfig(max_tokens=1, temperature=0, prompt_logprobs=5)
    request = [InferRequest(input_ids=[11, 220, 5, 90, 31, 7])]
    v = vllm_tiny.infer(request, config)[0].prompt_logprobs
    p = pt_tiny.infer(request, config)[0].prompt_logprobs
    assert v[0] is None and p[0] is None and len(v) == len(p) == 6
    for a, b in zip(v[1:], p[1:]):
        assert a.token_id == b.token_id and abs(a.logprob - b.logprob) < 1e-3 and a.rank == b.rank
        assert [x.token_id for x in a.top_logprobs] == [x.token_id for x in b.top_logprobs]


def test_cli_reports_bad_input_with_exit_status_2(data_file):
    result = run_cli("rlhf", "--rlhf_type", "gkd", "--model", TINY, "--teacher_model", TINY, "--dataset", data_file,
                     "--lmbda", "2", check=False)
    assert result.returncode == 2 and "--lmbda must be in [0, 1]" in result.stderr


def test_packed_batch_gives_the_padded_batch_logits(tiny_resolved, tiny_template):
    """Sequences packed end to end without padding (attention kept inside each by the restarting position ids)
    give the logits a right-padded batch gives at every completion token, and the LM head runs only there."""
    from swiftlike.model import load_model
    model = load_model(tiny_resolved, "float32", "cpu").eval()
    sequences = encoded_sequences(tiny_template)
    assert len({len(p) for p, _ in sequences}) > 1 and len({len(p) + len(a) for p, a in sequences}) > 1
    width = max(len(p) + len(a) for p, a in sequences)
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    attention = torch.zeros_like(ids)
    completion = torch.zeros(len(sequences), width - 1, dtype=torch.bool)
    for i, (prompt, answer) in enumerate(sequences):
        ids[i, :len(prompt) + len(answer)] = torch.tensor(prompt + answer)
        attention[i, :len(prompt) + len(answer)] = 1
        completion[i, len(prompt) - 1:len(prompt) + len(answer) - 1] = True
    batch = PackedSequences.pack(sequences)
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=attention).logits[:, :-1][completion]
        packed = completion_logits(model, batch)
    assert packed.shape == padded.shape == (sum(len(a) for _, a in sequences), padded.shape[-1])
    assert torch.allclose(packed, padded, atol=1e-5), float((packed - padded).abs().max())
    assert batch.targets.tolist() == [t for _, answer in sequences for t in answer]
    assert batch.sequences() == [p + a for p, a in sequences]


def test_server_mode_student_rollouts_with_the_rollout_server_as_teacher(tmp_path, data_file, rollout_server):
    """`--vllm_mode server`: the student samples on a `swiftlike rollout` server (the session's) and syncs only its
    LoRA adapter there, and the same server, asked without the adapter, is the teacher (the base model's top-k
    prompt log-probs): both of the rollout server's roles in one run."""
    port = rollout_server
    logged, _ = gkd_run(tmp_path, data_file, "--tuner_type", "lora", "--lmbda", "1", "--use_vllm", "true",
                        "--vllm_mode", "server", "--vllm_server_port", str(port), "--vllm_enable_lora", "true",
                        "--teacher_model_server", f"http://127.0.0.1:{port}", "--gkd_logits_topk", "8",
                        "--learning_rate", "1e-2", steps=3)
    assert [e["on_policy"] for e in logged] == [1.0, 1.0, 1.0]
    assert abs(logged[0]["jsd"]) < 1e-5  # a fresh adapter: the student is still the served base model
    assert all(math.isfinite(e["loss"]) and "sync/bytes" in e for e in logged)
