"""TRL's preference trainers, each subclassed only to take the rows `data.py` encoded with our template, in the
layout its collator reads, with our atomic checkpoints. Each override of a TRL member is listed in
`utils/contact_points.py`. Imports TRL (slow): `recipe.py` imports this module only when a run starts.
"""
from __future__ import annotations

import warnings

from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer, RewardConfig, RewardTrainer

from ...train.fused_head import score_only_labelled_positions_on_cpu
from ...train.trainer import AtomicCheckpoints

with warnings.catch_warnings():  # "experimental" notices; the classes are the ones TRL documents for CPO/ORPO
    warnings.simplefilter("ignore")
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer


score_only_labelled_positions_on_cpu()  # DPO and KTO forward through TRL's fused head (train/fused_head.py)


class DpoTrainer(AtomicCheckpoints, DPOTrainer):
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
