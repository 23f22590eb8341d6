"""`python -m swiftlike.ui.runner JOB_DIR`: runs one UI job's command and records how it ended.

The UI may be restarted while a job runs; this small parent outlives it, so the job's exit code is still known
(exit.json) when the UI comes back. It ignores SIGTERM itself: a stop reaches the whole session, the command
ends, and this records that end.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..utils import atomic_write_json


def main(job_dir: str) -> int:
    folder = Path(job_dir)
    request = json.loads((folder / "request.json").read_text(encoding="utf-8"))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(request["log"], "ab", buffering=0) as log:
        try:
            proc = subprocess.Popen(request["exec"], cwd=request["cwd"], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, preexec_fn=lambda: signal.signal(signal.SIGTERM,
                                                                                              signal.SIG_DFL))
        except OSError as e:
            log.write(f"swiftlike web-ui: error: cannot start {request['exec'][0]}: {e}\n".encode())
            atomic_write_json(folder / "exit.json", {"exit_code": 127, "ended": time.time()})
            return 127
        atomic_write_json(folder / "process.json", {"pid": proc.pid})
        code = proc.wait()
    atomic_write_json(folder / "exit.json", {"exit_code": code, "ended": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
