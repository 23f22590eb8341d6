"""Typed argument dataclasses, one per command; the CLI, configs and Python API fill them."""
from .base import BaseArguments
from .infer_args import GenerationArguments, InferArguments, VllmArguments
from .parser import parse_args

__all__ = ["BaseArguments", "GenerationArguments", "InferArguments", "VllmArguments", "parse_args"]
