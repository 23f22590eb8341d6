"""Rule-based reward functions for GRPO (`--reward_funcs`), their registry, and the weighted sum.

The interface is ms-swift's ORM / TRL's reward-function convention:

    reward(completions: list[str], **kwargs) -> list[float | None]

`completions` holds the decoded completion texts of one batch. Every dataset column other than the
prompt reaches the function as a keyword argument holding one value per completion (a row with
`solution` gives `solution=[...]`), together with `completion_ids` (token ids of each completion) and,
where the trainer has them, `completion_lengths` (token counts). A function takes what it needs and
ignores the rest through `**kwargs`. `None` (or NaN) for a completion means "not applicable here":
`combine_rewards` leaves it out of the weighted sum (TRL and ms-swift use `nansum`). Two other values say the
completion has no valid reward at all: `MISSING`, the function ran but could not score it (a judge reply without a
score), and `FAILED`, its server did not answer (`--reward_on_error skip`). Such a completion is left out of its
group's advantage statistics and gets advantage 0 (rl/core/advantages.py); a FAILED one drops its whole group.

Multi-turn rollouts (`--multi_turn_scheduler`) score the whole trajectory: `completions` holds each trajectory's
final assistant text, and three more keyword arguments come with it, one value per trajectory: `messages` (the
whole conversation, tool calls and results included), `rollout_infos` (what the scheduler reported, merged over
turns) and `step_rewards` (the environment's reward of each step; empty without one). With `--use_gym_env` the
environment's return, the sum of `step_rewards`, is one more reward column, `env` (`environment_return`), after
the functions and reward models, weighed by one more `--reward_weights` entry (1.0 when left out).

Built-ins, by their `--reward_funcs` name:

- accuracy:      1.0 when the completion's final answer is mathematically equal to `solution`
                 (math-verify), else 0.0. Understands `<answer>..</answer>`, GSM8K-style `#### N` and
                 `\\boxed{}`.
- format:        1.0 for `<think>...</think><answer>...</answer>` (ms-swift's pattern), else 0.0.
- format_hash:   1.0 when the last line is `#### <number>` (the built-in arithmetic task), else 0.0.
- cosine:        correctness scaled by completion length on a cosine curve (arXiv:2502.03373).
- repetition:    n-gram repetition penalty in [repetition_max_penalty, 0] (arXiv:2502.03373).
- soft_overlong: DAPO's soft overlong punishment (arXiv:2503.14476).
- code_exec:     the share of the row's test cases (`test_cases` or ms-swift's `verification_info`) that the
                 completion's Python code passes, run in the tool sandbox; in code_exec.py, registered when the
                 package is imported.

Parameterised built-ins are classes; `build_reward_funcs(names, **params)` instantiates them with the
matching `--cosine_*`, `--repetition_*`, `--soft_*` and `--max_completion_length` values. Plain
functions and instances are used as registered.
"""
from __future__ import annotations

import enum
import inspect
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...utils import get_logger
from ...utils.registry import Registry

logger = get_logger("swiftlike.rl")

RewardFunc = Callable[..., Sequence[Any]]

# name -> a reward function, a reward-function instance, or a class to instantiate with the CLI values.
REWARD_REGISTRY: Registry[Any] = Registry("reward function", "--reward_funcs")

# ms-swift's GRPO `--max_completion_length` default; `cosine_max_len` and `soft_max_length` fall back to it.
DEFAULT_MAX_COMPLETION_LENGTH = 512


# --------------------------------------------------------------------------- registry


def _origin(func: Any) -> str:
    """Where a registered reward came from, for the duplicate-name message."""
    target = func if inspect.isclass(func) or inspect.isfunction(func) else type(func)
    if str(getattr(target, "__module__", "")).startswith(f"{__package__}."):  # functions.py or code_exec.py
        return "built-in"
    try:
        return inspect.getsourcefile(target) or target.__module__
    except TypeError:
        return str(getattr(target, "__module__", "unknown origin"))


