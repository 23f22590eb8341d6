"""The rollout wire format, shared by trainer and server: see swiftlike/rollout/__init__.py."""
