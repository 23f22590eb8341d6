"""`swiftlike sft` and `swiftlike pt`: arguments -> model and data -> Trainer -> run directory."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..arguments.train_args import TrainArguments
from ..model import default_device, load_tokenizer, resolve_model
from ..template import get_template
from ..utils import get_logger
from ..utils.checkpoint import latest_checkpoint
from .data import EncodeStats
from .outputs import JsonlLog, save_args
from .run_setup import checkpoint_args_writer, shared_run_dir, training_arguments

logger = get_logger("swiftlike.train")


@dataclass
class TrainResult:
    """What a finished run produced; printed as the summary and returned to Python callers."""

    run_dir: Path
    last_checkpoint: Path | None
    best_checkpoint: Path | None
    global_step: int
    train_loss: float | None
    eval_loss: float | None
    elapsed_s: float
    train_tokens_per_second: float | None
    data: EncodeStats
    metrics: dict[str, float] = field(default_factory=dict)  # the last logged value of the trainer's key metrics

    def summary(self) -> str:
        def fmt(value, spec=".4f"):
            return "n/a" if value is None else format(value, spec)
        lines = [
            "training finished",
            f"  run directory     {self.run_dir}",
            f"  last checkpoint   {self.last_checkpoint or 'none'}",
            f"  best checkpoint   {self.best_checkpoint or self.last_checkpoint or 'none'}",
            f"  steps             {self.global_step}",
            f"  last train loss   {fmt(self.train_loss)}",
            f"  last eval loss    {fmt(self.eval_loss)}",
            f"  elapsed           {self.elapsed_s:.1f} s",
            f"  train tokens/s    {fmt(self.train_tokens_per_second, '.1f')}",
            f"  curves            {self.run_dir / 'images'}",
        ]
        lines[-1:-1] = [f"  last {name:<22} {value:.4f}" for name, value in self.metrics.items()]
        return "\n".join(lines)


def train(args: TrainArguments) -> TrainResult:
    """Run one training job from typed arguments (the CLI and the Python API both end here)."""
    from transformers import set_seed

    from .prepare import prepare_data
    from .trainer import RunLogCallback, SwiftlikeTrainer
    from .tuner import parameter_summary, prepare_model

    start = time.time()
    set_seed(args.seed)  # before the LoRA weights are initialised, so a run is reproducible from its args
    resolved = resolve_model(args.model, args.model_type, args.use_hf, args.model_revision)
    tokenizer = load_tokenizer(resolved)
    template = get_template(args.template or resolved.meta.template, tokenizer, args.system, args.agent_template)
    data = prepare_data(args, template)

    # The run directory's name is agreed over the process group, which TrainingArguments sets up.
    training_args = training_arguments(args, Path(args.output_dir or "output"), data.val is not None)
    run_dir = shared_run_dir(args, training_args, resolved)
    training_args.output_dir = str(run_dir)
    if args.logging_dir is not None:
        os.environ["TENSORBOARD_LOGGING_DIR"] = args.logging_dir
    log = JsonlLog(run_dir) if training_args.process_index == 0 else None
    saved_args: dict = {}
    if log is not None:
        saved_args = save_args(run_dir, args, model_dir=str(resolved.model_dir), template=template.meta.name,
                               model_type=resolved.model_type, data=data.stats.__dict__)
        if args.resume_from_checkpoint:
            checkpoint = Path(args.resume_from_checkpoint)
            log.seed_from(checkpoint.parent, int(checkpoint.name.rsplit("-", 1)[-1]))

    model = prepare_model(args, resolved, default_device())
    logger.info("%s (%s); run directory %s", parameter_summary(model), args.tuner_type, run_dir)
    callback = RunLogCallback(run_dir, log)
    trainer = SwiftlikeTrainer(model=model, args=training_args, train_dataset=data.train, eval_dataset=data.val,
                               data_collator=data.collator, processing_class=tokenizer, callbacks=[callback],
                               checkpoint_extras=checkpoint_args_writer(saved_args))
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    best = trainer.state.best_model_checkpoint
    return TrainResult(run_dir=run_dir, last_checkpoint=latest_checkpoint(run_dir),
                       best_checkpoint=Path(best) if best else None, global_step=trainer.state.global_step,
                       train_loss=callback.last_train_loss, eval_loss=callback.last_eval_loss,
                       elapsed_s=time.time() - start, train_tokens_per_second=callback.tokens_per_second,
                       data=data.stats)
