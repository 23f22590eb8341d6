"""Arguments of `swiftlike megatron rlhf`: `swiftlike rlhf` on the Megatron-core backend, under Megatron-LM's names.

ms-swift's `megatron rlhf` takes Megatron-LM's spellings for the training settings (`micro_batch_size`,
`global_batch_size`, `lr`, `train_iters`, ...) and its parallel sizes; its Ray examples are written with them.
This class accepts them as they are and translates each into the one field the trainers read, so a flag still
reaches its use as the same typed object, and a conflict (both spellings, different values) is an error naming
both. Settings that select Megatron-LM's fused GPU kernels have no counterpart in this backend, and sequence
parallelism does nothing at TP 1 (the only TP training is built for); they are accepted and listed once as having
no effect, rather than refused, so an ms-swift YAML runs unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..utils import get_logger
from ..utils.errors import NotBuiltError, UsageError
from ..utils.launch_env import LaunchEnv
from .base import arg
from .rlhf_args import RlhfArguments

logger = get_logger("swiftlike.arguments")

# Megatron-LM settings that pick a fused kernel or a memory technique this backend does not have, or (sequence
# parallelism) split activations over a TP group, which at TP 1 has one rank.
NO_EFFECT_SETTINGS = ("cross_entropy_loss_fusion", "gradient_accumulation_fusion", "attention_backend",
                      "recompute_granularity", "no_save_rng", "finetune", "sequence_parallel")


@dataclass
class MegatronArguments:
    """Megatron-core parallel sizes, and Megatron-LM's names for training settings (each maps to one field)."""

    tensor_model_parallel_size: int = arg(1, "Tensor-parallel size of the train role (TP); its data-parallel size "
                                          "is the device count / (TP x PP). Training is built for TP 1; the model "
                                          "and its conversion handle TP > 1.")
    pipeline_model_parallel_size: int = arg(1, "Pipeline-parallel size; only 1 is built.")
    context_parallel_size: int = arg(1, "Context-parallel size; only 1 is built.")
    expert_model_parallel_size: int = arg(1, "Expert-parallel size (MoE); only 1 is built.")
    sequence_parallel: bool = arg(False, "Megatron's sequence parallelism (splits activations over the TP group); "
                                  "training is built for TP 1, where it has no effect: true is accepted and named "
                                  "in the start-up warning of settings without effect.")
    micro_batch_size: int | None = arg(None, "Samples per forward pass per data-parallel rank (Megatron's name for "
                                       "--per_device_train_batch_size).")
    global_batch_size: int | None = arg(None, "Samples per optimizer step over all data-parallel ranks; sets "
                                        "--gradient_accumulation_steps to global / (micro_batch_size x DP). With it, "
                                        "--steps_per_generation counts optimizer steps, as in ms-swift's Megatron "
                                        "GRPO (a generation batch of global_batch_size x steps_per_generation).")
    data_parallel_size: int | None = arg(None, "Data-parallel size that --global_batch_size is divided by; default "
                                         "WORLD_SIZE (torchrun) or NPROC_PER_NODE x NNODES over TP x PP. A Ray job "
                                         "sets it from `train.gpus`.")
    lr: float | None = arg(None, "Peak learning rate (Megatron's name for --learning_rate).")
    min_lr: float | None = arg(None, "Learning rate at the end of the decay; equal to --lr means a constant rate.")
    lr_decay_style: Literal["cosine", "linear", "constant"] | None = arg(
        None, "Shape of the learning-rate decay (Megatron's name for --lr_scheduler_type); default cosine.")
    lr_warmup_fraction: float | None = arg(None, "Fraction of the steps spent warming up (--warmup_ratio).")
    lr_warmup_iters: int | None = arg(None, "Warm-up steps (--warmup_steps).")
    train_iters: int | None = arg(None, "Optimizer steps to run (--max_steps).")
    no_save_optim: bool = arg(False, "Checkpoints without the optimizer state (--save_only_model).")
    cross_entropy_loss_fusion: bool = arg(False, "Megatron-LM's fused cross entropy (GPU kernel; no effect here).")
    gradient_accumulation_fusion: bool = arg(False, "Megatron-LM's fused weight-gradient accumulation (GPU kernel; "
                                             "no effect here).")
    attention_backend: str | None = arg(None, "Megatron-LM's attention kernel (flash, fused, unfused, local, auto); "
                                        "this backend runs megatron-core's local attention.")
    recompute_granularity: str | None = arg(None, "Megatron-LM's activation recompute (full, selective); not built "
                                            "for this backend (no effect).")
    no_save_rng: bool = arg(False, "Megatron-LM's checkpoints without RNG state; no effect here.")
    finetune: bool = arg(False, "Megatron-LM: load weights without optimizer state or iteration; an HF checkpoint "
                         "always loads that way here.")


