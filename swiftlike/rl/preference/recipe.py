"""`swiftlike rlhf --rlhf_type dpo|kto|cpo|simpo|orpo|rm`: preference training on TRL's trainers.

The losses, reference handling, metrics and training loops are TRL's (`DPOTrainer`, `KTOTrainer`,
`RewardTrainer`, and `CPOTrainer` / `ORPOTrainer` from `trl.experimental`). What is ours: the argument
mapping (ms-swift's names and defaults), the encoding of rows with swiftlike's chat template
(`data.py`), the run directory, atomic checkpoints that carry args.json, the curves and the summary.
Each TRL trainer is subclassed (`trainers.py`) only to hand it rows already encoded, in the layout its collator reads.
"""
from __future__ import annotations

from ...arguments.rlhf_args import RlhfArguments
from ...model import ResolvedModel, default_device, pick_dtype, resolve_model
from ...train.outputs import PLOTTED
from ...train.run import TrainResult, load_train_val_rows, prepare_run
from ...utils import get_logger
from ..core.options import PolicyTrainingOptions, PreferenceOptions
from .data import PreferenceEncoder, encode_kto, encode_pairs, with_kl_completions

logger = get_logger("swiftlike.rl")

PREFERENCE_PLOTTED = (*PLOTTED, "rewards/*", "eval_rewards/*", "logps/*", "accuracy", "margin", "mean_reward",
                      "eval_accuracy", "eval_margin")
SUMMARY_KEYS = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected", "accuracy",
                "eval_rewards/accuracies", "eval_rewards/margins", "eval_accuracy")


def _trainer_classes():
    """TRL's trainers, each taught to take our encoded rows (trainers.py). Imported on use: TRL is slow to import."""
    from .trainers import TRAINERS
    return TRAINERS


def config_fields(preference: PreferenceOptions, policy_training: PolicyTrainingOptions) -> dict:
    """ms-swift's arguments -> the TRL config fields of `--rlhf_type` (beyond TrainingArguments').

    Lengths are applied while encoding (`PreferenceEncoder`), so TRL's own limits are turned off.
    """
    common = {"disable_dropout": policy_training.disable_dropout, "max_length": None}
    kind = preference.rlhf_type
    if kind == "dpo":
        loss_types, weights = list(preference.loss_type), preference.loss_weights
        if preference.rpo_alpha is not None:  # RPO = the DPO loss plus a weighted NLL term ("sft" in TRL's list)
            weights = list(weights or [1.0] * len(loss_types)) + [preference.rpo_alpha]
            loss_types.append("sft")
        return {**common, "beta": preference.beta, "loss_type": loss_types, "loss_weights": weights,
                "label_smoothing": preference.label_smoothing, "ld_alpha": preference.ld_alpha,
                "discopop_tau": preference.discopop_tau,
                "precompute_ref_log_probs": preference.precompute_ref_log_probs}
    if kind == "kto":
        return {**common, "beta": preference.beta, "loss_type": preference.loss_type[0],
                "desirable_weight": preference.desirable_weight, "undesirable_weight": preference.undesirable_weight}
    if kind in ("cpo", "simpo"):
        if kind == "simpo" and preference.cpo_alpha > 0:
            logger.warning("--rlhf_type simpo with --cpo_alpha %s trains CPO-SimPO (SimPO plus an NLL term), as "
                           "ms-swift does by default; --cpo_alpha 0 is pure SimPO", preference.cpo_alpha)
        return {**common, "beta": preference.beta, "loss_type": preference.loss_type[0],
                "cpo_alpha": preference.cpo_alpha, "simpo_gamma": preference.simpo_gamma,
                "label_smoothing": preference.label_smoothing}
    if kind == "orpo":
        return {**common, "beta": preference.beta}
    return {**common, "center_rewards_coefficient": preference.center_rewards_coefficient}


