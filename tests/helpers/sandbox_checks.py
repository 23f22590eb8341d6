"""What the sandbox tests check after an attack: no process of the sandbox's user is left (within a bound)."""
import time
from pathlib import Path

from swiftlike.tools.isolation import NOBODY


def nobody_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == NOBODY:
                found.append(int(entry.name))
        except FileNotFoundError:
            pass
    return found


def settled(check, within_s=3.0):
    """Whether `check()` holds within `within_s` (the kernel reaps a dead namespace's processes promptly)."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
