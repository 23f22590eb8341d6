"""The prepared GPU checks under tests/gpu/ must say "not run" (exit 2, before doing anything) on a machine
without a GPU, so that a CI run here cannot mistake them for passing or failing checks."""
import shutil
import subprocess
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parent / "gpu"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine runs these checks for real")
@pytest.mark.parametrize("script", sorted(p.name for p in GPU_DIR.glob("run_*.sh")))
def test_gpu_check_exits_2_without_a_gpu(script, tmp_path):
    done = subprocess.run(["bash", str(GPU_DIR / script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "no NVIDIA GPU found" in done.stderr and not any(tmp_path.iterdir())
