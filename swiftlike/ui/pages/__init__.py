"""The web UI's tabs, one module per family of commands."""
