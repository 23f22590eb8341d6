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
    top_k: int = -1
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0  # OpenAI's: subtracted from a token's logit once it has appeared
    frequency_penalty: float = 0.0  # OpenAI's: subtracted once per earlier occurrence
    n: int = 1
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
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
            ("n", self.n >= 1, "must be >= 1"),
            ("presence_penalty", -2 <= self.presence_penalty <= 2, "must be in [-2, 2]"),
            ("frequency_penalty", -2 <= self.frequency_penalty <= 2, "must be in [-2, 2]"),
            ("top_logprobs", self.top_logprobs is None or 0 <= self.top_logprobs <= 20, "must be in [0, 20]"),
            ("prompt_logprobs", self.prompt_logprobs is None or self.prompt_logprobs >= 0, "must be >= 0"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise InvalidSamplingParam(name, f"{rule}, got {getattr(self, name)}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class InferRequest:
    """Either chat `messages` (encoded with the engine's template) or ready `input_ids`."""

    messages: list[dict] | None = None
    input_ids: list[int] | None = None
    adapter: str | None = None

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
