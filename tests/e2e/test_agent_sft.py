"""SFT on tool traces, through the CLI's own entry points: --agent_template, the tokenizer's tool template, and
the flags that are not built yet exiting 3."""
import json
import math
import shutil
from pathlib import Path

import pytest
import trl
from cli import run_cli
from model_ids import TINY

from swiftlike.arguments import parse_args
from swiftlike.arguments.infer_args import InferArguments
from swiftlike.arguments.rlhf_args import RlhfArguments
from swiftlike.arguments.train_args import TrainArguments
from swiftlike.model import load_tokenizer, resolve_model
from swiftlike.template import get_template
from swiftlike.utils.errors import NotBuiltError

FAST = ["--report_to", "none", "--gradient_checkpointing", "false", "--gradient_accumulation_steps", "1",
        "--logging_steps", "1", "--save_steps", "100", "--max_steps", "2"]


def sft(tmp_path, *argv):
    from swiftlike import sft_main
    return sft_main(["--output_dir", str(tmp_path / "out"), *FAST, *argv])


def test_sft_trains_on_tool_traces_with_hermes(tmp_path):
    result = sft(tmp_path, "--model", TINY, "--dataset", "swiftlike/calculator-agent#32", "--agent_template", "hermes")
    assert result.global_step == 2 and math.isfinite(result.train_loss)
    assert result.data.kept == 32
    saved = json.loads((result.run_dir / "args.json").read_text())
    assert saved["agent_template"] == "hermes" and saved["dataset"] == ["swiftlike/calculator-agent#32"]


@pytest.fixture(scope="module")
def qwen2_5_with_tool_template(tmp_path_factory):
    """The tiny model with Qwen2.5's real chat template (which renders tools) as its tokenizer's template."""
    target = tmp_path_factory.mktemp("qwen2_5_tools") / "model"
    shutil.copytree(resolve_model(TINY).model_dir, target)
    tokenizer = load_tokenizer(resolve_model(str(target)))
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    tokenizer.save_pretrained(target)
    return target


def test_sft_with_the_tokenizers_own_tool_template(tmp_path, qwen2_5_with_tool_template):
    """--template tokenizer, no --agent_template: the tokenizer renders the tools; the encoded samples are the
    ones hermes on the registered qwen2_5 template gives."""
    from swiftlike.dataset import load_dataset
    model = str(qwen2_5_with_tool_template)
    result = sft(tmp_path, "--model", model, "--template", "tokenizer", "--dataset", "swiftlike/calculator-agent#8")
    assert result.global_step == 2 and math.isfinite(result.train_loss) and result.data.kept == 8
    tokenizer = load_tokenizer(resolve_model(model))
    native, hermes = get_template("tokenizer", tokenizer), get_template("qwen2_5", tokenizer)
    assert native.native_tools
    for row in load_dataset(["swiftlike/calculator-agent#8"]):
        ours, theirs = hermes.encode(row["messages"], tools=row["tools"]), native.encode(row["messages"],
                                                                                          tools=row["tools"])
        assert (theirs.input_ids, theirs.labels) == (ours.input_ids, ours.labels)


def test_rows_with_tools_on_a_template_without_agent_template_fail_before_training(tmp_path):
    with pytest.raises(ValueError, match="training row 1|has no agent template.*--agent_template"):
        sft(tmp_path, "--model", TINY, "--template", "chatml", "--dataset", "swiftlike/calculator-agent#4")


def test_agent_template_flag_is_checked_where_it_is_declared():
    data = ["--model", TINY, "--dataset", "swiftlike/calculator-agent#2"]
    assert parse_args(TrainArguments, [*data, "--agent_template", "react_en"]).agent_template == "react_en"
    assert parse_args(TrainArguments, data).agent_template is None
    assert parse_args(InferArguments, ["--model", TINY, "--agent_template", "hermes"]).agent_template == "hermes"
    with pytest.raises(NotBuiltError, match="--agent_template with swiftlike rlhf: not built"):
        parse_args(RlhfArguments, ["--rlhf_type", "dpo", *data, "--agent_template", "hermes"])


def test_cli_exit_statuses():
    not_built = run_cli("rlhf", "--rlhf_type", "dpo", "--model", TINY, "--dataset",
                        "swiftlike/arithmetic-preference#2", "--agent_template", "hermes", check=False)
    assert not_built.returncode == 3 and "not built" in not_built.stderr
    loss_scale = run_cli("sft", "--model", TINY, "--dataset", "swiftlike/calculator-agent#2", "--loss_scale", "hermes",
                         check=False)
    assert loss_scale.returncode == 3
    assert "'hermes' (weight 2 on <tool_call> blocks) needs per-token loss weights" in loss_scale.stderr
    usage = run_cli("sft", "--model", TINY, "--dataset", "swiftlike/calculator-agent#2", "--agent_template", "nope",
                    check=False)
    assert usage.returncode == 2
    assert "hermes" in usage.stderr
