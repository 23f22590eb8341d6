"""Threads that follow contention (utils/threads.py, train/fair_threads.py), measured against real busy
processes on this machine's CPUs."""
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from swiftlike.train.fair_threads import FairShareThreads
from swiftlike.utils.threads import LoadSampler, adapts_threads, next_threads, own_running, system_running

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


def crowded_then_emptied() -> dict:
    """Four busy processes beside a two-thread torch loop on two CPUs, one step each side of their end: what the
    callback measured and decided."""
    torch.set_num_threads(2)
    sampler = LoadSampler(interval=0.02)
    callback = FairShareThreads(sampler, cpus=2)
    callback.on_train_begin(None, State(), None)
    seen = {"after_probe": torch.get_num_threads()}
    busy = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        for p in busy:  # every one spinning before the step starts: a slow interpreter start is no contention
            assert p.stdout.readline() == "ready\n"
        time.sleep(0.2)
        callback.on_step_begin(None, State(), None)
        matmuls(1.5)
        callback.on_step_begin(None, State(), None)
        seen["crowded"], seen["crowded_threads"] = callback.measured, torch.get_num_threads()
        logs = {}
        callback.on_log(None, State(), None, logs=logs)
        seen["logs"] = logs
    finally:
        for p in busy:
            p.kill()
            p.wait()
            p.stdout.close()
    matmuls(1.0)
    callback.on_step_begin(None, State(), None)
    seen["emptied"], seen["emptied_threads"] = callback.measured, torch.get_num_threads()
    callback.on_train_end(None, State(), None)
    return seen


def test_a_crowded_step_drops_the_team_and_an_emptied_machine_gives_it_back():
    """The loop's threads queue for the CPUs the busy ones hold, so the next step runs one thread; once they end,
    the load falls and the team grows back. Run in a fresh interpreter: the suite's process has other tests'
    threads and vLLM's thread binding, which are not what a training process starts with."""
    here = Path(__file__).resolve().parent
    code = (f"import json, sys; sys.path.insert(0, {str(here)!r}); from test_threads import crowded_then_emptied; "
            "print(json.dumps(crowded_then_emptied()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    (waiting, loaded), (_, other) = seen["crowded"], seen["emptied"]
    assert waiting >= 0.5, seen  # our threads waited for the CPUs the busy ones held
    assert seen["crowded_threads"] == 1 and seen["logs"] == {"threads": 1}, seen
    assert seen["emptied_threads"] == next_threads(1, 2, 0.0, other), seen
    assert other < loaded - 1.2, seen  # the busy ones are gone (whatever else runs here)


class State:
    global_step = 0


def test_a_colocated_vllm_engine_keeps_its_thread_binding(monkeypatch):
    """vLLM's CPU worker replaces torch.set_num_threads in its process once it has bound its threads to cores
    (vllm/v1/worker/cpu_worker.py); a colocated trainer then leaves the count alone instead of calling the no-op
    at every step."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    sampler = LoadSampler(interval=0.02)
    callback = FairShareThreads(sampler, cpus=2)
    callback.on_train_begin(None, State(), None)
    for _ in range(2):
        callback.on_step_begin(None, State(), None)
    callback.on_train_end(None, State(), None)
    assert calls == [] and callback.measured is None

