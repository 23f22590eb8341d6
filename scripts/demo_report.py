"""The demo's data split, its statistics and its before/after report (used by scripts/demo.sh).

The scorer is the training reward itself (swiftlike's `accuracy`, through math-verify, and `format_hash`), so
"accuracy" here means exactly what the policy was rewarded for: the right number on a last line `#### N`.

Statistics (pure functions, unit-tested in tests/repo/test_demo_report.py):
- greedy: right answers out of the held-out prompts at temperature 0;
- mean@k: each held-out prompt is sampled k times at the training temperature; the prompt's score is its
  share of right samples, and mean@k is the mean of those scores over prompts;
- intervals: percentile bootstrap over prompts (a prompt's k samples stay together, since samples of one
  prompt are correlated), for each model's mean@k and, paired (the same resampled prompts for both models),
  for the after-minus-before difference. The demo's verdict uses the paired interval.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SPARKS = "▁▂▃▄▅▆▇█"


# ---- statistics (pure) ----

def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def mean_at_k(correct: list[list[float]]) -> float:
    """Mean over prompts of each prompt's share of right samples (correct[i] = the k verdicts of prompt i)."""
    return mean(mean(c) for c in correct)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) with linear interpolation between order statistics (numpy's default)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def bootstrap_ci(scores: list[float], n_boot: int = 10000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of per-prompt `scores`, resampling prompts with replacement."""
    rng = random.Random(seed)
    n = len(scores)
    means = [sum(scores[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot)]
    tail = (1 - level) / 2
    return percentile(means, tail), percentile(means, 1 - tail)


def paired_bootstrap_diff(before: list[float], after: list[float], n_boot: int = 10000, level: float = 0.95,
                          seed: int = 0) -> tuple[float, float, float]:
    """(mean(after) - mean(before), interval low, interval high): the same resampled prompts for both models."""
    if len(before) != len(after):
        raise ValueError("paired scores need the same prompts in the same order")
    diffs = [a - b for a, b in zip(after, before)]
    lo, hi = bootstrap_ci(diffs, n_boot, level, seed)
    return mean(diffs), lo, hi


def sparkline(values: list[float], lo: float = 0.0, hi: float = 1.0) -> str:
    """One block character per value on a fixed [lo, hi] scale (so two runs' lines compare)."""
    out = []
    for v in values:
        frac = (min(max(v, lo), hi) - lo) / (hi - lo) if hi > lo else 0.0
        out.append(SPARKS[min(int(frac * len(SPARKS)), len(SPARKS) - 1)])
    return "".join(out)


# ---- scoring the infer results ----

def verdicts(path: Path) -> tuple[list[list[float]], list[dict]]:
    """Per prompt, the accuracy reward (0/1) of each answer in a `swiftlike infer` result file."""
    from swiftlike.rl.rewards.functions import build_reward_funcs
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    accuracy = build_reward_funcs(["accuracy"])["accuracy"]
    answers = [r.get("responses") or [r["response"]] for r in rows]
    flat = [a for group in answers for a in group]
    solutions = [r["solution"] for r, group in zip(rows, answers) for _ in group]
    scores = [float(s or 0) for s in accuracy(flat, solution=solutions)]
    out, i = [], 0
    for group in answers:
        out.append(scores[i:i + len(group)])
        i += len(group)
    return out, rows


def formatted(rows: list[dict]) -> int:
    from swiftlike.rl.rewards.functions import build_reward_funcs
    return int(sum(build_reward_funcs(["format_hash"])["format_hash"]([r["response"] for r in rows])))


# ---- commands ----

def split(out_dir: str, n_sft: int, n_held: int) -> None:
    """Disjoint SFT warm-up rows (the first n_sft) and held-out test rows (the last n_held) of
    swiftlike/arithmetic-sft; GRPO's own prompts, swiftlike/arithmetic, share no question with it."""
    from swiftlike.dataset import load_dataset
    rows = load_dataset(["swiftlike/arithmetic-sft"])
    if n_sft + n_held > len(rows):
        raise ValueError(f"{n_sft} + {n_held} rows asked, {len(rows)} available")
    out = Path(out_dir)
    for name, part in (("warmup_sft.jsonl", rows[:n_sft]), ("held_out.jsonl", rows[-n_held:])):
        with (out / name).open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)


def reward_table(run_dir: str) -> list[dict]:
    from swiftlike.train.outputs import read_log
    return [e for e in read_log(run_dir) if "reward" in e and "loss" in e]


def report(out_dir: str, run_dir: str, algo: str = "grpo") -> bool:
    out, name = Path(out_dir), algo.upper()
    greedy, sampled, rows = {}, {}, {}
    for stage in ("base", "before", "after"):
        if (out / f"{stage}_greedy.jsonl").is_file():
            greedy[stage], rows[stage] = verdicts(out / f"{stage}_greedy.jsonl")
    for stage in ("before", "after"):
        sampled[stage], _ = verdicts(out / f"{stage}_sampled.jsonl")
    n = len(greedy["before"])
    k = len(sampled["before"][0])
    right = {s: int(sum(v[0] for v in greedy[s])) for s in greedy}

    print(f"\n=== held-out prompts, greedy: after the SFT warm-up ({name}'s start) and after {name} ===")
    for before, after in list(zip(rows["before"], rows["after"]))[:3]:
        print(f"\nQ: {before['messages'][0]['content']}  (expected {before['solution']})")
        print(f"before: {before['response'].strip()[:200]!r}")
        print(f"after:  {after['response'].strip()[:200]!r}")

    steps = reward_table(run_dir)
    print(f"\n=== {name} reward per step (mean accuracy of the step's samples at the training temperature) ===")
    print("step  reward  reward_std  zero-variance groups  kl" + ("" if any("kl" in e for e in steps) else
                                                                 "  (beta 0: no KL term, none logged)"))
    for e in steps:
        kl = f"{e['kl']:.4f}" if "kl" in e else "-"
        print(f"{e.get('step', '?'):>4}  {e['reward']:6.3f}  {e.get('reward_std', float('nan')):10.3f}  "
              f"{e.get('frac_reward_zero_std', float('nan')):20.2f}  {kl}")
    rewards = [e["reward"] for e in steps]
    third = max(1, len(rewards) // 3)
    print(f"reward (0..1 scale): {sparkline(rewards)}   first {third} steps {mean(rewards[:third]):.3f} -> "
          f"last {third} steps {mean(rewards[-third:]):.3f}")
    print(f"reward curve PNG: {Path(run_dir) / 'images' / 'train_reward.png'}")
    if algo == "ppo":
        print("\n=== the critic per step ===\nstep  value loss  explained variance")
        for e in steps:
            print(f"{e.get('step', '?'):>4}  {e.get('loss/value', float('nan')):10.4f}  "
                  f"{e.get('value/explained_variance', float('nan')):18.3f}")
        print(f"critic curves PNG: {sorted(str(p) for p in (Path(run_dir) / 'images').glob('*value*'))}")

    scores = {s: [mean(c) for c in sampled[s]] for s in sampled}
    ci = {s: bootstrap_ci(scores[s]) for s in scores}
    diff, lo, hi = paired_bootstrap_diff(scores["before"], scores["after"])
    print(f"\n=== held-out accuracy on {n} prompts {name} never trains on ===")
    if "base" in right:
        print(f"greedy, base model:        {right['base']}/{n}   (answers ending in '#### N': "
              f"{formatted(rows['base'])}/{n})")
    print(f"greedy, before {name}:       {right['before']}/{n}   ('#### N': {formatted(rows['before'])}/{n})")
    print(f"greedy, after {name}:        {right['after']}/{n}   ('#### N': {formatted(rows['after'])}/{n})")
    g_before, g_after = [v[0] for v in greedy["before"]], [v[0] for v in greedy["after"]]
    lost = sum(1 for b, a in zip(g_before, g_after) if b and not a)
    gained = sum(1 for b, a in zip(g_before, g_after) if a and not b)
    g_diff, g_lo, g_hi = paired_bootstrap_diff(g_before, g_after)
    print(f"greedy, after - before:    {right['after'] - right['before']:+d}/{n} ({lost} right -> wrong, {gained} wrong "
          f"-> right); as a share {g_diff:+.3f}, paired 95% CI [{g_lo:+.3f}, {g_hi:+.3f}]")
    for s, stage in (("before", f"before {name}"), ("after", f"after {name}")):
        print(f"mean@{k}, {stage + ':':<15} {mean_at_k(sampled[s]):.3f}  95% CI [{ci[s][0]:.3f}, {ci[s][1]:.3f}] "
              f"(bootstrap over prompts)")
    print(f"mean@{k}, after - before:   {diff:+.3f}  95% CI [{lo:+.3f}, {hi:+.3f}] "
          f"(paired bootstrap over prompts, 10000 resamples)")

    beyond = lo > 0
    greedy_ok = right["after"] >= right["before"]
    disjoint = ci["after"][0] > ci["before"][1]
    print(f"\nmean@{k} rose beyond noise (paired 95% interval of the difference above 0): {'YES' if beyond else 'NO'}")
    print(f"  (stricter: the two models' own 95% intervals do not overlap: {'yes' if disjoint else 'no'})")
    print(f"greedy did not drop ({right['before']} -> {right['after']} of {n}): {'YES' if greedy_ok else 'NO'}")
    ok = beyond and greedy_ok
    print(f"demo criterion (mean@{k} up beyond noise and greedy not down): {'HELD' if ok else 'NOT MET'}")
    return ok


if __name__ == "__main__":
    if sys.argv[1] == "split":
        split(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        report(sys.argv[2], sys.argv[3], *sys.argv[4:5])
