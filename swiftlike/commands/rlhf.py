"""`swiftlike rlhf`: GRPO, PPO, GKD or a preference trainer by --rlhf_type; with NPROC_PER_NODE > 1 it reruns itself
under torchrun, like sft."""
from __future__ import annotations

import sys

from ..arguments.ray_args import RayJob, load_ray_job, uses_ray
from ..arguments.rlhf_args import RlhfArguments
from ..rl.online.gkd_recipe import train_gkd
from ..rl.online.grpo_recipe import train_grpo
from ..rl.preference.recipe import train_preference
from ..train.run import TrainResult
from ..utils.errors import UsageError
from .train import run_training


def train_rlhf(args: RlhfArguments) -> TrainResult:
    if args.rlhf_type in ("grpo", "ppo"):  # PPO runs on GRPO's rollout machinery, with a critic
        return train_grpo(args)
    if args.rlhf_type == "gkd":
        return train_gkd(args)
    return train_preference(args)


def rlhf_main(args: RlhfArguments | RayJob | list[str] | None = None) -> TrainResult | None:
    """`--use_ray true` (with the job's YAML in --config) places the roles on Ray; otherwise one process, or
    NPROC_PER_NODE processes under torchrun."""
    if isinstance(args, RlhfArguments) and args.use_ray:
        raise UsageError("use_ray=True takes the job from its YAML: call rlhf_main(['--use_ray', 'true', '--config', "
                         "'job.yaml']) or pass a RayJob (swiftlike.arguments.ray_args.load_ray_job)")
    argv = list(sys.argv[1:] if args is None else args) if not isinstance(args, (RlhfArguments, RayJob)) else None
    if isinstance(args, RayJob) or (argv is not None and uses_ray(argv)):
        from ..ray.driver import run_ray_job
        result = run_ray_job(args if isinstance(args, RayJob) else load_ray_job(argv))
        print(result.summary(), flush=True)
        return result
    return run_training(RlhfArguments, args, train_rlhf)
