"""GRPO reward functions (`--reward_funcs`), their weighted sum and `--external_plugins`, on hand-worked values."""
import json
import math

import pytest
import torch

from swiftlike.rl.rewards import plugins
from swiftlike.rl.rewards.plugins import load_external_plugins
from swiftlike.rl.rewards.functions import (FAILED, MISSING, REWARD_REGISTRY, CosineReward, MathAccuracy,
                                            RepetitionPenalty, ScoredRewards, SoftOverlong, build_reward_funcs,
                                            combine_rewards, format_hash_reward, format_reward, register_reward)
from paths import REPO

ARITHMETIC = REPO / "swiftlike" / "dataset" / "data" / "arithmetic.jsonl"


def approx(x):
    return pytest.approx(x, abs=1e-6)


@pytest.fixture
def clean_registry():
    """Whatever a test registers is gone afterwards."""
    before = dict(REWARD_REGISTRY)
    loaded = dict(plugins._LOADED)
    yield
    REWARD_REGISTRY.clear()
    REWARD_REGISTRY.update(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


@pytest.fixture(scope="module")
def accuracy():
    return MathAccuracy()


# --------------------------------------------------------------------------- accuracy


def test_accuracy_hash_boxed_and_wrong_answers(accuracy):
    completions = [
        "12 + 7 = 19\n#### 19",           # GSM8K-style final answer
        "Half of one is \\boxed{1/2}.",   # boxed fraction vs decimal solution
        "12 + 7 = 19\n#### 20",           # wrong number after ####
        "So the result is \\boxed{3}",    # wrong boxed answer
        "I think it is nineteen",         # no extractable final answer
        "<think>7*2</think><answer>14</answer>",  # ms-swift <answer> tag
        "#### 1,000",                     # thousands separator
        "#### Step 1\n3 + 4 = 7\n#### Final answer\n\\boxed{7}",  # '####' as markdown headings
    ]
    solutions = ["19", "0.5", "19", "4", "19", "14", "1000", "7"]
    assert accuracy(completions, solution=solutions) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


def test_accuracy_gsm8k_solution_and_not_applicable_rows(accuracy):
    gsm8k = "She has 3 * 24 = 72 apples.\n#### 72"
    assert accuracy(["\\boxed{72}", "#### 72", "#### 71"], solution=[gsm8k] * 3) == [1.0, 1.0, 0.0]
    # a solution math-verify cannot read, or a null one, is "not applicable", not a 0
    assert accuracy(["#### 5", "#### 5"], solution=["no number here", None]) == [None, None]


def test_accuracy_on_the_builtin_arithmetic_task(accuracy):
    rows = [json.loads(line) for line in ARITHMETIC.read_text().splitlines()[:8]]
    solutions = [r["solution"] for r in rows]
    right = [f"Let me add.\n#### {s}" for s in solutions]
    wrong = [f"#### {int(s) + 1}" for s in solutions]
    assert accuracy(right, solution=solutions) == [1.0] * 8
    assert accuracy(wrong, solution=solutions) == [0.0] * 8
    assert format_hash_reward(right) == [1.0] * 8


def test_accuracy_without_solution_column_says_which_column_and_fix(accuracy):
    with pytest.raises(ValueError) as e:
        accuracy(["#### 1"], messages=[[]], lang=["en"])
    msg = str(e.value)
    assert "'accuracy' needs a 'solution' column" in msg
    assert "lang, messages" in msg
    assert "Add a 'solution' column" in msg and "drop 'accuracy' from --reward_funcs" in msg
    with pytest.raises(ValueError, match="got 2 'solution' values for 1 completions"):
        accuracy(["#### 1"], solution=["1", "2"])


# --------------------------------------------------------------------------- format


def test_format_think_answer():
    completions = [
        "<think>2 + 5 is 7</think>\n<answer>7</answer>",
        "<think>multi\nline</think><answer>a\nb</answer>",
        "<think>x</think><answer>7</answer> trailing text",
        "<answer>7</answer>",
        "Sure! <think>x</think><answer>7</answer>",
    ]
    assert format_reward(completions) == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_format_hash_last_line():
    completions = [
        "2 + 5 = 7\n#### 7",
        "#### 7\n",            # trailing whitespace is fine
        "#### -1,000.5",       # sign, thousands commas, decimals
        "#### 7 apples",       # not a bare number
        "#### 7\nHope this helps",  # not the last line
        "The answer is 7",     # no marker
        "so #### 7",           # marker not at the start of the line
        "####",                # no number
    ]
    assert format_hash_reward(completions) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert REWARD_REGISTRY["format_hash"] is format_hash_reward


# --------------------------------------------------------------------------- cosine


def test_cosine_at_min_mid_and_max_length(accuracy):
    cos = CosineReward(cosine_max_len=100, accuracy=accuracy)
    completions = ["#### 19", "#### 19", "#### 19", "#### 20", "#### 20", "#### 20", "#### 19"]
    lengths = [0, 50, 100, 0, 50, 100, 400]
    rewards = cos(completions, solution=["19"] * 7, completion_lengths=lengths)
    # correct: 1.0 at length 0 -> 0.5 at cosine_max_len; wrong: -0.5 -> 0.0; half-way is the midpoint
    # because cos(pi/2) = 0. Past cosine_max_len the length is clamped.
    assert rewards == approx([1.0, 0.75, 0.5, -0.5, -0.25, 0.0, 0.5])
    # a quarter of the way: value_T + (value_0 - value_T) * (1 + cos(pi/4)) / 2
    quarter = cos(["#### 19"], solution=["19"], completion_ids=[[0] * 25])
    assert quarter == approx([0.5 + 0.5 * (1 + math.cos(math.pi / 4)) / 2])


def test_cosine_defaults_and_missing_lengths(accuracy):
    cos = CosineReward(accuracy=accuracy)
    assert (cos.min_len_value_wrong, cos.max_len_value_wrong) == (-0.5, 0.0)
    assert (cos.min_len_value_correct, cos.max_len_value_correct) == (1.0, 0.5)
    assert cos.max_len == 512  # cosine_max_len defaults to max_completion_length (ms-swift default 512)
    assert CosineReward(max_completion_length=64, accuracy=accuracy).max_len == 64
    with pytest.raises(ValueError, match="'cosine' needs the token count of each completion"):
        cos(["#### 1"], solution=["1"])
    # a row accuracy cannot judge stays not applicable
    assert cos(["#### 1"], solution=[None], completion_lengths=[3]) == [None]


# --------------------------------------------------------------------------- repetition


def test_repetition_repeated_vs_fresh_text():
    rep = RepetitionPenalty()
    assert (rep.n, rep.max_penalty) == (3, -1.0)
    # "a b c a b c": trigrams abc, bca, cab, abc -> 3 distinct of 4 -> (1 - 3/4) * -1
    # "x x x x x x": 4 trigrams, 1 distinct -> -(1 - 1/4); case is ignored
    texts = ["a b c a b c", "the quick brown fox jumps over", "x X x x X x", "too short", ""]
    assert rep(texts) == approx([-0.25, 0.0, -0.75, 0.0, 0.0])
    assert RepetitionPenalty(repetition_n_grams=2, repetition_max_penalty=-2.0)(["a b a b"]) == approx(
        [-2.0 * (1 - 2 / 3)])
    with pytest.raises(ValueError, match="must be <= 0"):
        RepetitionPenalty(repetition_max_penalty=0.5)


# --------------------------------------------------------------------------- soft overlong


def test_soft_overlong_three_regions():
    soft = SoftOverlong(soft_max_length=100, soft_cache_length=20)
    lengths = [50, 80, 90, 100, 130]
    # <= 80 (= L_max - L_cache): 0; 80..100: (80 - L) / 20; > 100: -1
    assert soft(["x"] * 5, completion_lengths=lengths) == approx([0.0, 0.0, -0.5, -1.0, -1.0])
    assert soft(["x", "y"], completion_ids=[[1] * 85, [1] * 95]) == approx([-0.25, -0.75])
    assert SoftOverlong(soft_cache_length=128).max_length == 512  # defaults to max_completion_length


def test_soft_overlong_errors():
    with pytest.raises(ValueError, match="needs --soft_cache_length"):
        SoftOverlong()
    with pytest.raises(ValueError, match=r"below --soft_max_length \(100\), got 100"):
        SoftOverlong(soft_max_length=100, soft_cache_length=100)
    with pytest.raises(ValueError, match="'soft_overlong' needs the token count"):
        SoftOverlong(soft_max_length=100, soft_cache_length=20)(["x"])


# --------------------------------------------------------------------------- combine


def test_combine_weights_and_not_applicable():
    def a(completions, **kw):
        return [1.0, 0.0, None]

    def b(completions, **kw):
        return [0.5, 0.5, 0.5]

    scored = combine_rewards({"a": a, "b": b}, [2.0, 1.0], ["x", "y", "z"])
    total, per_func = scored.total, scored.per_func
    assert total.tolist() == approx([2.5, 0.5, 0.5])  # the None is skipped, not counted as 0 * 2
    assert per_func["b"].tolist() == [0.5, 0.5, 0.5]
    assert per_func["a"][:2].tolist() == [1.0, 0.0] and math.isnan(per_func["a"][2])
    # default weights: 1.0 each; a list of functions is keyed by function name
    scored = combine_rewards([a, b], None, ["x", "y", "z"])
    total, per_func = scored.total, scored.per_func
    assert total.tolist() == approx([1.5, 0.5, 0.5]) and list(per_func) == ["a", "b"]
    # a completion no function applies to sums to 0
    assert combine_rewards({"a": a}, None, ["x", "y", "z"]).total.tolist() == [1.0, 0.0, 0.0]


def test_a_missing_or_failed_reward_leaves_the_completion_without_a_valid_total():
    def judge(completions, **kw):
        return [0.5, MISSING, None, FAILED]

    def rule(completions, **kw):
        return [1.0, 1.0, 1.0, 1.0]

    scored = combine_rewards({"judge": judge, "rule": rule}, [2.0, 1.0], ["w", "x", "y", "z"])
    # missing and failed are not "not applicable" (y): the whole total is gone, the others' rewards stay logged
    assert scored.total.isnan().tolist() == [False, True, False, True]
    assert scored.total[[0, 2]].tolist() == [2.0, 1.0]
    assert scored.valid.tolist() == [True, False, True, False]
    assert scored.missing["judge"].tolist() == [False, True, False, False] and not scored.missing["rule"].any()
    assert scored.failed["judge"].tolist() == [False, False, False, True] and scored.failed_any.tolist()[3]
    assert scored.per_func["judge"].isnan().tolist() == [False, True, True, True]
    assert scored.per_func["rule"].tolist() == [1.0] * 4
    picked = ScoredRewards.cat([scored, scored.select(torch.tensor([1, 0]))])
    assert picked.valid.tolist() == [True, False, True, False, False, True]
    assert picked.missing["judge"].tolist()[4] and picked.per_func["rule"].tolist() == [1.0] * 6


def test_combine_passes_columns_to_builtins():
    funcs = build_reward_funcs(["accuracy", "format_hash", "soft_overlong"], soft_max_length=10, soft_cache_length=4)
    completions = ["2 + 5 = 7\n#### 7", "#### 8", "seven"]
    scored = combine_rewards(funcs, [1.0, 0.5, 1.0], completions, solution=["7", "7", "7"],
                             completion_ids=[[1] * 5, [1] * 8, [1] * 12])
    total, per_func = scored.total, scored.per_func
    assert per_func["accuracy"].tolist() == [1.0, 0.0, 0.0]
    assert per_func["format_hash"].tolist() == [1.0, 1.0, 0.0]
    assert per_func["soft_overlong"].tolist() == approx([0.0, -0.5, -1.0])
    assert total.tolist() == approx([1.5, 0.0, -1.0])
    assert total.dtype == torch.float32


def test_combine_errors():
    def one(completions, **kw):
        return [1.0]

    with pytest.raises(ValueError, match=r"got 1 --reward_weights for 2 --reward_funcs \(a, b\)"):
        combine_rewards({"a": one, "b": one}, [1.0], ["x"])
    with pytest.raises(ValueError, match="'a' returned 1 rewards for 2 completions"):
        combine_rewards({"a": one}, None, ["x", "y"])
    with pytest.raises(ValueError, match="'bad' returned 'high' for completion 0"):
        combine_rewards({"bad": lambda completions, **kw: ["high"]}, None, ["x"])
    with pytest.raises(ValueError, match="no reward functions"):
        combine_rewards({}, None, ["x"])


# --------------------------------------------------------------------------- registry and build


def test_build_passes_matching_arguments():
    funcs = build_reward_funcs(["cosine", "repetition", "soft_overlong", "format"], cosine_max_len=64,
                               repetition_n_grams=2, soft_cache_length=16, max_completion_length=128,
                               unrelated_argument=True)
    assert list(funcs) == ["cosine", "repetition", "soft_overlong", "format"]
    assert funcs["cosine"].max_len == 64
    assert funcs["repetition"].n == 2 and funcs["repetition"].max_penalty == -1.0
    assert (funcs["soft_overlong"].max_length, funcs["soft_overlong"].cache_length) == (128, 16)
    assert funcs["format"] is format_reward


def test_unknown_and_repeated_names():
    with pytest.raises(ValueError) as e:
        build_reward_funcs(["accuracy", "nope"])
    msg = str(e.value)
    assert "unknown --reward_funcs 'nope'" in msg
    assert "accuracy, code_exec, cosine, format, format_hash, llm_judge, repetition, soft_overlong" in msg
    assert "--external_plugins" in msg
    with pytest.raises(ValueError, match="names 'format' twice"):
        build_reward_funcs(["format", "format"])


def test_register_errors(clean_registry):
    with pytest.raises(ValueError, match=r"'accuracy' is already registered \(built-in\)"):
        register_reward("accuracy", lambda completions, **kw: [0.0] * len(completions))
    with pytest.raises(ValueError, match="must be callable"):
        register_reward("not_callable", 3)


# --------------------------------------------------------------------------- external plugins

PLUGIN = '''
from swiftlike.rl.rewards.functions import register_reward


@register_reward("contains_solution")
def contains_solution(completions, solution, **kwargs):
    return [1.0 if s in c else 0.0 for c, s in zip(completions, solution)]


class LengthBonus:
    def __init__(self, max_completion_length=512):
        self.max_completion_length = max_completion_length

    def __call__(self, completions, completion_lengths, **kwargs):
        return [n / self.max_completion_length for n in completion_lengths]


register_reward("length_bonus", LengthBonus)
'''


def test_plugin_registers_rewards_used_by_name(tmp_path, clean_registry):
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(PLUGIN)
    load_external_plugins([str(plugin), str(plugin)])  # the same file twice is imported once
    funcs = build_reward_funcs(["contains_solution", "length_bonus", "format_hash"], max_completion_length=10)
    scored = combine_rewards(funcs, [1.0, 1.0, 2.0], ["it is 7\n#### 7", "#### 8"], solution=["7", "7"],
                             completion_lengths=[5, 2])
    total, per_func = scored.total, scored.per_func
    assert per_func["contains_solution"].tolist() == [1.0, 0.0]
    assert per_func["length_bonus"].tolist() == approx([0.5, 0.2])
    assert total.tolist() == approx([1.0 + 0.5 + 2.0, 0.0 + 0.2 + 2.0])


def test_plugins_with_the_same_file_name_do_not_collide(tmp_path, clean_registry):
    for sub, name in (("a", "reward_a"), ("b", "reward_b")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "plugin.py").write_text(
            f"from swiftlike.rl.rewards.functions import register_reward\n"
            f"register_reward({name!r}, lambda completions, **kw: [1.0] * len(completions))\n")
    modules = load_external_plugins([tmp_path / "a" / "plugin.py", tmp_path / "b" / "plugin.py"])
    assert len({m.__name__ for m in modules}) == 2
    assert {"reward_a", "reward_b"} <= set(REWARD_REGISTRY)


def test_plugin_errors_name_the_file(tmp_path, clean_registry):
    missing = tmp_path / "missing.py"
    with pytest.raises(FileNotFoundError, match=f"--external_plugins {missing}: no such file"):
        load_external_plugins([missing])

    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(ValueError, match="notes.txt: not a Python file"):
        load_external_plugins(text)

    broken = tmp_path / "broken.py"
    broken.write_text("from swiftlike.rl.rewards.functions import register_reward\n"
                      "register_reward('half_done', lambda completions, **kw: [0.0] * len(completions))\n"
                      "1 / 0\n")
    with pytest.raises(RuntimeError, match="broken.py: importing it failed: ZeroDivisionError: division by zero"):
        load_external_plugins([broken])
    assert "half_done" not in REWARD_REGISTRY  # a failed plugin leaves nothing registered

    syntax = tmp_path / "syntax.py"
    syntax.write_text("def f(:\n")
    with pytest.raises(RuntimeError, match="syntax.py: importing it failed: SyntaxError"):
        load_external_plugins([syntax])

    clash = tmp_path / "clash.py"
    clash.write_text("from swiftlike.rl.rewards.functions import register_reward\n"
                     "register_reward('accuracy', lambda completions, **kw: [0.0] * len(completions))\n")
    with pytest.raises(RuntimeError) as e:
        load_external_plugins([clash])
    assert "clash.py: importing it failed" in str(e.value)
    assert "'accuracy' is already registered (built-in)" in str(e.value)


def test_two_plugins_registering_one_name(tmp_path, clean_registry):
    body = ("from swiftlike.rl.rewards.functions import register_reward\n"
            "def shared(completions, **kw):\n    return [0.0] * len(completions)\n"
            "register_reward('shared', shared)\n")
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text(body)
    second.write_text(body)
    load_external_plugins([first])
    with pytest.raises(RuntimeError) as e:
        load_external_plugins([second])
    msg = str(e.value)
    assert "second.py: importing it failed" in msg
    assert f"'shared' is already registered ({first.resolve()})" in msg
