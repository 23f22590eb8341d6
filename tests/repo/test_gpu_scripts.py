"""The prepared GPU checks under tests/gpu/ must say "not run" (exit 2, before doing anything) on a machine
without a GPU, so that a CI run here cannot mistake them for passing or failing checks."""
import shutil
import subprocess

import pytest
from paths import TESTS

GPU_DIR = TESTS / "gpu"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine runs these checks for real")
@pytest.mark.parametrize("script", sorted(p.name for p in GPU_DIR.glob("run_*.sh")))
def test_gpu_check_exits_2_without_a_gpu(script, tmp_path):
    done = subprocess.run(["bash", str(GPU_DIR / script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "no NVIDIA GPU found" in done.stderr and not any(tmp_path.iterdir())


def test_the_shared_helper_collects_pass_and_fail_lines(tmp_path):
    """tests/gpu/checks.sh, sourced under a stand-in nvidia-smi: check_run turns exit codes and checker verdicts into
    PASS / FAIL lines, write_summary writes them under $OUT, FAILED is 1 once any check failed."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\ncase \"$1\" in -L) echo 'GPU 0: Stand-in' ;; *) echo 'Stand-in, 1 MiB' ;; esac\n")
    (fake / "nvidia-smi").chmod(0o755)
    script = tmp_path / "run_probe.sh"
    script.write_text(f"""source {GPU_DIR / 'checks.sh'}
check_run good 0 good.log echo "finite, 3 steps"
echo "after good: $FAILED"
check_run crashed 3 crashed.log echo unused
check_run wrong 0 wrong.log sh -c 'echo "k3 too high"; exit 1'
record SKIPPED "SKIPPED sglang: not installed"
write_summary "Probe checks" probe.md "| header |"
exit "$FAILED"
""")
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{fake}:/usr/bin:/bin", "OUT": str(out)})
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:5] == ["PASS good: finite, 3 steps", "after good: 0", "FAIL crashed: exited 3 (log: crashed.log)",
                         "FAIL wrong: k3 too high", "SKIPPED sglang: not installed"]
    summary = (out / "probe.md").read_text()
    assert summary.startswith("# Probe checks (") and "Stand-in, 1 MiB" in summary
    assert "| header |\n- PASS good: finite, 3 steps\n- FAIL crashed" in summary
