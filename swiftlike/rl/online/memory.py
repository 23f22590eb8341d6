"""GPU memory sharing between the trainer and a colocated vLLM engine (--sleep_level, --offload_*).

These only mean something when vLLM runs on CUDA in the trainer's process: vLLM's sleep mode is built on
its CUDA memory allocator, and offloading the training model or optimizer to CPU frees GPU memory for the
engine's KV cache. Elsewhere (CPU, or the pt engine generating with the training model itself) they are
accepted, reported once as no-ops, and ignored, so one command line works on both kinds of machine.
"""
from __future__ import annotations

import contextlib

import torch

from ...infer.engine.vllm_engine import VllmOptions
from ...utils import get_logger
from ..core.options import RolloutOptions

logger = get_logger("swiftlike.rl")


class ColocateMemory:
    """What of --sleep_level, --offload_model, --offload_optimizer, --vllm_tensor_parallel_size applies here."""

    def __init__(self, rollout: RolloutOptions, vllm: VllmOptions, cuda: bool | None = None):
        cuda = torch.cuda.is_available() if cuda is None else cuda
        active = bool(rollout.use_vllm and rollout.vllm_mode == "colocate" and cuda)
        asked = [f"--{name} {value}" for name, value, default in (
            ("sleep_level", rollout.sleep_level, 0), ("offload_model", rollout.offload_model, False),
            ("offload_optimizer", rollout.offload_optimizer, False),
            ("vllm_tensor_parallel_size", vllm.tensor_parallel_size, 1)) if value != default]
        self.no_ops = [] if active else asked
        if self.no_ops:
            why = ("no CUDA device" if not cuda else "--use_vllm false generates with the training model itself"
                   if not rollout.use_vllm else "--vllm_mode server: the rollout server owns its devices")
            logger.warning("%s: no-op in this run (%s); vLLM sleep mode, offloading and tensor parallelism need "
                           "a colocated vLLM engine on CUDA", ", ".join(self.no_ops), why)
        self.sleep_level = rollout.sleep_level if active else 0
        self.offload_model = rollout.offload_model and active
        self.offload_optimizer = rollout.offload_optimizer and active
        self.tensor_parallel_size = vllm.tensor_parallel_size if active else 1

    @contextlib.contextmanager
    def offloaded(self, model, optimizer):
        """Training model and/or optimizer state on CPU for the duration (vLLM generating), then back."""
        if not (self.offload_model or self.offload_optimizer):
            yield
            return
        device = next(model.parameters()).device
        if self.offload_model:
            model.to("cpu")
        if self.offload_optimizer and optimizer is not None:
            _move_optimizer_state(optimizer, "cpu")
        torch.cuda.empty_cache()
        try:
            yield
        finally:
            if self.offload_model:
                model.to(device)
            if self.offload_optimizer and optimizer is not None:
                _move_optimizer_state(optimizer, device)


def _move_optimizer_state(optimizer, device) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to(device, non_blocking=True)
