"""Arguments of `swiftlike export`."""
from __future__ import annotations

from dataclasses import dataclass

from ..utils.errors import UsageError
from .base import BaseArguments, arg


@dataclass
class ExportArguments(BaseArguments):
    """swiftlike export: merge a LoRA adapter into its base model and write an HF directory."""

    command = "export"
    merge_lora: bool = arg(False, "Merge the --adapters checkpoint into the base weights.")
    output_dir: str | None = arg(None, "Where the merged model goes; default <adapter dir>-merged.")
    max_shard_size: str = arg("5GB", "Largest safetensors shard.")

    def __post_init__(self) -> None:
        from ..model.loader import check_adapter_dir
        for path in self.adapter_paths().values():
            check_adapter_dir(path)
        super().__post_init__()
        if not self.merge_lora:
            raise UsageError("nothing to export: pass --merge_lora true (with --adapters <checkpoint>)")
        if not self.adapters:
            raise UsageError("--merge_lora true needs --adapters <LoRA checkpoint directory>")
        if len(self.adapters) > 1:
            raise UsageError("--merge_lora merges one adapter at a time; pass a single --adapters path")
        if self.model is None:
            raise UsageError("--model is required: the adapter directory has no args.json to read it from")
