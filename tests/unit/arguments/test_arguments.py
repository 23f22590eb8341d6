"""One typed dataclass per command, filled alike by the CLI, --config files and the Python API."""
import json

import pytest
from cli import run_cli
from model_ids import TINY

from swiftlike.arguments import InferArguments, TrainArguments, parse_args
from swiftlike.utils.errors import NotBuiltError


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


def test_a_config_file_takes_the_aliases_the_command_line_takes(tmp_path, capsys):
    """`train_type:` in a YAML is `--train_type` on the command line (ms-swift's name for --tuner_type); a file
    once refused it as an unknown argument. Giving both names of one argument is refused by name."""
    path = tmp_path / "sft.yaml"
    path.write_text("model: m\ndataset: [d.jsonl]\ntrain_type: full\nbatch_size: 3\n")
    args = parse_args(TrainArguments, ["--config", str(path)])
    assert (args.tuner_type, args.per_device_train_batch_size) == ("full", 3)
    path.write_text("model: m\ndataset: [d.jsonl]\ntrain_type: full\ntuner_type: lora\n")
    with pytest.raises(SystemExit) as stopped:
        parse_args(TrainArguments, ["--config", str(path)])
    assert stopped.value.code == 2
    assert f"--config {path}: `train_type` and `tuner_type` are one argument (tuner_type); give it once" in \
        capsys.readouterr().err


def test_a_ray_job_yaml_takes_the_aliases_too(tmp_path):
    from swiftlike.arguments.ray_args import load_ray_job
    path = tmp_path / "job.yaml"
    path.write_text(f"rlhf_type: grpo\nmodel: {TINY}\ndataset: [swiftlike/arithmetic#8]\n"
                    "reward_funcs: [accuracy]\nnum_generations: 2\nbatch_size: 2\nmax_completion_length: 8\n"
                    "use_vllm: true\ncolocate_groups: [[train, rollout]]\ntrain: {gpus: 1, train_type: full}\n"
                    "rollout: {gpus: 1}\n")
    job = load_ray_job(["--config", str(path)])
    assert (job.train.tuner_type, job.train.per_device_train_batch_size) == ("full", 2)


def test_unknown_argument_and_invalid_choice_exit_nonzero(tmp_path):
    r = run_cli("infer", "--model", "m", "--no_such_flag", "1", check=False)
    assert r.returncode != 0 and "--no_such_flag" in r.stderr
    r = run_cli("infer", "--model", "m", "--infer_backend", "tpu", check=False)
    assert r.returncode != 0 and "tpu" in r.stderr and "pt" in r.stderr and "vllm" in r.stderr
    r = run_cli("infer", "--model", "m", "--stream", "maybe", check=False)
    assert r.returncode != 0 and "true or false" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\nnot_an_arg: 1\n")
    r = run_cli("infer", "--config", str(bad), check=False)
    assert r.returncode != 0 and "not_an_arg" in r.stderr


def test_python_api_validates_like_cli():
    with pytest.raises(ValueError, match="invalid choice for --torch_dtype.*float32"):
        InferArguments(model="m", torch_dtype="fp8")
    with pytest.raises(ValueError, match="--top_p"):
        InferArguments(model="m", top_p=1.5)
    with pytest.raises(ValueError, match="--model is required"):
        InferArguments()
    with pytest.raises(NotBuiltError, match="--infer_backend sglang in swiftlike infer"):
        InferArguments(model="m", infer_backend="sglang")


def test_checkpoint_args_json_fills_model(tmp_path):
    ckpt = tmp_path / "v0-run" / "checkpoint-10"
    ckpt.mkdir(parents=True)
    (ckpt.parent / "args.json").write_text(json.dumps({"model": TINY, "system": "Be nice."}))
    args = InferArguments(adapters=[str(ckpt)])
    assert args.model == TINY and args.system == "Be nice."
    assert InferArguments(adapters=[str(ckpt)], model="other").model == "other"


def test_cli_usage_and_refused_commands():
    r = run_cli(check=False)
    assert r.returncode != 0 and "infer" in r.stdout and "web-ui" in r.stdout and "not built yet" not in r.stdout
    r = run_cli("web-ui", "--server_name", "0.0.0.0", check=False)
    assert r.returncode == 2 and "needs --api_key" in r.stderr
    r = run_cli("rollout", "--model", "no/such-model-xyz", "--vllm_data_parallel_size", "2", check=False)
    assert r.returncode == 3 and "one engine per server" in r.stderr
    r = run_cli("train", check=False)
    assert r.returncode != 0 and "unknown command 'train'" in r.stderr
    r = run_cli("infer", "--help", check=False)
    assert r.returncode == 0 and "--val_dataset" in r.stdout and "--vllm_max_lora_rank" in r.stdout


