"""One typed dataclass per command, filled alike by the CLI, --config files and the Python API."""
import json
import subprocess
import sys

import pytest

from swiftlike.arguments import InferArguments, parse_args


def test_ms_swift_style_flags():
    args = parse_args(InferArguments, ["--model", "m", "--infer_backend", "vllm", "--temperature", "0.5",
                                       "--stream", "true", "--adapters", "a=/x", "/y/ckpt", "--stop_words", "A", "B"])
    assert args.infer_backend == "vllm" and args.temperature == 0.5 and args.stream is True
    assert args.adapter_paths() == {"a": "/x", "ckpt": "/y/ckpt"}
    assert args.stop_words == ["A", "B"]
    cfg = args.request_config()
    assert cfg.temperature == 0.5 and cfg.stop == ["A", "B"]


def test_config_file_and_cli_override(tmp_path):
    path = tmp_path / "infer.yaml"
    path.write_text("model: m\ntemperature: 0.3\nmax_new_tokens: 7\nval_dataset: [a.jsonl, b.jsonl]\nstream: true\n")
    args = parse_args(InferArguments, ["--config", str(path), "--max_new_tokens", "9"])
    assert (args.temperature, args.max_new_tokens, args.val_dataset, args.stream) == (0.3, 9, ["a.jsonl", "b.jsonl"], True)
    jpath = tmp_path / "infer.json"
    jpath.write_text(json.dumps({"model": "m", "top_k": 5}))
    assert parse_args(InferArguments, ["--config", str(jpath)]).top_k == 5


def run_cli(*argv):
    return subprocess.run([sys.executable, "-m", "swiftlike.cli.main", *argv], capture_output=True, text=True)


def test_unknown_argument_and_invalid_choice_exit_nonzero(tmp_path):
    r = run_cli("infer", "--model", "m", "--no_such_flag", "1")
    assert r.returncode != 0 and "--no_such_flag" in r.stderr
    r = run_cli("infer", "--model", "m", "--infer_backend", "tpu")
    assert r.returncode != 0 and "tpu" in r.stderr and "pt" in r.stderr and "vllm" in r.stderr
    r = run_cli("infer", "--model", "m", "--stream", "maybe")
    assert r.returncode != 0 and "true or false" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\nnot_an_arg: 1\n")
    r = run_cli("infer", "--config", str(bad))
    assert r.returncode != 0 and "not_an_arg" in r.stderr


def test_python_api_validates_like_cli():
    with pytest.raises(ValueError, match="invalid choice for --torch_dtype.*float32"):
        InferArguments(model="m", torch_dtype="fp8")
    with pytest.raises(ValueError, match="--top_p"):
        InferArguments(model="m", top_p=1.5)
    with pytest.raises(ValueError, match="--model is required"):
        InferArguments()
    with pytest.raises(ValueError, match="not available in swiftlike infer yet"):
        InferArguments(model="m", infer_backend="sglang")


def test_checkpoint_args_json_fills_model(tmp_path):
    ckpt = tmp_path / "v0-run" / "checkpoint-10"
    ckpt.mkdir(parents=True)
    (ckpt.parent / "args.json").write_text(json.dumps({"model": "tiny-random/qwen2_5", "system": "Be nice."}))
    args = InferArguments(adapters=[str(ckpt)])
    assert args.model == "tiny-random/qwen2_5" and args.system == "Be nice."
    assert InferArguments(adapters=[str(ckpt)], model="other").model == "other"


def test_cli_usage_and_unbuilt_commands():
    r = run_cli()
    assert r.returncode != 0 and "infer" in r.stdout and "not built yet" in r.stdout
    r = run_cli("web-ui")
    assert r.returncode == 3 and "not built yet" in r.stderr
    r = run_cli("rollout", "--model", "no/such-model-xyz", "--vllm_data_parallel_size", "2")
    assert r.returncode == 2 and "one engine per server" in r.stderr
    r = run_cli("train")
    assert r.returncode != 0 and "unknown command 'train'" in r.stderr
    r = run_cli("infer", "--help")
    assert r.returncode == 0 and "--val_dataset" in r.stdout and "--vllm_max_lora_rank" in r.stdout


def test_python_api_exports():
    import swiftlike
    from swiftlike import InferArguments as A, infer_main
    assert A is InferArguments and callable(infer_main) and swiftlike.__version__
