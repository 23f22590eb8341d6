"""Jobs the UI starts: real `swiftlike <command>` processes, recorded on disk so a restarted UI still lists them.

Each job is a directory under the jobs dir:

    <jobs_dir>/<id>/job.json    what was run: command line, argv, pid, output dir, log, start time (written once)
                    output.log  the command's stdout and stderr
                    exit.json   exit code and end time, written by the runner (swiftlike/ui/runner.py)
                    stop.json   present when the UI was asked to stop the job

Nobody rewrites a file another process writes, so no locking is needed, and every file is written atomically.
The runner waits on the command so its exit code survives the UI; the command starts in its own session, so a
stop (SIGTERM, then SIGKILL after a grace period) reaches every process it spawned and nothing else.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..utils import atomic_write_json

RUNNING, FINISHED, FAILED, STOPPED = "running", "finished", "failed", "stopped"


@dataclass
class Job:
    """A job's record and where its state stands now."""

    id: str
    dir: Path
    record: dict
    state: str
    exit_code: int | None

    @property
    def log(self) -> Path:
        return Path(self.record["log"])

    @property
    def command_line(self) -> str:
        return self.record["command_line"]

    @property
    def status(self) -> str:
        """running / finished / failed (exit code N) / stopped, as the runtime panel shows it."""
        if self.state == FAILED:
            return f"failed (exit code {self.exit_code})" if self.exit_code is not None else "failed (process lost)"
        return self.state

    def tail(self, lines: int = 60) -> str:
        if not self.log.is_file():
            return ""
        with self.log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64_000))
            text = f.read().decode("utf-8", errors="replace")
        # progress bars redraw with \r; show their last state only
        shown = [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
        return "\n".join(shown[-lines:])

    def error_line(self) -> str | None:
        """The CLI's own error message (`swiftlike <command>: error: ...`), if the log has one."""
        if not self.log.is_file():
            return None
        found = [line for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines()
                 if re.match(r"^swiftlike [\w -]+: (error|not built): ", line)]
        return found[-1] if found else None

    def run_dir(self) -> Path | None:
        """The run directory a training command made under its output dir (the newest one since the job began)."""
        out = self.record.get("output_dir")
        if not out:
            return None
        root = Path(out)
        if not root.is_absolute():
            root = Path(self.record["cwd"]) / root
        candidates = [p.parent for p in [root / "logging.jsonl", *root.glob("*/logging.jsonl")]
                      if p.is_file() and p.stat().st_mtime >= self.record["started"] - 1]
        return max(candidates, key=lambda p: p.stat().st_mtime, default=None)

    def last_checkpoint(self) -> Path | None:
        run = self.run_dir()
        if run is None:
            return None
        steps = [(int(m.group(1)), p) for p in run.glob("checkpoint-*") if (m := re.match(r"checkpoint-(\d+)$", p.name))]
        return max(steps)[1] if steps else None


class JobStore:
    """Starts, lists and stops the UI's jobs."""

    def __init__(self, root: str | os.PathLike, stop_grace_s: float = 10.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.stop_grace_s = stop_grace_s
        self._children: dict[int, subprocess.Popen] = {}  # runners this UI started, reaped when they end

    def start(self, command: str, argv: list[str], output_dir: str | None = None, port: int | None = None,
              cwd: str | None = None) -> Job:
        """Run `swiftlike <command> *argv` in the background; the argv goes to exec, never to a shell."""
        from .forms import command_line
        job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{command.replace(' ', '_')}-{os.urandom(3).hex()}"
        job_dir = self.root / job_id
        job_dir.mkdir(parents=True)
        exec_argv = [sys.executable, "-m", "swiftlike.cli.main", *command.split(), *argv]
        record = {"id": job_id, "command": command, "argv": list(argv), "command_line": command_line(command, argv),
                  "exec": exec_argv, "output_dir": output_dir, "port": port, "log": str(job_dir / "output.log"),
                  "cwd": cwd or os.getcwd(), "started": time.time()}
        atomic_write_json(job_dir / "request.json", record)
        runner = subprocess.Popen([sys.executable, "-m", "swiftlike.ui.runner", str(job_dir)], cwd=record["cwd"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        self._children[runner.pid] = runner
        record.update(pid=runner.pid, pid_started=psutil.Process(runner.pid).create_time())
        atomic_write_json(job_dir / "job.json", record)
        return self.get(job_id)

    def get(self, job_id: str) -> Job:
        job_dir = self.root / job_id
        record = json.loads((job_dir / "job.json").read_text(encoding="utf-8"))
        self._reap()
        exit_file = job_dir / "exit.json"
        if exit_file.is_file():
            code = json.loads(exit_file.read_text(encoding="utf-8"))["exit_code"]
            state = STOPPED if (job_dir / "stop.json").is_file() else (FINISHED if code == 0 else FAILED)
            return Job(job_id, job_dir, record, state, code)
        if self._alive(record):
            return Job(job_id, job_dir, record, RUNNING, None)
        if exit_file.is_file():  # the runner wrote it between the two checks
            return self.get(job_id)
        state = STOPPED if (job_dir / "stop.json").is_file() else FAILED
        return Job(job_id, job_dir, record, state, None)

    def list(self) -> list[Job]:
        """Newest first."""
        ids = sorted((p.name for p in self.root.iterdir() if (p / "job.json").is_file()), reverse=True)
        return [self.get(i) for i in ids]

    def stop(self, job_id: str) -> Job:
        """SIGTERM to the job's session; SIGKILL after the grace period if anything of it still runs."""
        job = self.get(job_id)
        if job.state != RUNNING:
            return job
        atomic_write_json(job.dir / "stop.json", {"requested": time.time()})
        group = self._members(job.record)
        for p in group:
            _signal(p, signal.SIGTERM)
        _, alive = psutil.wait_procs(group, timeout=self.stop_grace_s)
        for p in alive:
            _signal(p, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
        self._reap()
        if not (job.dir / "exit.json").is_file():  # the runner was killed before it could record the end
            atomic_write_json(job.dir / "exit.json", {"exit_code": -signal.SIGKILL, "ended": time.time()})
        return self.get(job_id)

    def processes(self, job_id: str) -> list[psutil.Process]:
        """The job's live processes: its runner and everything in its session."""
        return self._members(self.get(job_id).record)

    def _members(self, record: dict) -> list[psutil.Process]:
        if not self._alive(record):
            return []
        sid = os.getsid(record["pid"])
        members = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                    members.append(p)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return members

    @staticmethod
    def _alive(record: dict) -> bool:
        """The runner still runs (and is the same process: a recycled pid has another start time)."""
        try:
            p = psutil.Process(record["pid"])
            return p.status() != psutil.STATUS_ZOMBIE and abs(p.create_time() - record["pid_started"]) < 1
        except psutil.Error:
            return False

    def _reap(self) -> None:
        for pid, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]


def _signal(process: psutil.Process, sig: int) -> None:
    try:
        process.send_signal(sig)
    except psutil.Error:
        pass
