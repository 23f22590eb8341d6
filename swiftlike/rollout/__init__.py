"""Disaggregated rollout: `swiftlike rollout` (a vLLM engine behind HTTP), the trainer-side client that puts
servers behind the InferEngine interface, and the weight transports between them (http, shared path, NCCL/gloo).

Server side: server.py (engine thread, versions), app.py (routes), weights.py (bucket checks, atomic commit),
collective.py (broadcast group). Trainer side: client.py (RemoteEngine), transport.py. Both sides:
fingerprint.py (the served base weights' fingerprint that LoRA-only sync checks).
"""
