"""The sampler's output file: rows appended per prompt, in prompt order, resumable exactly, published whole.

While sampling, rows go to `<file>.partial`, each prompt's appended and fsynced before `<file>.progress.json`
(written atomically) records how many prompts and bytes are done. A run killed at any instant leaves a partial
file whose first `bytes` are whole prompts; `--resume` cuts it there and goes on from the next prompt. The output
file itself appears only at the end, by rename, so it is never half-written, and an earlier one is replaced only
then. The progress file also holds the flags that decide the rows: resuming with other ones is refused.

Not ms-swift's `.resume` / `ckpt_state.json` pair: that copies the whole file after each batch and records the
batch index after the copy, so a kill between the two repeats a batch.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..utils import atomic_write_json, get_logger
from ..utils.checkpoint import fsync_dir
from ..utils.errors import UsageError

logger = get_logger("swiftlike.sample")


class ResumableJsonl:
    def __init__(self, path: Path, settings: dict, *, resume: bool, override: bool):
        self.path, self.settings = path, settings
        self.partial = path.with_name(path.name + ".partial")
        self.progress = path.with_name(path.name + ".progress.json")
        self.prompts_done, self.complete = 0, False
        self._resume_state: dict = {}
        if self.partial.exists() and resume:
            self._resume()
        elif self.partial.exists() and not override:
            raise UsageError(f"{self.partial} holds an interrupted run's rows: continue it with --resume true, or "
                             "start over with --override_exist_file true")
        elif path.exists() and resume:
            logger.info("%s is complete; nothing to resume", path)
            self.complete = True
        elif path.exists() and not override:
            raise UsageError(f"{path} exists: pass --override_exist_file true to replace it (it is replaced only once "
                             "the new file is complete), or another --output_file")
        elif resume:
            logger.info("--resume: no interrupted run of %s in %s; starting from the first prompt", path.name,
                        path.parent)

    def start(self) -> None:
        """Open a fresh partial file, unless resuming one; called once everything else has been checked, so a
        run refused at its start leaves nothing behind."""
        if self.complete:
            return
        if self.prompts_done:
            with open(self.partial, "r+b") as f:
                f.truncate(self._resume_state["bytes"])  # what a kill left after the last whole prompt
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.partial.write_bytes(b"")
        self._record(0)

    def _resume(self) -> None:
        try:
            state = json.loads(self.progress.read_text())
        except (OSError, ValueError):
            raise UsageError(f"{self.partial} has no readable {self.progress.name} beside it, so where its last whole "
                             "prompt ends is unknown; start over with --override_exist_file true") from None
        changed = {k: (state["settings"].get(k), v) for k, v in self.settings.items() if state["settings"].get(k) != v}
        if changed:
            each = "; ".join(f"--{k} was {old!r}, now {new!r}" for k, (old, new) in changed.items())
            raise UsageError(f"--resume: {self.partial} was sampled with other settings ({each}); resume with the "
                             "same ones, or start over with --override_exist_file true")
        self._resume_state = state
        self.prompts_done = state["prompts_done"]
        logger.info("--resume: %d prompts of %s already sampled; continuing", self.prompts_done, self.path.name)

    def _record(self, written: int) -> None:
        atomic_write_json(self.progress, {"prompts_done": written, "bytes": self.partial.stat().st_size,
                                          "settings": self.settings})

    def append_prompt(self, lines: list[str]) -> None:
        """One prompt's rows (possibly none), then the progress that counts it."""
        with open(self.partial, "ab") as f:
            f.write("".join(lines).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        self.prompts_done += 1
        self._record(self.prompts_done)

    def publish(self) -> None:
        os.replace(self.partial, self.path)
        self.progress.unlink(missing_ok=True)
        fsync_dir(self.path.parent)
