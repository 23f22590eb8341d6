"""`--loss_scale`: which tokens carry loss, under ms-swift's names.

A value is a base strategy, optionally followed by `+`-joined refinements (ms-swift's syntax): `default`,
`last_round`, `all`, `ignore_empty_think` (= `default+ignore_empty_think`), `last_round+ignore_think_prefix`, ...
The refinements built here take text out of the loss (weight 0), so they keep loss a plain label mask. ms-swift's
agent refinements weight text up instead (`hermes`, `react`, `qwen` give calls weight 2; `agentflan`,
`alpha_umi` weight 3), which needs a per-token weighted loss in the trainer: those are not built and say so.
Tool results and the tool list never carry loss under any base strategy but `all`: they are not assistant text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..utils.errors import NotBuiltError, UsageError

BASE_STRATEGIES = {
    "default": "every assistant turn, the calls it makes included",
    "last_round": "the assistant text after the last user turn or tool result",
    "all": "every token, prompt and tool results included",
}

# ms-swift's patterns for these two, the ones that apply to our templates' think blocks.
REFINEMENTS = {
    "ignore_empty_think": (re.compile(r"<think>\s*</think>\s*|</think>\s*"),
                           "no loss on an empty <think></think> block at the start of an answer"),
    "ignore_think_prefix": (re.compile(r"<think>\n?"), "no loss on the '<think>' opening an answer"),
}

NOT_BUILT = {
    "hermes": "weight 2 on <tool_call> blocks",
    "react": "weight 2 on Action / Action Input lines",
    "qwen": "weight 2 on ✿FUNCTION✿ / ✿ARGS✿ lines",
    "agentflan": "weight 3 on tool names and arguments",
    "alpha_umi": "weight 2 on Action / Action Input / Next lines",
}


@dataclass(frozen=True)
class LossScale:
    base: str
    refinements: tuple[str, ...] = ()

    def trim(self, text: str, start: int, end: int) -> int:
        """The new start of the trained span `text[start:end]` once the refinements took their prefix out."""
        for name in self.refinements:
            match = REFINEMENTS[name][0].match(text, start, end)
            if match:
                start = match.end()
        return start


def describe_loss_scales() -> str:
    bases = "; ".join(f"{name} ({meaning})" for name, meaning in BASE_STRATEGIES.items())
    refinements = "; ".join(f"{name} ({meaning})" for name, (_, meaning) in REFINEMENTS.items())
    return f"base strategies: {bases}; refinements, joined with '+': {refinements}"


def parse_loss_scale(spec: str) -> LossScale:
    """`last_round+ignore_empty_think` -> LossScale('last_round', ('ignore_empty_think',)); a refinement alone
    means default+refinement, as in ms-swift."""
    parts = spec.split("+") if spec else [""]
    base = parts[0] if parts[0] in BASE_STRATEGIES else "default"
    names = parts[1:] if parts[0] in BASE_STRATEGIES else parts
    for name in names:
        if name in NOT_BUILT:
            raise NotBuiltError(f"--loss_scale {spec}: ms-swift's {name!r} ({NOT_BUILT[name]}) needs per-token loss "
                                "weights, which are not built; tool results are already out of the loss under "
                                "default and last_round")
        if name not in REFINEMENTS:
            raise UsageError(f"--loss_scale {spec!r}: unknown part {name!r}; {describe_loss_scales()}")
    if len(set(names)) != len(names):
        raise UsageError(f"--loss_scale {spec!r} names a refinement twice")
    return LossScale(base, tuple(names))
