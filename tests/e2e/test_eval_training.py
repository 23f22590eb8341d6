"""Benchmarks during training (--eval_use_evalscope) and over a run's checkpoints (--eval_all_checkpoints), on the
tiny model with the swiftlike backend: the live model served in-process must answer exactly as its saved
checkpoint does when `swiftlike eval` loads it, which fails if the callback scored stale or base weights."""
import json
from pathlib import Path

from model_ids import TINY

from swiftlike import eval_main, rlhf_main, sft_main
from swiftlike.train.outputs import read_log

BENCH = ["--eval_use_evalscope", "true", "--eval_dataset", "math", "rg:basic_arithmetic", "--eval_limit", "3",
         "--eval_generation_config", '{"max_tokens": 8}']


def sft_rows(path: Path) -> str:
    rows = [{"messages": [{"role": "user", "content": f"What is {a} + {a}?"},
                          {"role": "assistant", "content": f"#### {2 * a}"}]} for a in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def replies(report_dir: Path) -> list[str]:
    lines = (report_dir / "predictions.jsonl").read_text().splitlines()
    return [json.loads(line)["reply"] for line in lines]


def test_sft_logs_benchmarks_of_the_live_model_equal_to_its_checkpoints(tmp_path):
    result = sft_main(["--model", TINY, "--dataset", sft_rows(tmp_path / "d.jsonl"), "--max_steps", "4",
                       "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
                       "--learning_rate", "5e-2", "--save_steps", "2", "--eval_steps", "2", "--logging_steps", "1",
                       "--torch_dtype", "float32", "--report_to", "none", "--output_dir", str(tmp_path / "out"),
                       *BENCH])
    logged = [e for e in read_log(result.run_dir) if "eval_bench/math/accuracy" in e]
    assert [e["step"] for e in logged] == [2, 4]
    assert "eval_bench/rg:basic_arithmetic/accuracy" in logged[0]
    assert "eval_bench/math/accuracy" in result.metrics and (result.run_dir / "images").is_dir()
    assert any(p.name.startswith("eval_bench_math") for p in (result.run_dir / "images").iterdir())
    live = {step: replies(result.run_dir / "eval_bench" / f"step-{step}") for step in (2, 4)}

    report = eval_main(["--eval_all_checkpoints", str(result.run_dir), "--eval_dataset", "math",
                        "rg:basic_arithmetic", "--eval_limit", "3", "--max_new_tokens", "8",
                        "--torch_dtype", "float32", "--eval_output_dir", str(tmp_path / "all")])
    assert [row["step"] for row in report["steps"]] == [0, 2, 4]
    out = Path(report["output_dir"])
    assert (out / "accuracy_over_checkpoints.png").stat().st_size > 0 and "| 4 | checkpoint-4 |" in \
        (out / "report.md").read_text()
    saved = {step: replies(next((out / f"step-{step}").iterdir())) for step in (0, 2, 4)}
    assert saved[2] == live[2] and saved[4] == live[4]
    assert saved[0] != saved[4]  # training moved the answers, so the equality above is not the base model's


def test_grpo_and_gkd_log_benchmarks_at_their_eval_steps(tmp_path):
    common = ["--model", TINY, "--max_steps", "2", "--per_device_train_batch_size", "2",
              "--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--logging_steps", "1",
              "--eval_steps", "1", "--save_steps", "100", "--torch_dtype", "float32", "--report_to", "none",
              "--eval_use_evalscope", "true", "--eval_dataset", "math", "--eval_limit", "2",
              "--eval_generation_config", '{"max_tokens": 4}']
    grpo = rlhf_main(["--rlhf_type", "grpo", "--dataset", "swiftlike/arithmetic#4", "--reward_funcs", "format",
                      "--num_generations", "2", "--output_dir", str(tmp_path / "grpo"), *common])
    gkd = rlhf_main(["--rlhf_type", "gkd", "--teacher_model", TINY, "--dataset", sft_rows(tmp_path / "d.jsonl"),
                     "--output_dir", str(tmp_path / "gkd"), *common])
    for result in (grpo, gkd):
        steps = [e["step"] for e in read_log(result.run_dir) if "eval_bench/math/accuracy" in e]
        assert steps == [1, 2], steps
        assert sorted(p.name for p in (result.run_dir / "eval_bench").iterdir()) == ["step-1", "step-2"]
