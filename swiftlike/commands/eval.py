"""`swiftlike eval`: a model or a running endpoint on built-in or local benchmarks."""
from __future__ import annotations

from ..arguments.eval_args import EvalArguments
from ..eval.run import markdown, run_eval
from . import arguments_of


def eval_main(args: EvalArguments | list[str] | None = None) -> dict:
    report = run_eval(arguments_of(EvalArguments, args))
    print("\n" + markdown(report) + f"\nreport: {report['output_dir']}/report.json ({report['elapsed_s']} s)",
          flush=True)
    return report
