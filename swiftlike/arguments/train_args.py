"""Arguments of `swiftlike sft` and `swiftlike pt`.

Names and defaults follow ms-swift. `swiftlike.train.run.training_arguments` is the one place
they become a `transformers.TrainingArguments`, so the Trainer sees exactly what the user typed.
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..template.base import check_loss_scale
from ..utils.launch_env import LaunchEnv
from ..utils.errors import UsageError
from .base import BaseArguments, arg
from .eval_args import TrainingBenchmarkArguments
from .parser import SavedDefaults

DEEPSPEED_PRESETS = ("zero0", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload")


@dataclass
class TunerArguments:
    """What is trained: all weights, or LoRA adapters (PEFT)."""

    tuner_type: Literal["lora", "full"] = arg("lora", "full: train every weight; lora: train LoRA adapters only.",
                                               aliases=("--train_type",))
    lora_rank: int = arg(8, "LoRA rank r.")
    lora_alpha: int = arg(32, "LoRA scaling alpha (the update is scaled by alpha / r).")
    lora_dropout: float = arg(0.05, "Dropout on the LoRA branch.")
    target_modules: list[str] = arg(["all-linear"], "Modules that get LoRA: all-linear (every linear layer but "
                                    "the output head) or module names such as q_proj v_proj.")
    modules_to_save: list[str] = arg([], "Modules trained in full and saved with the adapter, e.g. embed_tokens "
                                     "lm_head.")
    lora_bias: Literal["none", "all"] = arg("none", "Train biases too (all) or not (none).")


@dataclass
class TrainDataArguments:
    """How training rows become batches: encoding processes, cache, lazy or streamed reading, loss tokens."""

    dataset_num_proc: int = arg(1, "Processes that encode the rows up front.")
    load_from_cache_file: bool = arg(False, "Reuse the encoded rows of an earlier run with the same rows, tokenizer, "
                                     "template and encoding flags ($SWIFTLIKE_CACHE/encoded), or store them there "
                                     "for the next run.")
    lazy_tokenize: bool = arg(False, "Encode a row when the Trainer reads it instead of all rows up front.")
    streaming: bool = arg(False, "Read the datasets row by row as training consumes them, encoding as it goes "
                          "(needs --max_steps; #N takes the first N rows; rows come in file order).")
    padding_free: bool = arg(False, "Flatten each batch into one row without padding; position_ids restart at "
                             "every sample, so attention stays within it.")
    loss_scale: str = arg("default", "Tokens that carry loss: default (every assistant turn), last_round (the "
                          "assistant turns after the last user turn), all (every token).")


@dataclass
class TrainArguments(BaseArguments, TunerArguments, TrainDataArguments, TrainingBenchmarkArguments, SavedDefaults):
    """swiftlike sft: supervised fine-tuning on chat data, loss on the assistant turns."""

    command = "sft"
    output_dir: str | None = arg(None, "Runs go to <output_dir>/vN-YYYYMMDD-HHMMSS/; default output/<model name>, "
                                 "or beside the checkpoint's run with --resume_from_checkpoint.")
    add_version: bool = arg(True, "Put each run in a new vN-<time> subdirectory of --output_dir.")
    learning_rate: float | None = arg(None, "Peak learning rate; default 1e-4 for LoRA, 1e-5 for full.")
    num_train_epochs: float = arg(3.0, "Passes over the training data (ignored when --max_steps > 0).")
    max_steps: int = arg(-1, "Optimizer steps to run; -1 = set by --num_train_epochs.")
    per_device_train_batch_size: int = arg(1, "Samples per forward pass per process.", aliases=("--batch_size",))
    per_device_eval_batch_size: int = arg(1, "Samples per evaluation forward pass per process.")
    gradient_accumulation_steps: int | None = arg(None, "Forward passes per optimizer step; default makes the "
                                                  "total batch at least 16 samples.")
    warmup_ratio: float = arg(0.0, "Fraction of steps with a linear learning-rate warm-up.")
    warmup_steps: int = arg(0, "Warm-up steps; overrides --warmup_ratio when > 0.")
    lr_scheduler_type: str = arg("cosine", "Learning-rate schedule (transformers names: cosine, linear, "
                                 "constant, constant_with_warmup, cosine_with_min_lr, ...).")
    lr_scheduler_kwargs: dict | None = arg(None, "The schedule's own arguments as a JSON object, e.g. "
                                           "'{\"min_lr\": 1e-6}' for cosine_with_min_lr.")
    weight_decay: float = arg(0.1, "AdamW weight decay.")
    adam_beta1: float = arg(0.9, "AdamW beta1.")
    adam_beta2: float = arg(0.95, "AdamW beta2.")
    max_grad_norm: float = arg(1.0, "Clip the gradient norm to this value.")
    optim: str = arg("adamw_torch", "Optimizer (transformers names).")
    logging_steps: int = arg(5, "Log loss, learning rate and grad norm every N steps.")
    save_steps: int = arg(500, "Save a checkpoint every N steps (and at the end).")
    save_total_limit: int | None = arg(None, "Keep at most N checkpoints (the best one is kept too).")
    save_only_model: bool = arg(False, "Save weights only, without optimizer state (cannot resume exactly).")
    eval_steps: int | None = arg(None, "Evaluate (validation loss, and --eval_use_evalscope benchmarks) every N "
                                 "steps; default --save_steps.")
    split_dataset_ratio: float = arg(0.0, "Hold out this fraction of --dataset for validation.")
    truncation_strategy: Literal["delete", "left", "right"] = arg(
        "delete", "A sample longer than --max_length is dropped (delete) or cut on the left or right.")
    packing: bool = arg(False, "Pack several samples into each --max_length row (no padding; attention stays "
                        "within each sample).")
    gradient_checkpointing: bool = arg(True, "Recompute activations in the backward pass to save memory.")
    use_liger_kernel: bool = arg(False, "Liger's fused Triton kernels (CUDA only; on a machine without a GPU "
                                 "training runs without them, with a warning).")
    torch_compile: bool = arg(False, "Compile the model with torch.compile (Inductor) before training. Off by "
                              "default: on this project's 2-core CPU a SmolLM2 LoRA step compiled ran at 0.88x "
                              "the eager speed after 164 s of compiling (benchmarks/bench_compile.py); on a GPU it "
                              "can pay for long runs.")
    dataloader_num_workers: int = arg(0, "Data-loader worker processes.")
    report_to: list[str] = arg(["tensorboard"], "Where metrics go besides logging.jsonl: tensorboard, wandb, "
                               "swanlab or none.")
    logging_dir: str | None = arg(None, "TensorBoard directory; default <run dir>/runs.")
    resume_from_checkpoint: str | None = arg(None, "Continue a run from this checkpoint: optimizer, scheduler, "
                                             "data position and RNG are restored.")
    deepspeed: str | None = arg(None, "DeepSpeed config: zero0|zero1|zero2|zero3|zero2_offload|zero3_offload or "
                                "a JSON path (GPU only).")
    ddp_backend: str | None = arg(None, "torch.distributed backend; default nccl on GPU, gloo on CPU.")
    ddp_timeout: int = arg(18000000, "Seconds a process waits for the others.")
    profile_step: int | None = arg(None, "Run optimizer step N under torch's profiler and write its operators "
                                   "ranked by self time to <run dir>/profile-stepN.txt (and .json). Pick a step "
                                   "after the first, which pays one-time allocations.")

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check()
        self.check_benchmarks()
        if self.learning_rate is None:
            self.learning_rate = 1e-4 if self.tuner_type == "lora" else 1e-5
        if self.eval_steps is None:
            self.eval_steps = self.save_steps
        if self.gradient_accumulation_steps is None:
            world = LaunchEnv.current().planned_world_size
            self.gradient_accumulation_steps = max(1, math.ceil(16 / self.per_device_train_batch_size / world))
        self.report_to = [r for r in self.report_to if r != "none"]
        if self.resume_from_checkpoint is not None:
            self._check_resume_dir()

    @classmethod
    def saved_defaults(cls, given: dict) -> dict:
        """With --resume_from_checkpoint, arguments not given again are those of the run being resumed."""
        checkpoint = given.get("resume_from_checkpoint")
        run_args = Path(checkpoint).parent / "args.json" if checkpoint else None
        if run_args is None or not run_args.is_file():
            return {}
        import dataclasses
        import json
        saved = json.loads(run_args.read_text())
        skip = {"resume_from_checkpoint", "output_dir", "add_version"}
        return {f.name: saved[f.name] for f in dataclasses.fields(cls)
                if f.init and f.name in saved and f.name not in skip}

    def _check(self) -> None:
        if self.model is None and self.resume_from_checkpoint is None:
            raise UsageError("--model is required, e.g. --model HuggingFaceTB/SmolLM2-135M-Instruct")
        if not self.dataset:
            raise UsageError("--dataset is required: a .jsonl/.json/.csv file or a built-in name "
                             "(swiftlike/alpaca-mini, swiftlike/self-cognition, ...)")
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "logging_steps", "save_steps",
                     "lora_rank", "lora_alpha"):
            if getattr(self, name) <= 0:
                raise UsageError(f"--{name} must be positive, got {getattr(self, name)}")
        if self.gradient_accumulation_steps is not None and self.gradient_accumulation_steps <= 0:
            raise UsageError(f"--gradient_accumulation_steps must be positive, got {self.gradient_accumulation_steps}")
        if self.profile_step is not None and not 0 < self.profile_step <= max(self.max_steps, self.profile_step):
            raise UsageError(f"--profile_step must be a step of the run (1..--max_steps), got {self.profile_step}")
        if not 0 <= self.split_dataset_ratio < 1:
            raise UsageError(f"--split_dataset_ratio must be in [0, 1), got {self.split_dataset_ratio}")
        if not 0 <= self.warmup_ratio < 1:
            raise UsageError(f"--warmup_ratio must be in [0, 1), got {self.warmup_ratio}; use --warmup_steps for "
                             "a step count")
        if not 0 <= self.lora_dropout < 1:
            raise UsageError(f"--lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.packing and self.max_length is None:
            raise UsageError("--packing true needs --max_length (the length of each packed row)")
        self._check_data_flags()
        if self.max_steps <= 0 and self.num_train_epochs <= 0:
            raise UsageError("set --max_steps > 0 or --num_train_epochs > 0")
        if self.tuner_type == "full" and self.adapters:
            raise UsageError("--adapters continues LoRA training; it cannot be combined with --tuner_type full")
        unknown = [r for r in self.report_to if r not in ("tensorboard", "wandb", "swanlab", "none")]
        if unknown:
            raise UsageError(f"--report_to {' '.join(unknown)}: choose from tensorboard, wandb, swanlab, none")
        for tracker in ("wandb", "swanlab"):  # transformers would only fail once the trainer is built
            if tracker in self.report_to and importlib.util.find_spec(tracker) is None:
                raise UsageError(f"--report_to {tracker} needs the {tracker} package: "
                                 f"pip install 'swiftlike[{tracker}]'")

    def _check_data_flags(self) -> None:
        check_loss_scale(self.loss_scale)
        if self.dataset_num_proc < 1:
            raise UsageError(f"--dataset_num_proc must be >= 1, got {self.dataset_num_proc}")
        if self.streaming and self.max_steps <= 0:
            raise UsageError("--streaming true needs --max_steps: a stream has no length to count epochs in")
        if self.streaming and self.split_dataset_ratio > 0:
            raise UsageError("--split_dataset_ratio needs the whole dataset; with --streaming true give "
                             "--val_dataset instead")
        if self.packing and (self.lazy_tokenize or self.streaming):
            raise UsageError("--packing true needs every sample's length up front; it cannot be combined with "
                             "--lazy_tokenize or --streaming (use --padding_free true instead)")

    def _check_resume_dir(self) -> None:
        from ..utils.checkpoint import check_resumable
        check_resumable(self.resume_from_checkpoint)
        run_args = Path(self.resume_from_checkpoint).parent / "args.json"
        if self.model is None and run_args.is_file():
            import json
            saved = json.loads(run_args.read_text())
            for key in ("model", "model_type", "template", "system"):
                if getattr(self, key) is None:
                    setattr(self, key, saved.get(key))
        if self.model is None:
            raise UsageError(f"--model is required: no args.json next to {self.resume_from_checkpoint}")
        if self.output_dir is None:  # the continuation lands next to the run it continues
            self.output_dir = str(Path(self.resume_from_checkpoint).resolve().parent.parent)

    @property
    def loss_on_all_tokens(self) -> bool:
        return False

    def deepspeed_config(self) -> str | None:
        """A preset name becomes the JSON file shipped with swiftlike; DeepSpeed itself needs a GPU."""
        if self.deepspeed is None:
            return None
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--deepspeed needs a CUDA GPU; on this machine train without it "
                             "(multi-process CPU training works with NPROC_PER_NODE=N)")
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            raise UsageError("--deepspeed needs the deepspeed package: pip install 'swiftlike[deepspeed]'") from None
        if self.deepspeed in DEEPSPEED_PRESETS:
            return str(Path(__file__).parent.parent / "train" / "ds_config" / f"{self.deepspeed}.json")
        if not Path(self.deepspeed).is_file():
            raise UsageError(f"--deepspeed {self.deepspeed}: not a preset ({', '.join(DEEPSPEED_PRESETS)}) "
                             "nor an existing JSON file")
        return self.deepspeed


@dataclass
class PtArguments(TrainArguments):
    """swiftlike pt: continued pre-training on plain text, loss on every token."""

    command = "pt"
    loss_scale: str = arg("all", "Tokens that carry loss; pt learns plain text, so every token (all).")

    def _check_data_flags(self) -> None:
        super()._check_data_flags()
        if self.loss_scale != "all":
            raise UsageError(f"--loss_scale {self.loss_scale}: swiftlike pt learns plain text with no chat "
                             "turns, so every token carries loss (all); use swiftlike sft for turn-based loss")

    @property
    def loss_on_all_tokens(self) -> bool:
        return True
