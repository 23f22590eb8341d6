"""What the sandbox tests check after an attack: no process of the sandbox's users is left (within a bound)."""
import time
from pathlib import Path

from swiftlike.tools import isolation, sandbox

NOBODY = 65534
# the uids calls run as when the caller is root (isolation.UID_RANGES); getattr keeps this helper importable by the
# same test run against an older sandbox, whose calls all ran as nobody
_RANGES = getattr(isolation, "UID_RANGES", ())


def _block() -> tuple[int, int] | None:
    """(first, count) of the uids this process's sandbox server gives its calls, once it has started."""
    server = getattr(sandbox, "_server", None)
    return (getattr(server, "started", None) or {}).get("uids")


def _sandbox_uid(uid: int, block) -> bool:
    if block is not None:  # this process's calls only, not those of another test run on the machine
        return block[0] <= uid < block[0] + block[1]
    return uid == NOBODY or any(first <= uid < first + count for first, count in _RANGES)


def sandbox_processes() -> list[int]:
    """The processes running as a uid this process's sandbox gives its calls (the server's block of per-call uids;
    before it started, or with an older sandbox, nobody and every per-call uid)."""
    found, block = [], _block()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and _sandbox_uid(entry.stat().st_uid, block):
                found.append(int(entry.name))
        except FileNotFoundError:
            pass
    return found


nobody_processes = sandbox_processes  # the name tests/unit/rl/test_code_exec_reward.py imports


def settled(check, within_s=3.0):
    """Whether `check()` holds within `within_s` (the kernel reaps a dead namespace's processes promptly)."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
