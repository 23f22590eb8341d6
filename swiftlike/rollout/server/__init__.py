"""The `swiftlike rollout` server: see swiftlike/rollout/__init__.py."""
