"""The tokenizer's own chat template, for chat models of a type swiftlike has no template for.

Text comes from `tokenizer.apply_chat_template`, so prompts are exactly what the model's authors
wrote. A Jinja template does not say which characters are the assistant's, so the loss spans are
found in one of two ways, as LLaMA-Factory and TRL do:

1. The template marks them with `{% generation %}` blocks: transformers' assistant-token mask is used.
2. Otherwise by incremental rendering. For the assistant message at index i, the conversation up to
   i rendered with a generation prompt must be a prefix of the conversation up to and including i,
   which must be a prefix of the whole conversation; the characters between the two prefixes, less
   trailing whitespace (the newline a template writes after its end-of-turn token is not generated),
   are that turn's span. A template that rewrites earlier turns once later ones follow (one that
   drops reasoning from history, say) breaks this and is refused with an error naming `--template`.

Tools: a chat template that renders `tools=` (Qwen2.5's, Qwen3's) is used as it is, and the agent template
whose parser reads back the calls it writes (found with a probe conversation) parses completions. With
`--agent_template`, or for a chat template that ignores tools, the agent template writes tools, calls and
results into plain turns first, as for a registered template.
"""
from __future__ import annotations

import dataclasses
import re

from .agent import AGENT_TEMPLATE_REGISTRY, AgentTemplate
from .base import Message, Span, Template, TemplateMeta, trained_turns
from .lowering import Lowered, needs_agent
from .toolcall import ToolCall

TOKENIZER_TEMPLATE = "tokenizer"

TOKENIZER_TEMPLATE_META = TemplateMeta(
    name=TOKENIZER_TEMPLATE, system_format="", user_format="", assistant_prefix="", assistant_suffix="",
    turn_separator="", chat_template="",
    description="the tokenizer's own chat template (apply_chat_template), tools included where it renders them; "
                "the default for model types that are not registered",
)

_GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")

_PROBE_CALL = ToolCall("swiftlike_probe_tool", {"probe_argument": 7})
_PROBE_TOOLS = [{"type": "function", "function": {
    "name": _PROBE_CALL.name, "description": "a probe", "parameters": {
        "type": "object", "properties": {"probe_argument": {"type": "integer"}}}}}]
_PROBE = [{"role": "user", "content": "ping"},
          {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL.as_message_call()]},
          {"role": "tool", "content": "swiftlike-probe-result"}]


