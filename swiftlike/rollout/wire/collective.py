"""Collective weight transport: the trainer broadcasts buckets to every rollout server in one group.

NCCL moves GPU tensors device to device; gloo is the same path on CPU tensors (and what the CPU test
suite runs). The group is a standalone ProcessGroup over a TCPStore the trainer hosts (rank 0, the
servers ranks 1..N), built apart from torch's default group, which the trainer's own data parallelism
and vLLM's in-process workers already use. A bucket travels as one flat byte tensor: the server is told
names, shapes and dtypes first (and checks them), then the broadcast fills it; each tensor is a view of
its bytes. Bytes rather than one dtype, so a delta's int32 positions and uint8 bitmasks travel beside its
values in the same broadcast.
"""
from __future__ import annotations

import datetime
import socket
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from ...utils.net import free_port
from .buckets import BUCKET_DTYPES, WeightStager, WeightUpdateError

GROUP_TIMEOUT = datetime.timedelta(minutes=10)


def _process_group(store, rank: int, world_size: int, backend: str):
    import torch.distributed as dist
    prefixed = dist.PrefixStore("swiftlike-weights", store)
    if backend == "nccl":
        return dist.ProcessGroupNCCL(prefixed, rank, world_size)
    if backend == "gloo":
        return dist.ProcessGroupGloo(prefixed, rank, world_size, GROUP_TIMEOUT)
    raise ValueError(f"collective backend must be nccl or gloo, got {backend!r}")


def _byte_layout(nbytes: list[int]) -> tuple[list[int], int]:
    """Each tensor's offset in a bucket's bytes (8-aligned, so every part views as its own dtype), and the total."""
    offsets, end = [], 0
    for n in nbytes:
        offsets.append(end)
        end += -(-n // 8) * 8
    return offsets, end


def _broadcast(group, tensor: torch.Tensor) -> None:
    import torch.distributed as dist
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    group.broadcast([tensor], opts).wait()


class CollectiveReceiver:
    """Server side: joins the trainer's group and receives announced buckets on its own thread."""

    def __init__(self, stager: WeightStager):
        self.stager = stager
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="swiftlike-collective")
        self._group: Future | None = None
        self._device = "cpu"
        self._received: list[Future] = []

    def connect(self, host: str, port: int, world_size: int, rank: int, backend: str) -> None:
        """Start joining; returns at once because joining blocks until the trainer joins too."""
        import torch.distributed as dist
        if backend == "nccl" and not torch.cuda.is_available():
            raise ValueError("the nccl weight transport needs a GPU on the rollout server; use http or path")
        self._device = "cuda" if backend == "nccl" else "cpu"

        def join():
            store = dist.TCPStore(host, port, world_size, is_master=False, timeout=GROUP_TIMEOUT)
            return _process_group(store, rank, world_size, backend)
        self._group = self._thread.submit(join)

    def receive(self, update_id: str, specs: list[tuple[str, tuple[int, ...], str]]) -> None:
        if self._group is None:
            raise WeightUpdateError("no collective group; call /update_weights/init_collective first")
        unknown = sorted({d for _, _, d in specs} - set(BUCKET_DTYPES))
        if unknown:
            raise WeightUpdateError(f"a collective bucket carries tensors of {sorted(BUCKET_DTYPES)}; got {unknown}")
        dtypes = [BUCKET_DTYPES[d] for _, _, d in specs]

        def run():
            sizes = [int(torch.Size(shape).numel()) * torch.empty(0, dtype=dtype).element_size()
                     for (_, shape, _), dtype in zip(specs, dtypes)]
            offsets, total = _byte_layout(sizes)
            flat = torch.empty(total, dtype=torch.uint8, device=self._device)
            _broadcast(self._group.result(), flat)
            self.stager.add_tensors(update_id, {
                name: flat[start:start + size].view(dtype).view(shape)
                for (name, shape, _), dtype, start, size in zip(specs, dtypes, offsets, sizes)})
        self._received.append(self._thread.submit(run))

    def wait_received(self) -> None:
        """Before commit: every announced bucket has arrived (or its error is raised here)."""
        received, self._received = self._received, []
        for f in received:
            f.result()

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


def local_address_towards(host: str) -> str:
    """The address of this machine that `host` can reach (the route's source address), for the TCPStore."""
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # UDP connect sends nothing; it only picks the route
        return s.getsockname()[0]


class CollectiveSender:
    """Trainer side: hosts the group's store as rank 0 and broadcasts each bucket to all servers at once."""

    def __init__(self, clients, backend: str):
        import torch.distributed as dist
        if backend == "nccl" and not torch.cuda.is_available():
            raise ValueError("--weight_transport nccl needs a GPU on the trainer; use http, path or gloo")
        self.backend = backend
        self.device = "cuda" if backend == "nccl" else "cpu"
        world_size = len(clients) + 1
        host = local_address_towards(clients[0].host)
        port = free_port("")  # the servers connect from their own machines
        store = dist.TCPStore(host, port, world_size, is_master=True, timeout=GROUP_TIMEOUT,
                              wait_for_workers=False)  # the servers join after they are told where
        for rank, client in enumerate(clients, start=1):
            client.post("/update_weights/init_collective", json={"host": host, "port": port,
                                                                 "world_size": world_size, "rank": rank,
                                                                 "backend": backend})
        self.group = _process_group(store, 0, world_size, backend)
        self._store = store

    def send(self, clients, update_ids: list[str], tensors: dict[str, torch.Tensor]) -> None:
        specs = [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
                 for n, t in tensors.items()]
        for client, update_id in zip(clients, update_ids):
            client.post("/update_weights/bucket_collective", json={"update_id": update_id, "tensors": specs})
        parts = [t.contiguous().reshape(-1).view(torch.uint8) for t in tensors.values()]
        offsets, total = _byte_layout([p.numel() for p in parts])
        flat = torch.zeros(total, dtype=torch.uint8, device=self.device)
        for start, part in zip(offsets, parts):
            flat[start:start + part.numel()].copy_(part)
        _broadcast(self.group, flat)
