"""`swiftlike rlhf --use_ray true`: place a job's roles on Ray, run them, and stop them all however it ends.

Placement (the YAML's `colocate_groups`, arguments/ray_args.py):

- train + rollout colocated: each train worker runs its own vLLM engine in its process (colocate mode), on its
  bundle's device; weights go to the engine in memory every step.
- rollout separate: `rollout.gpus / vllm_tensor_parallel_size` replicas, each a `swiftlike rollout` server in an
  actor on its own bundle; the train workers are server-mode trainers that spread their prompts over the
  replicas and push weights to them (full or LoRA-only, over the --weight_transport transports).
- teacher (gkd): colocated means the in-process teacher on the train workers; a separate `teacher:` group is
  replicas of the teacher model answering top-k prompt log-probs.

The driver watches every actor while the trainers run. A replica or worker that dies stops the run within
`HEALTH_PERIOD_S` + `HEALTH_TIMEOUT_S` seconds with an error naming the role and replica, and every actor and
placement group is removed on the way out, so nothing is left running and nothing hangs.
"""
from __future__ import annotations

import dataclasses
import secrets
import time
import uuid

from ..arguments.ray_args import RayJob
from ..train.run import TrainResult
from ..utils import get_logger
from . import cluster as ray_cluster
from .actors import RolloutReplica, TrainWorker

logger = get_logger("swiftlike.ray")

HEALTH_PERIOD_S = 5.0
HEALTH_TIMEOUT_S = 30.0
REPLICA_START_TIMEOUT_S = 600.0


class RoleFailed(RuntimeError):
    """A role's actor died or raised; the message names the role."""


class Slots:
    """The job's device slots in placement order (train ranks, then rollout replicas, then teacher replicas): what
    each actor asks Ray for, and the cores it pins itself to where `Cluster.core_sets` gives them."""

    def __init__(self, cluster: ray_cluster.Cluster, count: int):
        self.cluster = cluster
        self.cpus = cluster.slot_cpus(count)
        self._cores = cluster.core_sets(count)
        self._next = 0

    def resources(self, devices: int = 1) -> dict[str, float]:
        return ray_cluster.actor_resources(self.cluster, devices, self.cpus)

    def take(self, devices: int = 1) -> list[int] | None:
        """The cores of the next `devices` slots (None: not pinned)."""
        start, self._next = self._next, self._next + devices
        if self._cores is None:
            return None
        return [core for cores in self._cores[start:self._next] for core in cores]


@dataclasses.dataclass
class _Replicas:
    role: str
    actors: list
    urls: list[str]
    api_key: str


def replica_count(job: RayJob, role: str) -> tuple[int, int]:
    """(replicas, devices per replica) of a separate rollout or teacher role."""
    args = job.rollout if role == "rollout" else job.teacher
    per = max(1, args.vllm_tensor_parallel_size)
    devices = job.groups[role].devices
    if devices % per:
        raise ValueError(f"{job.config_path}: `{role}.gpus` {devices} is not a multiple of its "
                         f"vllm_tensor_parallel_size {per} (devices per replica)")
    return devices // per, per


def run_ray_job(job: RayJob) -> TrainResult:
    job_id = uuid.uuid4().hex[:8]
    devices = job.devices
    for role in ("rollout", "teacher"):
        if role in devices:
            replica_count(job, role)  # a bad split fails before Ray starts
    cluster = ray_cluster.connect(job.train.ray_address, sum(devices.values()), job.train.external_plugins)
    import ray
    groups, actors = [], []
    try:
        ray_cluster.check_fits(cluster, devices)
        ray_cluster.check_nodes(cluster, job.nnodes)
        slots = Slots(cluster, sum(devices.values()))
        train_cores = [slots.take() for _ in range(job.groups["train"].devices)]
        replicas = {}
        for role in ("rollout", "teacher"):
            if role in devices:
                replicas[role] = _start_replicas(job, job_id, role, slots, groups)
                actors += replicas[role].actors
        args = _train_arguments(job, replicas)
        workers = _start_workers(job, job_id, slots, groups)
        actors += workers
        results = _train(args, workers, train_cores, cluster.device == "GPU", replicas)
        return results[0]
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        for group in groups:
            ray.util.remove_placement_group(group)
        ray_cluster.shutdown(cluster)


