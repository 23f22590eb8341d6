"""Delta weight sync: after one full sync, send only the elements whose value in the engine's dtype changed.

Both sides keep the weights as the engine holds them after the last sync (`SyncedWeights`: HF names, the
engine's dtype, CPU). The trainer casts its new weights to that dtype and compares *bit patterns* with its
copy (integer views, so NaN == NaN when the bits agree, -0.0 != +0.0, and a change too small to survive the
cast to bf16 is no change at all); the receiver writes the sent bits into its own copy, also through integer
views, so the patched copy equals the new weights bit for bit, and the engine then loads whole tensors from
it. Why whole tensors: vLLM's CPU linear layers keep their weights prepacked (oneDNN handles, the parameter
itself is empty), and its in-place reload of a fused layer (qkv, gate_up) from only some of its inputs
leaves the others unset, so there is no engine tensor to patch in place; the saving is on the wire.

Per tensor, with n elements of e bytes and k of them changed, the smallest of three encodings is sent:
  - indices: k int32 flat positions (int64 past 2^31 elements) + k values    k * (4 + e) bytes
  - bitmask: one bit per element (little-endian bit order) + k values         ceil(n / 8) + k * e bytes
  - dense:   the whole tensor                                                  n * e bytes
so indices win below a density of 1/32 and the bitmask from there up to 1 - 1/(8e) (93.75 % in bf16,
96.9 % in fp32), above which the tensor goes whole; an unchanged tensor sends nothing. SLIME's delta sync
(`--update-weight-mode delta`, THUDM/slime #1806) also diffs bytes against a CPU snapshot of the last
broadcast and sends positions + values, with int32 absolute positions or uint16 gaps (optionally zstd); we
add the bitmask because full fine-tuning in fp32 changes most elements every step, where positions cost
more than the values; verl syncs full weights only.

On the wire a tensor's delta is safetensors entries named after it: `NAME` (dense), or
`NAME.__delta_indices__` / `NAME.__delta_bitmask__` with `NAME.__delta_values__`, so every transport that
carries safetensors-shaped buckets carries deltas unchanged.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

SUFFIXES = {"indices": ".__delta_indices__", "bitmask": ".__delta_bitmask__", "values": ".__delta_values__"}
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_BIT_WEIGHTS = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8)


class DeltaError(ValueError):
    """A delta that does not fit the tensor it names; the receiver refuses the whole update."""


def bits(t: torch.Tensor) -> torch.Tensor:
    """A flat integer view of a contiguous tensor's storage: compares and copies bit patterns exactly."""
    if not t.is_contiguous():
        raise DeltaError("delta sync needs contiguous tensors")
    return t.reshape(-1).view(_BITS[t.element_size()])


