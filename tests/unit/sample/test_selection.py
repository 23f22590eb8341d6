"""Which answers become rows, checked against hand-worked cases; the PRM reduction; the resumable file."""
import json
import math

import pytest

from swiftlike.rl.rewards.prm import answer_scores, check_is_prm, split_steps
from swiftlike.sample.output import ResumableJsonl
from swiftlike.sample.run import prompt_seed
from swiftlike.sample.selection import Selection, select_answers

NAN = math.nan


@pytest.mark.parametrize("orm, prm, kwargs, expected", [
    # no reward: every answer, in sampling order, nothing rejected
    (None, None, {}, Selection((0, 1, 2), None)),
    # ranks 10, 0, 10, 5: the two 10s kept in sampling order; the worst not kept (0) rejected
    ([1, 0, 1, 0.5], None, {}, Selection((0, 2), 1)),
    # answer 0 passes the ORM but not the PRM threshold; ranks 10.2, 10.9, 0.95: 1 kept, 2 the worst
    ([1, 1, 0], [0.2, 0.9, 0.95], {"prm_threshold": 0.5}, Selection((1,), 2)),
    # a missing ORM score neither passes nor is rejected
    ([NAN, 1, 0], None, {}, Selection((1,), 2)),
    # 3 of 4 answers pass: too easy at 0.75, not at 0.8 (then 3 kept and the one failure rejected)
    ([1, 1, 1, 0], None, {"easy_query_threshold": 0.75}, Selection((), None, too_easy=True)),
    ([1, 1, 1, 0], None, {"easy_query_threshold": 0.8, "n_best": 3}, Selection((0, 1, 2), 3)),
    # every answer kept: none rejected (a DPO pair of an answer with itself is no pair)
    ([1, 1], None, {}, Selection((0, 1), None)),
    # an answer tied with the worst kept one is not its rejection
    ([1, 1, 1], None, {"n_best": 1}, Selection((0,), None)),
    # PRM alone: passes at >= the threshold
    (None, [0.1, 0.7], {"prm_threshold": 0.5}, Selection((1,), 0)),
    # nothing passes: no rows
    ([0, -1], None, {}, Selection((), None)),
])
def test_selection_by_hand(orm, prm, kwargs, expected):
    n = len(orm if orm is not None else prm) if (orm or prm) else 3
    assert select_answers(n, orm, prm, **{"n_best": 2, **kwargs}) == expected


def test_prm_scores_are_the_weakest_steps_and_a_flat_score_is_refused():
    steps = lambda completions, **_: [[0.9, 0.2, 0.8], [0.7], []]  # noqa: E731
    got = answer_scores(steps, "p", ["a", "b", "c"])
    assert got[:2] == [0.2, 0.7] and math.isnan(got[2])
    with pytest.raises(ValueError, match="one number; a PRM returns a list of step scores.*--orm_model"):
        answer_scores(lambda completions, **_: [0.5] * len(completions), "flat", ["a", "b"])
    with pytest.raises(ValueError, match="returned 1 results for 2 completions"):
        answer_scores(lambda completions, **_: [[0.5]], "short", ["a", "b"])
    assert split_steps("one\n\ntwo\n\n\n\nthree") == ["one", "two", "three"]
    assert split_steps("") == [""]


def test_a_checkpoint_that_is_not_a_prm_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForSequenceClassification"]}))
    with pytest.raises(ValueError, match="a sequence classifier .*--orm_model.*not a process reward model"):
        check_is_prm(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    with pytest.raises(ValueError, match="is a Qwen2ForCausalLM, not a process reward model"):
        check_is_prm(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForTokenClassification"],
                                                      "num_labels": 2}))
    check_is_prm(tmp_path)


def test_prompt_seeds_depend_on_the_dataset_index_only():
    assert prompt_seed(42, 7) == prompt_seed(42, 7)
    assert len({prompt_seed(42, i) for i in range(1000)}) == 1000
    assert prompt_seed(42, 7) != prompt_seed(43, 7)


def test_the_resumable_file_cuts_a_torn_prompt_and_refuses_other_settings(tmp_path):
    path = tmp_path / "out.jsonl"
    out = ResumableJsonl(path, {"seed": 1}, resume=False, override=False)
    assert not out.partial.exists()  # nothing on disk until the run starts
    out.start()
    out.append_prompt(['{"a": 1}\n', '{"a": 2}\n'])
    out.append_prompt([])
    with open(out.partial, "ab") as f:
        f.write(b'{"a": 3')  # killed mid-write of the third prompt
    with pytest.raises(ValueError, match="interrupted run's rows: continue it with --resume true"):
        ResumableJsonl(path, {"seed": 1}, resume=False, override=False)
    with pytest.raises(ValueError, match="--seed was 1, now 2"):
        ResumableJsonl(path, {"seed": 2}, resume=True, override=False)
    again = ResumableJsonl(path, {"seed": 1}, resume=True, override=False)
    again.start()
    assert again.prompts_done == 2 and not path.exists()
    again.append_prompt(['{"a": 3}\n'])
    again.publish()
    assert path.read_text() == '{"a": 1}\n{"a": 2}\n{"a": 3}\n'
    assert not again.partial.exists() and not again.progress.exists()
    with pytest.raises(ValueError, match="exists: pass --override_exist_file true"):
        ResumableJsonl(path, {"seed": 1}, resume=False, override=False)
    assert ResumableJsonl(path, {"seed": 1}, resume=True, override=False).complete
    replaced = ResumableJsonl(path, {"seed": 1}, resume=False, override=True)
    replaced.start()
    assert path.read_text().count("\n") == 3  # the old file stays whole until the new one is published
    replaced.publish()
    assert path.read_text() == ""
