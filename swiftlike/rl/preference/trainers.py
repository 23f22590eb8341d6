"""TRL's preference trainers, each subclassed only to take the rows `data.py` encoded with our template, in the
layout its collator reads, with our atomic checkpoints. Each override of a TRL member is listed in
`utils/contact_points.py`. Imports TRL (slow): `recipe.py` imports this module only when a run starts.
"""
from __future__ import annotations

import warnings

from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer, RewardConfig, RewardTrainer

from ...model.segment_attention import use_segment_attention
from ...train.fused_head import pack_padded_rows, score_only_labelled_positions_on_cpu
from ...train.trainer import AtomicCheckpoints
from ...utils import get_logger

with warnings.catch_warnings():  # "experimental" notices; the classes are the ones TRL documents for CPO/ORPO
    warnings.simplefilter("ignore")
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer


logger = get_logger("swiftlike.rl")

score_only_labelled_positions_on_cpu()  # DPO and KTO forward through TRL's fused head (train/fused_head.py)


class DpoTrainer(AtomicCheckpoints, DPOTrainer):
    """Padding-free on segment attention: the policy's and the reference's forwards run each batch's chosen and
    rejected sequences as one packed row (train/fused_head.py `pack_padded_rows`); TRL's loss sees the padded
    layout it built."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for model in (self.model, self.ref_model):
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            if base is not None and use_segment_attention(base):
                pack_padded_rows(base)
                logger.info("dpo: each batch's chosen and rejected sequences run as one packed row, attended "
                            "one sequence at a time (%s)", "policy" if model is self.model else "reference")

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        return dataset  # prompt_ids / chosen_ids / rejected_ids, encoded and length-limited already


class KtoTrainer(AtomicCheckpoints, KTOTrainer):
    """Rows arrive encoded, each with its KL completion from another prompt (`with_kl_completions`).

    TRL refuses a per-device batch of 1 because its own KL pairs rotate answers inside a batch; ours do not
    depend on the batch, so TRL's check is shown a batch of 2 and the real size is put back in
    `_prepare_dataset`, which TRL calls after its check and before transformers' Trainer reads the size
    (`tests/e2e/test_preference.py::test_kto_trains_at_batch_size_one` checks the run's batch is 1)."""

    def __init__(self, *, args, **kwargs):
        self._per_device_batch = args.per_device_train_batch_size
        args.per_device_train_batch_size = max(2, self._per_device_batch)
        try:
            super().__init__(args=args, **kwargs)
        finally:
            args.per_device_train_batch_size = self._per_device_batch

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        args.per_device_train_batch_size = self._per_device_batch
        return dataset


class CpoTrainer(AtomicCheckpoints, CPOTrainer):
    def tokenize_row(self, feature, model=None):
        return feature  # already the row TRL's tokenize_row builds (data.cpo_row)


class OrpoTrainer(AtomicCheckpoints, ORPOTrainer):
    def tokenize_row(self, feature, model=None):
        return feature


class RmTrainer(AtomicCheckpoints, RewardTrainer):
    """TRL's RewardTrainer reads rows that have chosen_ids / rejected_ids as tokenized already."""


# --rlhf_type -> (trainer, its TRL config, the row layout data.py encodes for it)
TRAINERS = {"dpo": (DpoTrainer, DPOConfig, "dpo"), "kto": (KtoTrainer, KTOConfig, "kto"),
            "cpo": (CpoTrainer, CPOConfig, "cpo"), "simpo": (CpoTrainer, CPOConfig, "cpo"),
            "orpo": (OrpoTrainer, ORPOConfig, "cpo"), "rm": (RmTrainer, RewardConfig, "rm")}
