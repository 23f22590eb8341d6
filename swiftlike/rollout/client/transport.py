"""How weights travel from the trainer to rollout servers: one interface, three ways.

- http: each bucket as safetensors bytes in a POST body. Works on CPU and across hosts; costs an encode,
  a socket copy and a decode.
- path: each bucket written as a safetensors file under a directory both sides see (/dev/shm on one
  host, or a shared filesystem); only the path crosses HTTP and the server maps the file.
- nccl / gloo: the trainer broadcasts flat buckets to all servers in one collective group (collective.py);
  nccl moves GPU memory directly, gloo is the same path on CPU.

A delta update (delta.py) is safetensors entries too, so each transport carries it as it carries full
buckets; the collective ones broadcast a bucket's bytes, whatever the dtypes of its entries.

LoRA adapters are small: http sends their bytes, path shares a directory, and the collective transports
send them over http.
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from ..wire.buckets import TORCH_DTYPE_NAMES, pack


def cast(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors as the server holds them: its dtype, contiguous, on CPU (or the GPU they are on, for nccl)."""
    target = TORCH_DTYPE_NAMES.get(dtype)
    for name, tensor in named_tensors:
        t = tensor.detach().to("cpu" if tensor.device.type != "cuda" else tensor.device)
        if target is not None and t.is_floating_point():
            t = t.to(target)
        yield name, t.contiguous()


def group(pieces: Iterable[dict[str, torch.Tensor]], bucket_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    """Pieces (a tensor, or the entries of one tensor's delta, which stay together) grouped so a bucket stays
    under `bucket_bytes` (a piece larger than that travels alone)."""
    bucket: dict[str, torch.Tensor] = {}
    size = 0
    for piece in pieces:
        nbytes = sum(t.numel() * t.element_size() for t in piece.values())
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket.update(piece)
        size += nbytes
    if bucket:
        yield bucket


def buckets(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: str, bucket_bytes: int
            ) -> Iterator[dict[str, torch.Tensor]]:
    """Whole tensors cast to the server's dtype, in buckets of at most `bucket_bytes`."""
    return group(({name: t} for name, t in cast(named_tensors, dtype)), bucket_bytes)


def _adapter_bytes(adapter_dir: str | Path) -> bytes:
    """An adapter as one safetensors buffer with its adapter_config.json in the metadata."""
    from safetensors.torch import load_file, save
    adapter_dir = Path(adapter_dir)
    config = (adapter_dir / "adapter_config.json").read_text()
    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} not found; save the adapter with safetensors (PEFT's default)")
    return save(load_file(str(weights)), metadata={"adapter_config": config})


class HttpTransport:
    name = "http"

    def __init__(self, bucket_bytes: int):
        self.bucket_bytes = bucket_bytes

    def send(self, clients, update_ids: list[str], tensors: dict[str, torch.Tensor]) -> None:
        data = pack(tensors)
        for client, update_id in zip(clients, update_ids):
            client.post("/update_weights/bucket", params={"update_id": update_id}, data=data,
                        headers={"content-type": "application/octet-stream"})

    def send_adapter(self, clients, name: str, adapter_dir: str) -> list[int]:
        data = _adapter_bytes(adapter_dir)
        return [c.post("/load_adapter", params={"name": name}, data=data,
                       headers={"content-type": "application/octet-stream"})["policy_version"] for c in clients]

    def after_update(self) -> None:
        pass

    def close(self) -> None:
        pass


def default_shared_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


class PathTransport:
    """Buckets as files in a directory the server can read; removed once the update is committed."""

    name = "path"

    def __init__(self, bucket_bytes: int, root: str | None):
        self.bucket_bytes = bucket_bytes
        self.root = Path(root) if root else default_shared_dir()
        if not self.root.is_dir():
            raise ValueError(f"--weight_sync_path {self.root} is not a directory")
        self.dir = Path(tempfile.mkdtemp(prefix=f"swiftlike-weights-{uuid.uuid4().hex[:8]}-", dir=self.root))
        self._count = itertools.count()
        self._adapters: list[Path] = []

    def send(self, clients, update_ids: list[str], tensors: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file
        path = self.dir / f"bucket-{next(self._count):06d}.safetensors"
        partial = path.with_suffix(".partial")
        save_file({n: t.cpu() for n, t in tensors.items()}, str(partial))
        partial.rename(path)  # the server never sees a half-written bucket
        for client, update_id in zip(clients, update_ids):
            client.post("/update_weights/bucket_path", json={"update_id": update_id, "path": str(path)})

    def send_adapter(self, clients, name: str, adapter_dir: str) -> list[int]:
        shared = self.dir / f"adapter-{next(self._count):06d}"
        shutil.copytree(adapter_dir, shared)
        self._adapters.append(shared)
        while len(self._adapters) > 2:  # vLLM may still read the previous one lazily
            shutil.rmtree(self._adapters.pop(0), ignore_errors=True)
        return [c.post("/load_adapter", json={"name": name, "path": str(shared)})["policy_version"]
                for c in clients]

    def after_update(self) -> None:
        for f in self.dir.glob("bucket-*"):
            f.unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class CollectiveTransport(HttpTransport):
    """Full weights by broadcast (NCCL or gloo); adapters over HTTP. The group is set up on first use."""

    def __init__(self, bucket_bytes: int, backend: str):
        super().__init__(bucket_bytes)
        self.name = backend
        self.backend = backend
        self._sender = None

    def send(self, clients, update_ids: list[str], tensors: dict[str, torch.Tensor]) -> None:
        from ..wire.collective import CollectiveSender
        if self._sender is None:
            self._sender = CollectiveSender(clients, self.backend)
        self._sender.send(clients, update_ids, tensors)


def make_transport(name: str, bucket_mb: int, shared_path: str | None):
    """`auto` is nccl when CUDA is here (servers then have GPUs too), else http."""
    bucket_bytes = bucket_mb << 20
    if name == "auto":
        name = "nccl" if torch.cuda.is_available() else "http"
    if name == "http":
        return HttpTransport(bucket_bytes)
    if name == "path":
        return PathTransport(bucket_bytes, shared_path)
    if name in ("nccl", "gloo"):
        return CollectiveTransport(bucket_bytes, name)
    raise ValueError(f"--weight_transport must be auto, http, path, nccl or gloo, got {name!r}")
