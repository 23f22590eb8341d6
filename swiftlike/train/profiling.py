"""`--profile_step N`: one optimizer step under torch's profiler, its operators ranked by self time.

Why a step and not a run: a whole run's profile is dominated by start-up (model load, vLLM start, the first
steps' allocations), and a profiler left on slows every step it records. One step, late enough to be warm,
is what tells where a step's time goes. The window runs from the end of step N-1 to the end of step N, not
from the Trainer's `on_step_begin`: the Trainer fetches a step's batch before that call, and an online
trainer generates, scores and runs its extra forwards while fetching, so everything step N does is inside
(with step N-1's logging). Written on the main process only, atomically, to the run directory:
`profile-step<N>.txt` (the top operators) and `profile-step<N>.json` (every operator, for scripts such as
benchmarks/profile_steps.py).
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from ..utils.io import atomic_write_json, atomic_write_text
from ..utils.logging import get_logger

logger = get_logger(__name__)

TOP_OPERATORS = 30


def ranked_operators(events) -> list[dict]:
    """Every operator, most self CPU time first, each with its share of the step's self time."""
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) or 1.0
    return [{"operator": e.key, "self_cpu_ms": e.self_cpu_time_total / 1000, "share": e.self_cpu_time_total / total,
             "calls": e.count, "cpu_total_ms": e.cpu_time_total / 1000} for e in rows]


def format_table(rows: list[dict], step: int, wall_seconds: float) -> str:
    lines = [f"profile of optimizer step {step}: {wall_seconds:.2f} s wall; operators by self CPU time",
             f"{'operator':<48} {'self ms':>10} {'share':>7} {'calls':>7} {'total ms':>10}"]
    lines += [f"{r['operator'][:48]:<48} {r['self_cpu_ms']:>10.1f} {r['share']:>7.1%} {r['calls']:>7d} "
              f"{r['cpu_total_ms']:>10.1f}" for r in rows]
    return "\n".join(lines) + "\n"


class StepProfiler(TrainerCallback):
    def __init__(self, step: int, run_dir: Path, is_main_process: bool):
        self.step = step
        self.run_dir = Path(run_dir)
        self.is_main_process = is_main_process
        self._profiler: torch.profiler.profile | None = None
        self._wall = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        if self.step == state.global_step + 1:
            self._start()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step - 1:
            self._start()
        elif state.global_step == self.step and self._profiler is not None:
            self._stop()

    def _start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(activities=activities)
        self._profiler.__enter__()
        self._wall = time.perf_counter()

    def _stop(self) -> None:
        wall = time.perf_counter() - self._wall
        self._profiler.__exit__(None, None, None)
        rows = ranked_operators(self._profiler.key_averages())
        self._profiler = None
        if not self.is_main_process:
            return
        table = format_table(rows[:TOP_OPERATORS], self.step, wall)
        atomic_write_text(self.run_dir / f"profile-step{self.step}.txt", table)
        atomic_write_json(self.run_dir / f"profile-step{self.step}.json",
                          {"step": self.step, "wall_seconds": wall, "operators": rows})
        logger.info("profile of step %d written to %s\n%s", self.step, self.run_dir / f"profile-step{self.step}.txt",
                    "\n".join(table.splitlines()[:12]))
