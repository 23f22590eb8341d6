"""The process groups megatron-core's layers need, set up and torn down from one place.

Megatron's tensor-parallel layers find their groups through `megatron.core.parallel_state`, a process-wide
registry, so a model can only be built after `initialize_model_parallel`. `initialize_parallel` also starts
torch.distributed when nothing has (gloo on CPU, nccl on GPU): from the torchrun environment when there is one,
else as a single process on a free local port, which is what tests and a one-process run want.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ...utils.launch_env import LaunchEnv
from ...utils.net import free_port
from .shims import apply_cpu_shims

_owns_process_group = False


def _start_process_group() -> None:
    global _owns_process_group
    launch = LaunchEnv.current()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(launch.local_rank or 0)
    if launch.has_process_group_env:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    _owns_process_group = True


def initialize_parallel(tensor_model_parallel_size: int = 1, pipeline_model_parallel_size: int = 1,
                        seed: int = 0) -> None:
    """Start torch.distributed if needed and megatron's model-parallel groups (the rest of the world is DP).

    On a GPU the CUDA RNG of every TP rank is seeded through megatron (dropout inside tensor-parallel regions
    forks it); without one the CPU shims stand in (see shims.py).
    """
    from megatron.core import parallel_state, tensor_parallel

    if parallel_state.model_parallel_is_initialized():
        raise RuntimeError("megatron's model-parallel groups are already initialised; call destroy_parallel() first")
    world = dist.get_world_size() if dist.is_initialized() else (LaunchEnv.current().world_size or 1)
    per_replica = tensor_model_parallel_size * pipeline_model_parallel_size
    if tensor_model_parallel_size < 1 or pipeline_model_parallel_size < 1 or world % per_replica:
        raise ValueError(f"tensor_model_parallel_size={tensor_model_parallel_size} x pipeline_model_parallel_size="
                         f"{pipeline_model_parallel_size} must be >= 1 and divide the world size {world} "
                         "(launch with torchrun --nproc_per_node N)")
    if not dist.is_initialized():
        _start_process_group()
    apply_cpu_shims()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size, pipeline_model_parallel_size)
    if torch.cuda.is_available():
        tensor_parallel.model_parallel_cuda_manual_seed(seed)


def gather_tensor_parallel(local: dict[str, torch.Tensor], sharded: set[str]) -> list[dict[str, torch.Tensor]]:
    """Every TP rank's copy of `local` (one dict per rank, rank order): the names in `sharded` are all-gathered
    over the TP group, the others (replicated) repeated. What `mcore_to_hf` takes; every TP rank must call it."""
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    size = parallel_state.get_tensor_model_parallel_world_size()
    per_rank: list[dict[str, torch.Tensor]] = [{} for _ in range(size)]
    for key, tensor in local.items():
        pieces = [tensor] * size
        if key in sharded and size > 1:
            pieces = [torch.empty_like(tensor) for _ in range(size)]
            dist.all_gather(pieces, tensor.contiguous(), group=group)
        for rank, piece in enumerate(pieces):
            per_rank[rank][key] = piece
    return per_rank


def destroy_parallel() -> None:
    """Drop megatron's groups, and the process group too if `initialize_parallel` started it."""
    global _owns_process_group
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if _owns_process_group and dist.is_initialized():
        dist.destroy_process_group()
    _owns_process_group = False
