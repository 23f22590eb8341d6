"""Typed argument dataclasses, one per command; the CLI, configs and Python API fill them."""
from .app_args import AppArguments
from .base import BaseArguments
from .deploy_args import DeployArguments
from .eval_args import EvalArguments
from .export_args import ExportArguments
from .infer_args import GenerationArguments, InferArguments, VllmArguments
from .parser import parse_args
from .rlhf_args import RlhfArguments
from .rollout_args import RolloutServerArguments
from .sample_args import SampleArguments
from .train_args import PtArguments, TrainArguments, TunerArguments
from .webui_args import WebUIArguments

__all__ = ["AppArguments", "BaseArguments", "DeployArguments", "EvalArguments", "ExportArguments",
           "GenerationArguments", "InferArguments", "PtArguments", "RlhfArguments", "RolloutServerArguments",
           "SampleArguments", "TrainArguments", "TunerArguments", "VllmArguments", "WebUIArguments", "parse_args"]
