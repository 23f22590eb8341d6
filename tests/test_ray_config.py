"""The Ray job YAML (arguments/ray_args.py): ms-swift's form accepted, bad placements refused before Ray starts,
each with a message naming the key."""
import textwrap
from pathlib import Path

import pytest

from swiftlike.arguments.ray_args import TEACHER_PLACEHOLDER, load_ray_job

GRPO = """
rlhf_type: grpo
model: tiny-random/qwen2_5
dataset: [swiftlike/arithmetic#64]
reward_funcs: [accuracy]
num_generations: 2
per_device_train_batch_size: 2
max_completion_length: 8
use_vllm: true
"""


def job(tmp_path, text, *flags):
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(text))
    return load_ray_job(["--config", str(path), *flags])


def test_colocate_runs_the_engines_inside_the_train_workers(tmp_path):
    j = job(tmp_path, GRPO + "colocate_groups: [[train, rollout]]\ntrain: {gpus: 2, tuner_type: lora}\n"
                             "rollout: {gpus: 2, vllm_max_model_len: 512}\n")
    assert j.train.vllm_mode == "colocate" and j.train.tuner_type == "lora"
    assert j.rollout is None and j.devices == {"train": 2}


def test_separate_placement_builds_one_replica_argument_set(tmp_path):
    j = job(tmp_path, GRPO + "offload_model: false\ntrain: {gpus: 2}\nrollout: {gpus: 1, vllm_max_model_len: 512}\n",
            "--max_steps", "3")
    assert j.train.vllm_mode == "server" and j.train.max_steps == 3
    assert j.rollout.model == "tiny-random/qwen2_5" and j.rollout.vllm_max_model_len == 512
    assert j.devices == {"train": 2, "rollout": 1}


def test_standalone_teacher_replicas_for_gkd(tmp_path):
    j = job(tmp_path, """
        rlhf_type: gkd
        model: tiny-random/qwen2_5
        dataset: [swiftlike/arithmetic-sft#16]
        gkd_logits_topk: 8
        max_completion_length: 8
        train: {gpus: 1}
        teacher: {gpus: 1, model: tiny-random/llama3, vllm_engine_kwargs: {"max_logprobs": 16}}
        """)
    assert j.train.teacher_model_server == [TEACHER_PLACEHOLDER]
    assert j.teacher.model == "tiny-random/llama3" and j.teacher.max_logprobs == 16
    assert j.devices == {"train": 1, "teacher": 1}


@pytest.mark.parametrize("extra, message", [
    ("colocate_groups: [[train, rollout]]\ntrain: {gpus: 2}\nrollout: {gpus: 1}\n",
     r"colocate_groups\[0\].*gpus.*equal.*train.gpus=2, rollout.gpus=1"),
    ("train: {gpus: 1}\nrollout: {gpus: 1}\ncritic: {gpus: 1}\n", r"`critic:` is not a role"),
    ("colocate_groups: [[train, critic]]\ntrain: {gpus: 1}\nrollout: {gpus: 1}\n", r"unknown role\(s\) \['critic'\]"),
    ("train: {gpus: 1}\nrollout: {gpus: 1}\nteacher: {gpus: 1, model: x}\n", r"`teacher:` group is for rlhf_type: gkd"),
    ("train: {gpus: 0}\nrollout: {gpus: 1}\n", r"`train.gpus` must be a whole number >= 1"),
    ("rollout: {gpus: 1}\n", r"no `train:` group"),
    ("train: {gpus: 1}\n", r"use_vllm: true needs a `rollout:` group"),
    ("train: {gpus: 1, not_an_argument: 3}\nrollout: {gpus: 1}\n", r"`train:` group: unknown argument\(s\) "
                                                                   r"not_an_argument"),
    ("train: {gpus: 1}\nrollout: {gpus: 1, reward_funcs: [format]}\n", r"`rollout:` group: unknown argument\(s\) "
                                                                      r"reward_funcs"),
    ("colocate_groups: [[rollout, teacher]]\ntrain: {gpus: 1}\nrollout: {gpus: 1}\nteacher: {gpus: 1}\n",
     r"colocation is built for"),
])
def test_bad_jobs_are_refused_naming_the_key(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        job(tmp_path, GRPO + extra)


def test_standalone_teacher_needs_top_k_and_a_model(tmp_path):
    gkd = "rlhf_type: gkd\nmodel: tiny-random/qwen2_5\ndataset: [d.jsonl]\ntrain: {gpus: 1}\n"
    with pytest.raises(ValueError, match="top-k log-probs only; set gkd_logits_topk"):
        job(tmp_path, gkd + "teacher: {gpus: 1, model: tiny-random/llama3}\n")
    with pytest.raises(ValueError, match="`teacher:` needs `model:`"):
        job(tmp_path, gkd + "gkd_logits_topk: 4\nteacher: {gpus: 1}\n")
    with pytest.raises(ValueError, match="remove teacher_model"):
        job(tmp_path, gkd + "gkd_logits_topk: 4\nteacher_model: x\nteacher: {gpus: 1, model: y}\n")


def test_without_config_the_error_says_what_to_add():
    with pytest.raises(ValueError, match="add --config job.yaml"):
        load_ray_job(["--use_ray", "true"])


@pytest.mark.parametrize("config", sorted((Path(__file__).resolve().parent.parent / "examples" / "ray").rglob("*.yaml")),
                         ids=lambda p: p.parent.name + "/" + p.name)
def test_every_example_job_is_a_valid_job(config):
    from swiftlike.arguments.megatron_args import MegatronRlhfArguments
    cls = MegatronRlhfArguments if config.parent.name == "megatron" else None
    job = load_ray_job(["--config", str(config)], *([cls] if cls else []))
    assert job.groups["train"].devices >= 1 and job.train.model


def test_cpu_slots_share_the_cluster_and_pin_only_on_a_cluster_started_here():
    import os

    from swiftlike.ray.cluster import Cluster
    cores = sorted(os.sched_getaffinity(0))
    local = Cluster("x", "CPU", available=len(cores), cpus=len(cores), started=True)
    assert local.slot_cpus(1) == len(cores) and local.slot_cpus(len(cores) * 2) == 1
    sets = local.core_sets(len(cores))
    assert sets == [[c] for c in cores]  # one core each, disjoint
    assert local.core_sets(len(cores) + 1) is None  # more slots than cores: the processes share them, unpinned
    joined = Cluster("x", "CPU", available=16, cpus=16, started=False)
    assert joined.slot_cpus(4) == 4 and joined.core_sets(2) is None  # another node's cores are not known here
    gpus = Cluster("x", "GPU", available=8, cpus=64, started=True)
    assert gpus.slot_cpus(8) == 1 and gpus.core_sets(2) is None
