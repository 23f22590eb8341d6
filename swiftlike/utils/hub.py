"""Whether the user has told us to stay off the model/dataset hubs; models and datasets ask alike."""
from __future__ import annotations

import os

OFFLINE_VARIABLES = ("SWIFTLIKE_OFFLINE", "HF_HUB_OFFLINE", "MODELSCOPE_OFFLINE")


def offline_variable() -> str | None:
    """The first offline switch that is set (to name it in messages), or None."""
    return next((k for k in OFFLINE_VARIABLES if os.environ.get(k, "").lower() in ("1", "true", "yes")), None)
