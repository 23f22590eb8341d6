"""What every training command (sft, pt, rlhf: grpo, gkd, the preference family) does around its Trainer.

`prepare_run` and its `Run` are the one set-up, so each command sets up a run exactly as sft does: the same
seed, model resolution and template, the same `TrainingArguments` mapping, the same run directory, log,
args.json, checkpoint files and summary. A command adds only what its trainer needs between the steps.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..arguments.train_args import TrainArguments
from ..model import ResolvedModel, default_device, load_tokenizer, resolve_model
from ..template import get_template
from ..utils import atomic_write_json, get_logger, warn_once
from ..utils.checkpoint import latest_checkpoint
from ..utils.threads import adapts_threads
from .data import EncodeStats
from .outputs import ARGS_FILE, PLOTTED, JsonlLog, new_run_dir, save_args

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


@dataclass
class Run:
    """One training run from its arguments to its `TrainResult`, in the order the commands need it:
    `prepare_run` (seed, model, tokenizer, template), `training_arguments`, `open` (run directory, log,
    args.json, callbacks), the trainer (the command's own), `result`."""

    args: TrainArguments
    resolved: ResolvedModel
    tokenizer: object
    template: object
    started: float
    training_args: object = None
    run_dir: Path | None = None
    log: JsonlLog | None = None
    saved_args: dict = field(default_factory=dict)
    callbacks: list = field(default_factory=list)  # the run log's first; the Trainer takes them as they are

    def training_arguments(self, has_eval: bool, config_cls=None, **extra):
        """The run's `TrainingArguments` (see `training_arguments`), pointed at the output root until `open`
        names the run directory: TrainingArguments sets up the process group that agrees on that name."""
        self.training_args = training_arguments(self.args, Path(self.args.output_dir or "output"), has_eval,
                                                config_cls, **extra)
        return self.training_args

    def open(self, data: EncodeStats | None = None, plot_keys: tuple[str, ...] = PLOTTED, *,
             carry_log_on_resume: bool = True) -> Path:
        """The run directory with args.json (`data`: the encoding counts it records) and a new logging.jsonl;
        a resumed run's log starts with the history it continues unless `carry_log_on_resume` is false (the
        online trainers log only the steps they run)."""
        from .trainer import RunLogCallback
        args, training_args = self.args, self.training_args
        self.run_dir = shared_run_dir(args, training_args, self.resolved)
        training_args.output_dir = str(self.run_dir)
        self.log = JsonlLog(self.run_dir) if training_args.process_index == 0 else None
        if self.log is not None:
            extra = {} if data is None else {"data": data.__dict__}
            self.saved_args = save_args(self.run_dir, args, model_dir=str(self.resolved.model_dir),
                                        template=self.template.meta.name, model_type=self.resolved.model_type,
                                        **extra)
            if args.resume_from_checkpoint and carry_log_on_resume:
                checkpoint = Path(args.resume_from_checkpoint)
                self.log.seed_from(checkpoint.parent, int(checkpoint.name.rsplit("-", 1)[-1]))
        benchmarks = []
        if args.eval_use_evalscope:
            from ..eval.during_training import PLOT_PATTERN, BenchmarkCallback
            benchmarks = [BenchmarkCallback(args, self.resolved, self.template, self.run_dir)]
            plot_keys = (*plot_keys, PLOT_PATTERN)
        profiler = []
        if args.profile_step is not None:
            from .profiling import StepProfiler
            profiler = [StepProfiler(args.profile_step, self.run_dir, training_args.process_index == 0)]
        threads = []
        if adapts_threads():
            from .fair_threads import FairShareThreads
            threads = [FairShareThreads()]
        # the callbacks that add to a record (benchmarks, threads) before the run log's, which writes it
        self.callbacks = [*benchmarks, *threads, RunLogCallback(self.run_dir, self.log, plot_keys),
                          *tensorboard_callbacks(args), *profiler]
        return self.run_dir

    @property
    def callback(self):
        """The run log's callback, which holds the numbers of the summary."""
        from .trainer import RunLogCallback
        return next(c for c in self.callbacks if isinstance(c, RunLogCallback))

    def checkpoint_extras(self):
        return checkpoint_args_writer(self.saved_args)

    def result(self, trainer, data: EncodeStats, metric_keys: tuple[str, ...] = ()) -> TrainResult:
        """The summary of a trained `trainer`: `metric_keys` are the logged series whose last values it lists.
        Tokens per second only where the Trainer counted input tokens (not for batches built from rollouts)."""
        callback, history = self.callback, trainer.state.log_history
        metrics: dict[str, float] = {}
        for entry in history:
            metrics.update({k: v for k, v in entry.items() if k in metric_keys or k.startswith("eval_bench/")})
        eval_losses = [e["eval_loss"] for e in history if "eval_loss" in e]
        best = trainer.state.best_model_checkpoint
        counts_tokens = self.training_args.include_num_input_tokens_seen != "no"
        return TrainResult(run_dir=self.run_dir, last_checkpoint=latest_checkpoint(self.run_dir),
                           best_checkpoint=Path(best) if best else None, global_step=trainer.state.global_step,
                           train_loss=callback.last_train_loss, eval_loss=eval_losses[-1] if eval_losses else None,
                           elapsed_s=time.time() - self.started,
                           train_tokens_per_second=callback.tokens_per_second if counts_tokens else None,
                           data=data, metrics=metrics)


def prepare_run(args: TrainArguments) -> Run:
    """Seed first, before any weight (a LoRA adapter, a reward head) is initialised, so a run is reproducible
    from its args; then the model's files, tokenizer and template."""
    from transformers import set_seed
    started = time.time()
    set_seed(args.seed)
    resolved = resolve_model(args.model, args.model_type, args.use_hf, args.model_revision)
    tokenizer = load_tokenizer(resolved)
    template = get_template(args.template or resolved.meta.template, tokenizer, args.system, args.agent_template)
    return Run(args=args, resolved=resolved, tokenizer=tokenizer, template=template, started=started)


def tensorboard_callbacks(args: TrainArguments) -> list:
    """The TensorBoard writer of --logging_dir, given to the Trainer as a callback: transformers reads that
    directory only from the TENSORBOARD_LOGGING_DIR variable, which would outlive the run in this process and
    send a later run's curves there. Without --logging_dir the Trainer's own writer logs to <run dir>/runs."""
    if args.logging_dir is None or "tensorboard" not in args.report_to:
        return []
    from transformers.integrations import TensorBoardCallback
    callback = TensorBoardCallback()
    callback.logging_dir = os.path.expanduser(args.logging_dir)
    return [callback]


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
        # with --logging_dir, `tensorboard_callbacks` writes TensorBoard's curves
        report_to=[r for r in args.report_to if not (r == "tensorboard" and args.logging_dir)] or "none",
        deepspeed=args.deepspeed_config(), ddp_timeout=args.ddp_timeout,
        # On CPU, accelerate forms a torchrun process group only when told it is a CPU run.
        use_cpu=on_cpu, ddp_backend=args.ddp_backend, ddp_find_unused_parameters=False,
        use_liger_kernel=args.use_liger_kernel and not on_cpu,
        torch_compile=args.torch_compile,
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
