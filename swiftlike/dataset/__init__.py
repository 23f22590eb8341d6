"""Datasets: built-in, local files and hub ids, all normalized to `messages` rows."""
from .formats import DatasetRowError, normalize_row
from .loader import iter_dataset, load_dataset, split_dataset
from .registry import DATASET_REGISTRY, DatasetMeta, register_dataset

__all__ = ["DATASET_REGISTRY", "DatasetMeta", "DatasetRowError", "iter_dataset", "load_dataset", "normalize_row",
           "register_dataset", "split_dataset"]
