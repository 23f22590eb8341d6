"""PPO's critic: a one-label sequence classifier read at every position, so its score head gives a value per
token rather than per sequence.

Where it starts (`critic_source`): --value_model, else the first --reward_model (ms-swift's choice: a reward model
already maps a prefix to how good it is), else the policy's checkpoint with a fresh score head. It reads the policy's
token ids, so its tokenizer must be the policy's; that, and that its architecture has a sequence-classification
head at all, are checked from the tokenizer and config files before any model loads (`check_ppo_models`).

The critic trains in the policy's optimizer as a parameter group of its own (ppo_trainer.py), LoRA (a SEQ_CLS
adapter with its score head trained in full, as a --rlhf_type rm run) or full, like the policy.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...model.seq_cls import SeqClsCheckpoint
from ..core.options import RewardOptions
from ..core.ppo_options import PpoOptions
from .grpo_batch import completion_outputs

CRITIC_DIR = "value_model"  # inside each checkpoint: the critic's weights (or adapter), for resuming


@dataclass(frozen=True)
class CriticSource:
    """The checkpoint the critic starts from, and the flag that named it (for errors)."""

    checkpoint: SeqClsCheckpoint
    flag: str
    model_type: str | None = None


def critic_source(ppo: PpoOptions, reward: RewardOptions, model: str, model_type: str | None) -> CriticSource:
    if ppo.value_model:
        return CriticSource(SeqClsCheckpoint.of(ppo.value_model), f"--value_model {ppo.value_model}",
                            ppo.value_model_type)
    if reward.reward_model:
        first = reward.reward_model[0]
        return CriticSource(SeqClsCheckpoint.of(first), f"--reward_model {first} (the critic's default start)")
    return CriticSource(SeqClsCheckpoint(model, model_type), f"--model {model} (the critic's default start, with "
                        "a fresh value head)", model_type)


def check_ppo_models(ppo: PpoOptions, reward: RewardOptions, model: str, model_type: str | None, policy_vocab: dict,
                     use_hf: bool) -> CriticSource:
    """Before any model loads: every in-process reward model and the critic share the policy's tokenizer (PPO
    scores and values the policy's token ids), and the critic's architecture can take a value head."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    from ...model import load_tokenizer, resolve_model

    source = critic_source(ppo, reward, model, model_type)
    named = [(SeqClsCheckpoint.of(r), f"--reward_model {r}", None) for r in reward.reward_model]
    for checkpoint, flag, kind in named + [(source.checkpoint, source.flag, source.model_type)]:
        resolved = resolve_model(checkpoint.model, checkpoint.model_type or kind, use_hf=use_hf)
        if load_tokenizer(resolved).get_vocab() != policy_vocab:
            raise ValueError(f"{flag}: its tokenizer differs from the policy's (--model {model}); PPO scores and "
                             "values the policy's token ids, so the reward and value models must share its "
                             "tokenizer (for a reward model with another tokenizer, serve it and use "
                             "--reward_model_server, which scores text)")
        if checkpoint is source.checkpoint:
            config = AutoConfig.from_pretrained(resolved.model_dir)
            if config.model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
                raise ValueError(f"{flag}: model type {config.model_type!r} has no sequence-classification head in "
                                 "transformers, so it cannot be the critic; pass a --value_model of a family that "
                                 "has one (Llama, Qwen2, ...)")
    return source


def load_critic(source: CriticSource, args, device: str, resume_dir: str | None = None) -> torch.nn.Module:
    """The critic, trainable as the policy is (--tuner_type); from `resume_dir/value_model` when resuming."""
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForSequenceClassification

    from ...model import pick_dtype, resolve_model
    from ...train.lora_dropout import use_hashed_lora_dropout
    from ...train.tuner import lora_config

    saved = Path(resume_dir) / CRITIC_DIR if resume_dir else None
    if saved is not None and not saved.is_dir():
        raise ValueError(f"--resume_from_checkpoint {resume_dir}: no {CRITIC_DIR}/ in it, so it is not a PPO "
                         "checkpoint (the critic is saved there)")
    checkpoint = source.checkpoint
    resolved = resolve_model(checkpoint.model, checkpoint.model_type or source.model_type, use_hf=args.use_hf)
    full_saved = saved is not None and args.tuner_type == "full"
    base = AutoModelForSequenceClassification.from_pretrained(str(saved) if full_saved else resolved.model_dir,
                                                              num_labels=1, dtype=pick_dtype(args.torch_dtype, device))
    if base.config.num_labels != 1:
        raise ValueError(f"{source.flag}: a classifier with {base.config.num_labels} labels; the critic needs one "
                         "(a value per position)")
    if checkpoint.adapter and not full_saved:  # a LoRA --rlhf_type rm checkpoint: its score head is in the adapter
        base = PeftModel.from_pretrained(base, checkpoint.adapter).merge_and_unload()
    if base.config.pad_token_id is None:
        base.config.pad_token_id = base.config.eos_token_id
    base = base.to(device)
    if args.tuner_type == "full":
        return base.train()
    if saved is not None:
        critic = PeftModel.from_pretrained(base, str(saved), is_trainable=True)
    else:
        critic = get_peft_model(base, lora_config(args, reward_head=True))
    use_hashed_lora_dropout(critic)
    return critic.train()


def _backbone_and_head(critic: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The classifier's body and its score head, through a PEFT wrapper (whose LoRA layers live in the body and
    whose trained head copy is what the wrapped `score` calls)."""
    inner = critic.get_base_model() if hasattr(critic, "get_base_model") else critic
    head = getattr(inner, "score", None) or getattr(inner, "classifier")
    return getattr(inner, inner.base_model_prefix), head


def completion_values(critic: torch.nn.Module, batch: dict, share_prompts: bool = True) -> torch.Tensor:
    """(rows, completion width): at column t, the critic's value of the sequence before completion token t (the
    state the policy chose token t in), TRL's `full_value[:, context_length - 1 : -1]`. The body runs the batch as
    the policy's log-probs do (`completion_outputs`: the prompts' common prefix once, with --share_prompt_prefix)."""
    backbone, head = _backbone_and_head(critic)
    hidden = completion_outputs(backbone, batch, share_prompts, decoder=backbone)
    return head(hidden).squeeze(-1).float()


def save_critic(critic: torch.nn.Module, directory: Path) -> None:
    """The critic's weights (full) or adapter with its score head (LoRA), for `load_critic` on resume."""
    critic.save_pretrained(str(directory / CRITIC_DIR))