def register_reward(name: str, func: Any = None):
    """Register a reward function under the name `--reward_funcs` will use.

    `func` may be a function, a callable instance, or a class whose constructor takes keyword
    arguments named like the CLI arguments it needs (`build_reward_funcs` passes the ones it accepts).
    Without `func` this is a decorator: `@register_reward("my_reward")`.
    """
    if func is None:
        return lambda f: register_reward(name, f)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a reward function name must be a non-empty string, got {name!r}")
    if not callable(func):
        raise ValueError(f"reward function {name!r} must be callable (a function, a class or an object with "
                         f"__call__), got {type(func).__name__}")
    if name in REWARD_REGISTRY:
        raise ValueError(f"reward function {name!r} is already registered ({_origin(REWARD_REGISTRY[name])}); "
                         f"register yours under another name")
    return REWARD_REGISTRY.register(name, func)


def _constructor_kwargs(cls: type, params: Mapping[str, Any]) -> dict[str, Any]:
    sig = inspect.signature(cls.__init__)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return dict(params)
    return {k: v for k, v in params.items() if k in sig.parameters and k != "self"}


def build_reward_funcs(names: Sequence[str], **params: Any) -> dict[str, RewardFunc]:
    """`--reward_funcs` names -> {name: callable}, in the given order.

    `params` are the reward arguments (`cosine_max_len=..., soft_cache_length=...,
    max_completion_length=...`); each registered class receives those its constructor names.
    """
    funcs: dict[str, RewardFunc] = {}
    for name in names:
        if name in funcs:
            raise ValueError(f"--reward_funcs names {name!r} twice; give each reward function once "
                             f"(use --reward_weights to weigh one more)")
        if name not in REWARD_REGISTRY:
            raise ValueError(f"unknown --reward_funcs {name!r}; known reward functions: "
                             f"{', '.join(sorted(REWARD_REGISTRY))}. A custom one must be registered with "
                             f"register_reward({name!r}, func) in a file passed to --external_plugins")
        item = REWARD_REGISTRY[name]
        funcs[name] = item(**_constructor_kwargs(item, params)) if inspect.isclass(item) else item
    return funcs


# --------------------------------------------------------------------------- helpers shared by built-ins


def _need_column(who: str, column: str, value: Any, n: int, kwargs: Mapping[str, Any]) -> list:
    if value is None:
        have = sorted(k for k in kwargs if k not in ("completion_ids", "completion_lengths", "prompts"))
        raise ValueError(f"reward function {who!r} needs a {column!r} column in the dataset (the reference "
                         f"answer of each row), but the rows only have: {', '.join(have) or 'messages'}. "
                         f"Add a {column!r} column to the dataset, or drop {who!r} from --reward_funcs")
    value = list(value)
    if len(value) != n:
        raise ValueError(f"reward function {who!r} got {len(value)} {column!r} values for {n} completions")
    return value


def completion_token_lengths(who: str, n: int, kwargs: Mapping[str, Any]) -> list[int]:
    """Token count of each completion: `completion_lengths` if given, else the lengths of `completion_ids`."""
    lengths = kwargs.get("completion_lengths")
    if lengths is None and kwargs.get("completion_ids") is not None:
        lengths = [len(ids) for ids in kwargs["completion_ids"]]
    if lengths is None:
        raise ValueError(f"reward function {who!r} needs the token count of each completion: pass "
                         f"completion_ids=[[token ids], ...] or completion_lengths=[...]")
    lengths = [int(x) for x in lengths]
    if len(lengths) != n:
        raise ValueError(f"reward function {who!r} got {len(lengths)} completion lengths for {n} completions")
    return lengths


# --------------------------------------------------------------------------- accuracy

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _hash_answer(text: str) -> str | None:
    """The text after the last '####' (GSM8K's final-answer marker), up to the end of its line."""
    if "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1].strip()
    return tail.splitlines()[0].strip() if tail else ""


