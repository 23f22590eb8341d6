"""Runs `swiftlike rlhf` once per GRPO loss type (or PPO setting) on recorded rollouts; launched by
tests/e2e/test_grpo_ddp.py and tests/e2e/test_ppo.py.

Plain `python tests/helpers/grpo_ddp_worker.py` is the one-process run; under `torch.distributed.run` every rank runs
it. The only test hook is `Recording`, mixed into GrpoTrainer (`InjectedRolloutTrainer`) and PpoTrainer
(`InjectedPpoTrainer`), which are put in their place before `rlhf_main` builds its trainer: `_collect_rollouts`
serves the completions the test recorded with the real pt engine (sampling is random, and the one- and
two-process runs must train on the same rollouts), and it keeps
copies of what the test compares (parameters before and after, each rank's prompts and local metrics, and each
backward pass's loss and normaliser).
Drawing the PNG curves is skipped, for time.
Rewards, advantages, old/reference log-probs, the loss and its normalisers, DDP and the optimizer step are
all the real code.

`run_all` is the whole of it as a function: the one-process runs call it in the test's own process (through
test_grpo_ddp.launch, which puts back what the runs leave: the patched classes, the reward registered here, the
environment and thread count), where a fresh interpreter would cost ~10 s of imports per launch.

Environment of `main` (a process of its own: torchrun's ranks): DDP_TEST_ROLLOUTS (the recorded rollouts, JSON),
DDP_TEST_OUT (results directory), DDP_TEST_ARGS (JSON: {run name: extra CLI arguments}), DDP_TEST_COMMON (JSON: the
arguments of every run).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

import swiftlike.rl.online.grpo_trainer as grpo_trainer
import swiftlike.rl.online.ppo_trainer as ppo_trainer
import swiftlike.train.trainer as train_trainer
from swiftlike.commands.rlhf import rlhf_main
from swiftlike.rl.rewards.functions import REWARD_REGISTRY, register_reward
from swiftlike.rl.online.rollout_worker import Rollout

# what `configure` read: the recorded rollouts ({prompt: [rollout record, ...]}) and the results directory
RECORDED: dict[str, list[dict]] = {}
OUT = Path()


def configure(rollouts: str | Path, out: str | Path) -> None:
    """Serve the rollouts recorded in `rollouts` and write the results into `out`; registers `text_length`
    (where it is not registered yet)."""
    global OUT
    RECORDED.clear()
    RECORDED.update(json.loads(Path(rollouts).read_text()))
    OUT = Path(out)
    if "text_length" not in REWARD_REGISTRY:
        register_reward("text_length", text_length)


def text_length(completions, **kwargs):
    """A reward with spread on a random model, so advantages are not all zero."""
    return [len(c) / 100 for c in completions]


def trained_parameters(trainer) -> dict[str, torch.Tensor]:
    """The policy's parameters, and a PPO run's critic's (prefixed `critic.`)."""
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    critic = getattr(trainer, "critic", None)
    if critic is not None:
        params.update({f"critic.{n}": p.detach().clone() for n, p in critic.named_parameters()})
    return params


class Recording:
    """The hook, mixed into GrpoTrainer or PpoTrainer: rollouts are the recorded ones for the prompts the sampler
    gave this rank (a PPO group of one takes each prompt's first)."""

    last = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.params_before = trained_parameters(self)
        self.prompts_seen: list[str] = []
        self.local_metrics: list[dict[str, float]] = []
        self.micro_steps: list[dict] = []  # per backward pass: its step, tokens, loss normaliser and loss
        Recording.last = self

    def _collect_rollouts(self, rows, *_):  # (rows, steps_left)
        group_size = self.grpo.num_generations
        out = []
        for start in range(0, len(rows), group_size):
            group = rows[start:start + group_size]
            prompt = group[0]["messages"][-1]["content"]
            assert all(r["messages"][-1]["content"] == prompt for r in group), "a group split across rows"
            self.prompts_seen.append(prompt)
            out += [Rollout(**{**rec, "row": row})
                    for rec, row in zip(RECORDED[prompt][:group_size], group, strict=True)]
        return out, self._rewards(out)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        normaliser = inputs.get("num_items_in_batch")
        self.micro_steps.append({"step": self.state.global_step, "tokens": int(inputs["completion_mask"].sum()),
                                 "normaliser": None if normaliser is None else int(normaliser),
                                 # what the backward pass gets: the Trainer divides by the accumulation steps
                                 "loss": float(loss) / self.current_gradient_accumulation_steps})
        return loss

    def log(self, logs, start_time=None):
        if "loss" in logs:  # this rank's own values, before GrpoTrainer.log combines them over ranks
            self.local_metrics.append({k: sum(v) / len(v) for k, v in self._metrics.items() if v})
        super().log(logs, start_time)


class InjectedRolloutTrainer(Recording, grpo_trainer.GrpoTrainer):
    """GrpoTrainer on the recorded rollouts (tests/helpers/ray_recorded_rollouts_plugin.py builds on it too)."""


class InjectedPpoTrainer(Recording, ppo_trainer.PpoTrainer):
    """PpoTrainer on the recorded rollouts."""


def run_all(rollouts: str | Path, out: str | Path, runs: dict[str, list[str]], common: list[str]) -> None:
    """Every run of `runs` ({name: extra CLI arguments}, after `common`) in this process, on the rollouts recorded in
    `rollouts`, each writing its results into `out`. The trainer classes and the PNG curves are put back after."""
    configure(rollouts, out)
    rank = int(os.environ.get("RANK", "0"))
    saved = grpo_trainer.GrpoTrainer, ppo_trainer.PpoTrainer, train_trainer.plot_curves
    # rlhf_main imports them from their modules at call time
    grpo_trainer.GrpoTrainer = InjectedRolloutTrainer
    ppo_trainer.PpoTrainer = InjectedPpoTrainer
    train_trainer.plot_curves = lambda *a, **kw: []  # the PNG curves are not under test and cost ~15 s a run here
    try:
        for name, extra in runs.items():
            result = rlhf_main([*common, "--output_dir", str(OUT / name), *extra])
            trainer = Recording.last
            Recording.last = None  # the trainer (and its model) goes with the run
            (OUT / f"{name}.rank{rank}.json").write_text(json.dumps(
                {"prompts": trainer.prompts_seen, "metrics": trainer.local_metrics, "run_dir": str(result.run_dir),
                 "micro_steps": trainer.micro_steps}))
            if rank == 0:
                torch.save({"before": trainer.params_before, "after": trained_parameters(trainer)},
                           OUT / f"{name}.params.pt")
            del trainer, result
    finally:
        grpo_trainer.GrpoTrainer, ppo_trainer.PpoTrainer, train_trainer.plot_curves = saved


def main() -> None:
    run_all(os.environ["DDP_TEST_ROLLOUTS"], os.environ["DDP_TEST_OUT"], json.loads(os.environ["DDP_TEST_ARGS"]),
            json.loads(os.environ["DDP_TEST_COMMON"]))


if __name__ == "__main__":
    main()
