"""The processes of a Ray job, as plain classes the driver turns into actors (`ray.remote(...)`).

They run the single-process code unchanged: a train worker is one rank of `swiftlike rlhf` (the GRPO or GKD
trainer with its rollout worker, losses, correction and weight sync, or a preference trainer: dpo, kto, cpo,
simpo, orpo, rm), joined to the others by torch.distributed
as torchrun would join them; a replica is one `swiftlike rollout` server (its vLLM engine, weight-update routes
and policy versions) listening on its node's address, behind a per-job API key. So a train role with separate rollout replicas is server mode, and a
colocated one is colocate mode, each with every check and metric those modes have.
"""
from __future__ import annotations

import os
import socket
import threading
import time

from ..utils.net import free_port


def node_address() -> str:
    """This node's address as other nodes reach it (Ray's view of the node)."""
    import ray
    return ray.util.get_node_ip_address()


def pin_to(cores: list[int] | None) -> None:
    """Run this process on `cores` only, with as many compute threads (torch's and OpenMP's): a CPU slot's share
    of the machine (Slots in driver.py). vLLM's CPU engine binds its threads within this set."""
    if not cores:
        return
    import torch
    os.sched_setaffinity(0, cores)
    os.environ["OMP_NUM_THREADS"] = str(len(cores))
    torch.set_num_threads(len(cores))


class TrainWorker:
    """One data-parallel rank of the train role."""

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's address and a free port on it, for every rank's torch.distributed rendezvous."""
        return node_address(), free_port("")  # a port free on this actor's node

    def train(self, args, rank: int, world_size: int, master: tuple[str, int], one_device_each: bool,
              cores: list[int] | None = None):
        """Run the trainer as rank `rank` of `world_size`; returns its TrainResult (rank 0's holds the run).

        `one_device_each`: on GPUs, Ray shows each actor only its own device, so every rank is local rank 0 of a
        one-device view, which is what the trainer then uses. `cores`: see `pin_to`.
        """
        pin_to(cores)
        local_rank = 0 if one_device_each else rank
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(local_rank),
                          LOCAL_WORLD_SIZE="1" if one_device_each else str(world_size), MASTER_ADDR=master[0],
                          MASTER_PORT=str(master[1]))
        from ..rl.online.gkd_recipe import train_gkd
        from ..rl.online.grpo_recipe import train_grpo
        from ..rl.preference.recipe import train_preference
        return {"grpo": train_grpo, "gkd": train_gkd}.get(args.rlhf_type, train_preference)(args)


class RolloutReplica:
    """One rollout (or teacher) server: `swiftlike rollout` on this actor's node.

    It listens on the node's address as the cluster knows it (not on every interface) and on a port free on this
    node, taken by binding it here (the port is this node's to give, and the bound socket is handed to the server,
    so nothing can take it in between). Every route but /health needs `args.api_key`, which the driver generates
    per job unless the YAML sets one: a replica's weight-update routes would otherwise let anyone on the network
    replace the policy. Serving runs on a thread of the actor; the actor's methods answer the driver's health
    checks. Ray does not restart a replica (see driver.py), so its address holds for the run.
    """

    def __init__(self, args, cores: list[int] | None = None):
        import dataclasses

        from ..infer.engine import build_engine
        from ..rollout.server.app import create_app
        from ..rollout.server.service import RolloutService
        import uvicorn
        pin_to(cores)
        if not args.api_key:
            raise ValueError("a Ray rollout replica needs an API key (the driver sets one per job)")
        host = node_address()
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        listener.bind((host, 0))
        port = listener.getsockname()[1]
        self.args = dataclasses.replace(args, host=host, port=port)
        spec = self.args.engine_spec()
        spec.logprobs_mode = "processed_logprobs"  # RL trainers score tokens after temperature / top-k / top-p
        self.service = RolloutService(self.args, lambda: build_engine(spec))
        config = uvicorn.Config(create_app(self.service), host=host, port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [listener]},
                                       name="swiftlike-replica-http", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the rollout replica's HTTP server did not start on {host}:{port}")
            time.sleep(0.05)
        self.url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"

    def address(self) -> tuple[str, int]:
        return self.args.host, self.args.port

    def health(self) -> dict:
        """The driver's liveness probe: the serving thread is up, and how far the replica has come."""
        if not self.thread.is_alive():
            raise RuntimeError(f"the rollout replica at {self.url} stopped serving")
        return {"url": self.url, "policy_version": self.service.version,
                "samples_generated": self.service.samples_generated}

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.service.close()