class MathAccuracy:
    """1.0 when the completion's final answer equals `solution` under math-verify, else 0.0.

    Where the final answer is taken from, first that applies:
    1. the inside of `<answer>...</answer>` (ms-swift);
    2. the text after the last `####` (GSM8K style, our arithmetic task), unless nothing there parses
       or a `\\boxed{}` follows it (a markdown `#### heading`);
    3. otherwise math-verify's LaTeX extraction with `\\boxed{}` tried first and no anchor-less
       guessing (ms-swift's configuration: a bare number in prose is not taken as the answer).
    The solution goes through the same steps 1-2, then math-verify's default parse (so "19",
    "0.5", "\\frac{1}{2}", "\\boxed{1/2}" all work). A row whose solution cannot be parsed, or is
    null, gets None ("not applicable"), as TRL's accuracy_reward does.
    """

    name = "accuracy"

    def __init__(self):
        try:
            from latex2sympy2_extended import NormalizationConfig
            from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
        except ImportError as e:  # pragma: no cover - math-verify is a dependency
            raise RuntimeError("reward function 'accuracy' needs the math-verify package: "
                               "pip install math-verify") from e
        self._parse, self._verify = parse, verify
        self._default_config = [LatexExtractionConfig(), ExprExtractionConfig()]
        self._latex_config = [
            LatexExtractionConfig(
                normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                         boxed=True, units=True),
                boxed_match_priority=0,
                try_extract_without_anchor=False,
            )
        ]

    @staticmethod
    def _timeout() -> int | None:
        # math-verify's timeout uses SIGALRM, which only the main thread may set.
        return 5 if threading.current_thread() is threading.main_thread() else None

    def _parse_text(self, text: str, *, gold: bool) -> list:
        timeout = self._timeout()
        tagged = _ANSWER_TAG.search(text)
        if tagged:
            return self._parse(tagged.group(1).strip(), extraction_config=self._default_config,
                               extraction_mode="first_match", parsing_timeout=timeout)
        hashed = _hash_answer(text)
        # A '####' that only starts a markdown heading ("#### Final answer" then \boxed{7}) is not the answer.
        if hashed and "\\boxed" not in text.rsplit("####", 1)[1]:
            parsed = self._parse(hashed, extraction_config=self._default_config, extraction_mode="first_match",
                                 parsing_timeout=timeout)
            if parsed:
                return parsed
        config = self._default_config if gold else self._latex_config
        return self._parse(text, extraction_config=config, extraction_mode="first_match", parsing_timeout=timeout)

    def score(self, completion: str, solution: Any) -> float | None:
        if solution is None:
            return None
        gold = self._parse_text(str(solution), gold=True)
        if not gold:
            logger.warning("accuracy: cannot parse the solution %r; the row is left out of this reward", solution)
            return None
        answer = self._parse_text(completion, gold=False)
        if not answer:
            return 0.0
        try:
            return float(self._verify(gold, answer, timeout_seconds=self._timeout()))
        except Exception:
            return 0.0

    def __call__(self, completions: Sequence[str], solution: Sequence[Any] | None = None,
                 **kwargs: Any) -> list[float | None]:
        solution = _need_column(self.name, "solution", solution, len(completions), kwargs)
        return [self.score(c, s) for c, s in zip(completions, solution)]


# --------------------------------------------------------------------------- format

# ms-swift's Format ORM: the whole completion is <think>...</think> then <answer>...</answer>, nothing after.
_THINK_ANSWER = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)
# The arithmetic task's format: the last line is '#### <number>' (thousands commas and decimals allowed).
_HASH_LAST_LINE = re.compile(r"(?:\A|\n)[ \t]*####[ \t]*[-+]?\d[\d,]*(?:\.\d+)?[ \t]*\Z")


def format_reward(completions: Sequence[str], **kwargs: Any) -> list[float]:
    """1.0 when the completion is exactly `<think>...</think>` + `<answer>...</answer>` (ms-swift), else 0.0."""
    return [1.0 if _THINK_ANSWER.fullmatch(c) else 0.0 for c in completions]


def format_hash_reward(completions: Sequence[str], **kwargs: Any) -> list[float]:
    """1.0 when the last line (trailing whitespace ignored) is `#### <number>`, else 0.0."""
    return [1.0 if _HASH_LAST_LINE.search(c.rstrip()) else 0.0 for c in completions]


# --------------------------------------------------------------------------- cosine


def cosine_interpolate(t: float, T: float, value_at_0: float, value_at_T: float) -> float:
    """value_at_T + (value_at_0 - value_at_T) * (1 + cos(pi t / T)) / 2; equals ms-swift's cosfn."""
    t = min(max(t, 0.0), T)
    return value_at_T + (value_at_0 - value_at_T) * (1.0 + math.cos(math.pi * t / T)) / 2.0


