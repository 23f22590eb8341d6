"""One report layout for every backend: report.json (per-benchmark metrics and settings), report.md (the
table) and predictions.jsonl (one row per answer: prompt, reply, extracted answer, gold answer, verdict), written
atomically in a timestamped folder of --eval_output_dir."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..utils import atomic_write_json, atomic_write_jsonl, atomic_write_text

PREDICTION_KEYS = ("benchmark", "prompt", "gold", "reply", "extracted", "correct")


@dataclass
class BenchmarkResult:
    """One benchmark's outcome. `metrics` holds at least `questions` and `accuracy` (the share of correct
    answers by the harness's own main metric, named in `metric`); `predictions` rows carry PREDICTION_KEYS and
    whatever else the harness records (log-likelihoods, its own filter's output)."""

    name: str
    metrics: dict
    predictions: list[dict] = field(default_factory=list)


def new_run_dir(output_dir: str) -> Path:
    """A fresh timestamped folder (a second run in the same second gets a suffix rather than sharing it)."""
    base = Path(output_dir) / time.strftime("%Y%m%d-%H%M%S")
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    out.mkdir(parents=True)
    return out


def write_report(out_dir: Path, report: dict, results: list[BenchmarkResult]) -> dict:
    """report.json, report.md and predictions.jsonl in `out_dir`; returns the report with `output_dir` set."""
    report = {**report, "benchmarks": {r.name: r.metrics for r in results}}
    atomic_write_jsonl(out_dir / "predictions.jsonl", [p for r in results for p in r.predictions])
    atomic_write_text(out_dir / "report.md", markdown(report))
    atomic_write_json(out_dir / "report.json", report)
    return {**report, "output_dir": str(out_dir)}


def markdown(report: dict) -> str:
    ks = sorted({key for r in report["benchmarks"].values() for key in r if key.startswith("pass@")})
    head = ["benchmark", "metric", "questions", "samples", "accuracy", *ks]
    lines = [f"Model: {report['model']} ({report['source']}, backend {report['backend']})", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in report["benchmarks"].items():
        cells = [name, r.get("metric", "accuracy"), str(r["questions"]), str(r.get("samples_per_question", 1)),
                 f"{r['accuracy']:.4f}", *(f"{r[key]:.4f}" for key in ks)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
