"""scripts/setup.sh installs with uv: pip's configured sources are handed over (scripts/pip_sources.py), and a CPU
machine gets the versions of scripts/locks/cpu.txt."""
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("pip_sources", ROOT / "scripts" / "pip_sources.py")
pip_sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_sources)


def test_pips_files_and_environment_become_uv_options(tmp_path):
    index = tmp_path / "simple"
    index.mkdir()
    listing = (f":env:.find-links='/opt/wheels'\n"
               f"global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
               f"global.constraint='/etc/xdg/pip/constraints.txt'\n"
               f"global.extra-index-url='file://{index} file://{tmp_path}/missing https://mirror.example/simple'\n"
               f"global.find-links='/opt/wheels'\n"
               f"user.index-url='https://pypi.example/simple'\n")
    assert pip_sources.uv_options(listing) == [
        "--find-links", "/opt/wheels", "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", f"file://{index}", "--extra-index-url", "https://mirror.example/simple",
        "--index-url", "https://pypi.example/simple"]


def test_no_configuration_gives_no_options():
    assert pip_sources.uv_options("") == []


def lock(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "scripts" / "locks" / name).read_text().splitlines():
        if line and not line.startswith("#"):
            package, version = line.split("==")
            pins[package] = version
    return pins


@pytest.mark.skipif(torch.cuda.is_available(), reason="the lock is the CPU machine's set")
def test_this_environment_has_the_locked_versions():
    """A lock left behind after a dependency change would install other versions than the suite passes with."""
    differ = {}
    for package, version in lock("cpu.txt").items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            differ[package] = (version, installed)
    assert not differ, f"scripts/locks/cpu.txt vs .venv: {differ}; after a dependency change run scripts/lock.sh"
