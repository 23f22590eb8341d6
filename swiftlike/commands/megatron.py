"""`swiftlike megatron rlhf ...`: ms-swift's `megatron rlhf`, GRPO or GKD with the train role on megatron-core.

The same command as `swiftlike rlhf` (torchrun with NPROC_PER_NODE, Ray with --use_ray true), under Megatron-LM's
argument names (MegatronRlhfArguments), so an ms-swift `megatron rlhf` command line or Ray YAML runs with
`megatron` replaced by `swiftlike megatron`.
"""
from __future__ import annotations

import sys

from ..arguments.megatron_args import MegatronRlhfArguments
from ..arguments.ray_args import load_ray_job, uses_ray
from ..train.launch import is_rank_zero, relaunch_with_torchrun, wants_torchrun
from ..train.run import TrainResult
from ..utils.errors import UsageError
from . import arguments_of
from .rlhf import train_rlhf

SUBCOMMANDS = ("rlhf",)


def megatron_main(args: MegatronRlhfArguments | list[str] | None = None) -> TrainResult | None:
    if isinstance(args, MegatronRlhfArguments):
        return _run(args)
    argv = list(sys.argv[1:] if args is None else args)
    if not argv or argv[0] not in SUBCOMMANDS:
        raise UsageError(f"swiftlike megatron takes a subcommand: {', '.join(SUBCOMMANDS)} (e.g. `swiftlike megatron "
                         "rlhf --rlhf_type grpo ...`); sft and pt on the Megatron backend are not built")
    rest = argv[1:]
    if uses_ray(rest):
        from ..ray.driver import run_ray_job
        result = run_ray_job(load_ray_job(rest, MegatronRlhfArguments))
        print(result.summary(), flush=True)
        return result
    if wants_torchrun():
        relaunch_with_torchrun("megatron", argv)
        return None
    return _run(arguments_of(MegatronRlhfArguments, rest))


def _run(args: MegatronRlhfArguments) -> TrainResult:
    result = train_rlhf(args)
    if is_rank_zero():
        print(result.summary(), flush=True)
    return result
