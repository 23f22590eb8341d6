"""What every training command (sft, pt, rlhf) does before its Trainer starts.

Kept apart from the commands so GRPO and later trainers set up runs exactly as sft does: the
same data split, the same `TrainingArguments` mapping, the same run directory and checkpoint files.
"""
from __future__ import annotations

from pathlib import Path

from ..arguments.train_args import TrainArguments
from ..model import ResolvedModel, default_device
from ..utils import atomic_write_json, get_logger, warn_once
from .outputs import ARGS_FILE, new_run_dir

logger = get_logger("swiftlike.train")


def load_train_val_rows(args: TrainArguments, row_kind: str | None = None) -> tuple[list[dict], list[dict]]:
    """--dataset split by --split_dataset_ratio, plus --val_dataset; `row_kind` as in `load_dataset`."""
    from ..dataset import load_dataset, split_dataset
    rows = load_dataset(args.dataset, seed=args.seed, model_name=args.model_name, model_author=args.model_author,
                        use_hf=args.use_hf, row_kind=row_kind)
    train, val = split_dataset(rows, args.split_dataset_ratio, args.seed)
    if args.val_dataset:
        val += load_dataset(args.val_dataset, seed=args.seed, model_name=args.model_name,
                            model_author=args.model_author, use_hf=args.use_hf, row_kind=row_kind)
    return train, val


def training_arguments(args: TrainArguments, run_dir: Path, has_eval: bool, config_cls=None, **extra):
    """The one place our arguments become a `transformers.TrainingArguments`, or the subclass a TRL trainer
    reads (`config_cls`, e.g. `DPOConfig`), with that trainer's own fields in `extra`."""
    from transformers import TrainingArguments
    config_cls = config_cls or TrainingArguments
    on_cpu = default_device() == "cpu"
    if args.use_liger_kernel and on_cpu:
        warn_once(logger, "--use_liger_kernel: Liger's kernels are Triton kernels for CUDA GPUs, which this machine "
                          "lacks; training runs without them")
    return config_cls(
        output_dir=str(run_dir), seed=args.seed, data_seed=args.seed,
        learning_rate=args.learning_rate, num_train_epochs=args.num_train_epochs, max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        warmup_steps=args.warmup_steps if args.warmup_steps > 0 else args.warmup_ratio,  # < 1 means a ratio
        lr_scheduler_type=args.lr_scheduler_type, lr_scheduler_kwargs=args.lr_scheduler_kwargs or {},
        weight_decay=args.weight_decay,
        adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, max_grad_norm=args.max_grad_norm, optim=args.optim,
        logging_steps=args.logging_steps, logging_first_step=True, logging_nan_inf_filter=False, save_strategy="steps", save_steps=args.save_steps,
        save_total_limit=args.save_total_limit, save_only_model=args.save_only_model,
        eval_strategy="steps" if has_eval else "no", eval_steps=args.eval_steps if has_eval else None,
        metric_for_best_model="loss" if has_eval else None, greater_is_better=False if has_eval else None,
        gradient_checkpointing=args.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if args.gradient_checkpointing else None,
        bf16=args.torch_dtype == "bfloat16", fp16=args.torch_dtype == "float16",
        dataloader_num_workers=args.dataloader_num_workers, remove_unused_columns=False,
        dataloader_pin_memory=not on_cpu,
        report_to=args.report_to or "none",
        deepspeed=args.deepspeed_config(), ddp_timeout=args.ddp_timeout,
        # On CPU, accelerate forms a torchrun process group only when told it is a CPU run.
        use_cpu=on_cpu, ddp_backend=args.ddp_backend, ddp_find_unused_parameters=False,
        use_liger_kernel=args.use_liger_kernel and not on_cpu,
        # packed and flattened rows have no padding; counting "non-padding" would skip real tokens equal to the pad id
        include_num_input_tokens_seen="all" if args.packing or args.padding_free else "non_padding",
        **extra,
    )


def shared_run_dir(args: TrainArguments, training_args, resolved: ResolvedModel) -> Path:
    """Rank 0 picks the versioned directory; the other processes are told its name."""
    output_dir = args.output_dir or str(Path("output") / Path(resolved.model_id.rstrip("/")).name)
    name = [str(new_run_dir(output_dir, args.add_version)) if training_args.process_index == 0 else None]
    if training_args.world_size > 1:
        import torch.distributed as dist
        dist.broadcast_object_list(name, src=0)
    return Path(name[0])


def checkpoint_args_writer(saved_args: dict):
    """Each checkpoint carries the run's args.json, so infer/export/resume can use it on its own."""
    def write(checkpoint: Path) -> None:
        atomic_write_json(checkpoint / ARGS_FILE, saved_args)
    return write
