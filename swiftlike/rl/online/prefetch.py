"""Bounded staleness for `--async_generate`: generation batches prefetched ahead of the trainer, and the
rule that keeps any sample more than `--max_staleness` optimizer steps old out of the loss.

The dataloader hands each generation batch together with the rows of the next `depth` distinct batches
(`LookaheadBatches`); the trainer keeps that many generating on the rollout servers (`Prefetch`), so
generation runs continuously beside training into a buffer of at most `depth` batches, and weight syncs
do not wait for it (the servers continue a request under new weights, rollout/server/partial.py). `depth` is the
most batches ahead whose samples are still within the bound at the last step that trains on them
(rl/core/staleness.py), so a prefetched batch normally arrives within it. A batch taken from
the buffer is filtered by `rl.core.staleness.stale_groups` against what is left of the bound after its remaining steps: a
group that would be too old by its last use (a request that waited long on a busy server) is dropped and
generated again with the current weights (`spliced_index`), so the batch stays full.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future

from torch.utils.data import DataLoader, Sampler


def spliced_index(n: int, stale: list[int], group_size: int) -> list[int]:
    """Where each of `n` items comes from once the groups `stale` are replaced at their places: an index into the
    old items followed by the new ones (the stale groups' replacements, in the order of `stale`)."""
    replacement = {k: j for j, k in enumerate(stale)}
    return [n + replacement[i // group_size] * group_size + i % group_size if i // group_size in replacement else i
            for i in range(n)]


class GenerationRows(list):
    """A generation batch's rows, plus the rows of the next distinct batches for prefetching ([] if none)."""

    def __init__(self, rows: list[dict], ahead: list[list[dict]]):
        super().__init__(rows)
        self.ahead = ahead

    @classmethod
    def collate(cls, batch_size: int):
        """The DataLoader's collate_fn for LookaheadBatches: cut the flat rows back into batches."""
        def split(rows: list[dict]) -> GenerationRows:
            return cls(rows[:batch_size], [rows[k:k + batch_size] for k in range(batch_size, len(rows), batch_size)])
        return split


class LookaheadBatches(Sampler):
    """Generation batches of a RepeatSampler (grpo_trainer.py), as flat index lists: each copy of a distinct
    batch is followed by the indices of the next `depth` distinct batches of the same epoch (fewer near its
    end). Every copy carries them, not only the first: a run resumed between a batch's uses prefetches the
    batches after it at once."""

    def __init__(self, sampler, batch_size: int, depth: int):
        self.sampler, self.batch_size, self.depth = sampler, batch_size, depth

    def __iter__(self):
        flat = list(self.sampler)
        batches = [flat[i:i + self.batch_size] for i in range(0, len(flat), self.batch_size)]
        repeat = self.sampler.repeat
        distinct = batches[::repeat]
        for i, batch in enumerate(batches):
            ahead = distinct[i // repeat + 1:i // repeat + 1 + self.depth]
            yield [index for rows in (batch, *ahead) for index in rows]

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)


class EpochLoader(DataLoader):
    """A DataLoader the Trainer tells the epoch (`set_epoch`, as it does accelerate's), so each epoch draws its
    own order and a resumed run the same one as an uninterrupted run. In the epoch a run resumes in, the
    Trainer wraps the batch sampler to skip what was trained and sets the epoch on the batch sampler itself."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)


class Prefetch:
    """Generation batches submitted ahead, in the order they will be trained on."""

    def __init__(self, submit):
        self._submit = submit  # rows -> a Future of the batch (scoring.GroupScoring.submit)
        self._pending: deque[tuple[list[dict], Future]] = deque()

    def take(self, rows: list[dict]):
        """This batch's result if it was prefetched (waits for it), else None; a prefetched batch for other
        rows (a resumed run) is discarded."""
        if self._pending and self._pending[0][0] == list(rows):
            return self._pending.popleft()[1].result()
        self.clear()
        return None

    def top_up(self, ahead: list[list[dict]]) -> None:
        """Keep the next batches generating: submit those of `ahead` not in flight yet."""
        if any(p[0] != a for p, a in zip(self._pending, ahead)):
            self.clear()
        for rows in ahead[len(self._pending):]:
            self._pending.append((list(rows), self._submit(list(rows))))

    def clear(self) -> None:
        while self._pending:
            _, future = self._pending.popleft()
            if not future.cancel():
                future.result()

    def __len__(self) -> int:
        return len(self._pending)
