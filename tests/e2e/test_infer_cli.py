"""`swiftlike infer` end to end through the real CLI, on the pt and vLLM engines."""
import json
import os
import subprocess
import sys
from pathlib import Path

from cli import run_cli
from model_ids import SMOLLM2, TINY

SWIFTLIKE = str(Path(sys.executable).parent / "swiftlike")  # the console script pip installs
QUESTIONS = [("What is 12 + 7?", "19"), ("What is 3 * 4?", "12"), ("Say hello.", None)]


def write_dataset(path: Path) -> Path:
    with path.open("w") as f:
        for q, a in QUESTIONS:
            row = {"messages": [{"role": "user", "content": q}] + ([{"role": "assistant", "content": a}] if a else [])}
            f.write(json.dumps(row) + "\n")
    return path


def run(*argv, stdin=None):
    return run_cli("infer", *argv, stdin=stdin, check=False)


def batch(model, backend, tmp_path, *extra):
    data = write_dataset(tmp_path / "val.jsonl")
    out = tmp_path / f"out-{backend}.jsonl"
    r = run("--model", model, "--infer_backend", backend, "--val_dataset", str(data), "--result_path", str(out),
            "--temperature", "0", "--max_new_tokens", "16", "--logprobs", "true", *extra)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tokens/s" in r.stdout and str(out) in r.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(QUESTIONS)
    return rows


def compare(rows_pt, rows_vllm):
    for a, b in zip(rows_pt, rows_vllm):
        assert a["response"] == b["response"]
        ta, tb = a["logprobs"][0], b["logprobs"][0]
        assert [t["token_id"] for t in ta] == [t["token_id"] for t in tb]
        assert max(abs(x["logprob"] - y["logprob"]) for x, y in zip(ta, tb)) < 1e-3


def test_batch_infer_tiny_pt_and_vllm_agree(tmp_path):
    rows_pt = batch(TINY, "pt", tmp_path)
    rows_vllm = batch(TINY, "vllm", tmp_path)
    compare(rows_pt, rows_vllm)
    assert rows_pt[0]["labels"] == "19" and rows_pt[2]["labels"] is None
    assert rows_pt[0]["messages"][-1]["role"] == "assistant"


def test_interactive_chat_on_stdin():
    r = run("--model", TINY, "--max_new_tokens", "8", "--stream", "true", stdin="hello\nclear\nhow are you?\nexit\n")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count(">>> ") == 2 and "(history cleared)" in r.stdout


def test_bad_inputs_exit_with_clear_messages(tmp_path):
    # through the installed `swiftlike` script itself, once: the entry point users run
    r = subprocess.run([SWIFTLIKE, "infer", "--model", TINY, "--val_dataset", str(tmp_path / "missing.jsonl")],
                       capture_output=True, text=True, env=dict(os.environ, SWIFTLIKE_OFFLINE="1"), timeout=600)
    assert r.returncode != 0 and "missing.jsonl" in r.stderr
    r = run("--model", TINY, "--adapters", str(tmp_path))
    assert r.returncode != 0 and "not a LoRA adapter" in r.stderr


def test_smollm2_offline_pt_and_vllm_agree(tmp_path):
    """The real SmolLM2-135M-Instruct (dequantized GGUF), greedy, no network: both engines agree."""
    rows_pt = batch(SMOLLM2, "pt", tmp_path)
    rows_vllm = batch(SMOLLM2, "vllm", tmp_path)
    compare(rows_pt, rows_vllm)
    assert any(c.isalpha() for c in rows_vllm[2]["response"])
