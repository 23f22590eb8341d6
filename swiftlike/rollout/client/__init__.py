"""The trainer side of rollout servers: see swiftlike/rollout/__init__.py."""
