"""Threads for a training process that may share its CPUs: as many as the CPUs it may use (its affinity),
less the other work that is running on them, re-decided at every optimizer step.

Why: torch's CPU kernels run on an OpenMP team (GNU libgomp in the PyPI wheels) whose threads spin for a
while at the end of each parallel region before they sleep. Alone on its cores that is the fastest choice.
Beside another busy process it is the worst: a training step runs thousands of small kernels, each ending
in a barrier, and a team whose other thread has been descheduled burns its time slice spinning while the
thread it waits for cannot run. Measured here (docs/benchmarks.md, "Two jobs on one machine"): two DPO
trainings on two cores each kept 11% of their speed alone. Sleeping instead of spinning
(`OMP_WAIT_POLICY=PASSIVE`) keeps ~75% paired but costs 10-20% alone, on every run, for a case most runs
never meet; one thread per job keeps ~50% paired and, once the other job ends, the job goes back to all its
CPUs. So the count follows contention (`next_threads`): down when this process's threads queued for a CPU
during the last step (the kernel's per-thread run delay), up when the machine's other running tasks
(/proc/stat `procs_running` less this process's own, sampled in the background through each step) leave
CPUs free.

Two jobs on one machine are common here: a rollout server beside its trainer, two web-UI jobs, a sandboxed
reward beside a trainer. An `OMP_NUM_THREADS` in the environment is the user's choice and is kept as it is
(no adaptation).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

SAMPLE_SECONDS = 0.05


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: taskset, a cgroup's cpuset, a Ray placement), which is
    what a thread count should follow, not the machine's core count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def next_threads(current: int, cpus: int, waiting: float, other_running: float) -> int:
    """The team for the next step. Down when this process's threads spent the last step waiting for a CPU
    (`waiting`: the mean number of them queued, from the kernel's run delay), which is contention as this
    process felt it: low-priority neighbours that yield to it do not count, and a step that idles on I/O or
    a server is not mistaken for one that was crowded out. Up when the other running tasks leave room."""
    if current > 1 and waiting >= 0.5:
        return max(1, current - max(1, round(waiting)))
    room = cpus - round(other_running)
    return min(cpus, room) if room > current else current


def queued_seconds(task_dir: Path = Path("/proc/self/task")) -> float:
    """Seconds this process's threads have spent runnable but waiting for a CPU (the second field of each
    thread's schedstat), summed; threads that ended take their share with them, which only errs towards
    less contention."""
    total = 0
    for stat in task_dir.glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def system_running(stat_text: str) -> int:
    """Runnable tasks on the whole machine, from the text of /proc/stat."""
    for line in stat_text.splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    raise ValueError("no procs_running line in /proc/stat")


def own_running(task_dir: Path = Path("/proc/self/task")) -> int:
    """This process's threads in state R (running or runnable). The state follows the last ')' of each
    thread's stat line, since a thread's name may hold spaces and parentheses."""
    running = 0
    for stat in task_dir.glob("*/stat"):
        try:
            text = stat.read_text()
            running += text[text.rindex(")") + 2:].startswith("R")
        except (OSError, ValueError):  # the thread ended between the listing and the read
            continue
    return running


class LoadSampler:
    """The mean number of other running tasks since the last `take`, sampled every SAMPLE_SECONDS by a daemon
    thread (the reads are a few small /proc files; the main thread's torch kernels release the GIL)."""

    def __init__(self, interval: float = SAMPLE_SECONDS):
        self.interval = interval
        self._sum = 0.0
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="swiftlike-load-sampler", daemon=True)

    def start(self) -> LoadSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def sample(self) -> float:
        # the sampler itself is running while it reads: one of this process's R threads
        return max(0, system_running(Path("/proc/stat").read_text()) - own_running())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                value = self.sample()
            except (OSError, ValueError):  # /proc read mid-change: skip this sample, keep the thread alive
                continue
            with self._lock:
                self._sum += value
                self._count += 1

    def take(self) -> float | None:
        """The mean since the previous call, or None when no sample was taken in between."""
        with self._lock:
            mean = self._sum / self._count if self._count else None
            self._sum, self._count = 0.0, 0
        return mean


def adapts_threads(environ=os.environ) -> bool:
    """Whether the thread count follows the load: on Linux with schedstats, unless the user fixed it with
    OMP_NUM_THREADS."""
    return "OMP_NUM_THREADS" not in environ and Path("/proc/self/schedstat").is_file()
