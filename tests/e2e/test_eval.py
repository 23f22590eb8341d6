"""`swiftlike eval`: scoring functions on hand-made cases, benchmark files, and end-to-end runs in-process and
against a running `swiftlike deploy`."""
import json

import pytest
from cli import run_cli
from model_ids import TINY

from swiftlike.eval.data import BUILTIN, load_benchmark
from swiftlike.eval.scoring import extract_choice, extract_final, pass_at_k, qa_correct
from swiftlike.eval.served import serving


def test_extraction_and_equivalence():
    assert extract_final("3 + 4 = 7, so\n#### 7\nDone") == "7"
    assert extract_final("the result is \\boxed{12}") == "12"
    assert extract_final("first 3, then 1,250 apples") == "1250"
    assert extract_final("no numbers") is None
    assert qa_correct("#### 0.5", "1/2") and qa_correct("#### 1,234", "1234") and not qa_correct("#### 8", "7")
    assert extract_choice("The answer is (C).", 4) == "C"
    assert extract_choice("Answer: b", 4) == "B"
    assert extract_choice("B. 28", 4) == "B"
    assert extract_choice("I pick E", 4) is None


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(3, 0, 3) == 0.0 and pass_at_k(3, 1, 3) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_benchmark_files(tmp_path):
    assert {n: len(load_benchmark(n)) for n in BUILTIN} == {"math": 200, "mcq": 200}
    mcq = load_benchmark("mcq", limit=3)
    assert len(mcq) == 3 and mcq[0].kind == "mcq" and "\nA. " in mcq[0].prompt
    custom = tmp_path / "mine.jsonl"
    custom.write_text(json.dumps({"question": "2+2?", "answer": 4}) + "\n"
                      + json.dumps({"question": "Sky?", "choices": ["red", "blue"], "answer": "b"}) + "\n")
    qa, choice = load_benchmark(str(custom))
    assert (qa.kind, qa.answer, choice.kind, choice.answer) == ("qa", "4", "mcq", "B")
    custom.write_text(json.dumps({"question": "x", "choices": ["a", "b"], "answer": "C"}) + "\n")
    with pytest.raises(ValueError, match="must be one of AB"):
        load_benchmark(str(custom))
    with pytest.raises(ValueError, match="not a built-in benchmark"):
        load_benchmark("nope")


def run_eval(tmp_path, *argv):
    out = tmp_path / "eval"
    run_cli("eval", *argv, "--eval_output_dir", out, "--torch_dtype", "float32")
    run_dir = next(out.iterdir())
    predictions = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "report.json").read_text()), predictions, (run_dir / "report.md").read_text()


def test_eval_in_process_and_through_deploy_agree(tmp_path, vllm_tiny):
    """`swiftlike eval --model` on its own vLLM engine, and `--eval_url` against deploy's OpenAI app over the
    session's vLLM engine of the same model (the `swiftlike deploy` process itself: test_deploy.py)."""
    local, local_preds, md = run_eval(tmp_path / "local", "--model", TINY, "--infer_backend", "vllm",
                                      "--eval_dataset", "math", "mcq", "--eval_limit", "6", "--max_new_tokens", "24",
                                      "--vllm_max_model_len", "1024")
    assert set(local["benchmarks"]) == {"math", "mcq"} and local["benchmarks"]["math"]["questions"] == 6
    assert "| math | accuracy | 6 | 1 |" in md and len(local_preds) == 12
    with serving(vllm_tiny, 24, 4) as url:
        remote, remote_preds, _ = run_eval(tmp_path / "remote", "--eval_url", url, "--eval_dataset", "math", "mcq",
                                           "--eval_limit", "6", "--max_new_tokens", "24")
    assert remote["model"] == TINY and remote["source"].startswith("http://")
    for name in ("math", "mcq"):
        assert remote["benchmarks"][name]["accuracy"] == local["benchmarks"][name]["accuracy"]
    # greedy on the same engine: the very same replies, in-process or over HTTP
    assert [p["reply"] for p in remote_preds] == [p["reply"] for p in local_preds]


def test_eval_pass_at_k_with_samples(tmp_path):
    report, predictions, md = run_eval(tmp_path, "--model", TINY, "--eval_dataset", "mcq", "--eval_limit", "4",
                                       "--eval_num_samples", "3", "--temperature", "1.0", "--max_new_tokens", "8")
    result = report["benchmarks"]["mcq"]
    assert result["samples_per_question"] == 3 and len(predictions) == 12
    assert result["pass@3"] >= result["accuracy"] and "pass@3" in md