class CosineReward:
    """Length-scaled correctness (Yeo et al., arXiv:2502.03373; ms-swift's CosineReward).

    Correct answers go from `cosine_min_len_value_correct` at length 0 down to
    `cosine_max_len_value_correct` at `cosine_max_len` tokens (short right answers are best); wrong ones
    from `cosine_min_len_value_wrong` up to `cosine_max_len_value_wrong` (a long wrong attempt is punished
    less than a short one). `cosine_max_len` defaults to `max_completion_length`. Lengths beyond it are
    clamped to it (ms-swift's curve would turn back up). Correct = the accuracy reward is >= 1.
    """

    name = "cosine"

    def __init__(self, cosine_min_len_value_wrong: float = -0.5, cosine_max_len_value_wrong: float = 0.0,
                 cosine_min_len_value_correct: float = 1.0, cosine_max_len_value_correct: float = 0.5,
                 cosine_max_len: int | None = None, max_completion_length: int = DEFAULT_MAX_COMPLETION_LENGTH,
                 accuracy: RewardFunc | None = None):
        self.min_len_value_wrong = float(cosine_min_len_value_wrong)
        self.max_len_value_wrong = float(cosine_max_len_value_wrong)
        self.min_len_value_correct = float(cosine_min_len_value_correct)
        self.max_len_value_correct = float(cosine_max_len_value_correct)
        self.max_len = int(cosine_max_len if cosine_max_len is not None else max_completion_length)
        if self.max_len <= 0:
            raise ValueError(f"--cosine_max_len must be a positive token count, got {self.max_len}")
        self.accuracy = accuracy if accuracy is not None else MathAccuracy()

    def __call__(self, completions: Sequence[str], solution: Sequence[Any] | None = None,
                 **kwargs: Any) -> list[float | None]:
        solution = _need_column(self.name, "solution", solution, len(completions), kwargs)
        lengths = completion_token_lengths(self.name, len(completions), kwargs)
        correct = self.accuracy(completions, solution=solution, **kwargs)
        rewards: list[float | None] = []
        for length, acc in zip(lengths, correct):
            if acc is None or (isinstance(acc, float) and math.isnan(acc)):
                rewards.append(None)
            elif acc >= 1.0:
                rewards.append(cosine_interpolate(length, self.max_len, self.min_len_value_correct,
                                                  self.max_len_value_correct))
            else:
                rewards.append(cosine_interpolate(length, self.max_len, self.min_len_value_wrong,
                                                  self.max_len_value_wrong))
        return rewards


# --------------------------------------------------------------------------- repetition


class RepetitionPenalty:
    """`(1 - distinct n-grams / n-grams) * repetition_max_penalty` over lower-cased whitespace words.

    ms-swift's RepetitionPenalty (from arXiv:2502.03373): 0 for a text without repeated n-grams, for an
    empty text or one shorter than n words; tends to `repetition_max_penalty` as one n-gram repeats.
    """

    name = "repetition"

    def __init__(self, repetition_n_grams: int = 3, repetition_max_penalty: float = -1.0):
        if int(repetition_n_grams) < 1:
            raise ValueError(f"--repetition_n_grams must be >= 1, got {repetition_n_grams}")
        if repetition_max_penalty > 0:
            raise ValueError(f"--repetition_max_penalty is a penalty and must be <= 0, got {repetition_max_penalty}")
        self.n = int(repetition_n_grams)
        self.max_penalty = float(repetition_max_penalty)

    def score(self, text: str) -> float:
        words = text.lower().split()
        if len(words) < self.n:
            return 0.0
        ngrams = [tuple(words[i:i + self.n]) for i in range(len(words) - self.n + 1)]
        return (1.0 - len(set(ngrams)) / len(ngrams)) * self.max_penalty

    def __call__(self, completions: Sequence[str], **kwargs: Any) -> list[float]:
        return [self.score(c) for c in completions]


# --------------------------------------------------------------------------- soft overlong


