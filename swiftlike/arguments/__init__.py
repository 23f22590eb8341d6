"""Typed argument dataclasses, one per command; the CLI, configs and Python API fill them."""
from .base import BaseArguments
from .export_args import ExportArguments
from .infer_args import GenerationArguments, InferArguments, VllmArguments
from .parser import parse_args
from .rlhf_args import RlhfArguments
from .train_args import PtArguments, TrainArguments, TunerArguments

__all__ = ["BaseArguments", "ExportArguments", "GenerationArguments", "InferArguments", "PtArguments", "RlhfArguments",
           "TrainArguments", "TunerArguments", "VllmArguments", "parse_args"]
