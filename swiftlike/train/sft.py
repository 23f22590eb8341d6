"""`swiftlike sft` and `swiftlike pt`: arguments -> model and data -> Trainer -> run directory."""
from __future__ import annotations

from ..arguments.train_args import TrainArguments
from ..model import default_device
from ..model.segment_attention import use_segment_attention
from ..utils import get_logger
from .run import TrainResult, prepare_run

logger = get_logger("swiftlike.train")


def train(args: TrainArguments) -> TrainResult:
    """Run one training job from typed arguments (the CLI and the Python API both end here)."""
    from .prepare import prepare_data
    from .trainer import SwiftlikeTrainer
    from .tuner import parameter_summary, prepare_model

    run = prepare_run(args)
    data = prepare_data(args, run.template)
    run.training_arguments(has_eval=data.val is not None)
    run_dir = run.open(data.stats)
    model = prepare_model(args, run.resolved, default_device(), compact_head=True)
    if (args.packing or args.padding_free) and use_segment_attention(model):
        logger.info("attention: each sample of a flat row on its own (segment attention), not a row-wide mask")
    logger.info("%s (%s); run directory %s", parameter_summary(model), args.tuner_type, run_dir)
    trainer = SwiftlikeTrainer(model=model, args=run.training_args, train_dataset=data.train, eval_dataset=data.val,
                               data_collator=data.collator, processing_class=run.tokenizer, callbacks=run.callbacks,
                               checkpoint_extras=run.checkpoint_extras())
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    return run.result(trainer, data.stats)
