"""Multi-process training the ms-swift way: set NPROC_PER_NODE (and NNODES, NODE_RANK,
MASTER_ADDR, MASTER_PORT for several machines) and the same command runs under torchrun.
"""
from __future__ import annotations

import os
import subprocess
import sys

from ..utils import get_logger
from ..utils.net import free_port

logger = get_logger("swiftlike.train")


def wants_torchrun() -> bool:
    """True in the launching process only; the workers torchrun starts carry LOCAL_RANK."""
    if "LOCAL_RANK" in os.environ:
        return False
    nproc = int(os.environ.get("NPROC_PER_NODE") or 1)
    nnodes = int(os.environ.get("NNODES") or 1)
    return nproc > 1 or nnodes > 1


def torchrun_command(command: str, argv: list[str]) -> list[str]:
    nnodes = int(os.environ.get("NNODES") or 1)
    port = os.environ.get("MASTER_PORT") or (str(free_port()) if nnodes == 1 else "29500")
    return [sys.executable, "-m", "torch.distributed.run",
            f"--nproc_per_node={int(os.environ.get('NPROC_PER_NODE') or 1)}", f"--nnodes={nnodes}",
            f"--node_rank={int(os.environ.get('NODE_RANK') or 0)}",
            f"--master_addr={os.environ.get('MASTER_ADDR') or '127.0.0.1'}", f"--master_port={port}",
            "-m", "swiftlike.cli.main", command, *argv]


def relaunch_with_torchrun(command: str, argv: list[str]) -> None:
    cmd = torchrun_command(command, argv)
    logger.info("starting %s processes: %s", os.environ.get("NPROC_PER_NODE"), " ".join(cmd))
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        cores = os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cores // int(env.get("NPROC_PER_NODE") or 1)))
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"torchrun exited with status {result.returncode}; see the worker output above")


def is_rank_zero() -> bool:
    """RANK (set by torchrun) rather than the process group: closing a colocated vLLM engine destroys the group."""
    return int(os.environ.get("RANK") or 0) == 0
