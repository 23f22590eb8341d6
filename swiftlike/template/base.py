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

from .agent import AGENT_TEMPLATE_REGISTRY, AgentTemplate
from .loss_scale import BASE_STRATEGIES, LossScale, parse_loss_scale
from .lowering import Lowered, lower, needs_agent
from .toolcall import ParsedCompletion, canonical_messages, normalize_tools

IGNORE_INDEX = -100
_TURN_PROBE = "swiftlike-turn-probe"  # an assistant answer no template rewrites, found again in the rendered text

Message = dict  # {"role": "system"|"user"|"assistant"|"tool", "content": str}, assistant "tool_calls" (toolcall.py)

LOSS_SCALES = BASE_STRATEGIES  # the base strategies; loss_scale.py adds the refinements

Span = tuple[int, int]


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
    agent_template: str | None = None
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


def check_loss_scale(loss_scale: str) -> LossScale:
    return parse_loss_scale(loss_scale)


def trained_turns(messages: list[Message], loss_scale: str) -> list[int]:
    """Indices of the assistant messages that carry loss under `loss_scale` (ms-swift's meaning: for
    last_round, those after the last user message or tool result)."""
    base = parse_loss_scale(loss_scale).base
    last_user = max((i for i, m in enumerate(messages) if m["role"] in ("user", "tool")), default=-1)
    first = last_user + 1 if base == "last_round" else 0
    return [i for i, m in enumerate(messages) if m["role"] == "assistant" and i >= first]


