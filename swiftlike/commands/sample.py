"""`swiftlike sample`: answers sampled, scored and filtered into SFT / DPO rows (ms-swift's `swift sample`)."""
from __future__ import annotations

from ..arguments import SampleArguments
from . import arguments_of


def sample_main(args: SampleArguments | list[str] | None = None):
    """Returns the SampleResult (its `output` is the written file)."""
    from ..sample import run_sampling
    args = arguments_of(SampleArguments, args)
    result = run_sampling(args)
    print(result.summary(args.sampler_engine), flush=True)
    return result
