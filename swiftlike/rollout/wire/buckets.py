"""Server side of a weight update: buckets are checked as they arrive and applied together at commit.

A trainer sends its weights in buckets (so neither side holds two full copies in flight) and then commits.
Every bucket is checked against the names and shapes of the served checkpoint the moment it arrives; one
bad bucket poisons the whole update, and nothing reaches the engine before commit. So the engine never
serves a half-updated model, and a rejected update leaves the previous weights serving.

A delta update (delta.py) carries the changed elements of some tensors instead of whole tensors; its
entries are checked against the same shapes (a part named after an unknown tensor, or longer than the
tensor, poisons it too), and it names the weights it was computed against (`delta_base`).
"""
from __future__ import annotations

import functools
import json
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...rl.core.options import WeightSync
from .delta import split_name

# safetensors' dtype names, as the header of a bucket states them
SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
                      "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}
TORCH_DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# what a bucket's tensors may be: engine dtypes, and the positions and bitmasks of a delta
BUCKET_DTYPES = {**TORCH_DTYPE_NAMES, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}


def pack(tensors: dict[str, torch.Tensor]) -> bytearray:
    """Tensors as one safetensors buffer, written with a single copy per tensor.

    Why not `safetensors.torch.save`: it goes through extra intermediate copies and took 1.3 s for
    SmolLM2's 513 MiB here against 0.3 s for this; the bytes are the same format, so either side may
    use the library.
    """
    names = {v: k for k, v in SAFETENSORS_DTYPES.items()}
    header, offset = {}, 0
    for name, t in tensors.items():
        size = t.numel() * t.element_size()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    buf = bytearray(8 + len(blob) + offset)
    buf[:8] = len(blob).to_bytes(8, "little")
    buf[8:8 + len(blob)] = blob
    view = memoryview(buf)
    start = 8 + len(blob)
    for name, t in tensors.items():
        a, b = header[name]["data_offsets"]
        if b > a:
            view[start + a:start + b] = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return buf


def unpack(buf: bytes | bytearray) -> dict[str, torch.Tensor]:
    """Tensors viewing a safetensors buffer in place (no copy); they keep the buffer alive."""
    if isinstance(buf, bytes):
        buf = bytearray(buf)  # torch tensors need a writable buffer
    header = read_header(bytes(buf[:8 + int.from_bytes(buf[:8], "little")]))
    start = 8 + int.from_bytes(buf[:8], "little")
    out = {}
    for name, spec in header.items():
        dtype = SAFETENSORS_DTYPES.get(spec.get("dtype"))
        a, b = spec.get("data_offsets", (0, -1))
        shape = spec.get("shape")
        if dtype is None or not isinstance(shape, list) or start + b > len(buf) or b < a:
            raise WeightUpdateError(f"bucket entry {name!r} is malformed (dtype {spec.get('dtype')!r}, "
                                    f"offsets {a}..{b} in a {len(buf)}-byte body)")
        count = (b - a) // torch.empty(0, dtype=dtype).element_size()
        if count != torch.Size(shape).numel():
            raise WeightUpdateError(f"bucket entry {name!r}: {b - a} bytes do not hold shape {shape}")
        out[name] = torch.frombuffer(buf, dtype=dtype, count=count, offset=start + a).view(shape) if count else \
            torch.empty(shape, dtype=dtype)
    return out


class WeightUpdateError(ValueError):
    """A bucket or commit the server refuses; the message says what was wrong (sent back as a 4xx)."""


