"""Multi-process training the ms-swift way: set NPROC_PER_NODE (and NNODES, NODE_RANK,
MASTER_ADDR, MASTER_PORT for several machines) and the same command runs under torchrun.
"""
from __future__ import annotations

import os
import subprocess
import sys

from ..utils import get_logger
from ..utils.errors import WorkersFailed
from ..utils.launch_env import LaunchEnv
from ..utils.net import free_port
from ..utils.threads import usable_cpus

logger = get_logger("swiftlike.train")


def wants_torchrun() -> bool:
    """True in the launching process only; the workers torchrun starts carry LOCAL_RANK."""
    return LaunchEnv.current().wants_torchrun


def torchrun_command(command: str, argv: list[str]) -> list[str]:
    env = LaunchEnv.current()
    port = env.master_port or (str(free_port()) if env.nnodes == 1 else "29500")
    return [sys.executable, "-m", "torch.distributed.run",
            f"--nproc_per_node={env.nproc_per_node}", f"--nnodes={env.nnodes}", f"--node_rank={env.node_rank}",
            f"--master_addr={env.master_addr}", f"--master_port={port}",
            "-m", "swiftlike.cli.main", command, *argv]


def relaunch_with_torchrun(command: str, argv: list[str]) -> None:
    cmd = torchrun_command(command, argv)
    nproc = LaunchEnv.current().nproc_per_node
    logger.info("starting %s processes: %s", nproc, " ".join(cmd))
    env = dict(os.environ)  # the workers' environment: this one, with a thread budget per process
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, usable_cpus() // nproc))
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        raise WorkersFailed(f"torchrun exited with status {result.returncode}; see the worker output above")


def is_rank_zero() -> bool:
    """RANK (set by torchrun) rather than the process group: closing a colocated vLLM engine destroys the group."""
    return LaunchEnv.current().is_rank_zero
