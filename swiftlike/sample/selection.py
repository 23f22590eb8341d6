"""Which of a prompt's answers become rows: pure functions of their scores, unit-tested by hand.

ms-swift's rule, kept so its users get the same files: an answer passes when its outcome reward is > 0 and its
process reward (its weakest step's) is >= --prm_threshold; answers rank by `10 * orm + prm` (the outcome first,
the process score breaking ties), the --n_best_to_keep best passing ones are kept, and the worst-ranked answer is
the `rejected_response`. Two deviations, on purpose: the rejected answer is never one of the kept (ms-swift's can
be, when every answer is kept, which gives DPO a pair with itself), and an answer whose reward is missing (NaN:
the reward did not apply or failed) neither passes nor is rejected, since nothing is known of it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# How much more the outcome reward weighs than the process reward in the ranking (ms-swift's).
ORM_WEIGHT = 10.0


@dataclass(frozen=True)
class Selection:
    """The kept answers' indices (best first), the rejected one's (or None) and whether the prompt was too easy."""

    kept: tuple[int, ...]
    rejected: int | None
    too_easy: bool = False


def select_answers(n_answers: int, orm: Sequence[float] | None, prm: Sequence[float] | None, *, n_best: int,
                   prm_threshold: float = 0.0, easy_query_threshold: float | None = None) -> Selection:
    """The rows one prompt gives. Without any reward every answer is kept, in sampling order, none rejected."""
    if orm is None and prm is None:
        return Selection(tuple(range(n_answers)), None)
    for name, scores in (("orm", orm), ("prm", prm)):
        if scores is not None and len(scores) != n_answers:
            raise ValueError(f"{len(scores)} {name} scores for {n_answers} answers")
    orm_of = (lambda i: orm[i]) if orm is not None else (lambda i: 0.0)
    prm_of = (lambda i: prm[i]) if prm is not None else (lambda i: 0.0)
    scored = [i for i in range(n_answers) if not math.isnan(orm_of(i)) and not math.isnan(prm_of(i))]
    if easy_query_threshold is not None and orm is not None and n_answers:
        solved = sum(1 for i in scored if orm[i] > 0)
        if solved / n_answers >= easy_query_threshold:
            return Selection((), None, too_easy=True)
    passing = [i for i in scored if (orm is None or orm_of(i) > 0) and (prm is None or prm_of(i) >= prm_threshold)]
    rank = {i: ORM_WEIGHT * orm_of(i) + prm_of(i) for i in scored}
    # sorted() is stable: equal scores keep sampling order, so the choice is reproducible
    kept = tuple(sorted(passing, key=lambda i: -rank[i])[:n_best])
    if not kept:
        return Selection((), None)
    others = [i for i in scored if i not in kept and rank[i] < rank[kept[-1]]]
    rejected = min(others, key=lambda i: rank[i]) if others else None
    return Selection(kept, rejected)
