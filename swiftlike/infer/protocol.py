"""One OpenAI-shaped request/response protocol for every engine (pt, vLLM, remote servers).

Deploy, eval, rollout and RL all speak this, so a trainer can swap an in-process vLLM for
an HTTP client without changing the loop.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length"]

# Most log-prob alternatives per position a request may ask for unless the server is told otherwise
# (--max_logprobs; vLLM's own default): every engine and argument group takes it from here.
DEFAULT_MAX_LOGPROBS = 20


class InvalidSamplingParam(ValueError):
    """Names the bad field, so each front end (CLI flags, OpenAI server) can report it in its own terms."""

    def __init__(self, field_name: str, reason: str):
        super().__init__(f"{field_name} {reason}")
        self.field_name = field_name
        self.reason = reason


@dataclass
class RequestConfig:
    """Sampling parameters of one call; names follow the OpenAI API."""

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 = no top-k (the OpenAI routes also take vLLM's 0 for it)
    min_p: float = 0.0  # vLLM's: tokens below min_p x the top token's probability are dropped
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0  # OpenAI's: subtracted from a token's logit once it has appeared
    frequency_penalty: float = 0.0  # OpenAI's: subtracted once per earlier occurrence
    n: int = 1
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    # vLLM's extensions of the OpenAI body (tests/e2e/test_openai_fields.py): engines that cannot apply a
    # non-default one refuse it by name (InferEngine.check_config).
    stop_token_ids: list[int] = field(default_factory=list)  # besides the template's stop tokens
    min_tokens: int = 0  # no stop before this many tokens
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] = field(default_factory=list)
    logit_bias: dict[int, float] | None = None
    structured_outputs: dict | None = None  # vLLM's StructuredOutputsParams as a dict: regex, json, choice, ...
    logprobs: bool = False
    top_logprobs: int | None = None
    # vLLM's extension: log-probs of every prompt token and this many alternatives at each prompt position
    # (the served teacher of GKD answers with it); None = none.
    prompt_logprobs: int | None = None
    stream: bool = False

    def __post_init__(self) -> None:
        checks = [
            ("max_tokens", self.max_tokens >= 1, "must be >= 1"),
            ("temperature", self.temperature >= 0, "must be >= 0"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("top_k", self.top_k == -1 or self.top_k >= 1, "must be -1 (all tokens) or >= 1"),
            ("min_p", 0 <= self.min_p <= 1, "must be in [0, 1]"),
            ("min_tokens", 0 <= self.min_tokens <= self.max_tokens, "must be in [0, max_tokens]"),
            ("n", self.n >= 1, "must be >= 1"),
            ("presence_penalty", -2 <= self.presence_penalty <= 2, "must be in [-2, 2]"),
            ("frequency_penalty", -2 <= self.frequency_penalty <= 2, "must be in [-2, 2]"),
            ("top_logprobs", self.top_logprobs is None or 0 <= self.top_logprobs <= 20, "must be in [0, 20]"),
            ("prompt_logprobs", self.prompt_logprobs is None or self.prompt_logprobs >= 0, "must be >= 0"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise InvalidSamplingParam(name, f"{rule}, got {getattr(self, name)}")

    def extensions_set(self) -> list[str]:
        """The vLLM-extension fields given a value other than their default (engines check these)."""
        defaults = RequestConfig.__dataclass_fields__
        return [name for name in VLLM_EXTENSIONS if getattr(self, name) != _default(defaults[name])]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


VLLM_EXTENSIONS = ("min_p", "stop_token_ids", "min_tokens", "ignore_eos", "include_stop_str_in_output",
                   "skip_special_tokens", "spaces_between_special_tokens", "allowed_token_ids", "bad_words",
                   "logit_bias", "structured_outputs")


def _default(f):
    from dataclasses import MISSING
    return f.default_factory() if f.default is MISSING else f.default


@dataclass
class InferRequest:
    """Either chat `messages` (encoded with the engine's template) or ready `input_ids`.

    `tools` (OpenAI function schemas) are rendered into the prompt by the template's agent template; messages
    may hold OpenAI tool turns (assistant `tool_calls`, `tool` messages with `tool_call_id`). `tool_choice` is
    OpenAI's ("auto", "none", "required" or {"type": "function", "function": {"name": ...}}); servers enforce
    it (infer/tool_serving.py)."""

    messages: list[dict] | None = None
    input_ids: list[int] | None = None
    adapter: str | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.input_ids is None):
            raise ValueError("an InferRequest needs exactly one of messages or input_ids")
        if self.input_ids is not None and not self.input_ids:
            raise ValueError("input_ids must not be empty")


@dataclass
class TopLogprob:
    token_id: int
    token: str
    logprob: float


@dataclass
class TokenLogprob:
    token_id: int
    token: str
    logprob: float
    top_logprobs: list[TopLogprob] = field(default_factory=list)
    rank: int | None = None  # 1 = the most likely token at its position; reported for prompt tokens


@dataclass
class Choice:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    logprobs: list[TokenLogprob] | None = None
    # Which weights produced which tokens, as (policy version, token count) in order: a rollout server's
    # partial rollout continues a request across weight updates (rollout/partial.py). None: not tracked.
    version_spans: list[tuple[int, int]] | None = None


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class InferResponse:
    choices: list[Choice]
    usage: Usage
    prompt_token_ids: list[int]
    # The weights version that produced the answer: a rollout server counts its weight updates, so an RL
    # trainer can tell how many policy updates behind a sample is. None for engines that do not count.
    policy_version: int | None = None
    # With RequestConfig.prompt_logprobs: one entry per prompt token, None for the first (nothing precedes it).
    prompt_logprobs: list[TokenLogprob | None] | None = None

    @property
    def text(self) -> str:
        return self.choices[0].text

    def to_dict(self) -> dict:
        out = asdict(self)
        out["usage"]["total_tokens"] = self.usage.total_tokens
        return out


@dataclass
class StreamDelta:
    """A piece of one choice's answer; the last delta of a choice carries its finish_reason."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason | None = None
    logprobs: list[TokenLogprob] | None = None  # of this piece's tokens, when the request asked for them
