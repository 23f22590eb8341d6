"""Checkpoints that are either complete or absent.

transformers' Trainer writes `checkpoint-K/` file by file, so a process killed in the middle
leaves a directory with, say, weights but no optimizer state, which `--resume_from_checkpoint`
would then load. Here every checkpoint is written under `<run>/.staging/` and renamed into
place (one atomic `rename` on the same filesystem) after all processes have written their
part; a killed save leaves only the staging directory, which the next save clears.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import MissingInputError, UsageError

STAGING_DIR = ".staging"
CHECKPOINT_PREFIX = "checkpoint-"
TRAINER_STATE = "trainer_state.json"


def check_resumable(path: str | os.PathLike) -> Path:
    path = Path(path).expanduser()
    if not path.is_dir():
        raise MissingInputError(f"--resume_from_checkpoint {path}: no such directory")
    if path.parent.name == STAGING_DIR:
        raise UsageError(f"--resume_from_checkpoint {path}: an unfinished save (the run was killed while writing "
                         "it); resume from the checkpoint-K directory next to .staging instead")
    if not (path / TRAINER_STATE).is_file():
        raise UsageError(f"--resume_from_checkpoint {path}: not a training checkpoint (no {TRAINER_STATE}); "
                         "pass an output/.../vN-.../checkpoint-K directory")
    if not any((path / name).is_file() for name in ("optimizer.pt", "optimizer.bin")):
        raise UsageError(f"--resume_from_checkpoint {path}: saved without optimizer state (--save_only_model "
                         "true), so it cannot be resumed exactly; train from it with --adapters or --model instead")
    return path.resolve()


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    run_dir = Path(run_dir)
    found = [(int(p.name[len(CHECKPOINT_PREFIX):]), p) for p in run_dir.glob(f"{CHECKPOINT_PREFIX}*")
             if p.is_dir() and p.name[len(CHECKPOINT_PREFIX):].isdigit()]
    return max(found)[1] if found else None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(staged: Path, final: Path) -> None:
    """Move a fully written checkpoint into place; an older one at the same step is replaced."""
    if final.exists():
        old = staged.parent / f"replaced-{final.name}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(staged, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, final)
    fsync_dir(final.parent)
    if not any(staged.parent.iterdir()):
        staged.parent.rmdir()
