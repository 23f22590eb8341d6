"""GRPO with the train role on the Megatron backend (`swiftlike megatron rlhf`, megatron-core on CPU at TP 1):
the same loss, gradient and update as the transformers backend on the same batch, Megatron-LM's argument names,
LoRA, and a real run against a colocated vLLM engine whose weights are synced from the Megatron model."""
import subprocess
import sys

import pytest

from cli import run_cli
from model_ids import TINY
from servers import ENV
from swiftlike.train.outputs import read_log

pytest.importorskip("megatron.core")


def test_megatron_names_become_the_trainers_fields(monkeypatch):
    from swiftlike.arguments.megatron_args import MegatronRlhfArguments
    monkeypatch.setenv("WORLD_SIZE", "2")
    args = MegatronRlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], use_vllm=True,
                                 num_generations=2, micro_batch_size=2, global_batch_size=8, lr=5e-5, min_lr=5e-6,
                                 train_iters=7, lr_warmup_fraction=0.1, no_save_optim=True,
                                 cross_entropy_loss_fusion=True, steps_per_generation=3)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.learning_rate, args.max_steps,
            args.warmup_ratio, args.save_only_model) == (2, 2, 5e-5, 7, 0.1, True)
    assert args.steps_per_generation == 6  # 3 optimizer steps of 2 micro-batches each
    assert args.lr_scheduler_type == "cosine_with_min_lr" and args.lr_scheduler_kwargs == {"min_lr": 5e-6}
    assert args.train_backend == "megatron" and not args.share_prompt_prefix and not args.gradient_checkpointing
    constant = MegatronRlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"],
                                     use_vllm=True, num_generations=2, micro_batch_size=2, lr=5e-5, min_lr=5e-5)
    assert constant.lr_scheduler_type == "constant"


def test_settings_without_effect_are_named_once(caplog):
    """An ms-swift YAML's kernel knobs and `sequence_parallel: true` run unchanged, and the start-up warning says
    which of them do nothing here."""
    from swiftlike.arguments.megatron_args import MegatronRlhfArguments
    with caplog.at_level("WARNING", logger="swiftlike.arguments"):
        MegatronRlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], use_vllm=True,
                              num_generations=2, micro_batch_size=2, sequence_parallel=True,
                              cross_entropy_loss_fusion=True)
    warned = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
    assert len(warned) == 1 and "--sequence_parallel" in warned[0] and "--cross_entropy_loss_fusion" in warned[0]


@pytest.mark.parametrize("flags, message", [
    ({"per_device_train_batch_size": 4}, "one setting under two names"),
    ({"global_batch_size": 6, "micro_batch_size": 4}, "not a multiple of --micro_batch_size 4"),
    ({"tensor_model_parallel_size": 2}, "built for TP 1"),
    ({"pipeline_model_parallel_size": 2}, "runs whole models"),
    ({"vllm_enable_lora": True, "use_vllm": True, "tuner_type": "lora"}, "not built for --train_backend megatron"),
    ({"rlhf_type": "dpo", "reward_funcs": [], "use_vllm": False}, "trains grpo and gkd"),
    ({"use_vllm": False}, r"--train_backend megatron \(swiftlike megatron rlhf\) with --use_vllm false: grpo samples"),
    ({"rlhf_type": "gkd", "reward_funcs": [], "num_generations": 1, "use_vllm": False, "lmbda": 0.5,
      "teacher_model": TINY}, r"--use_vllm false: gkd .*--lmbda 0"),
])
def test_what_the_backend_lacks_is_refused_by_name(flags, message):
    from swiftlike.arguments.megatron_args import MegatronRlhfArguments
    base = dict(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=2,
                micro_batch_size=2, use_vllm=True)
    with pytest.raises(Exception, match=message):
        MegatronRlhfArguments(**{**base, **flags})


# GRPO's loss, and the 2026 estimators, losses and token selections, which the backends share
EQUIVALENCE_RUNS = ("grpo", "rloo_cispo_entropy", "reinforce_pp_sapo", "gdpo_kl_cov", "clip_cov", "opd_rl")
# Weight updates: the worst parameter is a norm weight, which megatron-core's RMSNorm rounds otherwise
# (measured worst: grpo 9.8e-6, rloo_cispo_entropy 1.7e-5, reinforce_pp_sapo 5.7e-6, gdpo_kl_cov 6.5e-6);
# the losses and gradient norms are held to RTOL (1e-5).
UPDATE_RTOL = 5e-5


