"""The training loop's side of utils/threads.py: at each optimizer step, torch's thread count follows the
contention of the step before (`next_threads`).

A Trainer callback because `torch.set_num_threads` sets the calling thread's OpenMP team size, so it must run
on the training loop's own thread, between steps (never inside a kernel). The count in use is logged as
`threads` with every record, and each change is logged once, so a slow stretch in the curves can be read
against the machine's load.
"""
from __future__ import annotations

import time

import torch
from transformers import TrainerCallback

from ..utils.logging import get_logger
from ..utils.threads import LoadSampler, next_threads, queued_seconds, usable_cpus

logger = get_logger(__name__)


def threads_settable() -> bool:
    """Whether `torch.set_num_threads` is still torch's own. vLLM's CPU worker, once it has bound its OpenMP
    threads to cores, replaces it in its process with a no-op that warns (a colocated engine lives in the
    trainer's process): the count is then vLLM's, and changing it would undo the binding."""
    return torch.set_num_threads is torch._C.set_num_threads


def probe_waiting(seconds: float = 0.3) -> float:
    """The mean number of this process's threads queued for a CPU during `seconds` of matmuls on the current
    team: the contention a step would meet, measured before the first one."""
    a = torch.randn(256, 256)
    start, queued = time.perf_counter(), queued_seconds()
    while time.perf_counter() - start < seconds:
        a @ a
    return (queued_seconds() - queued) / (time.perf_counter() - start)


class FairShareThreads(TrainerCallback):
    def __init__(self, sampler: LoadSampler | None = None, cpus: int | None = None):
        self.sampler = sampler or LoadSampler()
        self.cpus = cpus or usable_cpus()
        self._started = False
        self._mark: tuple[float, float] | None = None  # (wall clock, queued seconds) at the last step's start
        self._initial = 1
        # what the last decision read: this process's mean queued threads and the other running tasks over the step
        self.measured: tuple[float, float] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self._started:
            return
        if not threads_settable():
            logger.info("torch threads stay at %d: vLLM's CPU engine in this process has bound them to cores",
                        torch.get_num_threads())
            return
        self.sampler.start()
        self._started = True
        self._initial = torch.get_num_threads()
        waiting = probe_waiting()  # the first step would otherwise run crowded: on two cores that is 10x slower
        current = torch.get_num_threads()
        wanted = next_threads(current, self.cpus, waiting, other_running=0.0)
        if wanted < current:
            logger.info("%d torch threads instead of %d: %.1f of this process's threads queued for a CPU in a "
                        "short probe", wanted, current, waiting)
            torch.set_num_threads(wanted)

    def on_step_begin(self, args, state, control, **kwargs):
        if not threads_settable():
            if self._started:
                logger.info("torch threads stay at %d from here: vLLM's CPU engine in this process has bound them "
                            "to cores", torch.get_num_threads())
                self.sampler.stop()
                self._started = False
            return
        now, queued = time.perf_counter(), queued_seconds()
        last, self._mark = self._mark, (now, queued)
        other = self.sampler.take()
        if last is None or other is None:
            return
        waiting = (queued - last[1]) / max(now - last[0], 1e-6)
        self.measured = (waiting, other)
        current = torch.get_num_threads()
        wanted = next_threads(current, self.cpus, waiting, other)
        if wanted != current:
            logger.info("step %d: %d torch threads instead of %d (%d CPUs usable; last step %.1f of this process's "
                        "threads queued for a CPU, %.1f other tasks running)", state.global_step + 1, wanted, current,
                        self.cpus, waiting, other)
            torch.set_num_threads(wanted)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None:
            logs["threads"] = torch.get_num_threads()

    def on_train_end(self, args, state, control, **kwargs):
        """The process's own count back: a Python API caller's next work (or run) starts from it."""
        self.sampler.stop()
        if self._started and threads_settable():
            torch.set_num_threads(self._initial)