def split_name(entry: str) -> tuple[str, str]:
    """`NAME.__delta_values__` -> (`NAME`, "values"); a plain name is a dense tensor."""
    for part, suffix in SUFFIXES.items():
        if entry.endswith(suffix):
            return entry[:-len(suffix)], part
    return entry, "dense"


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Bool [n] -> uint8 [ceil(n / 8)]; element i is bit i % 8 of byte i // 8."""
    padded = torch.zeros(-(-mask.numel() // 8) * 8, dtype=torch.uint8)
    padded[:mask.numel()] = mask
    return (padded.view(-1, 8) * _BIT_WEIGHTS).sum(1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, n: int) -> torch.Tensor:
    return ((packed[:, None] & _BIT_WEIGHTS) != 0).reshape(-1)[:n]


def encoded_sizes(n: int, k: int, element_size: int) -> dict[str, int]:
    """Bytes each encoding takes for k changed elements out of n."""
    index_size = 4 if n < 2 ** 31 else 8
    return {"indices": k * (index_size + element_size), "bitmask": -(-n // 8) + k * element_size,
            "dense": n * element_size}


def encode(name: str, old: torch.Tensor, new: torch.Tensor) -> tuple[dict[str, torch.Tensor], int]:
    """The entries that turn `old` into `new` (same shape and dtype; none when every bit agrees), and how many
    elements changed."""
    if old.shape != new.shape or old.dtype != new.dtype:
        raise DeltaError(f"{name}: delta between {old.dtype} {list(old.shape)} and {new.dtype} {list(new.shape)}")
    new_bits = bits(new)
    changed = bits(old) != new_bits
    k = int(changed.sum())
    if k == 0:
        return {}, 0
    sizes = encoded_sizes(new.numel(), k, new.element_size())
    encoding = min(sizes, key=lambda e: (sizes[e], e != "dense"))  # on a tie the simplest: dense
    if encoding == "dense":
        return {name: new}, k
    values = new.reshape(-1)[changed]
    if encoding == "indices":
        positions = changed.nonzero()[:, 0].to(torch.int32 if new.numel() < 2 ** 31 else torch.int64)
        return {name + SUFFIXES["indices"]: positions, name + SUFFIXES["values"]: values}, k
    return {name + SUFFIXES["bitmask"]: pack_bits(changed), name + SUFFIXES["values"]: values}, k


def group(entries: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Bucket entries by the tensor they patch: {NAME: {"dense" | "indices" | "bitmask" | "values": t}}."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for entry, t in entries.items():
        name, part = split_name(entry)
        out.setdefault(name, {})[part] = t
    return out


def check(name: str, old: torch.Tensor | None, parts: dict[str, torch.Tensor]) -> None:
    """Raise DeltaError unless `parts` is one well-formed encoding of a change to `old` (before any is applied)."""
    kinds = set(parts)
    if kinds == {"dense"}:
        if old is not None and (parts["dense"].shape != old.shape or parts["dense"].dtype != old.dtype):
            raise DeltaError(f"{name}: dense delta of {parts['dense'].dtype} {list(parts['dense'].shape)} for a "
                             f"{old.dtype} {list(old.shape)} tensor")
        return
    if old is None:
        raise DeltaError(f"{name}: a sparse delta needs the tensor's previous value, which was never synced")
    if kinds not in ({"indices", "values"}, {"bitmask", "values"}):
        raise DeltaError(f"{name}: a delta is the tensor, or indices or bitmask with values; got {sorted(kinds)}")
    values = parts["values"]
    if values.dtype != old.dtype or values.dim() != 1:
        raise DeltaError(f"{name}: delta values are {values.dtype} {list(values.shape)}, the tensor is {old.dtype}")
    n = old.numel()
    if "indices" in parts:
        positions = parts["indices"]
        if positions.dtype not in (torch.int32, torch.int64) or positions.shape != values.shape:
            raise DeltaError(f"{name}: {positions.dtype} {list(positions.shape)} indices for {values.numel()} values")
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= n):
            raise DeltaError(f"{name}: delta indices outside [0, {n})")
        return
    mask = parts["bitmask"]
    if mask.dtype != torch.uint8 or mask.shape != (-(-n // 8),):
        raise DeltaError(f"{name}: bitmask of {mask.dtype} {list(mask.shape)} for {n} elements")
    count = int(unpack_bits(mask, n).sum())
    if count != values.numel():
        raise DeltaError(f"{name}: bitmask marks {count} elements but {values.numel()} values came")


def apply(old: torch.Tensor, parts: dict[str, torch.Tensor]) -> None:
    """Patch `old` in place with a checked delta; afterwards it equals the encoded tensor bit for bit."""
    target = bits(old)
    if "dense" in parts:
        target.copy_(bits(parts["dense"].contiguous()))
    elif "indices" in parts:
        target[parts["indices"].long()] = bits(parts["values"].contiguous())
    else:
        target[unpack_bits(parts["bitmask"], old.numel())] = bits(parts["values"].contiguous())


def nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class SyncStats:
    """What one sync sent: bytes on the wire, and changed / total elements (a full sync changes all)."""

    bytes: int = 0
    changed: int = 0
    total: int = 0

    @property
    def density(self) -> float:
        return self.changed / self.total if self.total else 0.0

    def metrics(self, delta: bool) -> dict[str, float]:
        out = {"sync/bytes": float(self.bytes)}
        if delta:
            out["sync/delta_density"] = self.density
        return out


class SyncedWeights:
    """The weights as the engine holds them after the last sync (HF names, engine dtype, contiguous, CPU).

    Memory: one more copy of the model in the engine's dtype (SmolLM2-135M: 270 MB in bf16), on the trainer
    and, when a trainer asks for delta sync, on each rollout server.
    """

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    @classmethod
    def copy_of(cls, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> SyncedWeights:
        return cls({n: t.detach().to("cpu", copy=True).contiguous() for n, t in named_tensors})

    @classmethod
    def kept_from(cls, received: dict[str, torch.Tensor]) -> SyncedWeights:
        """Server side, from a full update's tensors: CPU ones (views of the HTTP bodies or bucket files) are kept
        as they are; GPU ones (views of the NCCL broadcast buffers) are copied to CPU, since holding them would
        keep a second model in GPU memory beside vLLM's."""
        return cls({n: t if t.device.type == "cpu" else t.detach().to("cpu").contiguous() for n, t in received.items()})

    def advance(self, name: str, new: torch.Tensor, stats: SyncStats) -> dict[str, torch.Tensor]:
        """Trainer side: the delta from the synced value of `name` to `new`, applied here too; counts it."""
        new = new.detach().to("cpu").contiguous()
        old = self.tensors.get(name)
        if old is None or old.shape != new.shape or old.dtype != new.dtype:
            self.tensors[name] = new.clone()
            entries = {name: new}
            stats.changed += new.numel()
        else:
            entries, changed = encode(name, old, new)
            for parts in group(entries).values():
                apply(old, parts)
            stats.changed += changed
        stats.total += new.numel()
        stats.bytes += nbytes(entries.values())
        return entries

    def patch(self, entries: dict[str, torch.Tensor]) -> list[str]:
        """Receiver side: check every delta first, then apply them all; returns the names that changed."""
        grouped = {name: {part: t.to("cpu") for part, t in parts.items()}  # NCCL delivers them on the GPU
                   for name, parts in group(entries).items()}
        for name, parts in grouped.items():
            check(name, self.tensors.get(name), parts)
        for name, parts in grouped.items():
            if name not in self.tensors:
                self.tensors[name] = parts["dense"].detach().to("cpu", copy=True).contiguous()
            else:
                apply(self.tensors[name], parts)
        return list(grouped)

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self.tensors.items())