def test_python_api_exports():
    import swiftlike
    from swiftlike import InferArguments as A, infer_main
    assert A is InferArguments and callable(infer_main) and swiftlike.__version__


def test_engine_flags_come_from_the_engine_options_declaration():
    """A setting declared once in an engine's options dataclass is a flag of every command that composes the
    group, with the same default and help, and comes back as the options object, validated there."""
    import dataclasses

    from swiftlike.arguments.deploy_args import DeployArguments
    from swiftlike.arguments.option_flags import engine_flags
    from swiftlike.infer.engine.lmdeploy_engine import LmdeployOptions
    from swiftlike.infer.engine.sglang_engine import SglangOptions
    from swiftlike.infer.engine.vllm_engine import VllmOptions
    from swiftlike.utils.fields import arg

    deploy_fields = {f.name: f for f in dataclasses.fields(DeployArguments)}
    for options_cls, prefix in ((VllmOptions, "vllm_"), (SglangOptions, "sglang_"), (LmdeployOptions, "lmdeploy_")):
        settings = [f for f in dataclasses.fields(options_cls) if f.metadata.get("help")]
        assert settings, options_cls
        for f in settings:
            flag = deploy_fields[prefix + f.name]
            assert (flag.default, flag.metadata["help"]) == (f.default, f.metadata["help"])
    assert "vllm_max_loras" not in deploy_fields and "vllm_logprobs_mode" not in deploy_fields  # set by swiftlike

    @dataclasses.dataclass
    class ToyOptions:
        depth: int = arg(3, "How deep.")
        seed: int = 0
        internal: str = "ours"

        def __post_init__(self):
            if self.depth < 1:
                raise ValueError(f"--toy_depth must be >= 1, got {self.depth}")

    @dataclasses.dataclass
    class ToyArguments(engine_flags(ToyOptions, "toy_", "ToyFlags", doc="Toy engine.", module=__name__)):
        seed: int = 7

    args = parse_args(ToyArguments, ["--toy_depth", "5"], prog="toy")
    assert args.toy_options() == ToyOptions(depth=5, seed=7)  # shared settings pass through by name
    assert not hasattr(args, "toy_internal")
    with pytest.raises(ValueError, match="--toy_depth must be >= 1"):
        ToyArguments(toy_depth=0).toy_options()
    vllm = InferArguments(model="m", vllm_max_model_len=128, vllm_enable_prefix_caching=True).vllm_options()
    assert (vllm.max_model_len, vllm.enable_prefix_caching, vllm.seed) == (128, True, 42)
    with pytest.raises(ValueError, match="--vllm_max_num_seqs must be >= 1"):
        InferArguments(model="m", vllm_max_num_seqs=0).vllm_options()


def test_sampling_flags_are_one_group_with_defaults_by_command():
    from swiftlike.arguments import RlhfArguments
    from swiftlike.arguments.infer_args import GenerationArguments, SamplingArguments
    from swiftlike.arguments.rlhf_args import GrpoArguments

    for name in ("temperature", "top_p", "top_k", "repetition_penalty"):
        assert name in SamplingArguments.__annotations__
        assert name not in GrpoArguments.__annotations__ and name not in GenerationArguments.__annotations__
    assert issubclass(RlhfArguments, SamplingArguments) and issubclass(InferArguments, SamplingArguments)
    assert InferArguments(model="m").temperature == 0.0
    common = dict(model="m", dataset=["d.jsonl"])
    assert RlhfArguments(rlhf_type="grpo", reward_funcs=["accuracy"], **common).temperature == 1.0
    assert RlhfArguments(rlhf_type="gkd", teacher_model="t", **common).temperature == 0.9
    assert RlhfArguments(rlhf_type="grpo", reward_funcs=["accuracy"], top_k=20, **common).top_k == 20


def test_delta_weight_sync_needs_merged_weight_sync_to_vllm():
    from swiftlike.arguments import RlhfArguments
    common = dict(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"],
                  num_generations=4, per_device_train_batch_size=4, weight_sync="delta")
    with pytest.raises(ValueError, match="--weight_sync delta .* needs --use_vllm true"):
        RlhfArguments(**common)
    with pytest.raises(ValueError, match="--vllm_enable_lora true"):
        RlhfArguments(**common, use_vllm=True, vllm_enable_lora=True, tuner_type="lora")
    assert RlhfArguments(**common, use_vllm=True, tuner_type="full").weight_sync == "delta"
