"""`--prm_model`: process reward models, which score each step of an answer rather than the whole of it.

A PRM is called like a reward function, `prm(completions, **columns)`, but returns one *list* of step scores per
completion; `answer_scores` reduces them to one score per answer, its weakest step's (a chain of reasoning is as
sound as its worst step, the reduction Lightman et al. and the Qwen PRMs report). Two kinds:

- plugins: `register_prm("name", cls_or_func)` in an --external_plugins file (ms-swift's `prms = {...}` hook);
  a class is built without arguments.
- checkpoints: a token-classification model (`*ForTokenClassification`, as PRMs are trained: a label at the end
  of each step), read at the last token of each step, steps split at blank lines. With two labels the step's score
  is the probability of label 1 ("good"), with one label the sigmoid of its logit.

Written here rather than on TRL's PRM trainer, which trains them but has no scorer; the model loads through
transformers' AutoModelForTokenClassification.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ...utils.registry import Registry

PRM_REGISTRY: Registry = Registry("process reward model", "--prm_model")

# Where an answer's steps end: a blank line, the convention of PRM800K-style data and of the Qwen PRMs' step tags.
STEP_SEPARATOR = "\n\n"


def register_prm(name: str, prm: Any = None):
    """Register a process reward model under `name` (usable as a decorator)."""
    if prm is None:
        return lambda p: register_prm(name, p) or p
    return PRM_REGISTRY.register(name, prm)


def split_steps(answer: str) -> list[str]:
    """The answer's steps (blank-line separated, empty ones dropped); a one-paragraph answer is one step."""
    steps = [s for s in answer.split(STEP_SEPARATOR) if s.strip()]
    return steps or [answer]


def answer_scores(prm: Callable, name: str, completions: Sequence[str], **columns: Any) -> list[float]:
    """One score per completion, its weakest step's; NaN where the PRM scored no step. A PRM that answers with one
    number per completion, or the wrong count, is refused: that is an outcome reward (--orm_model)."""
    out = prm(list(completions), **columns)
    if not isinstance(out, (list, tuple)) or len(out) != len(completions):
        got = f"{len(out)} results" if isinstance(out, (list, tuple)) else type(out).__name__
        raise ValueError(f"process reward model {name!r} returned {got} for {len(completions)} completions; it must "
                         "return one list of step scores per completion")
    scores = []
    for i, steps in enumerate(out):
        if not isinstance(steps, (list, tuple)):
            raise ValueError(f"process reward model {name!r} returned {steps!r} for completion {i}, one number; a PRM "
                             "returns a list of step scores per completion (one number per answer is an outcome "
                             "reward: pass it as --orm_model)")
        values = [float(s) for s in steps if s is not None and not math.isnan(float(s))]
        scores.append(min(values) if values else math.nan)
    return scores


class TokenClassifierPrm:
    """A `*ForTokenClassification` checkpoint scoring each step at its last token (see the module docstring)."""

    def __init__(self, model_dir: str | Path, torch_dtype: torch.dtype = torch.float32, device: str = "cpu"):
        from transformers import AutoModelForTokenClassification, AutoTokenizer
        check_is_prm(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForTokenClassification.from_pretrained(model_dir, torch_dtype=torch_dtype).to(device)
        self.model.eval()
        self.device = device
        self.name = Path(model_dir).name

    @torch.inference_mode()
    def __call__(self, completions: Sequence[str], prompts: Sequence[list[dict]] | None = None,
                 **kwargs: Any) -> list[list[float]]:
        out = []
        for i, completion in enumerate(completions):
            question = prompts[i][-1]["content"] if prompts else ""
            ids = self.tokenizer(question + STEP_SEPARATOR, add_special_tokens=True)["input_ids"]
            ends = []
            for step in split_steps(completion):
                ids = ids + self.tokenizer(step + STEP_SEPARATOR, add_special_tokens=False)["input_ids"]
                ends.append(len(ids) - 1)
            logits = self.model(input_ids=torch.tensor([ids], device=self.device)).logits[0, ends].float()
            probs = torch.sigmoid(logits[:, 0]) if logits.shape[-1] == 1 else logits.softmax(-1)[:, 1]
            out.append(probs.tolist())
        return out


def check_is_prm(model_dir: str | Path) -> None:
    """A checkpoint a PRM cannot be read from is refused before it loads, naming what it is."""
    config_path = Path(model_dir) / "config.json"
    if not config_path.is_file():
        raise ValueError(f"--prm_model {model_dir}: no config.json there, and no process reward model is registered "
                         f"under that name; known: {', '.join(sorted(PRM_REGISTRY)) or 'none'}")
    config = json.loads(config_path.read_text())
    architectures = config.get("architectures") or []
    if not any(a.endswith("ForTokenClassification") for a in architectures):
        kind = ("a sequence classifier (an outcome reward model: pass it as --orm_model)"
                if any(a.endswith("ForSequenceClassification") for a in architectures)
                else f"a {', '.join(architectures) or 'model of unknown architecture'}")
        raise ValueError(f"--prm_model {model_dir} is {kind}, not a process reward model: a PRM is a "
                         "*ForTokenClassification checkpoint that labels the end of each step")
    if config.get("num_labels", len(config.get("id2label") or {}) or 2) not in (1, 2):
        raise ValueError(f"--prm_model {model_dir} has {config.get('num_labels')} labels; a PRM has 1 (a logit) or 2 "
                         "(bad / good) per step")
