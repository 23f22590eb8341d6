"""GroupScoring (rl/online/scoring.py) on plain functions with known timings: a group is scored as soon as it is
generated, while later groups still generate, so the trainer waits only for what outlasts the generation."""
import threading
import time

import pytest
import torch

from swiftlike.rl.online.prefetch import Prefetch
from swiftlike.rl.online.rollout_worker import Rollout
from swiftlike.rl.online.scoring import GroupScoring, score_after
from swiftlike.rl.rewards.functions import ScoredRewards

GROUP = 2


def rows(prompts: str) -> list[dict]:
    return [{"messages": [{"role": "user", "content": p}], "delay": 0.4 * i} for i, p in enumerate(prompts)
            for _ in range(GROUP)]


def rollout(row: dict) -> Rollout:
    return Rollout([1], [2, 3], row["messages"][0]["content"], "stop", None, row, 0)


class Recorder:
    """Group k generates in 0.4 k s; a scoring call takes `score_s`; every start and end is written down, and the
    groups of each scoring call. A completion's reward is its prompt's character code."""

    def __init__(self, score_s: float = 0.5, fail_on: str | None = None):
        self.score_s, self.fail_on, self.events, self.lock = score_s, fail_on, [], threading.Lock()
        self.servers_used: list[int] = []
        self.calls: list[list[str]] = []

    def note(self, what: str, prompt: str) -> None:
        with self.lock:
            self.events.append((time.monotonic(), what, prompt))

    def generate(self, group: list[dict], server: int) -> list[Rollout]:
        self.servers_used.append(server)
        time.sleep(group[0]["delay"])
        self.note("generated", group[0]["messages"][0]["content"])
        return [rollout(r) for r in group]

    def score(self, rollouts: list[Rollout]) -> ScoredRewards:
        prompts = list(dict.fromkeys(r.text for r in rollouts))
        self.calls.append(prompts)
        if self.fail_on in prompts:
            raise RuntimeError(f"judge down while scoring {self.fail_on}")
        time.sleep(self.score_s)
        for prompt in prompts:
            self.note("scored", prompt)
        values = torch.tensor([float(ord(r.text)) for r in rollouts])
        none = torch.zeros(len(rollouts), dtype=torch.bool)
        return ScoredRewards(values.clone(), {"judge": values}, {"judge": none}, {"judge": none.clone()})

    def at(self, what: str, prompt: str) -> float:
        return next(t for t, w, p in self.events if w == what and p == prompt)


def test_each_group_is_scored_as_soon_as_it_is_generated_and_the_trainer_waits_only_for_the_rest():
    recorder = Recorder(score_s=0.7)
    spans = []
    scoring = GroupScoring(recorder.generate, recorder.score, GROUP, servers=2,
                           on_generated=lambda start, end, rollouts, bg: spans.append((end - start, len(rollouts), bg)))
    try:
        start = time.monotonic()
        batch = scoring.submit(rows("abcd")).result()
        took = time.monotonic() - start
    finally:
        scoring.close()
    # in order, whatever order they finished in; each group's rewards are its own
    assert [r.text for r in batch.rollouts] == list("aabbccdd")
    assert batch.scored.total.tolist() == [97, 97, 98, 98, 99, 99, 100, 100]
    # a is scored alone at once (0-0.7 s) while the others generate (b, c, d done at 0.4, 0.8, 1.2 s); b waits for
    # it; c and d, both done by the time b's call ends (1.4 s), go in one call
    assert recorder.at("scored", "a") < recorder.at("generated", "d")
    assert recorder.calls == [["a"], ["b"], ["c", "d"]]
    # generation took 1.2 s; four calls in a row after it would be 2.8 s more: the wait is what outlasts it (0.9 s)
    assert batch.generate_wait == pytest.approx(1.2, abs=0.25)
    assert batch.reward_wait < 1.3 and took < 1.2 + 4 * 0.7 - 1.0, (batch, took)
    assert sorted(recorder.servers_used) == [0, 0, 1, 1]  # groups spread over the servers
    assert len(spans) == 1 and spans[0][1] == 8 and spans[0][2] is False


def test_an_error_of_a_reward_or_a_generation_reaches_the_trainer():
    recorder = Recorder(score_s=0.0, fail_on="b")
    scoring = GroupScoring(recorder.generate, recorder.score, GROUP, servers=1)
    try:
        with pytest.raises(RuntimeError, match="judge down while scoring b"):
            scoring.submit(rows("abc")).result()

        def broken(group, server):
            raise ConnectionError("rollout server gone")
        failing = GroupScoring(broken, recorder.score, GROUP, servers=1)
        with pytest.raises(ConnectionError, match="rollout server gone"):
            failing.submit(rows("a")).result()
        failing.close()
        with pytest.raises(ValueError, match="3 rows are not whole groups of 2"):
            scoring.submit(rows("ab")[:3])
    finally:
        scoring.close()


def test_prefetched_batches_are_scored_in_the_background_and_a_cleared_one_leaves_nothing_running():
    recorder = Recorder(score_s=0.2)
    scoring = GroupScoring(recorder.generate, recorder.score, GROUP, servers=1)
    prefetch = Prefetch(lambda batch_rows: scoring.submit(batch_rows, background=True))
    try:
        ahead = rows("ab")
        prefetch.top_up([ahead])
        time.sleep(1.2)  # the trainer trains meanwhile: generation (0.4 s) and scoring (at most 2 x 0.2 s) finish
        batch = prefetch.take(ahead)
        assert batch.reward_wait < 0.05 and batch.generate_wait < 0.05
        assert batch.scored.total.tolist() == [97, 97, 98, 98]
        prefetch.top_up([rows("cd")])
        prefetch.clear()  # a resumed run: waits for what started, cancels the rest
        assert len(prefetch) == 0
    finally:
        scoring.close()


def test_a_batch_generated_in_process_is_scored_after_it_and_all_of_it_is_waited_for():
    recorder = Recorder(score_s=0.2)
    batch = score_after([rollout(r) for r in rows("ab")], recorder.score, generate_seconds=1.5)
    assert batch.generate_wait == 1.5 and batch.reward_wait >= 0.2
    assert batch.scored.total.tolist() == [97, 97, 98, 98] and recorder.calls == [["a", "b"]]  # one call


def test_close_waits_for_the_reward_call_in_progress():
    """A run that ends while a group is being scored: close() returns after that call, with the reward thread
    ended, so the interpreter never shuts down under a daemon thread inside torch (an abort, exit -6)."""
    recorder = Recorder(score_s=0.6)
    scoring = GroupScoring(recorder.generate, recorder.score, GROUP, servers=1)
    scoring.submit(rows("a"))
    deadline = time.monotonic() + 5
    while not recorder.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.calls == [["a"]]  # scoring has started, and sleeps 0.6 s
    scoring.close()
    assert not scoring._reward_thread.is_alive()
    assert [what for _, what, _ in recorder.events] == ["generated", "scored"]
