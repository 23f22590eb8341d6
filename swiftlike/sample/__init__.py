"""`swiftlike sample`: many answers per prompt, scored by outcome / process rewards, the best kept as training rows.

selection: which answers become rows (pure, ms-swift's rule). scoring: --orm_model / --prm_model resolved through
rl/rewards. sources: each engine's answers as they finish. output: the resumable, atomically published file.
run: the pipeline.
"""
from .run import SampleResult, run_sampling

__all__ = ["SampleResult", "run_sampling"]
