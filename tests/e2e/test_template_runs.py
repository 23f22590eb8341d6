"""An unregistered chat model trained and served, moved from tests/unit/template/test_tokenizer_template.py (issue 51:
the unit tier trains nothing): a 2-step LoRA sft of the tiny random Mistral whose tokenizer carries Zephyr's chat
template (tests/helpers/tiny_mistral.py), then `swiftlike infer` from its checkpoint, in-process (tests/helpers/cli.py).
"""
import json

import pytest
from cli import run_cli
from tiny_mistral import ZEPHYR, save_tiny_mistral

FAST = ["--report_to", "none", "--gradient_checkpointing", "false", "--gradient_accumulation_steps", "1"]


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory):
    return save_tiny_mistral(tmp_path_factory.mktemp("tiny-mistral"), ZEPHYR)


def test_sft_then_infer_on_the_unregistered_model(mistral_dir, tmp_path):
    """A 2-step LoRA sft, then `swiftlike infer` from its checkpoint (template `tokenizer` from args.json)."""
    from swiftlike import sft_main
    result = sft_main(["--model", str(mistral_dir), "--dataset", "swiftlike/alpaca-mini#8", "--max_steps", "2",
                       "--output_dir", str(tmp_path / "out"), "--logging_steps", "1", *FAST])
    assert result.global_step == 2 and result.train_loss is not None
    saved = json.loads((result.run_dir / "args.json").read_text())
    assert (saved["model_type"], saved["template"]) == ("mistral", "tokenizer")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"query": "Say hi."}) + "\n")
    out = tmp_path / "answers.jsonl"
    run = run_cli("infer", "--adapters", result.last_checkpoint, "--val_dataset", questions, "--result_path", out,
                  "--max_new_tokens", "4", "--temperature", "0")
    assert "model type 'mistral' is not registered" in run.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["usage"]["completion_tokens"] >= 1
