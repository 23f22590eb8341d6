"""The RFT demo's prompt files and its report (used by scripts/rft_demo.sh); statistics from demo_report.py.

    rft_report.py prompts OUT ROUND N   round ROUND's N questions: rows (ROUND-1)*N .. ROUND*N-1 of
                                        swiftlike/arithmetic (no answers: the model writes its own)
    rft_report.py report OUT ROUNDS     greedy per round with the paired interval against the start, mean@4
                                        at the start and the end, rows kept and tokens generated per round
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from demo_report import bootstrap_ci, mean, mean_at_k, paired_bootstrap_diff, verdicts

SUMMARY = re.compile(r"(\d+) prompts .*?(\d+) answers, (\d+) tokens in ([\d.]+)s .*?\n\s+rows written: (\d+)",
                     re.DOTALL)


def prompts(out_dir: str, round_index: int, n: int) -> None:
    from swiftlike.dataset import load_dataset
    rows = load_dataset(["swiftlike/arithmetic"])[(round_index - 1) * n:round_index * n]
    with (Path(out_dir) / f"round{round_index}_prompts.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def plot_rounds(out: Path, accuracy: list[float], n: int) -> Path:
    """Held-out greedy accuracy after each round, as a PNG beside the results."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(len(accuracy)), accuracy, marker="o")
    ax.set_xticks(range(len(accuracy)))
    ax.set_xlabel("RFT round (0: the SFT warm-up)")
    ax.set_ylabel(f"greedy accuracy, {n} held-out")
    ax.set_title("RFT rounds, SmolLM2-135M", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "rft_rounds.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(out_dir: str, rounds: int) -> bool:
    out = Path(out_dir)
    greedy = {r: [v[0] for v in verdicts(out / f"round{r}_greedy.jsonl")[0]] for r in range(rounds + 1)}
    n = len(greedy[0])
    print(f"\n=== RFT: {rounds} round(s) of sample -> keep correct -> LoRA SFT, held-out greedy on {n} questions ===")
    print("round  sampled tokens  answers  rows kept  greedy right  change vs start  paired 95% CI")
    print(f"{0:>5}  {'-':>14}  {'-':>7}  {'-':>9}  {int(sum(greedy[0])):>8}/{n}")
    total_tokens = 0
    for r in range(1, rounds + 1):
        stats = SUMMARY.search((out / f"round{r}_sample.txt").read_text())
        _, answers, tokens, _, kept = (int(float(x)) for x in stats.groups())
        total_tokens += tokens
        diff, lo, hi = paired_bootstrap_diff(greedy[0], greedy[r])
        print(f"{r:>5}  {tokens:>14}  {answers:>7}  {kept:>9}  {int(sum(greedy[r])):>8}/{n}  {diff:>+15.3f}  "
              f"[{lo:+.3f}, {hi:+.3f}]")
    start, end = (verdicts(out / f"round{r}_sampled.jsonl")[0] for r in (0, rounds))
    s_start, s_end = [mean(c) for c in start], [mean(c) for c in end]
    m_diff, m_lo, m_hi = paired_bootstrap_diff(s_start, s_end)
    k = len(start[0])
    for name, scores, verdict in (("start", s_start, start), ("end", s_end, end)):
        lo, hi = bootstrap_ci(scores)
        print(f"mean@{k} at the {name}: {mean_at_k(verdict):.3f}  95% CI [{lo:.3f}, {hi:.3f}]")
    print(f"mean@{k}, end - start: {m_diff:+.3f}  paired 95% CI [{m_lo:+.3f}, {m_hi:+.3f}]")
    diff, lo, hi = paired_bootstrap_diff(greedy[0], greedy[rounds])
    print(f"tokens sampled in all rounds: {total_tokens}")
    print(f"curve PNG: {plot_rounds(out, [mean(greedy[r]) for r in range(rounds + 1)], n)}")
    ok = lo > 0
    print(f"\nheld-out greedy accuracy rose beyond noise after {rounds} round(s) (paired 95% interval above 0): "
          f"{'YES' if ok else 'NO'} ({diff:+.3f}, [{lo:+.3f}, {hi:+.3f}])")
    return ok


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if sys.argv[1] == "prompts":
        prompts(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(0 if report(sys.argv[2], int(sys.argv[3])) else 1)