def _data_parallel_size(args: MegatronArguments) -> int:
    world = LaunchEnv.current().planned_world_size
    return max(1, world // (args.tensor_model_parallel_size * args.pipeline_model_parallel_size))


@dataclass
class MegatronRlhfArguments(RlhfArguments, MegatronArguments):
    """swiftlike megatron rlhf: GRPO or GKD with the train role on megatron-core's GPTModel (ms-swift's
    `megatron rlhf`)."""

    command = "megatron"

    def __post_init__(self) -> None:
        self.train_backend = "megatron"
        self._translate()
        super().__post_init__()
        if self.rlhf_type not in ("grpo", "gkd"):
            raise UsageError(f"swiftlike megatron rlhf runs grpo and gkd; --rlhf_type {self.rlhf_type} trains on the "
                             "transformers backend: use `swiftlike rlhf`")
        self._check_parallel()
        noted = [f"--{name}" for name in NO_EFFECT_SETTINGS if getattr(self, name) not in (None, False)]
        if noted:
            logger.warning("%s: Megatron-LM settings with no effect in swiftlike's Megatron backend (fused kernels "
                           "and checkpoint details it does not have; sequence parallelism at TP 1)", ", ".join(noted))

    def _translate(self) -> None:
        """Megatron-LM's names into the fields the trainers read; both spellings with different values is an error."""
        pairs = (("micro_batch_size", "per_device_train_batch_size", 1), ("lr", "learning_rate", None),
                 ("train_iters", "max_steps", -1), ("lr_warmup_fraction", "warmup_ratio", 0.0),
                 ("lr_warmup_iters", "warmup_steps", 0))
        for megatron_name, name, default in pairs:
            value = getattr(self, megatron_name)
            if value is None:
                continue
            if getattr(self, name) not in (default, value):
                raise UsageError(f"--{megatron_name} {value} and --{name} {getattr(self, name)}: one setting under "
                                 "two names; give one of them")
            setattr(self, name, value)
        if self.no_save_optim:
            self.save_only_model = True
        if self.lr_decay_style is not None:
            self.lr_scheduler_type = self.lr_decay_style
        if self.min_lr is not None:
            if self.learning_rate is not None and self.min_lr >= self.learning_rate:
                self.lr_scheduler_type = "constant"
            else:
                style = self.lr_scheduler_type
                if style not in ("cosine", "cosine_with_min_lr"):
                    raise UsageError(f"--min_lr is the floor of a cosine decay; --lr_decay_style {style} has none")
                self.lr_scheduler_type = "cosine_with_min_lr"
                self.lr_scheduler_kwargs = {**(self.lr_scheduler_kwargs or {}), "min_lr": self.min_lr}
        if self.global_batch_size is not None:
            dp = self.data_parallel_size or _data_parallel_size(self)
            per_step = self.per_device_train_batch_size * dp
            if self.global_batch_size % per_step:
                raise UsageError(f"--global_batch_size {self.global_batch_size} is not a multiple of "
                                 f"--micro_batch_size {self.per_device_train_batch_size} x data-parallel size {dp}")
            self.gradient_accumulation_steps = self.global_batch_size // per_step
            if self.steps_per_generation is not None:
                # Megatron's steps_per_generation counts optimizer steps (a generation batch is global_batch_size x
                # steps_per_generation samples); the trainers count micro-batches, as TRL does.
                self.steps_per_generation *= self.gradient_accumulation_steps

    def _check_parallel(self) -> None:
        for name in ("pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size"):
            if getattr(self, name) != 1:
                raise NotBuiltError(f"--{name} {getattr(self, name)}: the Megatron backend runs whole models (1)")
        if self.tensor_model_parallel_size < 1:
            raise UsageError(f"--tensor_model_parallel_size must be >= 1, got {self.tensor_model_parallel_size}")
        if self.tensor_model_parallel_size > 1:
            raise NotBuiltError(f"--tensor_model_parallel_size {self.tensor_model_parallel_size}: training on the "
                                "Megatron backend is built for TP 1 (the data-parallel ranks take the devices); the "
                                "model and its HF conversion handle TP > 1 (docs/megatron.md)")
