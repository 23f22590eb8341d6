"""What `--reward_funcs code_exec` costs per completion: batches of 16 completions x 5 assert cases of
swiftlike/code-tasks (the reference solutions of 16 different rows, so nothing is deduplicated, and every case
passes), scored one sandbox call at a time and from the reward's thread pool, in alternating rounds. Wall time per
batch, and CPU time of the sandbox (its server and the children it forked, from /proc) and of this process.

    .venv/bin/python benchmarks/bench_code_exec.py [--rounds 3] [--batches 10]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's swiftlike, not an installed one

from swiftlike.dataset import load_dataset  # noqa: E402
from swiftlike.rl.rewards.code_exec import WORKERS, CodeExecReward  # noqa: E402
from swiftlike.tools import sandbox  # noqa: E402

BATCH = 16


def sandbox_cpu_s() -> float:
    """CPU seconds of the sandbox server and of every child it has reaped (each call's processes)."""
    fields = Path(f"/proc/{sandbox._server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime, stime, cutime, cstime


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(reward: CodeExecReward, batches: list[list[dict]]) -> dict[str, float]:
    """Median per completion over the batches: wall, sandbox CPU and this process's CPU, in ms."""
    wall, box, own = [], [], []
    for rows in batches:
        completions = [f"```python\n{row['reference']}```" for row in rows]
        box_0, own_0, started = sandbox_cpu_s(), own_cpu_s(), time.perf_counter()
        scores = reward(completions, test_cases=[row["test_cases"] for row in rows])
        wall.append(time.perf_counter() - started)
        box.append(sandbox_cpu_s() - box_0)
        own.append(own_cpu_s() - own_0)
        assert scores == [1.0] * len(rows), scores
    return {name: 1e3 * statistics.median(values) / BATCH for name, values in
            (("wall", wall), ("sandbox_cpu", box), ("trainer_cpu", own))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    rows = load_dataset(["swiftlike/code-tasks"])
    batches = [rows[i * BATCH:(i + 1) * BATCH] for i in range(args.batches)]
    rewards = {"1 worker": CodeExecReward(workers=1), f"{WORKERS} workers": CodeExecReward()}
    weak = [concern for concern, words in sandbox.sandbox_isolation().items()  # starts the server, untimed
            if words.startswith(("NOT ISOLATED", "LIMITED"))]
    print(f"{len(os.sched_getaffinity(0))} cores, uid {os.geteuid()}, protections missing: {weak or 'none'}, "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    for r in range(args.rounds):
        for name in (list(rewards) if r % 2 == 0 else list(rewards)[::-1]):
            ms = run(rewards[name], batches)
            print(f"round {r + 1}, {name}: per completion {ms['wall']:.1f} ms wall, {ms['sandbox_cpu']:.1f} ms "
                  f"sandbox CPU, {ms['trainer_cpu']:.1f} ms trainer CPU; per case {ms['wall'] / 5:.1f} ms wall")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