def load_ref_model(preference: PreferenceOptions, args: RlhfArguments, resolved: ResolvedModel, device: str):
    """The reference of dpo/kto, or None for TRL's default.

    TRL's default is the one ms-swift documents: with a fresh LoRA adapter, the model with the adapter disabled
    (no second copy in memory); when --adapters continues an adapter, the base under a frozen copy of that
    adapter (the SFT model, ms-swift's `--adapters x --ref_adapters x`); with full tuning, a frozen copy of
    --model. A model is loaded here only when the user names another reference (--ref_model, or
    --ref_adapters other than the --adapters training continues).
    """
    if not preference.uses_ref or preference.precompute_ref_log_probs and not preference.ref_adapters:
        return None
    same_adapters = args.tuner_type == "lora" and sorted(preference.ref_adapters) == sorted(args.adapters)
    if preference.ref_model is None and (not preference.ref_adapters or same_adapters):
        return None
    from transformers import AutoModelForCausalLM
    ref_resolved = resolve_model(preference.ref_model, preference.ref_model_type, args.use_hf, preference.ref_model_revision) \
        if preference.ref_model else resolved
    model = AutoModelForCausalLM.from_pretrained(ref_resolved.model_dir, dtype=pick_dtype(args.torch_dtype, device))
    if preference.ref_adapters:
        from peft import PeftModel
        for path in preference.ref_adapters:
            model = PeftModel.from_pretrained(model, path).merge_and_unload()
    logger.info("reference model: %s%s", ref_resolved.model_id,
                f" + adapters {' '.join(preference.ref_adapters)}" if preference.ref_adapters else "")
    return model.to(device).eval()


def kto_kl_block(args: RlhfArguments, training_args, what: str) -> int | None:
    """The rows among which KTO's KL completions are paired: one optimizer step's (one evaluation batch's, across
    processes); None when the loss has no KL term (TRL's `apo_zero_unpaired`) or the type is not kto."""
    if args.rlhf_type != "kto" or args.loss_type[0] == "apo_zero_unpaired":
        return None
    if what == "train":
        return args.per_device_train_batch_size * args.gradient_accumulation_steps * training_args.world_size
    return args.per_device_eval_batch_size * training_args.world_size


def encode(args: RlhfArguments, rows: list[dict], encoder: PreferenceEncoder, layout: str, what: str,
           kl_block: int | None = None):
    from datasets import Dataset
    samples, stats = encode_kto(rows, encoder) if layout == "kto" else encode_pairs(rows, encoder, layout)
    logger.info("%s data: %s", what, stats.describe(args.max_length, args.truncation_strategy))
    if not samples:
        raise ValueError(f"no {what} rows left after encoding ({stats.describe(args.max_length, args.truncation_strategy)}); "
                         "raise --max_length or use --truncation_strategy left|right")
    if kl_block is not None:
        samples = with_kl_completions(samples, kl_block, args.max_length)
    return Dataset.from_list(samples), stats


def train_preference(args: RlhfArguments) -> TrainResult:
    from ...train.tuner import lora_config, load_base_model, parameter_summary, prepare_model

    run = prepare_run(args)
    resolved, tokenizer, template = run.resolved, run.tokenizer, run.template
    preference = args.preference_options()
    trainer_cls, config_cls, layout = _trainer_classes()[args.rlhf_type]
    train_rows, val_rows = load_train_val_rows(args, row_kind="kto" if args.rlhf_type == "kto" else "pair")
    training_args = run.training_arguments(bool(val_rows), config_cls=config_cls,
                                           **config_fields(preference, args.policy_training_options()))
    encoder = PreferenceEncoder(template, args.max_length, args.max_completion_length, args.truncation_strategy)
    train_data, stats = encode(args, train_rows, encoder, layout, "train", kto_kl_block(args, training_args, "train"))
    val_data = encode(args, val_rows, encoder, layout, "validation",
                      kto_kl_block(args, training_args, "eval"))[0] if val_rows else None
    run_dir = run.open(stats, PREFERENCE_PLOTTED)

    device = default_device()
    reward_head = args.rlhf_type == "rm"
    extra = {}
    if args.tuner_type == "lora" and not args.adapters:
        # TRL wraps it: then its reference is this model with the adapter disabled, with no copy of anything
        model, extra["peft_config"] = load_base_model(args, resolved, device, reward_head), lora_config(args, reward_head)
    else:  # full weights, or an adapter to continue (TRL then keeps a frozen copy of it as the reference)
        model = prepare_model(args, resolved, device, reward_head)
    if model.config.pad_token_id is None:  # a reward model finds each row's last token through the pad id
        model.config.pad_token_id = tokenizer.pad_token_id
    if args.rlhf_type in ("dpo", "kto"):
        extra["ref_model"] = load_ref_model(preference, args, resolved, device)
    trainer = trainer_cls(model=model, args=training_args, train_dataset=train_data, eval_dataset=val_data,
                          processing_class=tokenizer, callbacks=run.callbacks,
                          checkpoint_extras=run.checkpoint_extras(), **extra)
    logger.info("%s (%s, %s); run directory %s", parameter_summary(trainer.model), args.rlhf_type, args.tuner_type,
                run_dir)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    return run.result(trainer, stats, SUMMARY_KEYS)
