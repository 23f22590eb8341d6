"""Sequence-classification checkpoints (ms-swift's `--task_type seq_cls`): which directories hold one, and where a
LoRA one keeps its base model.

A reward model is one of two things on disk: a full model whose config.json names a `...ForSequenceClassification`
architecture (TRL's RewardTrainer output, `swiftlike export --merge_lora` of one, any HF classifier), or a LoRA
checkpoint of `swiftlike rlhf --rlhf_type rm` (PEFT task type SEQ_CLS; the score head travels in the adapter) whose
base model is named by the run's args.json. Deploy and GRPO's `--reward_model` both read them through here.
"""
from __future__ import annotations

import json
from ..utils.errors import UsageError
from dataclasses import dataclass
from pathlib import Path

SEQ_CLS_SUFFIX = "ForSequenceClassification"


def is_seq_cls_adapter(path: str | Path) -> bool:
    """A LoRA adapter of a classifier (PEFT's SEQ_CLS task), e.g. a `rlhf --rlhf_type rm` checkpoint."""
    config = Path(path).expanduser() / "adapter_config.json"
    return config.is_file() and json.loads(config.read_text()).get("task_type") == "SEQ_CLS"


def is_seq_cls_model(path: str | Path) -> bool:
    """A model directory whose config.json names a sequence-classification architecture."""
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return False
    return any(a.endswith(SEQ_CLS_SUFFIX) for a in json.loads(config.read_text()).get("architectures") or [])


def saved_base_model(adapter: str | Path) -> tuple[str, str | None]:
    """The base model (and its model type) a LoRA checkpoint was trained on, from the args.json beside it."""
    path = Path(adapter).expanduser()
    for candidate in (path / "args.json", path.parent / "args.json"):
        if candidate.is_file():
            saved = json.loads(candidate.read_text())
            if saved.get("model"):
                return saved["model"], saved.get("model_type")
    raise UsageError(f"{adapter}: a LoRA checkpoint without an args.json naming its base model; merge it first with "
                     "`swiftlike export --adapters ... --merge_lora true`")


@dataclass(frozen=True)
class SeqClsCheckpoint:
    """What to load for one reward model: the model (a full classifier, or the base of a LoRA one) and the adapter
    to merge into it."""

    model: str
    model_type: str | None = None
    adapter: str | None = None

    @classmethod
    def of(cls, name: str) -> SeqClsCheckpoint:
        """`--reward_model NAME` / `deploy --model NAME`: a LoRA rm checkpoint brings its base from args.json."""
        if is_seq_cls_adapter(name):
            model, model_type = saved_base_model(name)
            return cls(model, model_type, name)
        if (Path(name).expanduser() / "adapter_config.json").is_file():
            raise UsageError(f"{name} is a LoRA adapter of a generating model, not of a reward model (its "
                             "adapter_config.json task_type is not SEQ_CLS, as `swiftlike rlhf --rlhf_type rm` writes "
                             "it)")
        return cls(name)

    @property
    def name(self) -> str:
        """The reward column's name (and the served model's default name): the directory's name, or for a LoRA
        checkpoint its run's and its own (`v0-20261204-120000-checkpoint-50`)."""
        if self.adapter is None:
            return Path(self.model.rstrip("/")).name
        adapter = Path(self.adapter.rstrip("/"))
        return f"{adapter.parent.name}-{adapter.name}"
