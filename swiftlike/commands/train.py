"""`swiftlike sft` and `swiftlike pt`; with NPROC_PER_NODE > 1 the command reruns itself under torchrun."""
from __future__ import annotations

import sys

from ..arguments.train_args import PtArguments, TrainArguments
from ..train.launch import is_rank_zero, relaunch_with_torchrun, wants_torchrun
from ..train.run import TrainResult
from ..train.sft import train
from ..utils.errors import UsageError
from . import arguments_of


def run_training(cls: type[TrainArguments], args, run) -> TrainResult | None:
    """Parse, run, and print the summary on rank 0. Under NPROC_PER_NODE > 1 the launching process starts
    torchrun on the same command line and returns None; the workers (which carry LOCAL_RANK) train."""
    if wants_torchrun():
        if isinstance(args, TrainArguments):
            raise UsageError(f"NPROC_PER_NODE > 1 reruns `swiftlike {cls.command}` under torchrun from a command "
                             f"line; call {cls.command}_main with a list of CLI strings instead of an arguments object")
        relaunch_with_torchrun(cls.command, list(sys.argv[1:] if args is None else args))
        return None
    result = run(arguments_of(cls, args))
    if is_rank_zero():
        print(result.summary(), flush=True)
    return result


def sft_main(args: TrainArguments | list[str] | None = None) -> TrainResult | None:
    return run_training(TrainArguments, args, train)


def pt_main(args: PtArguments | list[str] | None = None) -> TrainResult | None:
    return run_training(PtArguments, args, train)