class TokenizerTemplate(Template):
    """A Template whose rendering is the tokenizer's; encoding and labels work as for registered ones."""

    def __init__(self, tokenizer, system: str | None = None, registered: tuple[str, ...] = (),
                 agent: AgentTemplate | None = None):
        if not tokenizer.chat_template:
            raise ValueError(f"the tokenizer of {tokenizer.name_or_path!r} has no chat template to use as "
                             f"--template {TOKENIZER_TEMPLATE} (the default for model types that are not "
                             f"registered); pass --template with one of: {', '.join(registered)}")
        self.tokenizer = tokenizer
        meta = dataclasses.replace(TOKENIZER_TEMPLATE_META, chat_template=str(tokenizer.chat_template),
                                   stop_words=self._end_of_turn())
        super().__init__(meta, tokenizer, system, agent)
        self.marks_generation = bool(_GENERATION_TAG.search(meta.chat_template))
        self.native_tools = agent is None and self._renders_tools()
        self._parser = agent if agent is not None else self._find_parser() if self.native_tools else None

    def _chat(self, messages: list[Message], add_generation_prompt: bool, enable_thinking: bool,
              tools: list[dict] | None = None, continue_final: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt and not continue_final,
                                                  continue_final_message=continue_final,
                                                  enable_thinking=enable_thinking)

    def _end_of_turn(self) -> tuple[str, ...]:
        """The special token the template writes right after an answer (`<|im_end|>`, `</s>`, `<|eot_id|>`):
        generation must stop there even when it is not the tokenizer's EOS."""
        probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
        try:
            text = self._chat(probe, add_generation_prompt=False, enable_thinking=True)
        except Exception:  # a template that needs more than this (a system turn, say) tells its rule on real data
            return ()
        after = self.tokenizer(text[text.rfind("pong") + len("pong"):], add_special_tokens=False)["input_ids"]
        if not after:
            return ()
        added = self.tokenizer.added_tokens_decoder.get(after[0])
        return (added.content,) if added is not None and added.special else ()

    def _renders_tools(self) -> bool:
        """Whether the chat template writes a tool list, a call and a result (many ignore `tools` silently)."""
        try:
            text = self._chat(_PROBE, add_generation_prompt=True, enable_thinking=True, tools=_PROBE_TOOLS)
        except Exception:  # a template that rejects tool turns does not render them
            return False
        return text.count(_PROBE_CALL.name) >= 2 and "swiftlike-probe-result" in text

    def _find_parser(self) -> AgentTemplate | None:
        """The registered agent template that reads the probe's call back exactly from the assistant's turn."""
        before = self._chat(_PROBE[:1], True, True, _PROBE_TOOLS)
        through = self._chat(_PROBE[:2], False, True, _PROBE_TOOLS)
        turn = through[len(before):] if through.startswith(before) else through
        for agent in AGENT_TEMPLATE_REGISTRY.values():
            if agent.parse(turn).valid_calls == [_PROBE_CALL]:
                return agent
        return None

    @property
    def tool_parser(self) -> AgentTemplate | None:
        return self._parser

    @property
    def tool_call_turn_end(self) -> str:
        if self.agent is not None and not self.agent.results_turn:
            return self.agent.stop_words[0]
        return self.assistant_turn_end

    @property
    def assistant_turn_end(self) -> str:
        return self.meta.stop_words[0] if self.meta.stop_words else ""

    def _lower(self, messages: list[Message], tools: list[dict] | None) -> tuple[Lowered, list[dict] | None]:
        if messages[0]["role"] != "system" and self.default_system is not None:
            messages = [{"role": "system", "content": self.default_system}, *messages]
        if self.native_tools or not needs_agent(messages, tools):
            return Lowered(messages), tools
        if self.agent is None:
            raise ValueError(f"the chat template of {self.tokenizer.name_or_path!r} does not render tools and tool "
                             f"turns; pass --agent_template ({', '.join(AGENT_TEMPLATE_REGISTRY)}) to write them")
        return super()._lower(messages, tools)

    def _render_turns(self, lowered: Lowered, add_generation_prompt: bool, enable_thinking: bool,
                      base: str, tools: list[dict] | None) -> tuple[str, list[tuple[int, Span]]]:
        messages = lowered.messages
        trained = trained_turns(messages, base)
        text = self._chat(messages, add_generation_prompt, enable_thinking, tools, lowered.open_turn)
        if not trained or base == "all":
            return text, []
        if self.marks_generation:
            blocks = self._generation_spans(messages, text, trained, add_generation_prompt, enable_thinking, tools,
                                            lowered.open_turn)
            return text, list(zip(trained, blocks))
        return text, [(i, self._turn_span(messages, i, text, enable_thinking, tools, lowered.open_turn))
                      for i in trained]

    def _turn_span(self, messages: list[Message], index: int, text: str, enable_thinking: bool,
                   tools: list[dict] | None, open_turn: bool) -> Span:
        before = self._chat(messages[:index], True, enable_thinking, tools)
        last_open = open_turn and index == len(messages) - 1
        through = text if last_open else self._chat(messages[:index + 1], False, enable_thinking, tools)
        if not (through.startswith(before) and text.startswith(through)):
            raise ValueError(f"the chat template of {self.tokenizer.name_or_path!r} renders earlier turns "
                             f"differently once later turns follow (at message {index}), so swiftlike cannot tell "
                             "which tokens are the assistant's; pass --template with a registered template, or "
                             "use a chat template with {% generation %} blocks")
        return len(before), len(through) if last_open else len(through.rstrip())

    def _generation_spans(self, messages: list[Message], text: str, trained: list[int], add_generation_prompt: bool,
                          enable_thinking: bool, tools: list[dict] | None, open_turn: bool) -> list[Span]:
        """The template's own {% generation %} blocks, one per assistant message, as character spans."""
        marked = self.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
            add_generation_prompt=add_generation_prompt and not open_turn, continue_final_message=open_turn,
            enable_thinking=enable_thinking)
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(marked["input_ids"]) != list(encoded["input_ids"]):
            raise ValueError("apply_chat_template tokenized the conversation differently from its rendered text")
        blocks: list[Span] = []
        previous = 0
        for mask, (start, end) in zip(marked["assistant_masks"], encoded["offset_mapping"]):
            if mask and previous:
                blocks[-1] = (blocks[-1][0], end)
            elif mask:
                blocks.append((start, end))
            previous = mask
        assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if len(blocks) != len(assistants):
            raise ValueError(f"the chat template of {self.tokenizer.name_or_path!r} marks {len(blocks)} "
                             f"{{% generation %}} blocks for {len(assistants)} assistant messages; pass --template")
        return [block for block, index in zip(blocks, assistants) if index in trained]