def _start_replicas(job: RayJob, job_id: str, role: str, slots: Slots, groups: list) -> _Replicas:
    import ray
    count, per = replica_count(job, role)
    resources = slots.resources(per)
    group = ray_cluster.reserve(role, count, resources)
    groups.append(group)
    args = job.rollout if role == "rollout" else job.teacher
    # The replicas serve the cluster's network; their routes (weight updates included) want this key.
    given = args.api_key
    api_key = given or secrets.token_urlsafe(32)
    args = dataclasses.replace(args, api_key=api_key)
    cls = ray.remote(RolloutReplica)
    actors = [cls.options(name=f"swiftlike-{job_id}-{role}-{i}", **resources, **ray_cluster.on_bundle(group, i))
              .remote(args, slots.take(per)) for i in range(count)]
    logger.info("job %s: starting %d %s replica(s) of %s", job_id, count, role, args.model)
    addresses = _wait_for(role, [a.address.remote() for a in actors], REPLICA_START_TIMEOUT_S)
    urls = [f"http://{host}:{port}" for host, port in addresses]
    logger.info("%s replicas ready: %s (API key %s)", role, ", ".join(urls),
                "from the YAML" if given else "generated for this job")
    return _Replicas(role, actors, urls, api_key)


def _train_arguments(job: RayJob, replicas: dict[str, _Replicas]):
    """The train role's arguments with the replicas' addresses filled in (validated again by the dataclass)."""
    changes = {}
    if "rollout" in replicas:
        addresses = [url.removeprefix("http://").rsplit(":", 1) for url in replicas["rollout"].urls]
        changes.update(vllm_server_host=[host for host, _ in addresses],
                       vllm_server_port=[int(port) for _, port in addresses],
                       vllm_server_api_key=replicas["rollout"].api_key)
    if "teacher" in replicas:
        changes.update(teacher_model_server=replicas["teacher"].urls,
                       teacher_model_server_api_key=replicas["teacher"].api_key)
    return dataclasses.replace(job.train, **changes)


def _start_workers(job: RayJob, job_id: str, slots: Slots, groups: list) -> list:
    import ray
    count = job.groups["train"].devices
    resources = slots.resources()
    group = ray_cluster.reserve("train", count, resources)
    groups.append(group)
    cls = ray.remote(max_restarts=0)(TrainWorker)
    return [cls.options(name=f"swiftlike-{job_id}-train-{rank}", **resources, **ray_cluster.on_bundle(group, rank))
            .remote() for rank in range(count)]


def _train(args, workers: list, cores: list, one_device_each: bool, replicas: dict[str, _Replicas]) -> list[TrainResult]:
    """Every rank's TrainResult; stops with RoleFailed as soon as an actor of any role fails."""
    import ray
    master = ray.get(workers[0].rendezvous.remote())
    world = len(workers)
    logger.info("training on %d worker(s) (%s)", world, "colocated vLLM engines" if args.use_vllm and
                args.vllm_mode == "colocate" else "rollout replicas" if "rollout" in replicas else
                "the training model's own generate")
    pending = {w.train.remote(args, rank, world, master, one_device_each, cores[rank]): rank
               for rank, w in enumerate(workers)}
    results: dict[int, TrainResult] = {}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=HEALTH_PERIOD_S)
        for ref in done:
            rank = pending.pop(ref)
            try:
                results[rank] = ray.get(ref)
            except Exception as e:
                raise RoleFailed(f"role train, worker rank {rank} failed: {_reason(e)}") from None
        if pending:
            _check_replicas(replicas)
    return [results[rank] for rank in range(world)]


def _check_replicas(replicas: dict[str, _Replicas]) -> None:
    import ray
    for group in replicas.values():
        probes = [a.health.remote() for a in group.actors]
        for i, probe in enumerate(probes):
            try:
                ray.get(probe, timeout=HEALTH_TIMEOUT_S)
            except Exception as e:
                raise RoleFailed(f"role {group.role}, replica {i} ({group.urls[i]}) is gone: {_reason(e)}") from None


def _wait_for(role: str, refs: list, timeout: float) -> list:
    import ray
    deadline = time.monotonic() + timeout
    out = []
    for i, ref in enumerate(refs):
        try:
            out.append(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
        except Exception as e:
            raise RoleFailed(f"role {role}, replica {i} did not start: {_reason(e)}") from None
    return out


def _reason(error: Exception) -> str:
    """The root cause of a Ray error in one line: the remote exception's own message where there is one."""
    cause = getattr(error, "cause", None) or error
    text = str(cause).strip().splitlines()
    return (text[-1] if text else type(cause).__name__)[:500]
