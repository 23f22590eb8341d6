"""`--reward_model`: a sequence-classification model's score as one more GRPO reward column.

The model (`AutoModelForSequenceClassification`, one label, e.g. a Bradley-Terry reward model) reads the
whole conversation, prompt plus the sampled answer, rendered the way it was trained: with its tokenizer's
own chat template when it ships one (reward models often differ from their base model here), else with
swiftlike's template for its model type. Its logit is the reward. The column is named after the model, and
in `--reward_weights` it comes after the `--reward_funcs` entries, as in ms-swift.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ...model import ResolvedModel, default_device, load_tokenizer, pick_dtype
from ...template import get_template


class RewardModel:
    """Callable like a reward function: `(completions, prompts=[messages, ...]) -> [score, ...]`."""

    def __init__(self, resolved: ResolvedModel, torch_dtype: str = "auto", device: str | None = None,
                 batch_size: int = 16, adapter: Path | None = None):
        from transformers import AutoModelForSequenceClassification
        device = device or default_device()
        self.name = Path(resolved.model_id.rstrip("/")).name
        self.tokenizer = load_tokenizer(resolved)
        self.tokenizer.padding_side = "right"
        self.template = None if self.tokenizer.chat_template else get_template(resolved.meta.template,
                                                                               self.tokenizer)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            resolved.model_dir, num_labels=1, dtype=pick_dtype(torch_dtype, device))
        if adapter is not None:  # a LoRA checkpoint of `rlhf --rlhf_type rm`: its head and adapter merged in
            from peft import PeftModel
            self.model = PeftModel.from_pretrained(self.model, str(adapter)).merge_and_unload()
            self.name = Path(str(adapter).rstrip("/")).parent.name + "-" + Path(str(adapter)).name
        self.model = self.model.to(device).eval()
        if self.model.config.pad_token_id is None:  # it locates each row's last token through the pad id
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.batch_size = batch_size

    def render(self, prompt: list[dict], completion: str) -> str:
        messages = [*prompt, {"role": "assistant", "content": completion}]
        if self.template is None:
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return self.template.render(messages)[0]

    @torch.no_grad()
    def __call__(self, completions: Sequence[str], prompts: Sequence[list[dict]] | None = None,
                 **kwargs: Any) -> list[float]:
        if prompts is None or len(prompts) != len(completions):
            raise ValueError(f"reward model {self.name!r} needs one prompt (messages) per completion")
        texts = [self.render(list(p), c) for p, c in zip(prompts, completions)]
        scores: list[float] = []
        device = self.model.device
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[start:start + self.batch_size], padding=True, add_special_tokens=False,
                                 return_tensors="pt").to(device)
            scores += self.model(**enc).logits[:, 0].float().tolist()
        return scores


def load_reward_models(names: Sequence[str], use_hf: bool = False, torch_dtype: str = "auto") -> dict[str, RewardModel]:
    """`--reward_model` entries -> {column name: RewardModel}, resolved like --model."""
    from ...model import resolve_model
    models: dict[str, RewardModel] = {}
    for name in names:
        path = Path(name).expanduser()
        if (path / "adapter_config.json").is_file():  # a LoRA reward-model checkpoint: its base from args.json
            saved = json.loads((path / "args.json").read_text()) if (path / "args.json").is_file() else {}
            if not saved.get("model"):
                raise ValueError(f"--reward_model {name}: a LoRA checkpoint without args.json naming its base "
                                 "model; merge it first with `swiftlike export --adapters ... --merge_lora true`")
            base = resolve_model(saved["model"], saved.get("model_type"), use_hf=use_hf)
            rm = RewardModel(base, torch_dtype, adapter=path)
        else:
            rm = RewardModel(resolve_model(name, use_hf=use_hf), torch_dtype)
        if rm.name in models:
            raise ValueError(f"two --reward_model entries are both named {rm.name!r}")
        models[rm.name] = rm
    return models
