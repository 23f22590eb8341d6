"""The Ray job YAML (arguments/ray_args.py): ms-swift's form accepted, bad placements refused before Ray starts,
each with a message naming the key."""
import textwrap

import pytest

from swiftlike.arguments.ray_args import TEACHER_PLACEHOLDER, load_ray_job
from paths import REPO

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
    assert j.train.vllm_max_model_len == 512  # the group's engine setting reaches the engines the workers run


def test_a_colocated_rollout_groups_engine_settings_reach_the_train_role(tmp_path):
    """ms-swift's colocate YAML sets the engines in its `rollout:` group; they override the shared settings, and
    the command line overrides them."""
    text = GRPO + ("vllm_gpu_memory_utilization: 0.9\ncolocate_groups: [[train, rollout]]\ntrain: {gpus: 1}\n"
                   "rollout: {gpus: 1, vllm_tensor_parallel_size: 1, vllm_gpu_memory_utilization: 0.4, "
                   "vllm_max_model_len: 1024, vllm_enforce_eager: true}\n")
    j = job(tmp_path, text)
    assert (j.train.vllm_gpu_memory_utilization, j.train.vllm_max_model_len, j.train.vllm_enforce_eager) == (0.4, 1024,
                                                                                                            True)
    assert job(tmp_path, text, "--vllm_max_model_len", "2048").train.vllm_max_model_len == 2048


def test_a_colocated_rollout_groups_values_are_checked_as_the_flags_are(tmp_path, capsys):
    with pytest.raises(SystemExit):
        job(tmp_path, GRPO + "colocate_groups: [[train, rollout]]\ntrain: {gpus: 1}\n"
                             "rollout: {gpus: 1, vllm_gpu_memory_utilization: 1.5}\n")
    assert "--vllm_gpu_memory_utilization must be in (0, 1], got 1.5" in capsys.readouterr().err


@pytest.mark.parametrize("groups, message", [
    ("train: {gpus: 1}\nrollout: {gpus: 1, max_bucket_mb: 64}\n",
     r"`rollout:` group: unknown argument\(s\) max_bucket_mb for a rollout engine colocated with the train role"),
    ("train: {gpus: 1}\nrollout: {gpus: 1, not_an_argument: 1}\n", r"unknown argument\(s\) not_an_argument"),
    ("train: {gpus: 1, vllm_max_model_len: 512}\nrollout: {gpus: 1, vllm_max_model_len: 1024}\n",
     r"`vllm_max_model_len` is 512 in `train:` and 1024 in `rollout:`"),
])
def test_a_colocated_rollout_group_is_checked(tmp_path, groups, message):
    with pytest.raises(ValueError, match=message):
        job(tmp_path, GRPO + "colocate_groups: [[train, rollout]]\n" + groups)


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


def test_a_preference_job_runs_on_the_train_role_alone(tmp_path):
    dpo = "rlhf_type: dpo\nmodel: tiny-random/qwen2_5\ndataset: [swiftlike/arithmetic-preference#16]\n"
    j = job(tmp_path, dpo + "train: {gpus: 2}\n")
    assert j.train.rlhf_type == "dpo" and j.devices == {"train": 2} and j.rollout is None
    with pytest.raises(ValueError, match=r"a `rollout:` group serves grpo and gkd; rlhf_type dpo trains on the "
                                         r"dataset's answers"):
        job(tmp_path, dpo + "use_vllm: true\ntrain: {gpus: 1}\nrollout: {gpus: 1}\n")


def test_replica_api_keys_come_from_the_yaml_or_are_left_to_the_driver(tmp_path):
    separate = GRPO + "train: {gpus: 1}\n"
    assert job(tmp_path, separate + "rollout: {gpus: 1}\n").rollout.api_key is None  # the driver generates one
    given = job(tmp_path, separate.replace("use_vllm: true", "use_vllm: true\nvllm_server_api_key: k1")
                + "rollout: {gpus: 1}\n")
    assert given.rollout.api_key == given.train.vllm_server_api_key == "k1"
    assert job(tmp_path, separate + "rollout: {gpus: 1, api_key: k2}\n").rollout.api_key == "k2"
    with pytest.raises(ValueError, match=r"`rollout.api_key` and `vllm_server_api_key` differ"):
        job(tmp_path, separate.replace("use_vllm: true", "use_vllm: true\nvllm_server_api_key: k1")
            + "rollout: {gpus: 1, api_key: k2}\n")


def test_nnodes_is_kept_for_the_driver_to_check(tmp_path):
    colocated = GRPO + "colocate_groups: [[train, rollout]]\ntrain: {gpus: 2}\nrollout: {gpus: 2}\n"
    assert job(tmp_path, colocated + "nnodes: 2\n").nnodes == 2
    assert job(tmp_path, colocated).nnodes is None
    with pytest.raises(ValueError, match=r"`nnodes` must be a whole number >= 1"):
        job(tmp_path, colocated + "nnodes: 0\n")


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


@pytest.mark.parametrize("config", sorted((REPO / "examples" / "ray").rglob("*.yaml")),
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
