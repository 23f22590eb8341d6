"""The launch environment, read in one place: the variables torchrun (or `NPROC_PER_NODE=N swiftlike ...`, or a
Ray actor) sets to say which process of which job this is, and the process-wide settings swiftlike itself gives
third-party libraries that read them only from the environment.

Every other module asks `LaunchEnv.current()`, a frozen snapshot taken when asked: a Ray actor sets RANK and
WORLD_SIZE just before it trains, so the values are not cached at import.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


def _int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} must be an integer") from None


@dataclass(frozen=True)
class LaunchEnv:
    nproc_per_node: int = 1          # NPROC_PER_NODE: processes to start on this machine (ms-swift's variable)
    nnodes: int = 1                  # NNODES
    node_rank: int = 0               # NODE_RANK
    master_addr: str = "127.0.0.1"   # MASTER_ADDR
    master_port: str | None = None   # MASTER_PORT; None: a free local port for one machine, 29500 for several
    rank: int | None = None          # RANK, set by torchrun (or a Ray actor) in each worker
    local_rank: int | None = None    # LOCAL_RANK, likewise
    world_size: int | None = None    # WORLD_SIZE, likewise

    @classmethod
    def current(cls) -> LaunchEnv:
        return cls(nproc_per_node=_int("NPROC_PER_NODE", 1), nnodes=_int("NNODES", 1),
                   node_rank=_int("NODE_RANK", 0), master_addr=os.environ.get("MASTER_ADDR") or "127.0.0.1",
                   master_port=os.environ.get("MASTER_PORT") or None,
                   rank=_int("RANK", -1) if "RANK" in os.environ else None,
                   local_rank=_int("LOCAL_RANK", -1) if "LOCAL_RANK" in os.environ else None,
                   world_size=_int("WORLD_SIZE", -1) if "WORLD_SIZE" in os.environ else None)

    @property
    def is_worker(self) -> bool:
        """A process torchrun (or a Ray actor) started as one rank of a job, not the one that launches them."""
        return self.local_rank is not None

    @property
    def wants_torchrun(self) -> bool:
        """The launching process of a multi-process run: it starts the workers instead of training."""
        return not self.is_worker and (self.nproc_per_node > 1 or self.nnodes > 1)

    @property
    def planned_world_size(self) -> int:
        """The job's process count: WORLD_SIZE in a worker, else what NPROC_PER_NODE x NNODES will start (the
        launching process sizes defaults, such as gradient accumulation, for the workers it starts)."""
        return self.world_size or self.nproc_per_node * self.nnodes

    @property
    def is_rank_zero(self) -> bool:
        """RANK rather than the process group: closing a colocated vLLM engine destroys the group."""
        return not self.rank

    @property
    def has_process_group_env(self) -> bool:
        """torch.distributed's env:// initialisation finds its rank and world size here."""
        return self.rank is not None and self.world_size is not None


def keep_vllm_in_process() -> None:
    """vLLM's engine core in the calling process (unless the user chose otherwise): it starts ~3x faster on CPU,
    and a trainer in the same process hands it new weights by `collective_rpc`. vLLM reads this only from the
    environment, so the engine-construction edge (`infer.engine.build_engine`) sets it."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