def _check_calls(calls, label: str) -> None:
    if not isinstance(calls, list) or not calls:
        raise ValueError(f"{label}: tool_calls must be a non-empty list")
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not (isinstance(function, dict) and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments"), dict)):
            raise ValueError(f"{label}: tool_calls[{j}] must be {{'type': 'function', 'function': {{'name': str, "
                             "'arguments': dict}}}}")


def validate_messages(messages: list[Message]) -> None:
    if not messages:
        raise ValueError("a conversation needs at least one message")
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"message {i}: role must be system, user, assistant or tool (tool_call / tool_response "
                             f"in ms-swift's agent format), got {role!r}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"message {i} ({role}): content must be a string, got {type(m.get('content')).__name__}")
        if role == "system" and i != 0:
            raise ValueError(f"message {i}: a system message may only come first")
        if m.get("tool_calls") is not None:
            if role != "assistant":
                raise ValueError(f"message {i}: only assistant messages make tool calls, not {role}")
            _check_calls(m["tool_calls"], f"message {i}")
        if role == "tool" and not (i and (messages[i - 1]["role"] == "tool" or messages[i - 1].get("tool_calls"))):
            raise ValueError(f"message {i}: a tool result must follow the assistant message whose tool call it "
                             "answers (or another tool result)")


def _cut(span: Span, text: str, masked: list[str]) -> list[Span]:
    """`span` less each masked text, found in order inside it."""
    pieces, start, cursor = [], span[0], span[0]
    for piece in masked:
        at = text.find(piece, cursor, span[1])
        if at < 0:
            raise ValueError("the chat template changed the text of a tool result, so its tokens cannot be kept "
                             "out of the loss; use a registered --template")
        pieces.append((start, at))
        start = cursor = at + len(piece)
    pieces.append((start, span[1]))
    return pieces


class Template:
    """A TemplateMeta bound to a tokenizer, a default system prompt and, for tools, an agent template."""

    def __init__(self, meta: TemplateMeta, tokenizer, system: str | None = None, agent: AgentTemplate | None = None):
        self.meta = meta
        self.tokenizer = tokenizer
        self.default_system = read_system(system) if system is not None else meta.default_system
        self.agent = agent
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

    @property
    def tool_parser(self) -> AgentTemplate | None:
        """The agent template that reads calls out of completions: the one that writes them."""
        return self.agent

    @property
    def tool_call_turn_end(self) -> str:
        """What a completion that makes calls ends with, as this template writes it (hermes: the end-of-turn
        token; ReAct: `Observation:`); the text of `render_tool_turn` follows it."""
        if self.agent is not None and not self.agent.results_turn:
            return self.agent.stop_words[0]
        return self.meta.assistant_suffix

    @property
    def assistant_turn_end(self) -> str:
        """What ends an assistant turn that makes no calls, as this template writes it (`<|im_end|>`); the text of
        `render_user_turn` follows it."""
        return self.meta.assistant_suffix

    def _content(self, text: str) -> str:
        return text.strip() if self.meta.strip_content else text

    def _assistant_body(self, content: str, after_last_query: bool, is_last: bool) -> str:
        """Qwen3's rule for think blocks: after the last user query, the last message always shows one (empty if
        it has no reasoning) and earlier ones (calls between tool results) show theirs; before it, none does."""
        if not self.meta.thinking:
            return self._content(content)
        reasoning = ""
        if "</think>" in content:
            reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            content = content.split("</think>")[-1].lstrip("\n")
        if after_last_query and (is_last or reasoning):
            return "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + content.lstrip("\n")
        return content

    def fingerprint(self) -> str:
        """Everything the token ids and labels depend on, so encoded data can be reused only when it would
        come out the same (--load_from_cache_file)."""
        tokenizer = self.tokenizer
        vocab = tokenizer.backend_tokenizer.to_str() if hasattr(tokenizer, "backend_tokenizer") else \
            json.dumps(tokenizer.get_vocab(), sort_keys=True)
        parts = [json.dumps(asdict(self.meta), sort_keys=True), str(self.default_system), vocab,
                 json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str),
                 self.agent.name if self.agent is not None else ""]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _no_agent_error(self) -> ValueError:
        return ValueError(f"the conversation has tools or tool turns, but template {self.meta.name!r} has no agent "
                          f"template to write them; pass --agent_template ({', '.join(AGENT_TEMPLATE_REGISTRY)})")

    def _lower(self, messages: list[Message], tools: list[dict] | None) -> tuple[Lowered, list[dict] | None]:
        """The conversation in plain turns, and the tools still to hand to the renderer (none: written in)."""
        if not needs_agent(messages, tools):
            return Lowered(messages), None
        if self.agent is None:
            raise self._no_agent_error()
        return lower(messages, tools, self.agent, self.default_system), None

    def _render_turns(self, lowered: Lowered, add_generation_prompt: bool, enable_thinking: bool,
                      base: str, tools: list[dict] | None) -> tuple[str, list[tuple[int, Span]]]:
        """The text of plain turns and, for each assistant message `base` trains, its index and span."""
        messages = lowered.messages
        trained = set(trained_turns(messages, base))
        meta = self.meta
        parts: list[str] = [meta.bos]
        spans: list[tuple[int, Span]] = []
        pos = len(meta.bos)

        def emit(text: str, index: int | None = None) -> None:
            nonlocal pos
            if index is not None and text:
                spans.append((index, (pos, pos + len(text))))
            parts.append(text)
            pos += len(text)

        if messages[0]["role"] == "system":
            emit(meta.system_format.format(content=self._content(messages[0]["content"])))
        elif self.default_system is not None:
            emit(meta.system_format.format(content=self._content(self.default_system)))
        last_query = max((i for i, m in enumerate(messages) if m["role"] == "user" and i not in lowered.result_turns),
                         default=-1)
        last = len(messages) - 1
        for i, m in enumerate(messages):
            if m["role"] == "user":
                emit(meta.user_format.format(content=self._content(m["content"])))
            elif m["role"] == "assistant":
                open_turn = lowered.open_turn and i == last
                emit(meta.assistant_prefix)
                body = self._assistant_body(m["content"], i > last_query, i == last)
                emit(body if open_turn else body + meta.assistant_suffix, i if i in trained else None)
                if not open_turn:
                    emit(meta.turn_separator)
        if add_generation_prompt and not lowered.open_turn:
            emit(meta.assistant_prefix)
            if meta.thinking and not enable_thinking:
                emit("<think>\n\n</think>\n\n")
        return "".join(parts), spans

    def render(self, messages: list[Message], add_generation_prompt: bool = False, enable_thinking: bool = True,
               loss_scale: str = "default", tools=None) -> tuple[str, list[Span]]:
        """Render the conversation; return the text and the character spans that carry loss.

        `messages` may hold tool turns in ms-swift's or OpenAI's shape; `tools` is the tool list (a JSON string
        or a list of function schemas), written into the system turn by the agent template."""
        scale = parse_loss_scale(loss_scale)
        messages = canonical_messages(messages)
        validate_messages(messages)
        lowered, tools_left = self._lower(messages, normalize_tools(tools) if tools else None)
        text, turn_spans = self._render_turns(lowered, add_generation_prompt, enable_thinking, scale.base, tools_left)
        if scale.base == "all":
            return text, [(0, len(text))]
        masked: dict[int, list[str]] = {}
        for index, piece in lowered.masked:
            masked.setdefault(index, []).append(piece)
        spans = []
        for index, span in turn_spans:
            pieces = _cut(span, text, masked[index]) if index in masked else [span]
            if scale.base == "last_round":
                pieces = pieces[-1:]  # what follows the last tool result
            for start, end in pieces:
                start = scale.trim(text, start, end)
                if end > start:
                    spans.append((start, end))
        return text, spans

    def encode(self, messages: list[Message], add_generation_prompt: bool = False, enable_thinking: bool = True,
               loss_scale: str = "default", tools=None) -> Encoded:
        """Token ids plus labels; labels are IGNORE_INDEX outside the spans `loss_scale` trains."""
        if add_generation_prompt and messages and messages[-1]["role"] in ("assistant", "tool_call"):
            raise ValueError("add_generation_prompt needs a conversation that ends with a user turn or tool results")
        text, spans = self.render(messages, add_generation_prompt, enable_thinking, loss_scale, tools)
        return Encoded(*self._labelled(text, spans), text)

    def _labelled(self, text: str, spans: list[Span]) -> tuple[list[int], list[int]]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        labels = [IGNORE_INDEX] * len(ids)
        span_i = 0
        for t, (start, _end) in enumerate(enc["offset_mapping"]):
            while span_i < len(spans) and start >= spans[span_i][1]:
                span_i += 1
            if span_i < len(spans) and spans[span_i][0] <= start < spans[span_i][1]:
                labels[t] = ids[t]
        return ids, labels

    def encode_prompt(self, messages: list[Message], enable_thinking: bool = True, tools=None) -> list[int]:
        """Ids of a prompt ready for generation (ends with the assistant prefix, or inside the assistant's turn
        after tool results that continue it)."""
        return self.encode(messages, add_generation_prompt=True, enable_thinking=enable_thinking, tools=tools).input_ids

    def render_tool_turn(self, messages: list[Message], tools=None, enable_thinking: bool = True) -> str:
        """The text that follows a completion which made tool calls: the results and the next assistant prefix.

        `messages` ends with the assistant message that made the calls, then the tool results. The text starts
        where that message's trained span ends (after `tool_call_turn_end`), so appending its ids to the sampled
        ids continues the conversation the way training renders it, with no earlier turn re-tokenized."""
        canonical = canonical_messages(messages)
        tail = len(canonical)
        while tail and canonical[tail - 1]["role"] == "tool":
            tail -= 1
        if tail == len(canonical) or not tail or not canonical[tail - 1].get("tool_calls"):
            raise ValueError("render_tool_turn needs a conversation that ends with an assistant message with tool "
                             "calls followed by their tool results")
        text, spans = self.render(canonical, add_generation_prompt=True, enable_thinking=enable_thinking, tools=tools)
        return text[spans[-1][1]:]

    def encode_tool_turn(self, messages: list[Message], tools=None, enable_thinking: bool = True) -> list[int]:
        """`render_tool_turn` as token ids, to append after the ids a call turn was sampled as."""
        return list(self.tokenizer(self.render_tool_turn(messages, tools, enable_thinking),
                                   add_special_tokens=False)["input_ids"])

    def render_user_turn(self, content: str, enable_thinking: bool = True) -> str:
        """The text that follows an assistant turn (after `assistant_turn_end`) when a user message `content`
        comes next (an environment's observation, a tip): the separator, the user turn and the next assistant
        prefix, so that its ids appended to the sampled ids continue the conversation as it renders at once.

        Found in the rendering of a probe conversation rather than from the format's pieces, so a tokenizer's own
        chat template serves too; only the text after the probe answer is used, which no template makes depend on
        the turns before it."""
        probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": _TURN_PROBE},
                 {"role": "user", "content": content}]
        text = self.render(probe, add_generation_prompt=True, enable_thinking=enable_thinking, loss_scale="all")[0]
        end = text.find(_TURN_PROBE) + len(_TURN_PROBE)
        if not text.startswith(self.assistant_turn_end, end):
            raise ValueError(f"template {self.meta.name!r} does not end an assistant turn with "
                             f"{self.assistant_turn_end!r} right after its text, so a user turn cannot be appended "
                             "as ids after sampled ids; pass --template with a registered template")
        return text[end + len(self.assistant_turn_end):]

    def encode_user_turn(self, content: str, enable_thinking: bool = True) -> list[int]:
        """`render_user_turn` as token ids, to append after the ids an assistant turn was sampled as."""
        return list(self.tokenizer(self.render_user_turn(content, enable_thinking), add_special_tokens=False)[
            "input_ids"])

    def parse_tool_calls(self, text: str) -> ParsedCompletion:
        """A completion's text and its calls, read by this template's agent template."""
        if self.tool_parser is None:
            raise self._no_agent_error()
        return self.tool_parser.parse(text)
