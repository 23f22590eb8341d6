"""`--reward_model` / `--reward_model_server`: a sequence-classification model's score as one more GRPO reward column.

The model (one label, e.g. a Bradley-Terry reward model from `swiftlike rlhf --rlhf_type rm`) reads the whole
conversation, the prompt's messages plus the sampled answer as the assistant turn, rendered the way it was
trained; its logit is the reward. The rendering and the forward pass are the engine layer's classifier
(swiftlike/infer/engine/classifier.py): in this process for `--reward_model`, behind `swiftlike deploy`'s
`/classify` for `--reward_model_server`, the same code either way. The column is named after the model, and in
`--reward_weights` the reward models come after the `--reward_funcs` entries, as in ms-swift: the `--reward_model`
entries, then the `--reward_model_server` ones.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ...utils import get_logger
from ...utils.service_client import RequestRejected, ServerError, ServerUnavailable
from .functions import FAILED, MISSING, Unscored

logger = get_logger("swiftlike.rl")


class ConversationClassifier(Protocol):
    """What a reward model scores with: `PtClassifier` (in-process) or `ClassifyClient` (served)."""

    model_name: str
    num_labels: int

    def classify_each(self, conversations: Sequence[list[dict]]) -> list[list[float] | ServerError]: ...


def reward_column(model_name: str) -> str:
    """A reward model's column: the last path component of its (served) name, `rewards/<column>/mean` in the log."""
    return Path(model_name.rstrip("/")).name


class RewardModel:
    """Callable like a reward function: `(completions, prompts=[messages, ...]) -> [score, ...]`.

    A served reward model renders the conversation on its server, with its own tokenizer and template, exactly as
    the in-process one does here, so it may use another tokenizer than the policy: it reads the policy's text,
    not its token ids. (GKD's served teacher is the opposite case: its log-probs are over the student's token ids,
    so it must share the student's tokenizer, and `--teacher_model_server` checks that.) No tokenizer check here.

    A served one scores each conversation in its own request. A call that got no answer within the deadline
    raises its `ServerUnavailable` (the run stops, naming the server and the call), or with `on_error="skip"`
    (`--reward_on_error skip`) scores that completion FAILED (its group is dropped). A conversation the server
    refuses as invalid (HTTP 400: longer than the reward model's context, which depends on the completion) scores
    MISSING, counted in `rewards/<name>/missing`, whatever `on_error` says: the server is fine, this one input is not.
    """

    def __init__(self, classifier: ConversationClassifier, origin: str, on_error: str = "stop"):
        if classifier.num_labels != 1:
            raise ValueError(f"{origin}: {classifier.model_name} classifies into {classifier.num_labels} labels; a "
                             "reward model has one (its logit is the reward)")
        self.classifier, self.origin = classifier, origin  # origin: the flag and value, for messages
        self.on_error = on_error
        self.name = reward_column(classifier.model_name)

    def __call__(self, completions: Sequence[str], prompts: Sequence[list[dict]] | None = None,
                 **kwargs: Any) -> list[float | Unscored]:
        if prompts is None or len(prompts) != len(completions):
            raise ValueError(f"reward model {self.name!r} needs one prompt (messages) per completion")
        conversations = [[*p, {"role": "assistant", "content": c}] for p, c in zip(prompts, completions)]
        outcomes = self.classifier.classify_each(conversations)
        unavailable = [o for o in outcomes if isinstance(o, ServerUnavailable)]
        if unavailable and self.on_error != "skip":
            raise unavailable[0]
        rejected = [o for o in outcomes if isinstance(o, RequestRejected)]
        if unavailable:
            logger.warning("%s: %d of %d scores failed; their groups are dropped (--reward_on_error skip): %s",
                           self.origin, len(unavailable), len(outcomes), unavailable[0])
        if rejected:
            logger.warning("%s: the server refused %d of %d conversations; their rewards are missing. First: %s",
                           self.origin, len(rejected), len(outcomes), rejected[0])
        return [FAILED if isinstance(outcome, ServerUnavailable) else MISSING if isinstance(outcome, RequestRejected)
                else outcome[0] for outcome in outcomes]
