"""Model preparation for training: full weights or LoRA through PEFT."""
from __future__ import annotations

from ..arguments.train_args import TrainArguments
from ..model import ResolvedModel, attn_implementation, check_adapter_dir, pick_dtype
from ..utils import get_logger
from ..utils.errors import UsageError
from .fused_head import add_compact_lm_head
from .lora_dropout import use_hashed_lora_dropout

logger = get_logger("swiftlike.train")


def lora_target_modules(target_modules: list[str]) -> str | list[str]:
    """`all-linear` is PEFT's own keyword (every linear layer except the output head)."""
    if "all-linear" in target_modules:
        if len(target_modules) > 1:
            raise UsageError("--target_modules: use all-linear alone, or list module names without it")
        return "all-linear"
    return list(target_modules)


def load_base_model(args: TrainArguments, resolved: ResolvedModel, device: str, reward_head: bool = False):
    """The model in the training dtype. `reward_head` loads it as a one-label sequence classifier (a reward
    model: the LM's body and a new scalar head)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    kwargs = {"dtype": pick_dtype(args.torch_dtype, device),
              "attn_implementation": attn_implementation(args.attn_impl, device)}
    if reward_head:
        return AutoModelForSequenceClassification.from_pretrained(resolved.model_dir, num_labels=1, **kwargs)
    return AutoModelForCausalLM.from_pretrained(resolved.model_dir, **kwargs)


def lora_config(args: TrainArguments, reward_head: bool = False):
    """The LoRA of --lora_rank / --lora_alpha / --target_modules; a reward model's scalar head is trained in
    full beside it (PEFT's SEQ_CLS task does that)."""
    from peft import LoraConfig
    return LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                      target_modules=lora_target_modules(args.target_modules),
                      modules_to_save=list(args.modules_to_save) or None, bias=args.lora_bias,
                      task_type="SEQ_CLS" if reward_head else "CAUSAL_LM")


def prepare_model(args: TrainArguments, resolved: ResolvedModel, device: str, reward_head: bool = False,
                  compact_head: bool = False):
    """Load the model in the training dtype and wrap it for the chosen tuner. `compact_head` gives a causal LM
    TRL's fused head (fused_head.py) before PEFT wraps it; the model's `compact_lm_head` says if it took."""
    model = load_base_model(args, resolved, device, reward_head)
    model.compact_lm_head = compact_head and add_compact_lm_head(model)
    if args.tuner_type == "full":
        return model
    from peft import PeftModel, get_peft_model
    if args.adapters:
        if len(args.adapters) > 1:
            raise UsageError("--adapters: training continues one adapter at a time")
        path = check_adapter_dir(next(iter(args.adapter_paths().values())))
        logger.info("continuing LoRA training from %s", path)
        model = PeftModel.from_pretrained(model, str(path), is_trainable=True)
    else:
        try:
            model = get_peft_model(model, lora_config(args, reward_head))
        except ValueError as e:
            raise UsageError(f"--target_modules {' '.join(args.target_modules)}: {e}") from None
    use_hashed_lora_dropout(model)
    return model


def parameter_summary(model) -> str:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / max(total, 1):.2f}%)"
