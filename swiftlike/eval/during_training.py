"""Benchmarks on the model being trained (--eval_use_evalscope): every --eval_steps and at the last step the live
weights are served in this process, on loopback, behind deploy's OpenAI routes, and `swiftlike eval` scores them
with the configured backend; the accuracies go into the run log as eval_bench/<dataset>/accuracy, so they are
drawn beside the training curves, and each report stays under <run dir>/eval_bench/step-N/.

Why the live model and not a saved checkpoint: the step's weights are already in memory (LoRA included), so
nothing is written or loaded, and a run without --save_steps at that step is scored too. Only the main process
evaluates; the others wait for it at their next collective."""
from __future__ import annotations

import time
from pathlib import Path

from transformers import TrainerCallback

from ..arguments.train_args import TrainArguments
from ..utils import get_logger

logger = get_logger("swiftlike.eval")
KEY_PREFIX = "eval_bench"
PLOT_PATTERN = f"{KEY_PREFIX}/*"
SERVED_MAX_TOKENS = 256  # for a request that sets none; the backends send --eval_generation_config's
SERVED_CONCURRENCY = 16


class BenchmarkCallback(TrainerCallback):
    """Scores the live model at its step, then hands the figures to the step's log record (placed before the
    run-log callback, it adds them to the record that callback writes)."""

    def __init__(self, args: TrainArguments, resolved, template, run_dir: Path):
        self.args = args
        self.resolved = resolved
        self.template = template
        self.run_dir = run_dir
        self.pending: dict[str, float] = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        due = state.global_step % self.args.eval_steps == 0 or state.global_step >= state.max_steps
        if not due or not state.is_world_process_zero or model is None:
            return
        self.pending = self.score(model, state.global_step)
        state.log_history.append({**self.pending, "step": state.global_step})
        control.should_log = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and self.pending:
            logs.update(self.pending)
            self.pending = {}

    def score(self, model, step: int) -> dict[str, float]:
        from ..infer.engine.pt_engine import PtEngine
        from .run import run_eval
        from .served import serving
        started = time.time()
        was_training = model.training
        model.eval()
        try:
            engine = PtEngine(self.resolved, self.template, model=model)
            with serving(engine, SERVED_MAX_TOKENS, SERVED_CONCURRENCY) as url:
                report = run_eval(self.args.benchmark_arguments(url, str(self.run_dir / "eval_bench")))
        finally:
            model.train(was_training)
        out = Path(report["output_dir"])
        final = out.with_name(f"step-{step}")
        if not final.exists():
            out.rename(final)
        figures = {f"{KEY_PREFIX}/{name}/accuracy": r["accuracy"] for name, r in report["benchmarks"].items()}
        logger.info("step %d benchmarks (%.0f s): %s", step, time.time() - started,
                    ", ".join(f"{k.split('/')[1]} {v:.4f}" for k, v in figures.items()))
        return figures
