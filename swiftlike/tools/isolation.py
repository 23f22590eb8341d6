"""What the sandbox's child processes do to themselves before a tool runs, and which of it this machine allows.

Each call is two processes. The outer one (our code only, it never runs the tool) starts a session, enters new
namespaces and forks the inner one, which is the first process (pid 1) of a new pid namespace; when it ends the
kernel kills everything the tool started, wherever it moved itself (a process group kill alone misses a
`setsid()`). The inner one then, in order:

- network: a new network namespace has only a loopback interface, and it is down, so every connect fails
  (127.0.0.1 included: the parent's loopback servers are in another namespace);
- files: a new mount namespace in which the whole tree is remounted read-only and nosuid (mount_setattr,
  recursive), a fresh size-limited tmpfs over /tmp is the working directory, and /proc is the new pid
  namespace's own (other processes, their command lines and environments are not there); as root, a directory
  nobody cannot enter that holds the interpreter (a root-only home) is covered by a tmpfs showing only the
  interpreter's directories, so tools import what the caller can and see nothing else there;
- limits: RLIMIT_CPU (SIGXCPU at the limit, SIGKILL a second later; with a pid namespace the inner process is
  its pid 1, which the kernel's SIGXCPU does not reach, so the SIGKILL is what ends it), RLIMIT_AS (the
  process's size at fork plus the memory limit, so a server that imported much still leaves the tool its full
  budget), RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE, no core files;
- identity: as root, uid and gid 65534 (nobody) with no supplementary groups, which drops every capability and
  makes RLIMIT_NPROC bind (the kernel does not apply it to root); not as root, the namespaces are made inside a
  new user namespace mapping only the caller's own uid, and every capability is dropped after the mounts;
- no_new_privs (a setuid binary gives nothing), death with its parent, an environment of PATH, HOME, TMPDIR,
  LANG and `SINGLE_THREADED` only.

RLIMIT_NPROC counts the processes of a user in a user namespace: as root the limit is shared by the calls that
run at once as nobody (a fork bomb's processes die with its call, which frees the budget); not as root each
call's user namespace counts its own. Memory is limited per process, so a tool that forks can hold up to
MAX_PROCESSES times its memory limit until the call ends (a per-call total needs a cgroup, which CI may not have).

A machine that refuses namespaces (a container without CAP_SYS_ADMIN, a kernel without unprivileged user
namespaces) or mount_setattr (Linux < 5.12) gets what it allows: `probe_order` lists weaker settings to try
when the sandbox server starts, and `Isolation.report` says what then does not hold.
"""
from __future__ import annotations

import ctypes
import functools
import os
import resource
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
MAX_PROCESSES = 32  # RLIMIT_NPROC
MAX_OPEN_FILES = 64
MAX_FILE_MB = 16  # RLIMIT_FSIZE: any one file
WORKDIR_MB = 32  # the tmpfs at /tmp: all files together
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# numeric libraries start one thread rather than one per core: threads count against RLIMIT_NPROC
SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _AT_RECURSIVE, _AT_FDCWD = 0x1, 0x2, 0x8000, -100
_SYS_MOUNT_SETATTR = 442  # the same number on every Linux architecture (added after the syscall tables merged)
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


@dataclass(frozen=True)
class Isolation:
    """The protections a call gets; the sandbox server settles on one when it starts (`probe_order`)."""
    namespaces: bool  # new network, pid, mount and IPC namespaces (in a user namespace when not root)
    readonly_root: bool  # needs namespaces: everything read-only and nosuid but a private tmpfs at /tmp
    as_root: bool  # the server runs as root: calls run as nobody

    def report(self) -> dict[str, str]:
        """What holds for a tool, by concern, in words for logs and docs; 'NOT ISOLATED' marks what does not."""
        limits = "CPU time, memory, file size, open files and processes are limited"
        if self.as_root:
            identity = "runs as uid/gid 65534 (nobody) without capabilities"
        elif self.namespaces:
            identity = "runs as the caller's uid, capabilities dropped: it can read what the caller can read"
        else:
            identity = "NOT ISOLATED: runs as the caller's uid and can read what the caller can read"
        if self.readonly_root:
            files = "writes only to a private tmpfs at /tmp (the rest is read-only)"
        elif self.as_root:
            files = "writes only where nobody may (its own temporary directory, world-writable directories)"
        else:
            files = "NOT ISOLATED: can write wherever the caller can"
        closed = sorted({closed for closed, _ in interpreter_exposures()}) if self.as_root else []
        if not closed:
            imports = "a tool can import what the caller can"
        elif self.readonly_root:
            imports = f"a tool can import what the caller can: {', '.join(closed)} (closed to nobody) shows only " \
                      "the Python installation and import path inside it"
        else:
            imports = f"LIMITED: nobody cannot read {', '.join(closed)}, so a tool can use only the modules the " \
                      "sandbox imported before it ran (import what tools need at the top of their plugin file)"
        return {
            "network": "no network (a new network namespace with no interface up)" if self.namespaces else
            "NOT ISOLATED: the tool can open network connections",
            "processes": ("its own pid namespace: it sees and signals only its own processes, all killed when the "
                          "call ends" if self.namespaces else "its process group is killed when the call ends; "
                          "NOT ISOLATED: a process that leaves the group outlives the call"),
            "files": files, "identity": identity, "limits": limits, "imports": imports}


