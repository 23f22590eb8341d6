"""The Ray cluster a job runs on: joined or started, what kind of device a role's `gpus:` count means there, and
placement groups that hold each role's devices.

Why placement groups: a role's N devices are reserved as N bundles before any of its actors starts, so a job that
does not fit fails at once with the count it lacked, instead of starting half its actors and waiting forever for
the rest.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ..utils import get_logger
from ..utils.errors import UsageError

logger = get_logger("swiftlike.ray")

PLACEMENT_TIMEOUT_S = 60.0
# Environment the actors need to find models, data and engine settings the way the driver does.
FORWARDED_ENV_PREFIXES = ("SWIFTLIKE_", "VLLM_", "HF_", "MODELSCOPE_", "TRANSFORMERS_", "TOKENIZERS_", "PYTHONPATH",
                          "OMP_NUM_THREADS")


# Actors live in one namespace, named swiftlike-<job id>-<role>-<index>, so `ray list actors` shows whose they are.
NAMESPACE = "swiftlike"


@dataclass(frozen=True)
class Cluster:
    """`device`: "GPU" or "CPU", what one unit of a role's `gpus:` is here; `available`: how many such units;
    `cpus`: the cluster's CPUs; `started`: whether this run started the cluster (and so stops it)."""

    address: str
    device: str
    available: int
    cpus: int
    started: bool

    def slot_cpus(self, slots: int) -> int:
        """CPUs per device slot of a job with `slots` slots: on a CPU cluster its CPUs shared evenly (a slot's
        process then runs that many threads, Ray's OMP_NUM_THREADS); on GPUs one CPU beside each GPU."""
        return max(1, self.cpus // max(slots, 1)) if self.device == "CPU" else 1

    def core_sets(self, slots: int) -> list[list[int]] | None:
        """Disjoint cores for each slot, in order, on a cluster this run started on this machine with at least
        one core per slot; None otherwise (Ray does not pin processes to cores, and another node's cores are not
        known here). Pinned, a train worker and a rollout replica on one machine do not compete for cores, as
        they would not on separate devices."""
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if self.device != "CPU" or not self.started or len(cores) < slots:
            return None
        per = len(cores) // slots
        return [cores[i * per:(i + 1) * per] for i in range(slots)]


def forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}


def connect(address: str | None, needed: int, plugins: list[str]) -> Cluster:
    """Join `address` (or RAY_ADDRESS, or a cluster `ray start` runs on this machine), else start a local cluster
    sized for `needed` devices, as `ray.init()` would.

    A local cluster on a machine without a GPU gets max(cores, needed) CPU slots: one slot per device a role asks
    for, even if that is more than the cores (the processes then share them, which is said in a warning).
    Every worker process runs `_worker_setup` as it starts (Ray's worker_process_setup_hook): the driver's working
    directory, then `plugins` (--external_plugins), so what they register exists in every actor before it runs
    anything.
    """
    address = address or os.environ.get("RAY_ADDRESS")
    _use_cluster_token()  # before Ray is imported: it reads its auth mode then
    import ray
    runtime_env: dict = {"env_vars": forwarded_env(),
                         "worker_process_setup_hook": _worker_setup_hook(os.getcwd(), list(plugins))}
    common = dict(runtime_env=runtime_env, namespace=NAMESPACE, logging_level="WARNING")
    started = False
    try:
        ray.init(address=address or "auto", **common)
    except ConnectionError as e:
        if address:
            raise UsageError(f"cannot reach the Ray cluster at {address} ({e}); start it with `ray start --head` "
                             "(docs/ray.md) or fix --ray_address / RAY_ADDRESS") from None
        import torch
        gpus = torch.cuda.device_count()
        cores = os.cpu_count() or 1
        cpus = max(cores, needed) if not gpus else max(cores, gpus)
        if not gpus and needed > cores:
            logger.warning("this job asks for %d devices and the machine has %d CPU cores and no GPU: its %d CPU "
                           "slots share the cores", needed, cores, needed)
        ray.init(address="local", num_cpus=cpus, num_gpus=gpus, include_dashboard=False, **common)
        started = True
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    device = "GPU" if gpus else "CPU"
    available = gpus if gpus else int(resources.get("CPU", 0))
    if device == "CPU":
        logger.warning("no GPU in the Ray cluster: each role's `gpus: N` means N CPU slots")
    cluster = Cluster(ray.get_runtime_context().gcs_address, device, available, int(resources.get("CPU", 0)),
                      started)
    logger.info("Ray cluster %s (%s): %d %s slots", cluster.address, "started here" if started else "joined",
                available, device)
    return cluster


