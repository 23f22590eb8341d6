"""`swiftlike eval`: a model, a running endpoint or every checkpoint of a run, on benchmarks through evalscope,
lm-evaluation-harness or swiftlike's own sets."""
from __future__ import annotations

from pathlib import Path

from ..arguments.eval_args import EvalArguments
from ..eval.checkpoints import checkpoints_markdown, evaluate_checkpoints
from ..eval.run import markdown, run_eval
from . import arguments_of


def eval_main(args: EvalArguments | list[str] | None = None) -> dict:
    args = arguments_of(EvalArguments, args)
    if args.eval_all_checkpoints is not None:
        report = evaluate_checkpoints(args)
        table = checkpoints_markdown(report)
    else:
        report = run_eval(args)
        table = markdown(report)
    print("\n" + table + f"\nreport: {Path(report['output_dir']) / 'report.json'} ({report['elapsed_s']} s)",
          flush=True)
    return report
