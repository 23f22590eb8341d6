"""`swiftlike rlhf`: GRPO, GKD or a preference trainer by --rlhf_type; with NPROC_PER_NODE > 1 it reruns itself
under torchrun, like sft."""
from __future__ import annotations

from ..arguments.rlhf_args import RlhfArguments
from ..rl.gkd import train_gkd
from ..rl.grpo import train_grpo
from ..rl.preference import train_preference
from ..train.sft import TrainResult
from .train import run_training


def train_rlhf(args: RlhfArguments) -> TrainResult:
    if args.rlhf_type == "grpo":
        return train_grpo(args)
    if args.rlhf_type == "gkd":
        return train_gkd(args)
    return train_preference(args)


def rlhf_main(args: RlhfArguments | list[str] | None = None) -> TrainResult | None:
    return run_training(RlhfArguments, args, train_rlhf)