def _closed_to_others(target: Path) -> str | None:
    """The first directory above `target` that other users cannot enter (a root-only home, say)."""
    for directory in reversed(target.parents):
        if not directory.stat().st_mode & stat.S_IXOTH:
            return str(directory)
    return None


def interpreter_exposures() -> list[tuple[str, str]]:
    """(closed directory, directory inside it) for the interpreter's installation and import path where a
    directory above them is closed to nobody: the inner process shows these, and nothing else, through it.
    Paths under /tmp are left out: the tool's /tmp is its own, and the server imported the plugins there."""
    return _exposures(sys.base_prefix, sys.prefix, *sys.path)


@functools.lru_cache(maxsize=4)  # computed in the server (some ms of resolving paths), inherited by each fork
def _exposures(*paths: str) -> list[tuple[str, str]]:
    wanted = {Path(p).resolve() for p in paths if p and Path(p).is_dir()}
    exposures: list[tuple[str, str]] = []
    for path in sorted(wanted):
        shown = any(path.is_relative_to(earlier) for _, earlier in exposures)
        closed = None if shown or path.is_relative_to("/tmp") else _closed_to_others(path)
        if closed is not None:
            exposures.append((closed, str(path)))
    return exposures


def _show_through_closed_directories() -> None:
    """Replace each directory closed to nobody by an empty read-only tmpfs showing only the interpreter's
    directories inside it (bind mounts, made from handles taken before the tmpfs covers them)."""
    handles = [(closed, path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for closed, path in interpreter_exposures()]
    closed_directories = list(dict.fromkeys(closed for closed, _, _ in handles))
    for closed in closed_directories:
        _check(_libc.mount(b"tmpfs", closed.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=0755"),
               f"mount(tmpfs {closed})")
    for _, path, handle in handles:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _check(_libc.mount(f"/proc/self/fd/{handle}".encode(), path.encode(), None, _MS_BIND | _MS_REC, None),
               f"mount(bind {path})")
        os.close(handle)
    for closed in closed_directories:
        _read_only(closed)


def _read_only(path: str) -> None:
    attr = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0)
    _check(_libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), _AT_RECURSIVE, ctypes.byref(attr),
                         ctypes.sizeof(attr)), f"mount_setattr({path}, read-only)")


def probe_order(as_root: bool) -> list[Isolation]:
    """The settings to try, strongest first; the last one needs nothing but setrlimit (and setuid as root)."""
    return [Isolation(True, True, as_root), Isolation(True, False, as_root), Isolation(False, False, as_root)]


def enter_outer(isolation: Isolation) -> None:
    """In the outer process: a session of its own (the server kills the group), death with the server, and
    the new namespaces, which the next fork's child is the first process of."""
    os.setsid()
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if not isolation.namespaces:
        return
    flags = _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWIPC
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(flags | (0 if isolation.as_root else _CLONE_NEWUSER)), "unshare")
    if not isolation.as_root:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            with open(path, "w") as f:
                f.write(text)


def private_workdir(isolation: Isolation) -> str | None:
    """Without a private /tmp: an empty temporary directory for the call (the server removes it when the call
    ends); with one, None (the inner process mounts its own tmpfs)."""
    if isolation.readonly_root:
        return None
    path = tempfile.mkdtemp(prefix="swiftlike-tool-")
    if isolation.as_root:
        os.chown(path, NOBODY, NOBODY)
    return path


def enter_inner(isolation: Isolation, *, cpu_s: int, memory_mb: int, workdir: str | None) -> None:
    """In the process that runs the tool, before it runs: everything the module docstring lists, in order."""
    with open("/proc/self/statm") as f:
        size_at_fork = int(f.read().split()[0]) * resource.getpagesize()
    if isolation.namespaces:  # first, so that nothing mounted here shows in the caller's namespace
        _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(make / private)")
    if isolation.readonly_root:
        uid = NOBODY if isolation.as_root else os.getuid()
        gid = NOBODY if isolation.as_root else os.getgid()
        _read_only("/")
        if isolation.as_root:
            _show_through_closed_directories()
        options = f"size={WORKDIR_MB}m,mode=0700,uid={uid},gid={gid}".encode()
        _check(_libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, options), "mount(tmpfs /tmp)")
        workdir = "/tmp"
    if isolation.namespaces:
        _check(_libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mount(/proc)")
    megabyte = 1 << 20
    for limit, value in ((resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)),
                         (resource.RLIMIT_AS, (size_at_fork + memory_mb * megabyte,) * 2),
                         (resource.RLIMIT_FSIZE, (MAX_FILE_MB * megabyte,) * 2),
                         (resource.RLIMIT_NPROC, (MAX_PROCESSES,) * 2),
                         (resource.RLIMIT_NOFILE, (MAX_OPEN_FILES,) * 2), (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(limit, value)
    if isolation.as_root:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    else:  # the caller's own capabilities, and in a user namespace those over its namespaces
        header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
        _check(_libc.capset(ctypes.byref(header), data), "capset(no capabilities)")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(PATH=SAFE_PATH, HOME=workdir, TMPDIR=workdir, LANG="C.UTF-8", **SINGLE_THREADED)