class SoftOverlong:
    """DAPO's soft overlong punishment (Yu et al., arXiv:2503.14476, eq. 13), on completion token counts.

    With L_max = `soft_max_length` (default `max_completion_length`) and L_cache = `soft_cache_length`:
    0 for L <= L_max - L_cache; (L_max - L_cache - L) / L_cache in between (linear, reaching -1 at L_max);
    -1 beyond L_max.
    """

    name = "soft_overlong"

    def __init__(self, soft_max_length: int | None = None, soft_cache_length: int | None = None,
                 max_completion_length: int = DEFAULT_MAX_COMPLETION_LENGTH):
        self.max_length = int(soft_max_length if soft_max_length is not None else max_completion_length)
        if soft_cache_length is None:
            raise ValueError("reward function 'soft_overlong' needs --soft_cache_length (L_cache: the punished "
                             f"interval is [soft_max_length - soft_cache_length, soft_max_length], soft_max_length "
                             f"= {self.max_length})")
        self.cache_length = int(soft_cache_length)
        if not 0 < self.cache_length < self.max_length:
            raise ValueError(f"--soft_cache_length must be > 0 and below --soft_max_length ({self.max_length}), "
                             f"got {self.cache_length}")

    def score(self, length: int) -> float:
        exceed = length - (self.max_length - self.cache_length)
        return max(min(-exceed / self.cache_length, 0.0), -1.0)

    def __call__(self, completions: Sequence[str], **kwargs: Any) -> list[float]:
        return [self.score(n) for n in completion_token_lengths(self.name, len(completions), kwargs)]


# --------------------------------------------------------------------------- weighted sum


def reward_func_name(func: Any) -> str:
    name = getattr(func, "name", None) or getattr(func, "__name__", None) or type(func).__name__
    return str(name)


class Unscored(enum.Enum):
    """A reward a function returns for a completion it has no valid reward for (unlike None: not applicable)."""

    MISSING = "missing"  # it ran, but could not score this completion: a judge reply without a score
    FAILED = "failed"  # its server did not answer in time, and --reward_on_error skip keeps the run going


MISSING, FAILED = Unscored.MISSING, Unscored.FAILED


@dataclass
class ScoredRewards:
    """One batch's rewards: the weighted total, each function's column and which completions have no valid reward.

    `per_func` is NaN where a function does not apply, and where its reward is missing or failed; `missing` and
    `failed` tell those apart (a bool column per function). A completion with any missing or failed reward has no
    valid total (`valid` False, `total` NaN): the advantage leaves it out (`group_advantages(valid=...)`), and the
    trainer the loss. So does a trajectory whose environment raised (`env_failed`, set by the GRPO trainer's
    `drop_failed_trajectories`): its rewards say nothing about its tokens."""

    total: torch.Tensor
    per_func: dict[str, torch.Tensor]
    missing: dict[str, torch.Tensor]
    failed: dict[str, torch.Tensor]
    env_failed: torch.Tensor | None = None  # bool per completion; None: none (all False after __post_init__)

    def __post_init__(self) -> None:
        if self.env_failed is None:
            self.env_failed = torch.zeros(len(self.total), dtype=torch.bool)

    @property
    def valid(self) -> torch.Tensor:
        return ~_any_column(self.missing, len(self.total)) & ~self.failed_any & ~self.env_failed

    @property
    def failed_any(self) -> torch.Tensor:
        """The completions a reward of which failed: their groups are dropped (`--reward_on_error skip`)."""
        return _any_column(self.failed, len(self.total))

    def select(self, index: torch.Tensor) -> ScoredRewards:
        return ScoredRewards(self.total[index], *({n: v[index] for n, v in d.items()}
                                                  for d in (self.per_func, self.missing, self.failed)),
                             env_failed=self.env_failed[index])

    @staticmethod
    def cat(parts: Sequence[ScoredRewards]) -> ScoredRewards:
        return ScoredRewards(torch.cat([p.total for p in parts]),
                             *({n: torch.cat([getattr(p, field)[n] for p in parts]) for n in getattr(parts[0], field)}
                               for field in ("per_func", "missing", "failed")),
                             env_failed=torch.cat([p.env_failed for p in parts]))


def _any_column(marks: dict[str, torch.Tensor], n: int) -> torch.Tensor:
    return torch.stack(list(marks.values())).any(dim=0) if marks else torch.zeros(n, dtype=torch.bool)


