"""A call's wall clock on a busy machine: time a call spent waiting for a CPU is not held against it.

A call that passes its wall clock is killed, and the sandbox says why. A program that sleeps, blocks on a pipe or
computes past the limit failed by itself; one that spent the time waiting for a CPU, on a machine busy with other
work (the trainer, other calls, other jobs), was never given its chance, and a reward must not score that as a
wrong answer. The kernel keeps both apart per thread: `/proc/<pid>/schedstat` has the time a thread ran and the
time it sat runnable on a run queue waiting for a CPU (`run_delay`); a sleeping thread adds to neither.

So when a call reaches its deadline the server asks `at_deadline`, which reads the call's processes (the outer
process and everything below it, alive or not yet reaped): their CPU time with their reaped children's (from
`/proc/<pid>/stat`), how long their threads waited for a CPU, and whether one of them is runnable now. The call's
own time is the time since it started less that waiting. It is killed as its own failure once it ran (CPU time)
`timeout_s`, or once its own time reached `timeout_s` with none of its threads runnable (it slept or blocked); a
thread that is runnable now may be in the middle of a wait the kernel adds to `run_delay` only when the thread
next runs, so its own time is not trusted then. Otherwise the deadline moves on by the own time missing (at least
a quarter of `timeout_s`, so a busy machine costs a few checks per call, not many), up to `MAX_WALL_FACTOR` times
`timeout_s` in all. A program that loops on a busy machine thus still runs into its CPU limit (a program's
failure, as on an idle machine), and a slow but right one finishes. A call that reaches the cap was starved: the
sandbox answers that as an infrastructure error, with no verdict on the code.

A program's own processes could make it wait, being runnable beside it. So the call's demand, the time its
processes ran plus the time its threads waited, divided by the time since it started, must stay at most
`MAX_DEMAND`: about one runnable thread, as a program of a code task has (the runner and the outer process
mostly sleep). A call that asks for more (a fork bomb asks for dozens, a program with busy threads for two or
more) gets no more than `timeout_s`, and its timeout is its own failure: its processes compete with each other,
so its waiting may be its own doing.

What it cannot see: a process the program let the kernel reap unseen (a parent that ignores SIGCHLD) leaves no
trace of its demand. A program that starts such short-lived spinners on purpose can make its own timeout look like
the machine's: it then holds its worker up to the cap, and its reward is missing rather than 0 (never a pass).
Without `schedstat` (a kernel without CONFIG_SCHED_INFO) no call waits, as before this check.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_WALL_FACTOR = 4  # a starved call gets up to this many times its wall clock in all
MAX_DEMAND = 1.5  # runnable threads on average: one, with room for the measurement's noise
_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children) from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # ended meanwhile
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ..., utime at 11
    return int(fields[1]), sum(int(value) for value in fields[11:15]) / _TICKS


def _threads(pid: int) -> list[tuple[float, bool]]:
    """(seconds waited runnable for a CPU, runnable now) of each thread of `pid`; none without schedstat."""
    threads = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            waited = int((task / "schedstat").read_text().split()[1]) / 1e9
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError, ValueError):
            continue
        threads.append((waited, state == "R"))
    return threads


def _call_processes(root: int) -> dict[int, float]:
    """`root` and every process below it, alive or not yet reaped, with their CPU seconds."""
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(entry)
            if found is not None:
                parents[int(entry)], cpu[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = {}, [root] if root in cpu else []
    while todo:
        pid = todo.pop()
        tree[pid] = cpu[pid]
        todo.extend(children.get(pid, ()))
    return tree


@dataclass(frozen=True)
class Deadline:
    """What the server does with a call at its deadline: wait on until `extend_to`, or kill it now (`extend_to`
    None), in which case `starved` says why the machine, not the program, is to blame (None: the program)."""
    extend_to: float | None
    starved: str | None = None


def at_deadline(root: int, started: float, timeout_s: float, now: float) -> Deadline:
    """The call whose outer process is `root`, started at `started` (time.monotonic), at its deadline `now`."""
    processes = _call_processes(root)
    threads = [thread for pid in processes for thread in _threads(pid)]
    elapsed, ran = now - started, sum(processes.values())
    waited = sum(wait for wait, _ in threads)
    if not threads or (ran + waited) / elapsed > MAX_DEMAND or ran >= timeout_s:
        return Deadline(None)  # no schedstat; more than one thread kept busy; it computed its whole wall clock
    own = elapsed - waited
    if own >= timeout_s and not any(runnable for _, runnable in threads):
        return Deadline(None)  # it slept or blocked through its wall clock
    cap = started + MAX_WALL_FACTOR * timeout_s
    if now < cap:
        return Deadline(min(cap, now + max(timeout_s - own, timeout_s / 4)))
    return Deadline(None, f"its threads waited {waited:.2f} s for a CPU in {elapsed:.2f} s and ran {ran:.2f} s")
