"""When GRPO trains on each generation batch, and how far ahead `--async_generate` may generate under
`--max_staleness`: pure arithmetic over micro-steps, shared by the argument checks and the trainer.

A generation batch is served for `micro_steps` = steps_per_generation x num_iterations consecutive
micro-steps of an epoch, and every `gradient_accumulation_steps` micro-steps make one optimizer step. The
two need not divide each other (steps_per_generation 3 with accumulation 2: a batch's third micro-batch
shares its optimizer step with the next batch's first), so a batch's first and last optimizer steps are
counted here from its first micro-step rather than assumed to be whole multiples. The Trainer starts every
epoch at an optimizer step and a generation batch, so positions are counted within the epoch.

A sample's staleness at a step is that step minus the step whose weights sampled its oldest token; the
bound holds at every step that trains on it, the last one included.
"""
from __future__ import annotations

import math


def trained_steps(first_micro_step: int, micro_steps: int, accumulation: int) -> tuple[int, int]:
    """(first, last) optimizer step of the epoch that trains on the generation batch whose first micro-step
    is `first_micro_step`."""
    return first_micro_step // accumulation, (first_micro_step + micro_steps - 1) // accumulation


def prefetch_lag(batches_ahead: int, micro_steps: int, accumulation: int) -> int:
    """The most optimizer steps between starting a batch `batches_ahead` batches after the one being taken
    (the trainer tops the prefetch up when it takes a batch, right after that step's weight sync) and the
    last step that trains on it. The schedule repeats every accumulation / gcd batches, so that many
    starting batches cover every case."""
    period = accumulation // math.gcd(micro_steps, accumulation)
    return max(trained_steps((j + batches_ahead) * micro_steps, micro_steps, accumulation)[1]
               - trained_steps(j * micro_steps, micro_steps, accumulation)[0] for j in range(period))


def min_async_staleness(micro_steps: int, accumulation: int) -> int:
    """The smallest --max_staleness that lets one generation batch be prefetched: 1 when a batch serves one
    optimizer step, 2B - 1 when it serves B."""
    return prefetch_lag(1, micro_steps, accumulation)


def prefetch_depth(max_staleness: int, micro_steps: int, accumulation: int) -> int:
    """Generation batches to keep generating ahead: the most whose every sample is at most `max_staleness`
    steps old at the last step that trains on it (0 = synchronous)."""
    if max_staleness <= 0:
        return 0
    depth = 0
    while prefetch_lag(depth + 1, micro_steps, accumulation) <= max_staleness:
        depth += 1
    return depth


def steps_left(micro_step: int, micro_steps: int, accumulation: int) -> int:
    """Optimizer steps after the current one that still train on the generation batch being served at
    `micro_step` of the epoch (0 when this step is its last)."""
    first = micro_step - micro_step % micro_steps
    return trained_steps(first, micro_steps, accumulation)[1] - micro_step // accumulation


def stale_groups(versions: list[int | None], current: int, max_staleness: int, group_size: int) -> list[int]:
    """Indices of the groups (consecutive `group_size` samples) holding a sample whose policy version (its oldest
    token's) is more than `max_staleness` steps behind `current`. A group goes as a whole: its advantages are
    computed over all its samples. None (a sample of the current policy) is never stale."""
    stale = []
    for g in range(len(versions) // group_size):
        group = versions[g * group_size:(g + 1) * group_size]
        if any(v is not None and current - v > max_staleness for v in group):
            stale.append(g)
    return stale