def _as_float(value: Any, who: str, i: int) -> float:
    if value is None or isinstance(value, Unscored):
        return math.nan
    if isinstance(value, torch.Tensor):
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"reward function {who!r} returned {value!r} for completion {i}; expected a number, None "
                         "for 'not applicable', or MISSING / FAILED for 'no valid reward'") from None


def combine_rewards(funcs: Mapping[str, RewardFunc] | Sequence[RewardFunc], weights: Sequence[float] | None,
                    completions: Sequence[str], **columns: Any) -> ScoredRewards:
    """Call every reward function on the batch: the weighted total, each function's rewards and what is unscored.

    `columns` are passed to each function as keyword arguments (dataset columns as lists, plus
    `completion_ids` / `completion_lengths`). Weights default to 1.0 each. A None or NaN reward is "not
    applicable": it stays NaN in the per-function tensor and is skipped by the sum (`nansum`, as TRL
    and ms-swift do); a completion no function applies to gets 0 and a warning. A MISSING or FAILED reward makes
    the completion's total NaN: it has no valid reward (see `ScoredRewards`).
    """
    named = dict(funcs) if isinstance(funcs, Mapping) else {}
    if not isinstance(funcs, Mapping):
        for func in funcs:
            name = reward_func_name(func)
            if name in named:
                raise ValueError(f"two reward functions are named {name!r}; pass a {{name: func}} mapping")
            named[name] = func
    if not named:
        raise ValueError("no reward functions: give at least one name in --reward_funcs")
    n = len(completions)
    if weights is None:
        weight_t = torch.ones(len(named), dtype=torch.float32)
    else:
        weights = list(weights)
        if len(weights) != len(named):
            raise ValueError(f"got {len(weights)} --reward_weights for {len(named)} --reward_funcs "
                             f"({', '.join(named)}); give one weight per function, or none for 1.0 each")
        weight_t = torch.tensor([float(w) for w in weights], dtype=torch.float32)

    per_func: dict[str, torch.Tensor] = {}
    missing: dict[str, torch.Tensor] = {}
    failed: dict[str, torch.Tensor] = {}
    for name, func in named.items():
        out = func(list(completions), **columns)
        if out is None or isinstance(out, (str, bytes)) or not hasattr(out, "__len__"):
            raise ValueError(f"reward function {name!r} must return a list with one reward per completion, "
                             f"got {type(out).__name__}")
        if len(out) != n:
            raise ValueError(f"reward function {name!r} returned {len(out)} rewards for {n} completions")
        out = list(out)
        per_func[name] = torch.tensor([_as_float(v, name, i) for i, v in enumerate(out)], dtype=torch.float32)
        missing[name] = torch.tensor([v is MISSING for v in out], dtype=torch.bool)
        failed[name] = torch.tensor([v is FAILED for v in out], dtype=torch.bool)

    stacked = torch.stack(list(per_func.values()), dim=1) if n else torch.zeros(0, len(named))
    scored = ScoredRewards((stacked * weight_t.unsqueeze(0)).nansum(dim=1), per_func, missing, failed)
    scored.total = scored.total.masked_fill(~scored.valid, math.nan)
    unscored = torch.isnan(stacked).all(dim=1) & scored.valid
    if unscored.any():
        logger.warning("no reward function applies to completion(s) %s (all returned None); they get 0",
                       unscored.nonzero().flatten().tolist())
    return scored


# The reward column of an environment's return (--use_gym_env); not a --reward_funcs name, so it is never counted twice.
ENV_REWARD = "env"


def environment_return(completions: Sequence[str], step_rewards: Sequence[Sequence[float]] | None = None,
                       **kwargs: Any) -> list[float]:
    """The environment's return of each trajectory: the sum of its step rewards (0 for a trajectory whose
    environment gave none)."""
    if step_rewards is None:
        raise ValueError("the env reward (--use_gym_env) sums each trajectory's step_rewards, which only multi-turn "
                         "rollouts (--multi_turn_scheduler) report")
    return [float(sum(steps)) for steps in step_rewards]


# --------------------------------------------------------------------------- built-in registrations

register_reward("accuracy", MathAccuracy)
register_reward("format", format_reward)
register_reward("format_hash", format_hash_reward)
register_reward("cosine", CosineReward)
register_reward("repetition", RepetitionPenalty)
register_reward("soft_overlong", SoftOverlong)
