"""Record one step of TRL's own PPOTrainer on the tiny random model, for tests/unit/rl/test_ppo_math.py.

TRL writes its PPO math (per-token rewards, reward whitening, GAE, advantage whitening, the clipped losses)
inline in `PPOTrainer.train`, so it cannot be called on given tensors as its GRPO loss can. Instead this runs
the real trainer for one step and reads its tensors at two points of its training loop: when it whitens the
advantages (the rollout phase is complete: log-probs, values, scores, rewards, returns) and at its first
`accelerator.backward` (the first micro-batch's new log-probs, value predictions and losses). The test then
feeds the inputs to swiftlike/rl/core/ppo.py and compares the outputs.

PPOTrainer's last release is trl 1.12.0 (trl.experimental.ppo; 1.13 removed it); it cannot be installed next to
the trl our runs use, so this script installs it into a scratch directory and runs with that one first on the
path. Run from the repository root (the result, about 20 KB, is committed):

    .venv/bin/python scripts/record_trl_ppo_reference.py [--out tests/fixtures/trl_ppo_reference.pt]
"""
from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TRL_WITH_PPO = "1.12.0"
SCRATCH = Path(tempfile.gettempdir()) / f"swiftlike-trl-{TRL_WITH_PPO}"
SETTINGS = dict(kl_coef=0.05, kl_estimator="k3", whiten_rewards=True, gamma=0.95, lam=0.9, cliprange=0.2,
                cliprange_value=0.2, vf_coef=0.1)


def _ensure_trl_with_ppo() -> None:
    """Re-run this script with trl 1.12.0 ahead of the installed trl on sys.path."""
    import trl
    if trl.__version__ == TRL_WITH_PPO:
        return
    if not (SCRATCH / "trl").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(SCRATCH),
                        f"trl=={TRL_WITH_PPO}"], check=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(SCRATCH), os.environ.get("PYTHONPATH")])))
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _models(seed: int):
    """The tiny random policy, and a value and a reward model with seeded random score heads on its backbone.
    The policy's end-of-turn logit is raised so that some answers end before the response length, which is
    what exercises TRL's padding masks."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from swiftlike.model import load_tokenizer, resolve_model

    resolved = resolve_model("tiny-random/qwen2_5")
    tokenizer = load_tokenizer(resolved)
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    policy = AutoModelForCausalLM.from_pretrained(resolved.model_dir, dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(resolved.model_dir, dtype=torch.float32)
    with torch.no_grad():
        for model in (policy, ref):
            model.get_output_embeddings().weight[tokenizer.eos_token_id] *= 6.0
    value, reward = (AutoModelForSequenceClassification.from_pretrained(resolved.model_dir, num_labels=1,
                                                                        dtype=torch.float32) for _ in range(2))
    for head in (value.score, reward.score):
        torch.nn.init.normal_(head.weight, std=0.5)
    return tokenizer, policy, ref, value, reward


def _record(out: Path, seed: int) -> None:
    import torch
    from datasets import Dataset
    from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl.experimental.ppo import ppo_trainer as trl_ppo

    tokenizer, policy, ref, value, reward = _models(seed)
    prompts = ["What is two plus two?", "Name a colour.", "Say hello in French.", "Count to three.",
               "Spell cat.", "What is the capital of France?", "Name a prime number.", "Say yes or no."]
    dataset = Dataset.from_dict({"input_ids": [tokenizer(p)["input_ids"] for p in prompts]})
    with tempfile.TemporaryDirectory() as tmp:
        # TRL needs 8 completions per mini-batch to whiten; two micro-batches of 4 make one
        config = PPOConfig(output_dir=tmp, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                           num_mini_batches=1, num_ppo_epochs=1, total_episodes=8, response_length=12,
                           stop_token="eos", missing_eos_penalty=1.0, temperature=0.7, seed=seed, report_to=[],
                           num_sample_generations=0, save_strategy="no", use_cpu=True, **SETTINGS)
        trainer = PPOTrainer(args=config, processing_class=tokenizer, model=policy, ref_model=ref,
                             reward_model=reward, train_dataset=dataset, value_model=value)
        recorded: dict = {}
        whiten, backward = trl_ppo.masked_whiten, trainer.accelerator.backward

        def recording_whiten(values, mask, shift_mean=True):
            caller = inspect.currentframe().f_back.f_locals
            if not shift_mean:
                recorded["rewards_before_whitening"] = values.detach().clone()
            elif "advantages" not in recorded:
                recorded.update({name: caller[name].detach().clone() for name in
                                 ("logprobs", "ref_logprobs", "values", "scores", "rewards", "returns")})
                recorded["token_mask"] = ~caller["padding_mask"]
                recorded["value_mask"] = ~caller["padding_mask_p1"]
                recorded["score_index"] = caller["actual_end"].clone()
                recorded["advantages"] = torch.masked_fill(whiten(values, mask), caller["padding_mask"], 0)
            return whiten(values, mask, shift_mean)

        def recording_backward(loss, **kwargs):
            caller = inspect.currentframe().f_back.f_locals
            if "loss" not in recorded:
                recorded["micro_batch_rows"] = torch.as_tensor(caller["micro_batch_inds"]).long()
                recorded["new_logprobs"] = caller["new_logprobs"].detach().clone()
                recorded["vpred"] = caller["vpred"].detach().clone()
                for name in ("pg_loss", "vf_loss", "vf_clipfrac", "loss"):
                    recorded[name] = caller[name].detach().clone()
                recorded["pg_clipfrac"] = ((caller["pg_losses2"] > caller["pg_losses"]).float()
                                           [~caller["padding_mask"][caller["micro_batch_inds"]]].mean())
            return backward(loss, **kwargs)

        trl_ppo.masked_whiten = recording_whiten
        trainer.accelerator.backward = recording_backward
        trainer.train()
    recorded.update(SETTINGS)
    lengths = recorded["token_mask"].sum(-1).tolist()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".tmp")
    torch.save(recorded, partial)
    partial.replace(out)
    print(f"recorded TRL {TRL_WITH_PPO} PPO step -> {out} (completion lengths {lengths}, "
          f"scores {[round(s, 3) for s in recorded['scores'].tolist()]}, loss {recorded['loss'].item():.6f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/trl_ppo_reference.pt"))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    _ensure_trl_with_ppo()
    _record(args.out, args.seed)


if __name__ == "__main__":
    main()
