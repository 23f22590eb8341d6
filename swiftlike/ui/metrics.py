"""Curves of a run, read from its logging.jsonl while it trains, smoothed the way TensorBoard smooths them."""
from __future__ import annotations

import math
from pathlib import Path

from ..train.outputs import read_log

CURVES = ("loss", "reward", "kl")  # what the runtime panel draws: loss for every run, reward and KL for RL


def ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average, debiased so it does not start at 0."""
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    out, last = [], 0.0
    for n, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight ** n))
    return out


def read_entries(run_dir: Path | None) -> list[dict]:
    """logging.jsonl's entries (train.outputs.read_log skips a line still being written); none before the job
    has a run directory."""
    return [] if run_dir is None else read_log(run_dir)


def curve_rows(entries: list[dict], key: str, weight: float = 0.6) -> list[dict]:
    """Rows (step, value, series) of `key`, raw and smoothed, for a line plot; non-finite values are left out."""
    points = [(e["step"], float(e[key])) for e in entries
              if isinstance(e.get(key), (int, float)) and "step" in e and math.isfinite(e[key])]
    if not points:
        return []
    steps, values = zip(*points)
    rows = [{"step": s, "value": v, "series": key} for s, v in points]
    rows += [{"step": s, "value": v, "series": f"{key} (smoothed)"} for s, v in zip(steps, ema(list(values), weight))]
    return rows
