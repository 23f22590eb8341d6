"""Disaggregated rollout: `swiftlike rollout` (a vLLM engine behind HTTP), the trainer-side client that puts
servers behind the InferEngine interface, and the weight transports between them, one layer per sub-package.

wire: what both sides agree on, below the engines: weight buckets and their checks (buckets), sparse deltas
    (delta), the base weights' fingerprint LoRA-only sync checks (fingerprint), the NCCL/gloo broadcast
    group (collective).
client: the trainer side, in the engines layer: RemoteEngine / ServerClient (remote_engine) and the http,
    shared-path and collective weight transports (transport).
server: the server side: the engine thread and policy versions (service), the routes (app), requests cut
    and resumed across weight updates (partial).
multi_turn: multi-turn rollouts (schedulers, environments, the trajectory loop), run by the RL rollout worker
    and the server alike.
"""
