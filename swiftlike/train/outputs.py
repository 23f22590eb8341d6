"""The run directory every training command writes, and what goes in it.

    <output_dir>/vN-YYYYMMDD-HHMMSS/
        args.json          the arguments, so checkpoints can be used without repeating them
        logging.jsonl      one JSON object per log event (loss, lr, grad norm, eval, timing)
        checkpoint-K/      Trainer checkpoints, renamed into place only once complete
        images/*.png       curves of every logged series, redrawn at each save

GRPO and the other trainers reuse this layout, so one reader serves all of them.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from ..utils import atomic_write_json, get_logger

logger = get_logger("swiftlike.train")

LOGGING_FILE = "logging.jsonl"
ARGS_FILE = "args.json"
IMAGES_DIR = "images"
_VERSION = re.compile(r"^v(\d+)-")


def new_run_dir(output_dir: str | os.PathLike, add_version: bool = True) -> Path:
    """`output_dir/vN-<time>` with N one more than the highest existing version."""
    root = Path(output_dir)
    if not add_version:
        root.mkdir(parents=True, exist_ok=True)
        return root
    root.mkdir(parents=True, exist_ok=True)
    versions = [int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _VERSION.match(p.name))]
    version = max(versions, default=-1) + 1
    run_dir = root / f"v{version}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir()
    return run_dir


def save_args(run_dir: Path, args, **extra) -> dict:
    data = {**asdict(args), "command": args.command, **extra}
    atomic_write_json(run_dir / ARGS_FILE, data)
    return data


def read_log(run_dir: str | os.PathLike) -> list[dict]:
    """Entries of logging.jsonl; a last line cut short by a crash is skipped."""
    path = Path(run_dir) / LOGGING_FILE
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


class JsonlLog:
    """Appends one line per event; each line is written with one call and flushed."""

    def __init__(self, run_dir: Path):
        """A new run starts a new file, also when --add_version false reuses a directory."""
        self.path = run_dir / LOGGING_FILE
        self.path.write_text("", encoding="utf-8")

    def seed_from(self, previous_run: Path, up_to_step: int) -> None:
        """A resumed run starts with the history of the run it continues, up to the checkpoint."""
        kept = [e for e in read_log(previous_run) if e.get("step", 0) <= up_to_step]
        for entry in kept:
            self.write(entry)

    def write(self, entry: dict) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
            f.flush()


def _series(entries: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    series: dict[str, tuple[list[int], list[float]]] = {}
    for entry in entries:
        step = entry.get("step")
        if step is None:
            continue
        for key, value in entry.items():
            if key in ("step", "epoch", "elapsed_s") or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            xs, ys = series.setdefault(key, ([], []))
            xs.append(step)
            ys.append(float(value))
    return series


PLOTTED = ("loss", "eval_loss", "learning_rate", "grad_norm")


def _expand(keys: tuple[str, ...], logged) -> list[str]:
    """`keys` with each shell-style pattern (`timing/*`) replaced by the logged keys it matches, sorted."""
    out: list[str] = []
    for key in keys:
        matches = sorted(fnmatch.filter(logged, key)) if any(c in key for c in "*?[") else [key]
        out += [m for m in matches if m not in out]
    return out


def plot_curves(run_dir: str | os.PathLike, keys: tuple[str, ...] = PLOTTED, smooth: float = 0.9) -> list[Path]:
    """One PNG per series named in `keys` under images/, each written atomically.

    A key may be a pattern (`rewards/*/mean`), since which reward or timing series a run logs is only
    known from its log. Train curves get an exponential moving average drawn over the raw points, which
    stay visible. One figure is redrawn for every series, with fixed margins and a legend only where two lines
    need telling apart: a GRPO run draws ~20 curves, and a new figure, a tight bounding box (a second draw) and
    a one-line legend per curve cost about 30% of the time (57 curves: 6.5 s before, 4.6 s after).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    series = _series(read_log(run_dir))
    images = run_dir / IMAGES_DIR
    images.mkdir(exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.12, top=0.92)
    try:
        for key in _expand(keys, series):
            if key not in series or len(series[key][0]) < 1:
                continue
            written.append(_draw_curve(fig, ax, key, *series[key], smooth, images))
    finally:
        plt.close(fig)
    return written


def _draw_curve(fig, ax, key: str, xs: list[int], ys: list[float], smooth: float, images: Path) -> Path:
    ax.clear()
    ax.plot(xs, ys, color="#9ecae1" if len(xs) > 4 else "#1f77b4", marker="o" if len(xs) <= 20 else None,
            label=key)
    if len(xs) > 4 and not key.startswith("eval_") and key != "learning_rate":
        ema, avg = [], ys[0]
        for y in ys:
            avg = smooth * avg + (1 - smooth) * y
            ema.append(avg)
        ax.plot(xs, ema, color="#1f77b4", label=f"{key} (smoothed)")
        ax.legend()
    ax.set_xlabel("step")
    ax.set_title(key)
    ax.grid(alpha=0.3)
    name = ("train_" + key if not key.startswith(("eval_", "train_")) else key).replace("/", "_")
    target = images / f"{name}.png"
    tmp = images / f".{name}.tmp.png"
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, target)
    return target
