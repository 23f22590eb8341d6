"""The python of a virtualenv beside ours: tools whose pins conflict with swiftlike's (evalscope, verifiers) live in
their own virtualenv, which `make setup` builds next to .venv, and run there as subprocesses."""
from __future__ import annotations

import os
import sys
from pathlib import Path


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
