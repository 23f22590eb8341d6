"""Chat encoding for training and inference.

The text is rendered in Python and tokenized once, with character offsets, so the token ids
are exactly those of `tokenizer.apply_chat_template` (which also renders then tokenizes
once), while the offsets tell which tokens belong to assistant answers and carry loss.
Tokenizing pieces separately, as some frameworks do, can split BPE merges differently at
piece boundaries and drift from what the model saw in pre-training.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

IGNORE_INDEX = -100

Message = dict  # {"role": "system"|"user"|"assistant", "content": str}

# ms-swift's three base strategies for --loss_scale; its agent and think-block variants are not built.
LOSS_SCALES = {
    "default": "every assistant turn",
    "last_round": "the assistant turns after the last user turn",
    "all": "every token, prompt included",
}


@dataclass(frozen=True)
class TemplateMeta:
    """One chat format, declared as data.

    `chat_template` is the same format written as a Jinja template: it is installed on
    tokenizers we build, and tests check that both renderings agree token for token.
    """
    name: str
    system_format: str
    user_format: str
    assistant_prefix: str
    assistant_suffix: str
    turn_separator: str
    chat_template: str
    default_system: str | None = None
    bos: str = ""
    stop_words: tuple[str, ...] = ()
    strip_content: bool = False
    thinking: bool = False
    description: str = ""


@dataclass
class Encoded:
    input_ids: list[int]
    labels: list[int]
    text: str
    extra: dict = field(default_factory=dict)

    @property
    def num_trainable(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


def read_system(system: str | None) -> str | None:
    """`--system` is text, or the path of a file holding the text."""
    if system is None:
        return None
    if len(system) < 4096 and "\n" not in system:
        path = Path(system).expanduser()
        if path.is_file():
            return path.read_text(encoding="utf-8").rstrip("\n")
    return system


def check_loss_scale(loss_scale: str) -> None:
    if loss_scale not in LOSS_SCALES:
        supported = "; ".join(f"{name} ({meaning})" for name, meaning in LOSS_SCALES.items())
        raise ValueError(f"--loss_scale {loss_scale!r} is not supported; swiftlike implements ms-swift's base "
                         f"strategies: {supported}")


def trained_turns(messages: list[Message], loss_scale: str) -> list[int]:
    """Indices of the assistant messages that carry loss under `loss_scale` (ms-swift's meaning)."""
    check_loss_scale(loss_scale)
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    first = last_user + 1 if loss_scale == "last_round" else 0
    return [i for i, m in enumerate(messages) if m["role"] == "assistant" and i >= first]


def validate_messages(messages: list[Message]) -> None:
    if not messages:
        raise ValueError("a conversation needs at least one message")
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "user", "assistant"):
            raise ValueError(f"message {i}: role must be system, user or assistant, got {role!r}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"message {i} ({role}): content must be a string, got {type(m.get('content')).__name__}")
        if role == "system" and i != 0:
            raise ValueError(f"message {i}: a system message may only come first")


class Template:
    """A TemplateMeta bound to a tokenizer and a default system prompt."""

    def __init__(self, meta: TemplateMeta, tokenizer, system: str | None = None):
        self.meta = meta
        self.tokenizer = tokenizer
        self.default_system = read_system(system) if system is not None else meta.default_system
        self.stop_token_ids = self._stop_token_ids()

    def _stop_token_ids(self) -> list[int]:
        ids = []
        for word in self.meta.stop_words:
            tid = self.tokenizer.convert_tokens_to_ids(word)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                ids.append(tid)
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    def _content(self, text: str) -> str:
        return text.strip() if self.meta.strip_content else text

    def _assistant_body(self, content: str, in_final_answer: bool) -> str:
        """Qwen3-style templates show an (empty) think block only on the final answer."""
        if not self.meta.thinking:
            return self._content(content)
        reasoning = ""
        if "</think>" in content:
            reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            content = content.split("</think>")[-1].lstrip("\n")
        if in_final_answer:
            return "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + content.lstrip("\n")
        return content

    def fingerprint(self) -> str:
        """Everything the token ids and labels depend on, so encoded data can be reused only when it would
        come out the same (--load_from_cache_file)."""
        tokenizer = self.tokenizer
        vocab = tokenizer.backend_tokenizer.to_str() if hasattr(tokenizer, "backend_tokenizer") else \
            json.dumps(tokenizer.get_vocab(), sort_keys=True)
        parts = [json.dumps(asdict(self.meta), sort_keys=True), str(self.default_system), vocab,
                 json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str)]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def render(self, messages: list[Message], add_generation_prompt: bool = False,
               enable_thinking: bool = True, loss_scale: str = "default") -> tuple[str, list[tuple[int, int]]]:
        """Render the conversation; return the text and the character spans that carry loss."""
        validate_messages(messages)
        trained = set(trained_turns(messages, loss_scale))
        meta = self.meta
        parts: list[str] = [meta.bos]
        spans: list[tuple[int, int]] = []
        pos = len(meta.bos)

        def emit(text: str, trainable: bool = False) -> None:
            nonlocal pos
            if trainable and text:
                spans.append((pos, pos + len(text)))
            parts.append(text)
            pos += len(text)

        system_turns = 1 if messages[0]["role"] == "system" else 0  # `body` indices are shifted by this
        body = list(messages)
        if body[0]["role"] == "system":
            emit(meta.system_format.format(content=self._content(body.pop(0)["content"])))
        elif self.default_system is not None:
            emit(meta.system_format.format(content=self._content(self.default_system)))
        last_user = max((i for i, m in enumerate(body) if m["role"] == "user"), default=-1)
        for i, m in enumerate(body):
            if m["role"] == "user":
                emit(meta.user_format.format(content=self._content(m["content"])))
            else:
                final = i > last_user and i == len(body) - 1
                emit(meta.assistant_prefix)
                emit(self._assistant_body(m["content"], final) + meta.assistant_suffix,
                     trainable=i + system_turns in trained)
                emit(meta.turn_separator)
        if add_generation_prompt:
            emit(meta.assistant_prefix)
            if meta.thinking and not enable_thinking:
                emit("<think>\n\n</think>\n\n")
        text = "".join(parts)
        return text, [(0, len(text))] if loss_scale == "all" else spans

    def encode(self, messages: list[Message], add_generation_prompt: bool = False,
               enable_thinking: bool = True, loss_scale: str = "default") -> Encoded:
        """Token ids plus labels; labels are IGNORE_INDEX outside the spans `loss_scale` trains."""
        if add_generation_prompt and messages and messages[-1]["role"] == "assistant":
            raise ValueError("add_generation_prompt needs a conversation that ends with a user turn")
        text, spans = self.render(messages, add_generation_prompt, enable_thinking, loss_scale)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        labels = [IGNORE_INDEX] * len(ids)
        span_i = 0
        for t, (start, _end) in enumerate(enc["offset_mapping"]):
            while span_i < len(spans) and start >= spans[span_i][1]:
                span_i += 1
            if span_i < len(spans) and spans[span_i][0] <= start < spans[span_i][1]:
                labels[t] = ids[t]
        return Encoded(ids, labels, text)

    def encode_prompt(self, messages: list[Message], enable_thinking: bool = True) -> list[int]:
        """Ids of a prompt ready for generation (ends with the assistant prefix)."""
        return self.encode(messages, add_generation_prompt=True, enable_thinking=enable_thinking).input_ids
