"""Rewards scored while generation goes on (server mode): each group is sent to a rollout server as its own request
and scored as soon as its completions are back, while the other groups are still generating.

A reward that is a service (a served judge or reward model, a code sandbox) takes seconds per batch; scored after
the whole batch is generated, that time is added to every step. Here a generation batch is one request per group
(num_generations completions of one prompt, all on one server so they share its prefix cache), each on its own
thread; the servers batch them together as they would one large request. When a group's request returns, its
rewards are computed on the reward thread, so by the time the last group is generated most of the batch is
already scored, and the trainer waits only for what is left: `timing/reward_wait`.

One reward thread, not one per group: reward functions and plugins were written for one call at a time, and a
served reward already overlaps its own calls (`--judge_max_concurrency`, the reward model client's requests in
flight). Each call scores every group generated since the last one began, so the groups that finish together
(completions of even length do) reach a served judge or reward model as one batch, which it serves far faster than
one group after another. Rewards are per completion (no built-in reward looks across the batch), so scoring a
group alone or with others gives it the same rewards.

Colocated and pt rollouts generate in the trainer's process, one batch at a time; they are scored after it
(`score_after`), and `timing/reward_wait` is then the whole reward time.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import torch

from ..rewards.functions import ScoredRewards
from .rollout_worker import Rollout

GROUP_THREADS_PER_SERVER = 64  # group requests one trainer may have waiting on one rollout server
CLOSE_TIMEOUT_S = 120  # the longest close() waits for a reward call in progress (a judge request, a sandbox run)


@dataclass
class ScoredBatch:
    """A generation batch's rollouts and rewards, with how long the caller waited for each."""

    rollouts: list[Rollout]
    scored: ScoredRewards
    generate_wait: float  # seconds the caller waited for the last group to be generated
    reward_wait: float  # seconds it then waited for the rewards of the groups not scored yet


def score_after(rollouts: list[Rollout], score: Callable[[list[Rollout]], ScoredRewards],
                generate_seconds: float) -> ScoredBatch:
    """A batch generated in the trainer's process, scored now: the trainer waits for every reward."""
    start = time.time()
    scored = score(rollouts)
    return ScoredBatch(rollouts, scored, generate_seconds, time.time() - start)


class PendingBatch:
    """A generation batch in flight: one future per group for its rollouts and one for its rewards.

    Quacks like a Future where `Prefetch` needs it to (`result`, `cancel`)."""

    def __init__(self, generated: list[Future], scored: list[Future]):
        self.generated, self.scored = generated, scored

    def result(self) -> ScoredBatch:
        """Waits for every group; an error of any generation or reward is raised here, in the trainer."""
        start = time.time()
        rollouts = [r for future in self.generated for r in future.result()]
        generated_at = time.time()
        scored = ScoredRewards.cat([future.result() for future in self.scored])
        return ScoredBatch(rollouts, scored, generated_at - start, time.time() - generated_at)

    def cancel(self) -> bool:
        """Cancel the groups not started yet and wait for the others and their rewards to end (their errors are
        dropped with them): afterwards nothing of this batch runs."""
        for future in self.generated:
            future.cancel()
        wait(self.generated + self.scored)
        return True


class GroupScoring:
    """Generation batches sent as one request per group, each group scored as soon as it is generated.

    `generate_group(rows, server)` generates one group on rollout server `server` (RolloutWorker.generate);
    `score(rollouts)` computes the rewards of one or more groups (GrpoTrainer._rewards). `on_generated(start, end, rollouts,
    background)` is told when a whole batch has been generated, for the trainer's timeline."""

    def __init__(self, generate_group: Callable[[list[dict], int], list[Rollout]],
                 score: Callable[[list[Rollout]], ScoredRewards], group_size: int, servers: int,
                 on_generated: Callable[[float, float, list[Rollout], bool], None] | None = None):
        self._generate_group, self._score, self.group_size = generate_group, score, group_size
        self.servers, self._on_generated = servers, on_generated
        self._generation = ThreadPoolExecutor(GROUP_THREADS_PER_SERVER * max(servers, 1),
                                              thread_name_prefix="swiftlike-group")
        self._ready: queue.SimpleQueue = queue.SimpleQueue()  # (group's rollouts, its rewards' future); None: stop
        self._reward_thread = threading.Thread(target=self._score_ready_groups, name="swiftlike-reward", daemon=True)
        self._reward_thread.start()

    def submit(self, rows: Sequence[dict], background: bool = False) -> PendingBatch:
        """Start generating `rows` (num_generations copies of each prompt, in groups); group k goes to server
        k mod servers."""
        if len(rows) % self.group_size:
            raise ValueError(f"{len(rows)} rows are not whole groups of {self.group_size}")
        starts = range(0, len(rows), self.group_size)
        started, left, lock = time.time(), [len(starts)], threading.Lock()
        generated = [self._generation.submit(self._generate_group, list(rows[s:s + self.group_size]),
                                             k % max(self.servers, 1)) for k, s in enumerate(starts)]

        def batch_done(_: Future) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last and self._on_generated is not None and all(not f.cancelled() and f.exception() is None
                                                                for f in generated):
                self._on_generated(started, time.time(), [r for f in generated for r in f.result()], background)
        for future in generated:
            future.add_done_callback(batch_done)
        return PendingBatch(generated, [self._score_when_generated(future) for future in generated])

    def _score_when_generated(self, generated: Future) -> Future:
        scored: Future = Future()

        def ready(done: Future) -> None:
            if done.cancelled():
                scored.cancel()
                scored.set_running_or_notify_cancel()  # what an executor does: `wait` counts it done only then
            elif done.exception() is not None:
                scored.set_exception(done.exception())
            else:
                self._ready.put((done.result(), scored))
        generated.add_done_callback(ready)
        return scored

    def _score_ready_groups(self) -> None:
        """The reward thread: score every group generated so far in one call, hand each its part, repeat."""
        while True:
            waiting = [self._ready.get()]
            while not self._ready.empty():
                waiting.append(self._ready.get())
            if any(item is None for item in waiting):
                return
            rollouts = [r for group, _ in waiting for r in group]
            try:
                scored = self._score(rollouts)
            except BaseException as e:  # noqa: BLE001 - handed to the trainer, which raises it
                for _, future in waiting:
                    future.set_exception(e)
                continue
            offset = 0
            for group, future in waiting:
                future.set_result(scored.select(torch.arange(offset, offset + len(group))))
                offset += len(group)

    def close(self) -> None:
        """Stop generating and let the reward thread finish the call it is in. Joined, not left running: a daemon
        thread still inside a reward's torch or tokenizer call when the interpreter shuts down is killed there,
        and a kill that unwinds through C++ aborts the process (`terminate called without an active exception`,
        exit -6) after a run that had finished."""
        self._generation.shutdown(wait=False, cancel_futures=True)
        self._ready.put(None)
        self._reward_thread.join(timeout=CLOSE_TIMEOUT_S)
