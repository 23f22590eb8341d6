"""The swiftlike backend's own sets and flags: reasoning-gym tasks scored by their own verifier on every row,
GRPO rows of the same task read as the same questions, and ms-swift's eval flags refused with the fix named."""
import json

import pytest
from model_ids import TINY

from swiftlike.arguments.eval_args import EvalArguments
from swiftlike.arguments.parser import parse_args
from swiftlike.arguments.train_args import TrainArguments
from swiftlike.eval.builtin import score
from swiftlike.eval.data import RG_EVAL_SEED, load_benchmark

TASKS = ("basic_arithmetic", "chain_sum", "leg_counting", "spell_backward", "base_conversion")


def replies_for(question) -> list[str]:
    """A right answer, a wrong one, one with extra words inside the tags, a reply without tags and an empty one."""
    gold = question.answer
    return [f"Thinking...\n<answer>{gold}</answer>", f"<answer>{gold}x7</answer>", f"<answer> {gold} </answer>",
            f"The answer is {gold}.", ""]


@pytest.mark.parametrize("task", TASKS)
def test_reasoning_gym_verdicts_equal_its_own_score_answer_on_every_row(task):
    from reasoning_gym.utils import extract_answer
    questions = load_benchmark(f"rg:{task}", limit=12)
    assert len(questions) == 12 and all(q.kind == "rg" and q.system for q in questions)
    verdicts = []
    for q in questions:
        for reply in replies_for(q):
            ours, found = score(q, reply)
            assert found == extract_answer(reply)
            assert ours == float(q.rg_dataset.score_answer(extract_answer(reply), q.rg_entry)), (task, reply)
            verdicts.append(ours)
    # the right answer scores 1 and the empty reply 0 on every row: the check sees both outcomes
    assert verdicts[0::5] == [1.0] * 12 and verdicts[4::5] == [0.0] * 12


def test_reasoning_gym_sets_are_held_out_from_training_rows_and_grpo_rows_read_as_the_same_questions(tmp_path):
    from swiftlike.rollout.multi_turn.adapters import reasoning_gym_rows
    rows = reasoning_gym_rows("basic_arithmetic", size=6, seed=RG_EVAL_SEED)
    path = tmp_path / "rg.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_rows = load_benchmark(str(path))
    by_name = load_benchmark("rg:basic_arithmetic", limit=6)
    assert [(q.prompt, q.answer) for q in from_rows] == [(q.prompt, q.answer) for q in by_name]
    training = reasoning_gym_rows("basic_arithmetic", size=6)  # seed 0, what GRPO rows default to
    assert not {r["messages"][0]["content"] for r in training} & {q.prompt for q in by_name}
    sized = load_benchmark("rg:basic_arithmetic", dataset_args={"size": 3, "seed": 7, "min_terms": 2, "max_terms": 2})
    assert len(sized) == 3 and sized[0].prompt.count(" ") <= 6
    with pytest.raises(ValueError, match="unknown task 'no_such_task'"):
        load_benchmark("rg:no_such_task", limit=2)
    with pytest.raises(ValueError, match="size: expected an integer >= 1"):
        load_benchmark("rg:basic_arithmetic", dataset_args={"size": 0})


@pytest.mark.parametrize("kwargs, message", [
    ({"eval_backend": "swiftlike", "eval_dataset": ["gsm8k"]}, "for harness tasks use --eval_backend Native"),
    ({"eval_dataset": ["gsm8k"], "eval_num_samples": 2, "temperature": 0.7}, "pass@k) is the swiftlike backend's"),
    ({"eval_dataset": ["math"], "eval_dataset_args": {"gsm8k": {}}}, "names gsm8k, which --eval_dataset does not"),
    ({"eval_dataset": ["math"], "eval_generation_config": {"max_len": 5}}, "unknown key 'max_len'"),
    ({"eval_all_checkpoints": "/no/such/run"}, "no such directory"),
    ({"eval_dataset": ["math"], "eval_num_proc": 0}, "--eval_num_proc must be >= 1"),
])
def test_eval_flags_refused_with_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EvalArguments(**{"model": TINY, **kwargs})


def test_ms_swift_eval_flags_reach_the_arguments():
    args = parse_args(EvalArguments, [
        "--eval_url", "http://127.0.0.1:8000/v1/chat/completions", "--eval_dataset", "gsm8k", "arc",
        "--eval_generation_config", '{"max_tokens": 77, "temperature": 0.5, "top_p": 0.9}',
        "--eval_dataset_args", '{"gsm8k": {"few_shot_num": 0}}', "--eval_concurrency", "4"])
    assert (args.eval_url, args.eval_backend, args.max_new_tokens, args.temperature, args.top_p, args.eval_num_proc) \
        == ("http://127.0.0.1:8000/v1", "Native", 77, 0.5, 0.9, 4)
    assert args.dataset_args("gsm8k") == {"few_shot_num": 0} and args.dataset_args("arc") == {}


def test_training_benchmark_flags():
    base = {"model": TINY, "dataset": ["d.jsonl"]}
    with pytest.raises(ValueError, match="--eval_dataset takes effect with --eval_use_evalscope true"):
        TrainArguments(**base, eval_dataset=["gsm8k"])
    with pytest.raises(ValueError, match="needs --eval_dataset"):
        TrainArguments(**base, eval_use_evalscope=True)
    with pytest.raises(ValueError, match="for harness tasks use"):
        TrainArguments(**base, eval_use_evalscope=True, eval_backend="swiftlike", eval_dataset=["gsm8k"])
    args = TrainArguments(**base, eval_use_evalscope=True, eval_dataset=["gsm8k"], eval_limit=5,
                          eval_generation_config={"max_tokens": 64})
    bench = args.benchmark_arguments("http://127.0.0.1:9/v1", "/tmp/out")
    assert (bench.eval_backend, bench.eval_limit, bench.max_new_tokens, bench.temperature) == ("Native", 5, 64, 0.0)
