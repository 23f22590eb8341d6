"""The evidence table of scripts/algorithms_evidence.sh: held-out mean@4 of each algorithm and seed.

Per run: mean@4 after GRPO with its percentile-bootstrap 95% interval over questions, and the paired
after-minus-before change with its interval (the statistics of scripts/demo_report.py). Per algorithm: the
mean over seeds of mean@4 and of the change, with a t-interval over the seeds (3 seeds: wide on purpose,
since seed-to-seed spread is the noise a reader of such a table most often forgets).
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_report import bootstrap_ci, mean, paired_bootstrap_diff, verdicts  # noqa: E402

# two-sided 95% Student-t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}


def seed_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean over seeds and its 95% t-interval (nan width for a single seed)."""
    m = mean(values)
    if len(values) < 2:
        return m, float("nan"), float("nan")
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half


def main(out_dir: str) -> None:
    out = Path(out_dir)
    before, _ = verdicts(out / "before_sampled.jsonl")
    before_scores = [mean(c) for c in before]
    lo, hi = bootstrap_ci(before_scores)
    print(f"before GRPO (the warmed-up model): mean@4 {mean(before_scores):.3f} [{lo:.3f}, {hi:.3f}], "
          f"{len(before_scores)} held-out questions\n")
    print("| algorithm | seed | mean@4 after [95% CI] | change vs before [paired 95% CI] |")
    print("|---|---:|---|---|")
    summary = []
    for arm_dir in sorted(p for p in (out / "runs").iterdir() if p.is_dir()):
        afters, changes = [], []
        for run in sorted(arm_dir.iterdir()):
            result = run / "after_sampled.jsonl"
            if not result.is_file():
                continue
            after, _ = verdicts(result)
            scores = [mean(c) for c in after]
            a_lo, a_hi = bootstrap_ci(scores)
            d, d_lo, d_hi = paired_bootstrap_diff(before_scores, scores)
            afters.append(mean(scores))
            changes.append(d)
            print(f"| {arm_dir.name} | {run.name.removeprefix('seed')} | {mean(scores):.3f} [{a_lo:.3f}, {a_hi:.3f}] "
                  f"| {d:+.3f} [{d_lo:+.3f}, {d_hi:+.3f}] |")
        if afters:
            summary.append((arm_dir.name, len(afters), seed_interval(afters), seed_interval(changes)))
    print("\n| algorithm | seeds | mean@4 after, mean over seeds [t 95% CI] | change vs before [t 95% CI] |")
    print("|---|---:|---|---|")
    for name, n, (a, a_lo, a_hi), (d, d_lo, d_hi) in summary:
        print(f"| {name} | {n} | {a:.3f} [{a_lo:.3f}, {a_hi:.3f}] | {d:+.3f} [{d_lo:+.3f}, {d_hi:+.3f}] |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: algorithms_report.py <output dir of scripts/algorithms_evidence.sh>")
    main(sys.argv[1])