def checkpoint_shapes(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of a HF checkpoint, read from the safetensors headers (no tensor data)."""
    from safetensors import safe_open
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}; the rollout server checks weight "
                                "updates against the served checkpoint's tensors")
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


def read_header(data: bytes | Path) -> dict[str, dict]:
    """The JSON header of a safetensors buffer or file: {name: {"dtype", "shape", ...}}."""
    if isinstance(data, Path):
        with data.open("rb") as f:
            raw = f.read(8)
    else:
        raw = bytes(data[:8])
    if len(raw) < 8:
        raise WeightUpdateError("a weight bucket must be a safetensors file; got fewer than 8 bytes")
    size = int.from_bytes(raw, "little")
    if isinstance(data, Path):
        with data.open("rb") as f:
            f.seek(8)
            blob = f.read(size)
    else:
        blob = bytes(data[8:8 + size])
    try:
        header = json.loads(blob)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise WeightUpdateError("a weight bucket must be a safetensors file; its header is not valid JSON") from None
    header.pop("__metadata__", None)
    return header


@dataclass
class PendingUpdate:
    """One update in progress: tensors received so far, or the reason it was rejected."""

    update_id: str
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # shared-path buckets, read at commit
    names: set[str] = field(default_factory=set)
    error: str | None = None
    delta_base: str | None = None  # a delta update: the weights id it was computed against
    # the trainer's --weight_sync: under delta, the server keeps a copy of a full update for the deltas after it
    weight_sync: WeightSync = "full"


def _locked(method):
    """Buckets arrive on HTTP worker threads while commit runs on the engine thread."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return wrapper


class WeightStager:
    """Checks incoming buckets against the served checkpoint and hands a complete update to the engine."""

    def __init__(self, expected_shapes: dict[str, tuple[int, ...]]):
        self.expected = expected_shapes
        self.lock = threading.RLock()
        self.pending: PendingUpdate | None = None
        self.committed: dict[str, dict] = {}  # update id -> its commit's answer (a retried commit gets it again)

    @_locked
    def begin(self, delta_base: str | None = None, weight_sync: WeightSync = "full") -> str:
        """Start an update; an unfinished one (a trainer that died mid-update) is dropped."""
        self.pending = PendingUpdate(uuid.uuid4().hex, delta_base=delta_base, weight_sync=weight_sync)
        return self.pending.update_id

    def _update(self, update_id: str) -> PendingUpdate:
        if self.pending is None or self.pending.update_id != update_id:
            raise WeightUpdateError(f"no open weight update {update_id!r}; start one with /update_weights/begin")
        return self.pending

    def check(self, update: PendingUpdate, shapes: dict[str, tuple[int, ...]]) -> None:
        """Reject the whole update on the first unknown name or wrong shape."""
        problems = [p for p in (self.problem(name, shape, update.delta_base is not None)
                                for name, shape in shapes.items()) if p]
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            update.error = "; ".join(problems[:3]) + more
            raise WeightUpdateError(f"weight update rejected, the previous weights keep serving: {update.error}")
        update.names.update(shapes)

    def problem(self, name: str, shape: tuple[int, ...], delta: bool) -> str | None:
        """What is wrong with an entry of this shape, or None."""
        tensor, part = split_name(name) if delta else (name, "dense")
        want = self.expected.get(tensor)
        if want is None:
            return f"unknown tensor {tensor!r}"
        if part == "dense":
            return None if tuple(shape) == want else (f"{name!r} has shape {list(shape)}, the served model's is "
                                                      f"{list(want)}")
        numel = torch.Size(want).numel()
        length = -(-numel // 8) if part == "bitmask" else None
        if len(shape) != 1 or shape[0] > numel or (length is not None and shape[0] != length):
            return f"{name!r} of shape {list(shape)} is no {part} of a delta for {list(want)}"
        return None

    @_locked
    def add_bytes(self, update_id: str, data: bytes | bytearray) -> int:
        """An HTTP bucket: safetensors bytes, checked from the header before any tensor is decoded."""
        update = self._live(update_id)
        header = read_header(data)
        self.check(update, {n: tuple(v["shape"]) for n, v in header.items()})
        update.tensors.update(unpack(data))
        return len(header)

    @_locked
    def add_file(self, update_id: str, path: Path) -> int:
        """A shared-path bucket: checked now, read at commit (it stays on the shared filesystem until then)."""
        update = self._live(update_id)
        if not path.is_file():
            raise WeightUpdateError(f"bucket file {path} does not exist on the rollout server; the shared path "
                                    "transport needs a directory both machines see (e.g. /dev/shm on one host)")
        header = read_header(path)
        self.check(update, {n: tuple(v["shape"]) for n, v in header.items()})
        update.files.append(path)
        return len(header)

    @_locked
    def add_tensors(self, update_id: str, tensors: dict[str, torch.Tensor]) -> int:
        """A collective bucket, received straight into tensors (shapes were checked from its announcement)."""
        update = self._live(update_id)
        update.tensors.update(tensors)
        return len(tensors)

    @_locked
    def check_announced(self, update_id: str, shapes: dict[str, tuple[int, ...]]) -> None:
        """A collective bucket is checked from its announcement, before the tensors travel."""
        self.check(self._live(update_id), shapes)

    def _live(self, update_id: str) -> PendingUpdate:
        update = self._update(update_id)
        if update.error is not None:
            raise WeightUpdateError(f"weight update already rejected ({update.error}); start a new one")
        return update

    @_locked
    def take(self, update_id: str) -> tuple[PendingUpdate, dict[str, torch.Tensor]]:
        """The update and everything it carries, for the engine; the update is closed either way."""
        from safetensors.torch import load_file
        update = self._update(update_id)
        self.pending = None
        if update.error is not None:
            raise WeightUpdateError(f"weight update rejected, the previous weights keep serving: {update.error}")
        tensors = dict(update.tensors)
        for path in update.files:
            if not path.is_file():
                raise WeightUpdateError(f"bucket file {path} vanished before commit; nothing was applied")
            tensors.update(load_file(str(path)))
        delta = update.delta_base is not None
        if not tensors and not delta:  # a delta where nothing changed is empty
            raise WeightUpdateError("weight update has no tensors; send at least one bucket before commit")
        wrong = [n for n, t in tensors.items() if self.problem(n, tuple(t.shape), delta)]
        if wrong:  # a shared file rewritten after its check, or a collective bucket that differs from its notice
            raise WeightUpdateError(f"weight update rejected, the previous weights keep serving: {wrong[:3]} "
                                    "do not match the served model's shapes")
        return update, tensors

    @_locked
    def abort(self, update_id: str) -> None:
        if self.pending is not None and self.pending.update_id == update_id:
            self.pending = None
