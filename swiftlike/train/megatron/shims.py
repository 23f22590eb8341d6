"""Let megatron-core's local (non-Transformer-Engine) GPT layers run on a machine without CUDA.

megatron-core is written for NVIDIA GPUs, and two places on the forward path of the local layer spec assume one
even when every tensor is on the CPU:

- `GlobalMemoryBuffer.get_tensor` allocates its scratch buffer on `torch.cuda.current_device()`. Core attention
  (`DotProductAttention`) takes the `baddbmm` output buffer from it (the sequence-parallel all-gathers take
  theirs too), so the first attention call fails on a CPU-only torch build ("Torch not compiled with CUDA
  enabled"). The shim allocates the same buffer on the CPU.
- `CudaRNGStatesTracker.fork` swaps the CUDA generator's state around attention dropout, so that tensor-parallel
  ranks draw different dropout masks; it needs a state registered by `model_parallel_cuda_manual_seed`, which
  itself calls `torch.cuda.manual_seed`. Without CUDA there is no such generator; the shim makes `fork` a no-op, so
  dropout (zero in the supported checkpoints) draws from the CPU generator.

Two more CUDA allocations (the output layer's vocabulary gather and RotaryEmbedding's table) are not patched but
avoided: model.py gathers the logits itself and rope.py builds the table. The shims are applied only when CUDA
is unavailable (on a GPU the real code is right) and at most once per process.
"""
from __future__ import annotations

import contextlib

import torch

_applied = False


def apply_cpu_shims() -> bool:
    """Patch megatron-core for CPU use if there is no CUDA; True if the shims are in place after the call."""
    global _applied
    if _applied:
        return True
    if torch.cuda.is_available():
        return False
    from megatron.core import utils as mcore_utils
    from megatron.core.tensor_parallel import random as mcore_random

    def get_tensor_on_cpu(self, tensor_shape, dtype, name, mem_alloc_context=None):
        numel = 1
        for size in tensor_shape:
            numel *= size
        key = (name, dtype)
        if key not in self.buffer or self.buffer[key].numel() < numel:
            self.buffer[key] = torch.empty(numel, dtype=dtype, device="cpu", requires_grad=False)
        return self.buffer[key][0:numel].view(*tensor_shape)

    def fork_without_cuda_rng(self, name=None):
        return contextlib.nullcontext()

    mcore_utils.GlobalMemoryBuffer.get_tensor = get_tensor_on_cpu
    mcore_random.CudaRNGStatesTracker.fork = fork_without_cuda_rng
    _applied = True
    return True
