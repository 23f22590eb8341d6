"""transformers' Trainer with what a platform run needs around it.

The training loop, optimizer, scheduler, resume and DDP are the Trainer's. Added here:
atomic checkpoints that carry args.json (see checkpoint.py), logging.jsonl, PNG curves at
every save, and the numbers for the end-of-run summary.
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from transformers import Trainer, TrainerCallback

from ..utils.checkpoint import CHECKPOINT_PREFIX, STAGING_DIR, publish
from .outputs import PLOTTED, JsonlLog, plot_curves


class AtomicCheckpoints:
    """Mixed into a transformers Trainer (ours, or one of TRL's): checkpoints appear only when complete, with
    `checkpoint_extras` written into each. A mixin rather than a wrapper because the Trainer calls
    `_save_checkpoint` and `_get_output_dir` on itself."""

    def __init__(self, *args, checkpoint_extras: Callable[[Path], None] | None = None, **kwargs):
        self._checkpoint_extras = checkpoint_extras
        self._staging_root: str | None = None
        super().__init__(*args, **kwargs)

    def _get_output_dir(self, trial) -> str:
        return self._staging_root or super()._get_output_dir(trial)

    def _barrier(self) -> None:
        if self.args.world_size > 1:
            import torch.distributed as dist
            dist.barrier()

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{CHECKPOINT_PREFIX}{self.state.global_step}"
        staging_root = run_dir / STAGING_DIR
        staged = staging_root / name
        if self.args.should_save:
            shutil.rmtree(staged, ignore_errors=True)
            staging_root.mkdir(parents=True, exist_ok=True)
        self._barrier()
        self._staging_root = str(staging_root)
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_root = None
        if self.args.should_save and self._checkpoint_extras is not None:
            self._checkpoint_extras(staged)
        self._barrier()  # every rank has written its RNG state
        if self.args.should_save:
            publish(staged, run_dir / name)
            best = self.state.best_model_checkpoint
            if best is not None and Path(best).parent == staging_root:
                self.state.best_model_checkpoint = str(run_dir / Path(best).name)
            self._rotate(run_dir)
        self._barrier()

    def _rotate(self, run_dir: Path) -> None:
        from transformers.trainer_utils import rotate_checkpoints
        rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit,
                           best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=False)



class SwiftlikeTrainer(AtomicCheckpoints, Trainer):
    """transformers' Trainer with atomic checkpoints; sft, pt and GRPO train with it."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Training batches go through the compact LM head when the model has it (fused_head.py): the same
        loss, projected at labelled positions only. Evaluation keeps the logits (metrics may read them), and
        label smoothing and a custom loss need them too. `self.model`, not `model`: a DDP wrapper hides the
        attribute."""
        if (model.training and "labels" in inputs and self.label_smoother is None and self.compute_loss_func is None
                and getattr(self.model, "compact_lm_head", False)):
            inputs = {**inputs, "fused_lm_head": True}
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        """A Megatron-backend model is saved as an HF checkpoint (LoRA merged), which transformers, vLLM and
        `swiftlike deploy` load; the Trainer would write its GPTModel state dict under Megatron's names. Tensor
        parallel size 1 (what the backend trains with) holds every weight on each rank, so rank 0 writes alone."""
        from .megatron.model import MegatronCausalLM
        model = self.accelerator.unwrap_model(self.model)
        if not isinstance(model, MegatronCausalLM):
            return super()._save(output_dir, state_dict)
        out = Path(output_dir or self.args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        model.write_hf_files(model.merged_hf_state_dict(), out)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(out)

PLOT_INTERVAL_S = 60.0


class RunLogCallback(TrainerCallback):
    """Writes logging.jsonl and redraws the PNG curves of `plot_keys` (each trainer has its own); main process only."""

    def __init__(self, run_dir: Path, log: JsonlLog | None, plot_keys: tuple[str, ...] = PLOTTED):
        self.run_dir = run_dir
        self.log = log
        self.plot_keys = plot_keys
        self.start = time.time()
        self.last_train_loss: float | None = None
        self.last_eval_loss: float | None = None
        self.tokens_per_second: float | None = None
        self._tokens_at_start = 0
        self._last_plot = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self._tokens_at_start = state.num_input_tokens_seen

    def on_step_end(self, args, state, control, **kwargs):
        """Log the final step too, so the summary's last loss is the last step's, not an older one."""
        if state.global_step >= state.max_steps:
            control.should_log = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.log is None or not logs:
            return
        elapsed = time.time() - self.start
        entry = {"step": state.global_step, "epoch": round(state.epoch or 0.0, 4), **logs}
        entry["global_step/max_steps"] = f"{state.global_step}/{state.max_steps}"
        entry["elapsed_s"] = round(elapsed, 2)
        if state.global_step:
            remaining = elapsed / state.global_step * max(state.max_steps - state.global_step, 0)
            entry["remaining_s"] = round(remaining, 1)
        self.log.write(entry)
        if "loss" in logs:
            self.last_train_loss = logs["loss"]
        if "eval_loss" in logs:
            self.last_eval_loss = logs["eval_loss"]
        if "train_runtime" in logs and "train_loss" in logs:  # the Trainer's end-of-training record
            tokens = state.num_input_tokens_seen - self._tokens_at_start
            self.tokens_per_second = tokens / max(logs["train_runtime"], 1e-9)

    def on_save(self, args, state, control, **kwargs):
        """Curves follow the checkpoints, at most every PLOT_INTERVAL_S seconds (drawing costs ~1 s)."""
        final = state.global_step >= state.max_steps  # on_train_end draws them right after
        if state.is_world_process_zero and not final and time.time() - self._last_plot > PLOT_INTERVAL_S:
            plot_curves(self.run_dir, self.plot_keys)
            self._last_plot = time.time()

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            plot_curves(self.run_dir, self.plot_keys)

