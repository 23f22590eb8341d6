"""Threads that follow contention (utils/threads.py, train/fair_threads.py), measured against real busy
processes on this machine's CPUs."""
import subprocess
import sys
import time

import torch

from swiftlike.train.fair_threads import FairShareThreads
from swiftlike.utils.threads import (LoadSampler, adapts_threads, next_threads, own_running, queued_seconds,
                                     system_running)

BUSY = "import time\nprint('ready', flush=True)\nend = time.time() + 30\nwhile time.time() < end: pass\n"


def test_down_on_queueing_up_on_room():
    assert next_threads(2, 2, waiting=1.0, other_running=2.0) == 1  # crowded out: half the team queued
    assert next_threads(2, 2, waiting=0.1, other_running=3.0) == 2  # neighbours that yield (nice 19) do not count
    assert next_threads(4, 4, waiting=2.2, other_running=2.0) == 2
    assert next_threads(1, 2, waiting=0.0, other_running=0.2) == 2  # the other job ended: all CPUs again
    assert next_threads(1, 2, waiting=0.0, other_running=1.0) == 1  # it still runs: stay
    assert next_threads(1, 1, waiting=3.0, other_running=5.0) == 1  # never below one


def test_proc_parsing_and_the_users_choice():
    assert system_running("cpu  1 2 3\nprocs_running 7\nprocs_blocked 0\n") == 7
    assert own_running() >= 1  # this thread is running while it counts
    assert not adapts_threads({"OMP_NUM_THREADS": "2"}) and adapts_threads({})


def matmuls(seconds: float) -> None:
    a = torch.randn(256, 256)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a


def test_a_crowded_step_drops_the_team_and_an_emptied_machine_gives_it_back():
    """Four busy processes beside a two-thread torch loop on two CPUs: the loop's threads queue, the next step
    runs one thread; once they end, the load falls and the team grows back to the CPUs."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    sampler = LoadSampler(interval=0.02)
    callback = FairShareThreads(sampler, cpus=2)
    callback.on_train_begin(None, State(), None)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        for p in busy:  # every one spinning before the step starts: a slow interpreter start is no contention
            assert p.stdout.readline() == "ready\n"
        time.sleep(0.2)
        sampler.take()
        callback.on_step_begin(None, State(), None)
        queued, start = queued_seconds(), time.perf_counter()
        matmuls(1.5)
        waiting = (queued_seconds() - queued) / (time.perf_counter() - start)
        assert waiting >= 0.5, waiting  # our threads waited for the CPUs the busy ones held
        loaded = sampler.take()
        sampler._sum, sampler._count = loaded, 1  # the callback reads the same window
        callback.on_step_begin(None, State(), None)
        assert torch.get_num_threads() == 1
        logs = {}
        callback.on_log(None, State(), None, logs=logs)
        assert logs == {"threads": 1}
    finally:
        for p in busy:
            p.kill()
            p.wait()
            p.stdout.close()
    try:
        sampler.take()
        matmuls(1.0)
        other = sampler.take()
        sampler._sum, sampler._count = other, 1  # the callback reads the same window
        callback.on_step_begin(None, State(), None)
        assert torch.get_num_threads() == next_threads(1, 2, 0.0, other)
        assert other < loaded - 1.2, (loaded, other)  # the busy ones are gone (whatever else runs here)
    finally:
        callback.on_train_end(None, State(), None)
        torch.set_num_threads(before)


class State:
    global_step = 0
