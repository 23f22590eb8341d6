"""Print, one per line, the `uv pip install` options that name the package sources pip is configured with.

scripts/setup.sh installs with uv (about a minute where pip took over three), and uv reads no pip.conf and no
PIP_* variable. A machine's mirrors, local wheel folders and constraint files live in exactly those, so they
are handed over here: find-links, index-url, extra-index-url and constraint, from `pip config list` (files and
environment alike). A file:// index whose folder does not exist is left out, as pip ignores it too.

    python scripts/pip_sources.py   # run with the python whose pip's configuration counts (.venv's)
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

OPTIONS = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url",
           "constraint": "--constraint"}


def configured(listing: str) -> dict[str, list[str]]:
    """{pip option: values} from `pip config list` lines such as `global.find-links='/opt/wheels'` or
    `:env:.extra-index-url='a b'`; a value may hold several, separated by whitespace, as pip reads them."""
    found: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        option = key.rsplit(".", 1)[-1]
        if not sep or option not in OPTIONS:
            continue
        for item in ast.literal_eval(value).split():
            if item not in found.setdefault(option, []):
                found[option].append(item)
    return found


def usable(option: str, value: str) -> bool:
    if option.endswith("index-url") and value.startswith("file:"):
        return Path(urlparse(value).path).is_dir()
    return True


def uv_options(listing: str) -> list[str]:
    out = []
    for option, values in configured(listing).items():
        for value in values:
            if usable(option, value):
                out += [OPTIONS[option], value]
    return out


if __name__ == "__main__":
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             check=True).stdout
    print("\n".join(uv_options(listing)))
