"""sft / pt / export end to end on the tiny model: real Trainer, real checkpoints, real engines."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli import BASE_ENV, run_cli
from model_ids import SMOLLM2, TINY

from swiftlike import pt_main, sft_main
from swiftlike.train.outputs import read_log

FAST = ["--report_to", "none", "--gradient_checkpointing", "false", "--gradient_accumulation_steps", "1",
        "--logging_steps", "1"]


def strs(*argv) -> list[str]:
    return [str(a) for a in argv]


def losses(run_dir):
    return {e["step"]: e["loss"] for e in read_log(run_dir) if "loss" in e}


def mean(xs):
    return sum(xs) / len(xs)


def assert_loss_falls(run_dir):
    curve = [v for _, v in sorted(losses(run_dir).items())]
    assert len(curve) >= 6, curve
    assert mean(curve[-3:]) < mean(curve[:3]) * 0.8, curve


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lora")
    return sft_main(strs("--model", TINY, "--dataset", "swiftlike/alpaca-mini#8", "--output_dir", out,
                         "--max_steps", 12, "--save_steps", 6, "--per_device_train_batch_size", 4,
                         "--learning_rate", 5e-3, "--lora_rank", 8, *FAST))


def test_lora_sft_lowers_loss_and_lays_out_the_run(lora_run):
    run_dir = lora_run.run_dir
    assert run_dir.name.startswith("v0-") and len(run_dir.name) == len("v0-20261129-120000")
    assert_loss_falls(run_dir)
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-6"]
    assert not (run_dir / ".staging").exists()
    ckpt = run_dir / "checkpoint-12"
    for name in ("adapter_model.safetensors", "adapter_config.json", "args.json", "optimizer.pt", "scheduler.pt",
                 "rng_state.pth", "trainer_state.json", "tokenizer.json"):
        assert (ckpt / name).is_file(), name
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved["model"] == TINY and saved["template"] == "qwen2_5" and saved["tuner_type"] == "lora"
    for png in ("train_loss.png", "train_learning_rate.png", "train_grad_norm.png"):
        assert (run_dir / "images" / png).stat().st_size > 1000
    assert lora_run.last_checkpoint == ckpt and lora_run.global_step == 12
    assert lora_run.train_tokens_per_second and lora_run.train_tokens_per_second > 0
    assert "best checkpoint" in lora_run.summary()


def test_full_sft_with_validation_lowers_loss(tmp_path):
    result = sft_main(strs("--model", TINY, "--tuner_type", "full", "--dataset", "swiftlike/alpaca-mini#12",
                           "--split_dataset_ratio", 0.25, "--output_dir", tmp_path, "--max_steps", 12,
                           "--save_steps", 6, "--per_device_train_batch_size", 3, "--learning_rate", 1e-3, *FAST))
    assert_loss_falls(result.run_dir)
    evals = [e["eval_loss"] for e in read_log(result.run_dir) if "eval_loss" in e]
    assert len(evals) == 2 and evals[1] < evals[0]
    assert result.best_checkpoint is not None and result.best_checkpoint.parent == result.run_dir
    assert (result.run_dir / "images" / "eval_loss.png").is_file()
    ckpt = result.run_dir / "checkpoint-12"
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "config.json").is_file()


def test_pt_on_plain_text_and_packing(tmp_path):
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps({"text": f"Paragraph {i}: the quick brown fox jumps over the lazy dog "
                                                f"{'again ' * (i % 5)}and rests."}) + "\n" for i in range(24)))
    result = pt_main(strs("--model", TINY, "--dataset", data, "--output_dir", tmp_path / "out",
                          "--max_steps", 8, "--save_steps", 8, "--per_device_train_batch_size", 2,
                          "--packing", "true", "--max_length", 64, "--learning_rate", 5e-3, "--profile_step", 3,
                          *FAST))
    assert result.data.kept == 24 and result.global_step == 8
    profile = json.loads((result.run_dir / "profile-step3.json").read_text())  # --profile_step: one step's operators
    names = [row["operator"] for row in profile["operators"]]
    assert profile["step"] == 3 and profile["wall_seconds"] > 0
    # forward and backward matmuls: among the step's largest self times (on a tiny model an AVX-512 CPU runs them
    # about as fast as the elementwise ops, so which one leads depends on the CPU)
    assert "aten::mm" in names[:3], names[:5]
    assert any("Optimizer.step" in name for name in names), names  # and the optimizer: the whole step
    assert (result.run_dir / "profile-step3.txt").read_text().startswith("profile of optimizer step 3")
    assert json.loads((result.run_dir / "args.json").read_text())["command"] == "pt"
    assert_loss_falls(result.run_dir)


def test_too_long_samples_are_counted_in_the_log(tmp_path, caplog):
    import logging
    with caplog.at_level(logging.INFO, logger="swiftlike.train"):
        result = sft_main(strs("--model", TINY, "--dataset", "swiftlike/alpaca-mini", "--output_dir", tmp_path,
                               "--max_steps", 1, "--max_length", 60, *FAST))
    assert result.data.dropped_too_long > 0
    assert f"{result.data.dropped_too_long} longer than --max_length 60 dropped" in caplog.text


def test_bad_row_and_bad_adapter_are_clear_errors(tmp_path, lora_run):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "a", "response": "b"}\n{"query": "c"}\n')
    result = run_cli("sft", "--model", TINY, "--dataset", bad, "--output_dir", tmp_path, check=False)
    assert result.returncode == 1
    assert "bad.jsonl line 2: missing field 'response'" in result.stderr
    not_adapter = lora_run.run_dir / "images"
    result = run_cli("export", "--adapters", not_adapter, "--merge_lora", "true", "--model", TINY, check=False)
    assert result.returncode == 2 and "not a LoRA adapter (no adapter_config.json" in result.stderr


def test_sigkill_during_save_then_resume_matches_uninterrupted_run(tmp_path):
    """Kill -9 while a checkpoint is being written; every checkpoint left is complete, and
    resuming from the newest one reproduces the loss curve of a run that was never stopped. The killed run is a
    process of its own (the kill is what is under test); the others run in this one."""
    common = ["--model", TINY, "--dataset", "swiftlike/alpaca-mini#16", "--max_steps", 8, "--save_steps", 1,
              "--per_device_train_batch_size", 2, "--learning_rate", 3e-3, "--lora_dropout", 0.2, *FAST]
    reference = sft_main(strs(*common, "--output_dir", tmp_path / "reference"))
    killed_dir = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "swiftlike.cli.main", "sft", *map(str, common),
                             "--output_dir", str(killed_dir)], env={**os.environ, **BASE_ENV},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    caught = None
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        staged = list(killed_dir.glob("v0-*/.staging/checkpoint-*"))
        if staged and int(staged[0].name.split("-")[1]) >= 3:
            proc.send_signal(signal.SIGKILL)
            caught = staged[0]
            break
        time.sleep(0.001)
    proc.wait()
    assert caught is not None, "the run ended before a save could be interrupted"
    run_dir = caught.parent.parent
    published = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert published and int(published[-1].name.split("-")[1]) < int(caught.name.split("-")[1])
    for ckpt in published:
        for name in ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                     "trainer_state.json", "args.json"):
            assert (ckpt / name).is_file(), (ckpt, name)
    partial = run_cli("sft", "--resume_from_checkpoint", caught, "--dataset", "swiftlike/alpaca-mini#16",
                      check=False)
    assert partial.returncode != 0 and "unfinished save" in partial.stderr

    last = published[-1]
    resumed = run_cli("sft", "--resume_from_checkpoint", last)  # arguments and output_dir come from the run
    assert "training finished" in resumed.stdout
    resumed_dir = max(killed_dir.glob("v1-*"))
    expected, got = losses(reference.run_dir), losses(resumed_dir)
    assert sorted(got) == sorted(expected)  # history up to the checkpoint is carried over
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=1e-4, abs=1e-5), step


def test_two_process_torchrun_on_cpu(tmp_path):
    """The relaunch under torchrun, seen from outside: a process of its own."""
    result = run_cli("sft", "--model", TINY, "--dataset", "swiftlike/alpaca-mini#16", "--output_dir", tmp_path,
                     "--max_steps", 3, "--save_steps", 3, "--per_device_train_batch_size", 2, *FAST,
                     env={"NPROC_PER_NODE": "2", "OMP_NUM_THREADS": "1"}, in_process=False)
    assert "torch.distributed.run" in result.stderr and "training finished" in result.stdout
    (run_dir,) = tmp_path.glob("v0-*")
    ckpt = run_dir / "checkpoint-3"
    assert (ckpt / "rng_state_0.pth").is_file() and (ckpt / "rng_state_1.pth").is_file()
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["global_step"] == 3 and state["train_batch_size"] == 2
    # Each step consumed 2 processes x 2 samples, so 3 steps covered 12 of the 16 samples.
    assert state["log_history"][-1]["epoch"] == pytest.approx(0.75)


def test_merged_model_matches_adapter_inference_pt_and_vllm(lora_run, tmp_path, tiny_resolved, tiny_template,
                                                             vllm_tiny):
    from swiftlike.infer import InferRequest, RequestConfig
    from swiftlike.infer.engine.pt_engine import PtEngine
    from swiftlike.infer.engine.vllm_engine import VllmEngine, VllmOptions
    from swiftlike.model import resolve_model

    ckpt = lora_run.last_checkpoint
    out = run_cli("export", "--adapters", ckpt, "--merge_lora", "true")  # model and template from args.json
    merged = ckpt.parent / f"{ckpt.name}-merged"
    assert str(merged) in out.stdout and (merged / "model.safetensors").is_file()
    assert json.loads((merged / "args.json").read_text())["template"] == "qwen2_5"

    questions = ["Name a planet.", "What is 3 + 4?", "Tell me about rivers."]
    config = RequestConfig(max_tokens=12, temperature=0)

    def ids(engine, adapter=None):
        reqs = [InferRequest(messages=[{"role": "user", "content": q}], adapter=adapter) for q in questions]
        return [r.choices[0].token_ids for r in engine.infer(reqs, config)]

    merged_resolved = resolve_model(str(merged))
    pt_adapter = ids(PtEngine(tiny_resolved, tiny_template, "float32", adapters={"trained": str(ckpt)}), "trained")
    pt_merged = ids(PtEngine(merged_resolved, tiny_template, "float32"))
    assert pt_adapter == pt_merged
    assert pt_adapter != ids(PtEngine(tiny_resolved, tiny_template, "float32"))  # training changed the answers

    vllm_tiny.add_adapter("trained", str(ckpt))
    vllm_adapter = ids(vllm_tiny, "trained")
    engine = VllmEngine(merged_resolved, tiny_template, VllmOptions(torch_dtype="float32", max_model_len=512))
    try:
        vllm_merged = ids(engine)
    finally:
        engine.close()
    assert vllm_adapter == vllm_merged == pt_merged


def test_infer_reads_model_and_template_from_checkpoint(lora_run, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"query": "Name a planet."}) + "\n")
    result_path = tmp_path / "answers.jsonl"
    out = run_cli("infer", "--adapters", lora_run.last_checkpoint, "--val_dataset", questions, "--result_path",
                  result_path, "--max_new_tokens", 4)
    assert "tiny-random/qwen2_5" in out.stderr and "template qwen2_5" in out.stderr
    assert len(result_path.read_text().splitlines()) == 1


def test_smollm2_lora_self_cognition_end_to_end(tmp_path):
    """The ms-swift self-cognition recipe on the real SmolLM2: after LoRA training, the model names itself."""
    out = run_cli("sft", "--model", SMOLLM2, "--dataset", "swiftlike/self-cognition",
                  "--model_name", "Swifty", "--model_author", "Lark Labs", "--output_dir", tmp_path / "out",
                  "--num_train_epochs", 1, "--per_device_train_batch_size", 8, "--learning_rate", 2e-3,
                  "--gradient_accumulation_steps", 1, "--gradient_checkpointing", "false", "--report_to", "none",
                  "--logging_steps", 4)
    (checkpoint,) = (tmp_path / "out").glob("v0-*/checkpoint-12")
    assert str(checkpoint) in out.stdout
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"query": "who are you?"}) + "\n")
    answers = tmp_path / "answers.jsonl"
    run_cli("infer", "--adapters", checkpoint, "--val_dataset", questions, "--result_path", answers,
            "--max_new_tokens", 40)
    response = json.loads(answers.read_text())["response"]
    assert "Swifty" in response, response


def test_two_runs_in_one_process_each_write_their_own_tensorboard_dir(tmp_path):
    """--logging_dir of one run must not become the next run's TensorBoard directory (no process-wide setting)."""
    pytest.importorskip("tensorboard")
    common = ["--model", TINY, "--dataset", "swiftlike/alpaca-mini#4", "--max_steps", 2, "--save_steps", 2,
              "--per_device_train_batch_size", 2, "--report_to", "tensorboard", "--gradient_checkpointing", "false",
              "--gradient_accumulation_steps", "1", "--logging_steps", "1"]
    chosen = tmp_path / "tb"
    first = sft_main(strs(*common, "--output_dir", tmp_path / "a", "--logging_dir", chosen))
    second = sft_main(strs(*common, "--output_dir", tmp_path / "b"))
    events = lambda root: sorted(p.relative_to(tmp_path) for p in root.rglob("events.out.tfevents.*"))  # noqa: E731
    assert len(events(chosen)) == 1, f"--logging_dir {chosen} should hold the first run's curves only: {events(chosen)}"
    assert not events(first.run_dir), "the first run's curves go to its --logging_dir, not its run directory"
    assert len(events(second.run_dir / "runs")) == 1, "the second run's curves belong under its own run directory"
    assert "TENSORBOARD_LOGGING_DIR" not in os.environ


def test_failed_torchrun_workers_end_with_one_line_not_the_launchers_traceback(tmp_path):
    """The workers print their own errors; the launcher adds one line naming torchrun's status, not a traceback of
    its own frames that would bury theirs (a plain RuntimeError printed one before the CLI's usage-error rule).
    The launcher's whole output, as a user sees it: a process of its own."""
    result = run_cli("sft", "--model", TINY, "--dataset", tmp_path / "missing.jsonl", "--max_steps", "1",
                     "--output_dir", tmp_path / "out", env={"NPROC_PER_NODE": "2"}, check=False, in_process=False)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == "swiftlike sft: error: torchrun exited with status 1; see the worker output above"
    assert "missing.jsonl" in result.stderr  # the workers' own message
    assert "launch.py" not in result.stderr  # no frame of the launcher