def _use_cluster_token() -> None:
    """Ray >= 2.59 clusters started with `ray start` require their token; `ray.init(address=...)` presents it only
    in RAY_AUTH_MODE=token (unlike `address="auto"`), so that mode is set when a token is at hand and no mode was
    chosen. A cluster without authentication ignores the token. Ray reads the mode into its configuration when it
    is imported, so in a process that imported Ray already (a script's own `import ray`, a test) the configuration
    is read again, as Ray does when it turns token mode on itself; otherwise the driver would present no token, and
    a local cluster it starts would get the token from the environment while the driver runs without one."""
    have_token = (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                  or os.path.isfile(os.path.expanduser("~/.ray/auth_token")))
    if have_token and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        if "ray._raylet" in sys.modules:
            sys.modules["ray._raylet"].Config.initialize("")


def _worker_setup_hook(driver_cwd: str, plugins: list[str]):
    """A named function (Ray serializes the hook by value and wants its name) that runs `_worker_setup`."""
    def swiftlike_worker_setup() -> None:
        _worker_setup(driver_cwd, plugins)
    return swiftlike_worker_setup


def _worker_setup(driver_cwd: str, plugins: list[str]) -> None:
    """Every worker process starts in the driver's working directory where this node has it (one machine, or a
    shared filesystem), so a YAML's relative paths (data, output_dir, plugins) mean what they mean to the driver;
    then the plugins are imported."""
    if os.path.isdir(driver_cwd):
        os.chdir(driver_cwd)
    else:
        logger.warning("the driver's working directory %s is not on this node; relative paths in the job resolve "
                       "against %s", driver_cwd, os.getcwd())
    if plugins:
        from ..rl.rewards.plugins import load_external_plugins
        load_external_plugins(plugins)


def check_fits(cluster: Cluster, devices: dict[str, int]) -> None:
    """Refuse a job that needs more devices than the cluster has, before any actor starts."""
    needed = sum(devices.values())
    if needed > cluster.available:
        parts = " + ".join(f"{role} {n}" for role, n in devices.items())
        raise UsageError(f"this job needs {needed} {cluster.device} slots ({parts}) and the Ray cluster at "
                         f"{cluster.address} has {cluster.available}; lower the roles' `gpus:` or add nodes "
                         "(`ray start --address ...` on each, docs/ray.md)")


def check_nodes(cluster: Cluster, nnodes: int | None) -> None:
    """Refuse a job whose YAML says `nnodes: N` on a cluster with fewer alive nodes, before any actor starts (Ray
    would otherwise pack the whole job onto the nodes it has, or wait for devices that are not there)."""
    import ray
    if nnodes is None:
        return
    alive = sum(1 for node in ray.nodes() if node.get("Alive"))
    if alive < nnodes:
        raise UsageError(f"the job's YAML says nnodes: {nnodes} and the Ray cluster at {cluster.address} has {alive} "
                         f"node(s); start the others with `ray start --address {cluster.address}` (docs/ray.md) or "
                         "lower nnodes")


def actor_resources(cluster: Cluster, devices: int, slot_cpus: int) -> dict[str, float]:
    """Ray resources of one actor holding `devices` device slots (as actor options)."""
    if cluster.device == "GPU":
        return {"num_gpus": float(devices), "num_cpus": 1.0}
    return {"num_cpus": float(devices * slot_cpus)}


def reserve(role: str, count: int, resources: dict[str, float]):
    """A ready placement group of `count` bundles of `resources` (actor_resources) for `role`."""
    import ray
    from ray.util.placement_group import placement_group
    shape = {"GPU" if k == "num_gpus" else "CPU": v for k, v in resources.items()}
    group = placement_group([shape] * count, strategy="PACK", name=f"swiftlike-{role}")
    ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_TIMEOUT_S)
    if not ready:
        raise RuntimeError(f"Ray could not place the {role} role's {count} bundle(s) of {shape} within "
                           f"{PLACEMENT_TIMEOUT_S:.0f} s; the cluster's free resources: {ray.available_resources()}")
    return group


def on_bundle(group, index: int) -> dict:
    """Actor options that pin it to bundle `index` of `group`."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=group,
                                                                    placement_group_bundle_index=index)}


def shutdown(cluster: Cluster | None) -> None:
    import ray
    if ray.is_initialized():
        ray.shutdown()
    if cluster is not None and not cluster.started:
        logger.info("left the Ray cluster at %s running", cluster.address)