def test_megatron_backend_trains_like_the_transformers_backend(tmp_path, grpo_one_process):
    """The recorded rollouts of tests/e2e/test_grpo_ddp.py, one process each (the transformers side is the run
    test_grpo_ddp.py compares two processes against): loss, gradient norm and the update of every weight (compared
    under HF names) agree within 1e-5 relative (the update within UPDATE_RTOL), for GRPO and the 2026 algorithm
    set, OPD-RL with an in-process teacher included."""
    import torch

    from swiftlike.model import resolve_model
    from swiftlike.train.megatron import mcore_to_hf
    from test_grpo_ddp import RTOL, launch, rel_diff, runs_with_adapter, train_logs
    from transformers import AutoConfig
    base, hf = grpo_one_process
    mc = tmp_path / "mc"
    mc.mkdir()
    runs = {name: argv for name, argv in runs_with_adapter(base).items() if name in EQUIVALENCE_RUNS}
    assert set(runs) == set(EQUIVALENCE_RUNS)
    # the Megatron backend generates through vLLM only; the engine is synced every step and never sampled here
    launch(mc, base / "rollouts.json", base / "prompts.jsonl", 1,
           {name: [*argv, "--train_backend", "megatron", "--use_vllm", "true", "--vllm_max_model_len", "256"]
            for name, argv in runs.items()})
    config = AutoConfig.from_pretrained(resolve_model(TINY).model_dir)
    for run in EQUIVALENCE_RUNS:
        a, b = train_logs(hf, run), train_logs(mc, run)
        assert [e["step"] for e in a] == [e["step"] for e in b] == [1, 2], run
        for x, y in zip(a, b):
            for key in ("loss", "grad_norm", "kl", "teacher_kl"):
                if x.get(key) or y.get(key):
                    assert rel_diff(x[key], y[key]) < RTOL, (run, key, x[key], y[key])
        p_hf, p_mc = torch.load(hf / f"{run}.params.pt"), torch.load(mc / f"{run}.params.pt")
        strip = len("gpt.")
        as_hf = {when: mcore_to_hf([{k[strip:]: v for k, v in p_mc[when].items()}], config)
                 for when in ("before", "after")}
        names = [n.removeprefix("model.") for n in p_hf["after"]]
        worst = 0.0
        for name in p_hf["after"]:
            key = name if name in as_hf["after"] else name.removeprefix("model.")
            update_hf = p_hf["after"][name] - p_hf["before"][name]
            update_mc = as_hf["after"][key] - as_hf["before"][key]
            if update_hf.any():
                worst = max(worst, float((update_hf - update_mc).norm() / update_hf.norm()))
        assert names and worst < UPDATE_RTOL, (run, worst)


def test_megatron_grpo_with_colocated_vllm_and_lora(tmp_path):
    """`swiftlike megatron rlhf` end to end: Megatron-LM's names, LoRA, merged weights synced to vLLM every step
    (the engine's log-probs then equal the trainer's), and an HF checkpoint that transformers loads."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text("from swiftlike.rl.rewards.functions import register_reward\n\n"
                      "@register_reward('text_length')\ndef text_length(completions, **kwargs):\n"
                      "    return [len(c) / 100 for c in completions]\n")
    result = run_cli("megatron", "rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset",
                     "swiftlike/arithmetic#32", "--external_plugins", plugin, "--reward_funcs", "text_length",
                     "--num_generations", "4", "--micro_batch_size", "4", "--global_batch_size", "8", "--train_iters",
                     "3", "--lr", "1e-3", "--min_lr", "1e-4", "--max_completion_length", "12", "--use_vllm", "true",
                     "--vllm_max_model_len", "512", "--tuner_type", "lora", "--lora_rank", "8", "--beta", "0.04",
                     "--logging_steps", "1", "--report_to", "none", "--torch_dtype", "float32",
                     "--log_rollout_offpolicy_metrics", "true", "--output_dir", tmp_path / "out",
                     "--cross_entropy_loss_fusion", "true", "--recompute_granularity", "selective")
    assert "no effect" in result.stderr  # the Megatron-LM kernel settings, said once
    run_dir = next((tmp_path / "out").glob("v*"))
    logged = [e for e in read_log(run_dir) if "loss" in e]
    assert [e["step"] for e in logged] == [1, 2, 3]
    assert all(e["grad_norm"] > 0 for e in logged) and logged[-1]["kl"] > 0
    # after each sync the engine samples with the weights the trainer scores with (fp32 on both sides)
    assert all(e["rollout_correction/k3_kl"] < 1e-4 for e in logged), [e["rollout_correction/k3_kl"] for e in logged]
    checkpoint = run_dir / "checkpoint-3"
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert type(model).__name__ == "Qwen2ForCausalLM" and (checkpoint / "args.json").is_file()


def test_the_python_api_runs_two_megatron_trainings_in_one_process(tmp_path):
    """A run on the Megatron backend tears down the parallel groups it set up (and the process group it started),
    so the next run in the same process builds its own. GKD on the dataset's answers (--lmbda 0: nothing is
    generated), in a fresh interpreter, as a user's script would run it."""
    script = tmp_path / "two_runs.py"
    script.write_text(f"""
from megatron.core import parallel_state
import torch.distributed as dist

from swiftlike.arguments.megatron_args import MegatronRlhfArguments
from swiftlike.commands.megatron import megatron_main

for run in ("first", "second"):
    args = MegatronRlhfArguments(rlhf_type="gkd", model={TINY!r}, teacher_model={TINY!r}, lmbda=0.0,
                                 dataset=["swiftlike/arithmetic-sft#8"], micro_batch_size=2, train_iters=2,
                                 max_completion_length=8, logging_steps=1, save_steps=100, report_to=["none"],
                                 torch_dtype="float32", output_dir={str(tmp_path)!r} + "/" + run)
    result = megatron_main(args)
    assert result.global_step == 2, result
    assert not parallel_state.model_parallel_is_initialized() and not dist.is_initialized(), run
print("two runs finished")
""")
    result = subprocess.run([sys.executable, str(script)], env=ENV, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-5000:]
    assert "two runs finished" in result.stdout
    assert len(list((tmp_path / "second").glob("v*"))) == 1
