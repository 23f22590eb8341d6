"""`swiftlike eval`: one benchmark run on the backend --eval_backend names, written in the one report layout.

The harness backends (Native = evalscope, lm_eval) get the model as an OpenAI-compatible endpoint: --eval_url,
or --model served here by deploy's app for the run's length (served.py). The swiftlike backend answers with an
engine in this process (builtin.py)."""
from __future__ import annotations

import time

from ..arguments.eval_args import EvalArguments
from ..utils import get_logger
from .builtin import EngineAnswers, evaluate
from .report import markdown, new_run_dir, write_report

logger = get_logger("swiftlike.eval")

__all__ = ["markdown", "run_eval"]


def run_eval(args: EvalArguments) -> dict:
    """One model or endpoint; --eval_all_checkpoints is checkpoints.evaluate_checkpoints, which calls this."""
    if args.eval_all_checkpoints is not None:
        raise ValueError("run_eval evaluates one model; --eval_all_checkpoints goes through "
                         "swiftlike.eval.checkpoints.evaluate_checkpoints (or eval_main)")
    start = time.time()
    out_dir = new_run_dir(args.eval_output_dir)
    if args.eval_backend == "swiftlike":
        from ..infer.engine import build_engine
        engine = build_engine(args.engine_spec())
        adapter = None if args.eval_url else next(iter(engine.adapters), None)
        model = engine.model_name if adapter is None else f"{args.model} + {adapter}"
        try:
            results = evaluate(EngineAnswers(engine, args, adapter), args)
        finally:
            engine.close()
    else:
        from .served import served_model
        with served_model(args) as endpoint:
            model = endpoint.model
            results = run_harness(args, endpoint, out_dir)
    report = {"model": model, "source": args.eval_url or args.infer_backend, "backend": args.eval_backend,
              "settings": settings_of(args), "elapsed_s": round(time.time() - start, 1)}
    return write_report(out_dir, report, results)


def run_harness(args: EvalArguments, endpoint, out_dir):
    """The harness's own run against `endpoint`; its raw output stays under out_dir/<backend>/."""
    if args.eval_backend == "lm_eval":
        from .lm_eval_backend import run_lm_eval
        return run_lm_eval(args, endpoint, out_dir / "lm_eval")
    from .evalscope_backend import run_evalscope
    return run_evalscope(args, endpoint, out_dir / "evalscope")


def settings_of(args: EvalArguments) -> dict:
    return {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
            "repetition_penalty": args.repetition_penalty, "max_new_tokens": args.max_new_tokens,
            "eval_num_samples": args.eval_num_samples, "eval_limit": args.eval_limit,
            "eval_dataset_args": args.eval_dataset_args, "extra_eval_args": args.extra_eval_args}
