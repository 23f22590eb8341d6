"""`swiftlike export`: merge a LoRA checkpoint into its base model."""
from __future__ import annotations

from pathlib import Path

from ..arguments.export_args import ExportArguments
from ..export.merge import merge_lora
from . import arguments_of


def export_main(args: ExportArguments | list[str] | None = None) -> Path:
    return merge_lora(arguments_of(ExportArguments, args))
