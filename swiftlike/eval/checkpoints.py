"""`swiftlike eval --eval_all_checkpoints <run dir>`: the same benchmarks on every checkpoint of a training run,
step 0 being the model it started from, then accuracy over steps as a table (report.md / report.json) and a PNG.

Each checkpoint is evaluated as `swiftlike eval` would on its own (a LoRA checkpoint as --adapters over the base
model its args.json names, a full one as --model), with its own report under the run's folder, so a run that
stops half way keeps the checkpoints already scored."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from ..arguments.eval_args import EvalArguments
from ..utils import atomic_write_json, atomic_write_text, get_logger
from ..utils.checkpoint import CHECKPOINT_PREFIX
from ..utils.errors import UsageError
from .report import new_run_dir

logger = get_logger("swiftlike.eval")


def checkpoints_of(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every published checkpoint-N, by step."""
    found = []
    for path in run_dir.iterdir():
        suffix = path.name[len(CHECKPOINT_PREFIX):]
        if path.is_dir() and path.name.startswith(CHECKPOINT_PREFIX) and suffix.isdigit():
            found.append((int(suffix), path))
    return sorted(found)


def evaluate_checkpoints(args: EvalArguments) -> dict:
    from .run import run_eval
    run_dir = Path(args.eval_all_checkpoints)
    checkpoints = checkpoints_of(run_dir)
    if not checkpoints:
        raise UsageError(f"--eval_all_checkpoints {run_dir}: no checkpoint-N folders in it")
    saved = run_dir / "args.json"
    base = json.loads(saved.read_text()).get("model") if saved.is_file() else None
    started = time.time()
    out_dir = new_run_dir(args.eval_output_dir)
    points = [(0, base, None)] if base else []
    points += [(step, None, path) for step, path in checkpoints]
    rows = []
    for step, model, path in points:
        if path is not None and (path / "adapter_config.json").is_file():
            model, adapters = None, [str(path)]
        else:
            model, adapters = (str(path) if path is not None else model), []
        logger.info("step %d: %s", step, adapters[0] if adapters else model)
        one = dataclasses.replace(args, eval_all_checkpoints=None, model=model, adapters=adapters,
                                  template=args.template if path is None else None,
                                  eval_output_dir=str(out_dir / f"step-{step}"))
        report = run_eval(one)
        rows.append({"step": step, "checkpoint": str(path) if path else model,
                     **{name: r["accuracy"] for name, r in report["benchmarks"].items()}})
    report = {"run_dir": str(run_dir), "backend": args.eval_backend, "benchmarks": list(args.eval_dataset),
              "steps": rows, "elapsed_s": round(time.time() - started, 1)}
    atomic_write_json(out_dir / "report.json", report)
    atomic_write_text(out_dir / "report.md", checkpoints_markdown(report))
    plot_over_steps(report, out_dir / "accuracy_over_checkpoints.png")
    return {**report, "output_dir": str(out_dir)}


def checkpoints_markdown(report: dict) -> str:
    names = report["benchmarks"]
    lines = [f"Run: {report['run_dir']} (backend {report['backend']})", "",
             "| step | checkpoint | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for row in report["steps"]:
        lines.append(f"| {row['step']} | {Path(row['checkpoint']).name} | "
                     + " | ".join(f"{row[n]:.4f}" for n in names) + " |")
    return "\n".join(lines) + "\n"


def plot_over_steps(report: dict, target: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    steps = [row["step"] for row in report["steps"]]
    for name in report["benchmarks"]:
        ax.plot(steps, [row[name] for row in report["steps"]], marker="o", label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy")
    ax.set_title("accuracy over checkpoints")
    ax.grid(alpha=0.3)
    ax.legend()
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, dpi=100, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, target)
