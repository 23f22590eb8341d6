"""--orm_model and --prm_model resolved to scorers, and one prompt's answers scored by them.

The outcome reward is anything GRPO scores with, through the same code (rl/rewards): a reward function by name
(built-in or from --external_plugins), a reward model checkpoint loaded here, or a served reward model's URL.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..rl.rewards import PRM_REGISTRY, REWARD_REGISTRY, build_reward_funcs, combine_rewards
from ..rl.rewards.prm import TokenClassifierPrm, answer_scores, check_is_prm
from ..utils import get_logger
from ..utils.errors import UsageError

logger = get_logger("swiftlike.sample")


def build_orm(spec: str, *, max_new_tokens: int, use_hf: bool, torch_dtype: str) -> tuple[str, Callable]:
    """(name, reward callable) for --orm_model: a URL is a served reward model, a directory a checkpoint, anything
    else a registered reward function."""
    if spec.startswith(("http://", "https://")):
        from ..infer.engine.classify_client import ClassifyClient
        from ..rl.rewards.reward_model import RewardModel
        model = RewardModel(ClassifyClient(spec, 60.0, None), f"--orm_model {spec}")
        return model.name, model
    if Path(spec).expanduser().is_dir():
        from ..infer.engine import EngineSpec, build_classifier
        from ..model.seq_cls import SeqClsCheckpoint, is_seq_cls_adapter, is_seq_cls_model
        from ..rl.rewards.reward_model import RewardModel
        if not (is_seq_cls_model(spec) or is_seq_cls_adapter(spec)):
            raise UsageError(f"--orm_model {spec} is a directory but not a reward model (no *ForSequenceClassification "
                             "config.json, nor a --rlhf_type rm LoRA checkpoint); give a reward model, a served "
                             f"one's URL, or a reward function name: {', '.join(sorted(REWARD_REGISTRY))}")
        checkpoint = SeqClsCheckpoint.of(spec)
        adapters = {checkpoint.name: checkpoint.adapter} if checkpoint.adapter else {}
        classifier = build_classifier(EngineSpec("pt", model=checkpoint.model, model_type=checkpoint.model_type,
                                                 use_hf=use_hf, torch_dtype=torch_dtype, adapters=adapters))
        model = RewardModel(classifier, f"--orm_model {spec}")
        return model.name, model
    if spec in PRM_REGISTRY:
        raise UsageError(f"--orm_model {spec} is a process reward model (registered with register_prm); pass it as "
                         "--prm_model")
    if spec not in REWARD_REGISTRY:
        raise UsageError(f"--orm_model {spec!r} is not a reward function, a reward model directory or a URL; reward "
                         f"functions: {', '.join(sorted(REWARD_REGISTRY))} (more from --external_plugins files that "
                         "call register_reward)")
    return spec, build_reward_funcs([spec], max_completion_length=max_new_tokens)[spec]


def build_prm(spec: str, *, torch_dtype: str) -> tuple[str, Callable]:
    """(name, PRM callable) for --prm_model: a registered PRM, or a token-classification checkpoint."""
    import torch
    if spec in PRM_REGISTRY:
        item = PRM_REGISTRY[spec]
        return spec, item() if isinstance(item, type) else item
    if spec in REWARD_REGISTRY:
        raise UsageError(f"--prm_model {spec} is an outcome reward function, not a process reward model; pass it as "
                         "--orm_model")
    check_is_prm(spec)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(torch_dtype, torch.float32)
    prm = TokenClassifierPrm(spec, dtype)
    return prm.name, prm


@dataclass
class AnswerScores:
    """One prompt's answers scored: NaN where a reward is missing; None for a reward not given."""

    orm: list[float] | None
    prm: list[float] | None


class PromptScorer:
    """Scores one prompt's answers with the ORM and the PRM; each reward is called once per prompt."""

    def __init__(self, orm: tuple[str, Callable] | None, prm: tuple[str, Callable] | None):
        self.orm, self.prm = orm, prm

    @property
    def enabled(self) -> bool:
        return self.orm is not None or self.prm is not None

    def __call__(self, row: dict, prompt: list[dict], answers: Sequence[str],
                 token_ids: Sequence[Sequence[int]]) -> AnswerScores:
        if not self.enabled:
            return AnswerScores(None, None)
        columns: dict[str, Any] = {k: [v] * len(answers) for k, v in row.items() if k != "messages"}
        columns.update(prompts=[prompt] * len(answers), completion_ids=[list(t) for t in token_ids],
                       completion_lengths=[len(t) for t in token_ids])
        orm = prm = None
        if self.orm is not None:
            name, func = self.orm
            scored = combine_rewards({name: func}, None, answers, **columns)
            orm = [float(v) for v in scored.per_func[name]]
            orm = [math.nan if (scored.missing[name][i] or scored.failed[name][i]) else v for i, v in enumerate(orm)]
        if self.prm is not None:
            name, func = self.prm
            prm = answer_scores(func, name, answers, **columns)
        return AnswerScores(orm, prm)
