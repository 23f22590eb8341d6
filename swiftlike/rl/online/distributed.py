"""What the GRPO trainer shares between processes: token counts for the loss normalisers, and logged metrics.

Each process generates, scores and trains on its own share of the generation batch (whole prompt groups,
see `RepeatSampler`), so two things need the other ranks: the bnpo/dapo normalisers, which count the
completion tokens of the *global* micro-batch or optimizer step (see `losses.aggregate`), and the metrics,
which each rank measures on its own rows. Both are no-ops in one process.
"""
from __future__ import annotations

import torch


def _world_size() -> int:
    import torch.distributed as dist
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def process_rank() -> tuple[int, int]:
    """(rank, world size) of this trainer process; (0, 1) without a process group."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    import torch.distributed as dist
    if _world_size() > 1:
        dist.barrier()


def server_shares(num_servers: int, rank: int, world: int) -> tuple[list[int], bool]:
    """Which rollout servers trainer process `rank` of `world` generates on, and whether it owns them (pushes
    their weights).

    With at least as many servers as processes, each server belongs to one process (servers r, r + world, ...),
    so every process syncs its own servers and none waits for another. With fewer servers, process r shares
    server r % num_servers with others and the lowest of them (rank r < num_servers) owns it: all processes hold
    the same weights after an optimizer step, so one push serves them all, and the others wait for it.
    """
    if num_servers >= world:
        return list(range(rank, num_servers, world)), True
    return [rank % num_servers], rank < num_servers


def sum_across_processes(counts: list[int], device: torch.device | str = "cpu") -> list[int]:
    """Element-wise sum of every process's `counts` (all must pass lists of the same length).

    `device` is where the collective runs: CUDA for NCCL, CPU for gloo.
    """
    if _world_size() == 1:
        return list(counts)
    import torch.distributed as dist
    totals = torch.tensor(counts, dtype=torch.long, device=device)
    dist.all_reduce(totals)
    return totals.tolist()


def concat_across_processes(values: torch.Tensor) -> tuple[torch.Tensor, slice]:
    """Every process's `values` (same shape on each) concatenated in rank order, and this rank's slice of it.

    For statistics over the global batch, such as `--scale_rewards batch`'s reward std, which a 1-process run
    of the same global batch takes over all of its rows.
    """
    world = _world_size()
    if world == 1:
        return values, slice(0, values.shape[0])
    import torch.distributed as dist
    parts = [torch.empty_like(values) for _ in range(world)]
    dist.all_gather(parts, values.contiguous())
    n, rank = values.shape[0], dist.get_rank()
    return torch.cat(parts), slice(rank * n, (rank + 1) * n)


def metric_reduction(key: str) -> str:
    """How a metric combines over processes: "max" for timings and maxima, "min" for minima, else "mean".

    A timing is the slowest rank's, because that rank sets the step's pace. A maximum or minimum over
    rows or tokens (`completions/max_length`, `staleness/max`, `rollout_correction/log_ppl_diff_min`) is
    taken over all ranks' rows too.
    """
    words = key.rsplit("/", 1)[-1].split("_")
    if key.startswith("timing/") or words[0] == "max" or words[-1] == "max":
        return "max"
    if words[0] == "min" or words[-1] == "min":
        return "min"
    return "mean"


def reduce_metrics(local: dict[str, float]) -> dict[str, float]:
    """Every process's metrics combined by `metric_reduction`; called by all ranks together.

    The mean is over processes. Each rank holds the same number of rows and logs the same number of
    values per key, so for a per-row average (reward, completion length, zero-std fraction) that is the
    average over the global batch; for a per-token average (kl, entropy, clip ratios, rollout_correction/*)
    it weighs each rank's micro-batches equally, as TRL and ms-swift do. A std (reward_std) is the mean
    of the ranks' stds, not the global batch's. A key only some ranks logged is combined over those.
    """
    world = _world_size()
    if world == 1:
        return dict(local)
    import torch.distributed as dist
    gathered: list[dict[str, float] | None] = [None] * world
    dist.all_gather_object(gathered, dict(local))
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for metrics in gathered for k in metrics):
        values = [metrics[key] for metrics in gathered if key in metrics]
        how = metric_reduction(key)
        out[key] = max(values) if how == "max" else min(values) if how == "min" else sum(values) / len(values)
    return out


def gather_ragged(values: torch.Tensor) -> tuple[torch.Tensor, slice]:
    """Every process's 1-D `values`, of any length each, concatenated in rank order (on every rank), and this
    rank's slice of it.

    For a statistic over the global micro-batch's tokens, such as `--top_entropy_quantile`'s threshold or
    KL-Cov's top share, whose token count differs between ranks.
    """
    if _world_size() == 1:
        return values, slice(0, values.numel())
    import torch.distributed as dist
    lengths = counts_of_each_process(values.numel(), values.device)
    padded = torch.zeros(max(lengths), dtype=values.dtype, device=values.device)
    padded[:values.numel()] = values
    parts = [torch.empty_like(padded) for _ in lengths]
    dist.all_gather(parts, padded)
    start = sum(lengths[:dist.get_rank()])
    return torch.cat([part[:n] for part, n in zip(parts, lengths)]), slice(start, start + values.numel())


def counts_of_each_process(count: int, device: torch.device | str = "cpu") -> list[int]:
    """Each process's `count`, in rank order (called by all ranks together)."""
    import torch.distributed as dist
    counts = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(_world_size())]
    dist.all_gather(counts, torch.tensor([count], dtype=torch.long, device=device))
    return [int(c) for c in counts]
