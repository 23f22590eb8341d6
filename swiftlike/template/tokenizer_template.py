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
"""
from __future__ import annotations

import dataclasses
import re

from .base import Message, Template, TemplateMeta, trained_turns, validate_messages

TOKENIZER_TEMPLATE = "tokenizer"

TOKENIZER_TEMPLATE_META = TemplateMeta(
    name=TOKENIZER_TEMPLATE, system_format="", user_format="", assistant_prefix="", assistant_suffix="",
    turn_separator="", chat_template="",
    description="the tokenizer's own chat template (apply_chat_template); the default for model types that are "
                "not registered",
)

_GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")


class TokenizerTemplate(Template):
    """A Template whose rendering is the tokenizer's; encoding and labels work as for registered ones."""

    def __init__(self, tokenizer, system: str | None = None, registered: tuple[str, ...] = ()):
        if not tokenizer.chat_template:
            raise ValueError(f"the tokenizer of {tokenizer.name_or_path!r} has no chat template to use as "
                             f"--template {TOKENIZER_TEMPLATE} (the default for model types that are not "
                             f"registered); pass --template with one of: {', '.join(registered)}")
        self.tokenizer = tokenizer
        meta = dataclasses.replace(TOKENIZER_TEMPLATE_META, chat_template=str(tokenizer.chat_template),
                                   stop_words=self._end_of_turn())
        super().__init__(meta, tokenizer, system)
        self.marks_generation = bool(_GENERATION_TAG.search(meta.chat_template))

    def _chat(self, messages: list[Message], add_generation_prompt: bool, enable_thinking: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
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

    def render(self, messages: list[Message], add_generation_prompt: bool = False,
               enable_thinking: bool = True, loss_scale: str = "default") -> tuple[str, list[tuple[int, int]]]:
        validate_messages(messages)
        if messages[0]["role"] != "system" and self.default_system is not None:
            messages = [{"role": "system", "content": self.default_system}, *messages]
        trained = trained_turns(messages, loss_scale)
        text = self._chat(messages, add_generation_prompt, enable_thinking)
        if loss_scale == "all":
            return text, [(0, len(text))]
        if not trained:
            return text, []
        if self.marks_generation:
            return text, self._generation_spans(messages, text, trained, add_generation_prompt, enable_thinking)
        return text, [self._turn_span(messages, i, text, enable_thinking) for i in trained]

    def _turn_span(self, messages: list[Message], index: int, text: str, enable_thinking: bool) -> tuple[int, int]:
        before = self._chat(messages[:index], True, enable_thinking)
        through = self._chat(messages[:index + 1], False, enable_thinking)
        if not (through.startswith(before) and text.startswith(through)):
            raise ValueError(f"the chat template of {self.tokenizer.name_or_path!r} renders earlier turns "
                             f"differently once later turns follow (at message {index}), so swiftlike cannot tell "
                             "which tokens are the assistant's; pass --template with a registered template, or "
                             "use a chat template with {% generation %} blocks")
        return len(before), len(through.rstrip())

    def _generation_spans(self, messages: list[Message], text: str, trained: list[int],
                          add_generation_prompt: bool, enable_thinking: bool) -> list[tuple[int, int]]:
        """The template's own {% generation %} blocks, one per assistant message, as character spans."""
        marked = self.tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
            add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking)
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(marked["input_ids"]) != list(encoded["input_ids"]):
            raise ValueError("apply_chat_template tokenized the conversation differently from its rendered text")
        blocks: list[tuple[int, int]] = []
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
