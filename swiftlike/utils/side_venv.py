"""The python of a virtualenv beside ours: tools whose pins conflict with swiftlike's (evalscope, verifiers) live in
their own virtualenv, which `make setup` builds next to .venv, and run there as subprocesses; and the environment
such a subprocess may start with when it runs code we do not control (a verifiers environment), so that none of our
secrets (API keys, tokens) can be read from it."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

# What a subprocess needs to run python, find its caches and certificates and speak the user's locale; everything
# else of ours (API keys, hub tokens, cloud credentials, proxies that may carry a password) stays behind.
KEPT_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "PYTHONPATH",
                  "PYTHONHASHSEED", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_HUB_OFFLINE",
                  "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "SSL_CERT_FILE", "SSL_CERT_DIR",
                  "REQUESTS_CA_BUNDLE")
KEPT_PREFIXES = ("LC_",)


def side_venv_python(variable: str, venv_name: str, holds: str, needed_by: str, how_to_build: str) -> Path:
    """$`variable`, else `venv_name`/bin/python next to the running virtualenv, in the source tree swiftlike runs
    from (an editable install), or in the working directory.

    holds: what that virtualenv has installed (named when $variable points nowhere); needed_by and how_to_build:
    the error's start and end when none is found, around the places looked at."""
    override = os.environ.get(variable)
    if override:
        if not Path(override).is_file():
            raise FileNotFoundError(f"${variable}={override}: no such file (give the python of a virtualenv with "
                                    f"{holds} installed)")
        return Path(override)
    roots = (Path(sys.prefix).parent, Path(__file__).resolve().parents[2], Path.cwd())
    candidates = list(dict.fromkeys(root / venv_name / "bin" / "python" for root in roots))
    for python in candidates:
        if python.is_file():
            return python
    raise FileNotFoundError(f"{needed_by} in its own virtualenv, and none was found (looked for "
                            f"{', '.join(map(str, candidates))}). {how_to_build}")


def scrubbed_environment(pass_env: Sequence[str] = (), offline: bool = False) -> dict[str, str]:
    """Our environment cut down to KEPT_VARIABLES (and the LC_* locale), plus the variables `pass_env` names, which
    the user hands over on purpose (an environment's own API key); `offline` turns on the hub offline switches."""
    kept = {k: v for k, v in os.environ.items() if k in KEPT_VARIABLES or k.startswith(KEPT_PREFIXES)}
    missing = [name for name in pass_env if name not in os.environ]
    if missing:
        raise ValueError(f"pass_env names {', '.join(missing)}, which this process's environment does not have")
    kept.update({name: os.environ[name] for name in pass_env})
    if offline:
        kept.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return kept
