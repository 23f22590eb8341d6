"""`swiftlike export --adapters <checkpoint> --merge_lora true`.

PEFT's `merge_and_unload` does the arithmetic; this adds what makes the result usable on
its own: the tokenizer and chat template beside the weights, an args.json naming the template
and system prompt, and an atomic write (a staging directory renamed into place).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from ..arguments.export_args import ExportArguments
from ..model import check_adapter_dir, load_tokenizer, pick_dtype, resolve_model
from ..model.seq_cls import is_seq_cls_adapter
from ..template import get_template
from ..utils import atomic_write_json, get_logger
from ..utils.errors import UsageError

logger = get_logger("swiftlike.export")


def default_output_dir(adapter_dir: Path) -> Path:
    return adapter_dir.parent / f"{adapter_dir.name}-merged"


def base_model_class(adapter_dir: Path):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    return AutoModelForSequenceClassification if is_seq_cls_adapter(adapter_dir) else AutoModelForCausalLM


def merge_lora(args: ExportArguments) -> Path:
    """Write base + adapter as one HF model directory; return its path."""
    from peft import PeftModel

    adapter_dir = check_adapter_dir(next(iter(args.adapter_paths().values())))
    output_dir = Path(args.output_dir) if args.output_dir else default_output_dir(adapter_dir)
    if output_dir.exists():
        raise UsageError(f"--output_dir {output_dir} already exists; remove it or choose another directory")
    resolved = resolve_model(args.model, args.model_type, args.use_hf, args.model_revision)
    tokenizer = load_tokenizer(resolved)
    template = get_template(args.template or resolved.meta.template, tokenizer, args.system)
    start = time.time()
    base = base_model_class(adapter_dir).from_pretrained(resolved.model_dir, dtype=pick_dtype(args.torch_dtype, "cpu"),
                                                         **({"num_labels": 1} if is_seq_cls_adapter(adapter_dir) else {}))
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    staging = output_dir.parent / f".{output_dir.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        merged.save_pretrained(staging, max_shard_size=args.max_shard_size)
        tokenizer.save_pretrained(staging)
        atomic_write_json(staging / "args.json", {
            "model": str(output_dir.resolve()), "model_type": resolved.model_type, "template": template.meta.name,
            "system": args.system, "merged_from": {"model": args.model, "adapter": str(adapter_dir)},
            "command": "export"})
        os.replace(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in output_dir.iterdir() if f.is_file())
    print(f"merged {adapter_dir} into {resolved.model_id}\n"
          f"  output      {output_dir}\n"
          f"  size        {size / 2**20:.1f} MiB\n"
          f"  elapsed     {time.time() - start:.1f} s\n"
          f"  use it      swiftlike infer --model {output_dir} --infer_backend vllm", flush=True)
    return output_dir
