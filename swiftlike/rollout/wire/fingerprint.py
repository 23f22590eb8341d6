"""A cheap fingerprint of a model's weights, so a trainer can tell whether a rollout server serves the base
model it trains on before it pushes only a LoRA adapter on top of it.

The one definition, used by the server (over its checkpoint at load, and over each committed full update)
and by the trainer (over its own base weights):

- A tensor's digest is sha256 over its name, its shape, and `SAMPLES_PER_TENSOR` values taken at fixed,
  evenly spaced flat indices (first and last included; every value if it has fewer), each cast to the
  *serving* dtype and then to float32, as little-endian bytes.
- `lm_head.*` is left out: a tied head is absent from the checkpoint but present in some trainers' views.
- The fingerprint is sha256 over the sorted names with their digests; the layout is sha256 over the sorted
  names with their shapes only (equal layouts: the same architecture and sizes, so a full update fits).

Casting to the serving dtype first makes a bf16 server and an fp32 trainer of the same checkpoint agree.
It is a sample, not a checksum: training moves nearly every value, so any update changes it, but one value
edited off the sampled grid would not.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

SAMPLES_PER_TENSOR = 256
EXCLUDED_PREFIXES = ("lm_head.",)
SERVING_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def fingerprinted(name: str) -> bool:
    return not name.startswith(EXCLUDED_PREFIXES)


def sample_indices(numel: int, samples: int = SAMPLES_PER_TENSOR) -> torch.Tensor:
    """Evenly spaced flat indices, integer arithmetic only so both sides pick the same ones."""
    if numel <= samples:
        return torch.arange(numel)
    return torch.arange(samples, dtype=torch.int64) * (numel - 1) // (samples - 1)


def tensor_digest(name: str, tensor: torch.Tensor, serving_dtype: str) -> str:
    if serving_dtype not in SERVING_DTYPES:
        raise ValueError(f"serving dtype must be one of {sorted(SERVING_DTYPES)}, got {serving_dtype!r}")
    flat = tensor.detach().reshape(-1)
    values = flat[sample_indices(flat.numel()).to(flat.device)]
    if values.is_floating_point():
        values = values.to(SERVING_DTYPES[serving_dtype])
    values = values.to(device="cpu", dtype=torch.float32).contiguous()
    h = hashlib.sha256()
    h.update(name.encode())
    h.update(json.dumps(list(tensor.shape)).encode())
    h.update(values.numpy().astype("<f4").tobytes())
    return h.hexdigest()


def combine(digests: dict[str, str]) -> str:
    return hashlib.sha256("\n".join(f"{n} {digests[n]}" for n in sorted(digests)).encode()).hexdigest()


def layout(shapes: dict[str, tuple[int, ...]]) -> str:
    return hashlib.sha256("\n".join(f"{n} {list(shapes[n])}" for n in sorted(shapes)).encode()).hexdigest()


@dataclass(frozen=True)
class WeightsFingerprint:
    """Per-tensor digests and shapes of a set of weights; immutable, so a reader never sees a half update."""

    digests: dict[str, str]
    shapes: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, named_tensors: Iterable[tuple[str, torch.Tensor]], serving_dtype: str) -> WeightsFingerprint:
        digests, shapes = {}, {}
        for name, tensor in named_tensors:
            if fingerprinted(name):
                digests[name] = tensor_digest(name, tensor, serving_dtype)
                shapes[name] = tuple(tensor.shape)
        return cls(digests, shapes)

    def updated(self, named_tensors: Iterable[tuple[str, torch.Tensor]], serving_dtype: str) -> WeightsFingerprint:
        """After a (possibly partial) full-weight update: the received tensors replace their digests."""
        new = WeightsFingerprint.of(named_tensors, serving_dtype)
        return WeightsFingerprint({**self.digests, **new.digests}, {**self.shapes, **new.shapes})

    @property
    def fingerprint(self) -> str:
        return combine(self.digests)

    @property
    def layout(self) -> str:
        return layout(self.shapes)


def checkpoint_fingerprint(model_dir: str | Path, serving_dtype: str) -> WeightsFingerprint:
    """The fingerprint of a HF safetensors checkpoint as a server loads it (one tensor in memory at a time)."""
    from safetensors import safe_open

    def tensors():
        for path in sorted(Path(model_dir).glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    if fingerprinted(name):  # an untied head is the largest tensor: not read at all
                        yield name, handle.get_tensor(name)
    return WeightsFingerprint.of(tensors(), serving_dtype)
