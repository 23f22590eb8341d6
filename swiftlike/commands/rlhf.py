"""`swiftlike rlhf`: GRPO today; with NPROC_PER_NODE > 1 it reruns itself under torchrun, like sft."""
from __future__ import annotations

from ..arguments.rlhf_args import RlhfArguments
from ..rl.grpo import train_grpo
from ..train.sft import TrainResult
from .train import run_training


def rlhf_main(args: RlhfArguments | list[str] | None = None) -> TrainResult | None:
    return run_training(RlhfArguments, args, train_grpo)
