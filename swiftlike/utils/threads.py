"""Thread settings for a swiftlike process: as many threads as the CPUs it may use, and threads that sleep,
not spin, while they wait.

Why: torch's CPU kernels run on an OpenMP team (GNU libgomp in the PyPI wheels). By default a libgomp thread
that reaches the end of a parallel region spins for a while before it sleeps, which is the fastest choice
for a process alone on its cores. Beside another busy process it is the worst: a training step runs many
small kernels, each ending in a barrier, and a team whose other thread has been descheduled burns its time
slice spinning while the thread it waits for cannot run. Measured here (two SmolLM2 LoRA training loops on
two cores, docs/benchmarks.md "Two jobs on one machine"): each ran at 5.6% of its speed alone with the
default policy, and at 56-59% with `OMP_WAIT_POLICY=PASSIVE`, which costs ~5% alone. Two jobs on one
machine are how this platform is used (a rollout server beside its trainer, two web-UI jobs, a sandbox
beside a trainer), so passive waiting is the default; `OMP_WAIT_POLICY=ACTIVE` in the environment keeps the
spinning for a machine given to one job.

libgomp reads its environment once, when torch loads it, so `configure_threads` must run before torch is
imported: the CLI's entry point calls it first. A Python API user who imports torch before swiftlike sets
the variable in the environment of the process instead.
"""
from __future__ import annotations

import os
from collections.abc import Mapping


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: taskset, a cgroup's cpuset, a Ray placement), which is
    what a thread count should follow, not the machine's core count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to `environ`: only those it does not set, so a user's own choice always wins. The
    thread count is left to libgomp, whose default already follows the affinity (`usable_cpus`); a launcher
    that splits the CPUs between processes sets OMP_NUM_THREADS itself (train/launch.py)."""
    return {} if "OMP_WAIT_POLICY" in environ else {"OMP_WAIT_POLICY": "PASSIVE"}


def configure_threads() -> dict[str, str]:
    """Apply `thread_environment` to this process, and so to the processes it starts; returns what it set."""
    added = thread_environment(os.environ)
    os.environ.update(added)
    return added
