"""What the sandbox's child processes do to themselves before a tool runs, which of it this machine allows, and
the check that it holds.

Each call is two processes. The outer one (our code only, it never runs the tool) starts a session, enters new
network, pid, mount and IPC namespaces and forks the inner one, the first process (pid 1) of the new pid
namespace: when it ends the kernel kills everything the tool started, wherever it moved itself (a process group
kill alone misses a `setsid()`). The inner one then, in order:

- files: a root of its own (`rootfs.py`): the interpreter, its standard library and the system's libraries
  read-only, a private tmpfs at /tmp as the working directory, /proc of its own pid namespace; no project, home,
  data or installed-packages directory;
- network: the new network namespace has only a loopback interface, and it is down, so every connect fails
  (127.0.0.1 included: the caller's loopback servers are in another namespace);
- limits: RLIMIT_CPU (SIGXCPU at the limit, SIGKILL a second later; the kernel's SIGXCPU does not reach a pid
  namespace's pid 1, so the SIGKILL is what ends it), RLIMIT_AS (the process's size at fork plus the memory
  limit, so a server that imported much still leaves the tool its full budget), RLIMIT_FSIZE, RLIMIT_NPROC,
  RLIMIT_NOFILE, no core files;
- identity: as root, a uid and gid of the call's own (the server holds a block of `UID_BLOCK` uids no other
  server on the machine uses, and hands one to each running call), no supplementary groups: every capability is dropped, and RLIMIT_NPROC, which the kernel counts per uid
  and never applies to root, gives each call its own budget of `MAX_PROCESSES`, so one call's fork bomb cannot
  starve another call's threads. Not as root, the namespaces are made inside a user namespace of the call's own
  that maps only the caller's uid (the kernel counts RLIMIT_NPROC per user namespace, so each call has its own
  budget there too) and every capability is dropped after the mounts;
- no_new_privs (a setuid binary gives nothing), death with its parent, an environment of PATH, HOME, TMPDIR,
  LANG and `SINGLE_THREADED` only, and last the seccomp filter (`seccomp.py`), which refuses new namespaces,
  mounts, ptrace, bpf, key rings, perf events and the like.

How the namespaces are entered depends on what the machine allows; `probe_order` lists the settings, strongest
first, and the sandbox server tries each for real (`verify` checks from inside a child that every protection
holds) and takes the first that passes:

- `namespaces`: root with CAP_SYS_ADMIN unshares them directly;
- `shared_user_namespace`: root without CAP_SYS_ADMIN (a container's default), where the kernel still allows user
  namespaces (creating one needs no capability): the server makes one user namespace at start that maps root
  (for the mounts) and the call uids, and each call enters it (setns) before unsharing the others;
- `own_user_namespace`: not root: a user namespace per call that maps the caller's uid;
- `none`: nothing of the above works (Docker's default seccomp profile refuses unshare, a kernel or an AppArmor
  policy refuses unprivileged user namespaces). Only the limits, the per-call uid as root, the minimal
  environment and the seccomp filter hold, so the sandbox refuses to run anything unless the caller opted out
  (`sandbox.py`: `--allow_unisolated_execution`, `SWIFTLIKE_ALLOW_UNISOLATED=1`).

Memory is limited per process, so a tool that forks can hold up to MAX_PROCESSES times its memory limit until the
call ends (a per-call total needs a cgroup, which CI may not have).
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import random
import resource
import signal
import socket
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from . import rootfs, seccomp
from .rootfs import check as _check

MAX_PROCESSES = 32  # RLIMIT_NPROC, per call
MAX_OPEN_FILES = 64
MAX_FILE_MB = 16  # RLIMIT_FSIZE: any one file
WORKDIR_MB = rootfs.WORKDIR_MB
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# numeric libraries start one thread rather than one per core: threads count against RLIMIT_NPROC
SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# As root, each running call gets a uid (and the same gid) of its own from a block of UID_BLOCK uids that its sandbox
# server holds alone: a lock file per block (LOCKS) keeps two servers on this machine (the ranks of one run, or two
# runs) from sharing one, and the block is drawn at random within a range far above the uids of people and services
# and below 2**31 (some tools read uids as signed). Where this process's user namespace does not map that range (a
# rootless container maps 65536 uids), the 1024 uids just below nobody's are taken instead.
UID_BLOCK = 64  # calls at once per server; more wait for one to end
# (first, count): 4096 blocks, so that at most 4096 (empty) lock files ever pile up in LOCKS
UID_RANGES = ((2_000_000_000, 4096 * UID_BLOCK), (65534 - 1024, 1024))
PREFERRED_FIRST_UID = UID_RANGES[0][0]
LOCKS = "/tmp/swiftlike-sandbox-uids"
NOBODY = 65534

Entry = Literal["namespaces", "shared_user_namespace", "own_user_namespace", "none"]

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@dataclass(frozen=True)
class Isolation:
    """How each call is isolated; the sandbox server settles on one when it starts (`probe_order`)."""
    entry: Entry
    as_root: bool  # the server runs as root: each call runs as a uid of its own from `uids`
    uids: tuple[int, int] | None = None  # (first, count) of the call uids, as root

    @property
    def isolated(self) -> bool:
        return self.entry != "none"

    def report(self) -> dict[str, str]:
        """What holds for a tool, by concern, in words for logs and docs; 'NOT ISOLATED' marks what does not."""
        limits = f"CPU time, memory, file size, open files and processes ({MAX_PROCESSES} per call) are limited"
        syscalls = "new namespaces, mounts, ptrace, bpf, key rings, perf events, kexec, modules, userfaultfd and " \
                   "io_uring are refused (seccomp)"
        if self.as_root:
            first, count = self.uids
            identity = f"a uid and gid of the call's own ({first}-{first + count - 1}), no groups, no capabilities"
        elif self.isolated:
            identity = "the caller's uid in a user namespace of the call's own, no capabilities"
        else:
            identity = "NOT ISOLATED: runs as the caller's uid, with the caller's rights"
        if not self.isolated:
            return {
                "network": "NOT ISOLATED: the code can open network connections, 127.0.0.1 included",
                "processes": "NOT ISOLATED: it sees every process" + (
                    "; it can signal only processes of its own uid, all killed when the call ends" if self.as_root
                    else ", can signal the caller's, and a process that leaves its group outlives the call"),
                "files": "NOT ISOLATED: " + ("it can read what any user may read (the project, world-readable files) "
                                             "and write where anyone may" if self.as_root else
                                             "it can read and write what the caller can"),
                "identity": identity, "system calls": syscalls, "limits": limits, "imports": self._imports()}
        return {
            "network": "no network (a new network namespace with no interface up)",
            "processes": "its own pid namespace: it sees and signals only its own processes, all killed when the "
                         "call ends",
            "files": "a root of its own: the interpreter, its standard library and the system's libraries "
                     "read-only, a private tmpfs at /tmp; no project, home, data or installed-packages directory",
            "identity": identity, "system calls": syscalls, "limits": limits,
            "imports": "the standard library, and what the sandbox server imported before the call (swiftlike.tools, "
                       "each tool's plugin file and what that file imports at its top)"}


    def _imports(self) -> str:
        """Unisolated: as root the call's uid may be unable to enter the interpreter's directory (a root-only home)."""
        closed = _closed_to_others(rootfs.view().interpreter) if self.as_root else None
        if closed is None:
            return "what the caller can import"
        return f"LIMITED: the call's uid cannot enter {closed}, so a tool can use only the modules the sandbox " \
               "imported before it ran (import what tools need at the top of their plugin file)"


def _closed_to_others(target: str) -> str | None:
    """The first directory above `target` that other users cannot enter (a root-only home, say)."""
    for directory in reversed(Path(target).parents):
        if not directory.stat().st_mode & stat.S_IXOTH:
            return str(directory)
    return None


def _mapped(first: int, count: int) -> bool:
    """Whether this process's user namespace maps uids and gids first..first+count-1."""
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/self/{name}") as f:
            ranges = [tuple(map(int, line.split())) for line in f if line.strip()]
        if not any(inside <= first and first + count <= inside + length for inside, _, length in ranges):
            return False
    return True


def _lock_directory() -> str | None:
    """LOCKS, made by and for root (None where someone else made it: its locks would prove nothing)."""
    os.makedirs(LOCKS, mode=0o700, exist_ok=True)
    return LOCKS if os.stat(LOCKS).st_uid == 0 else None


def call_uids() -> tuple[tuple[int, int], int | None] | None:
    """((first, UID_BLOCK), the lock's descriptor, held while the server lives) of the uids this server's calls
    run as (root only), or None when this namespace maps no range of them or every block is taken."""
    directory = _lock_directory()
    for first, count in UID_RANGES:
        if not _mapped(first, count):
            continue
        blocks = count // UID_BLOCK
        for block in random.sample(range(blocks), blocks):
            start = first + block * UID_BLOCK
            if directory is None:
                return (start, UID_BLOCK), None
            lock = os.open(f"{directory}/{start}", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock)
                continue
            return (start, UID_BLOCK), lock
    return None


def probe_order(as_root: bool, uids: tuple[int, int] | None = None) -> list[Isolation]:
    """The settings to try, strongest first; the last, `none`, needs nothing but setrlimit (and setuid as root).
    As root, `uids` is the server's block (`call_uids`); without one nothing can run."""
    if not as_root:
        return [Isolation("own_user_namespace", False), Isolation("none", False)]
    if uids is None:
        return []
    return [Isolation("namespaces", True, uids), Isolation("shared_user_namespace", True, uids),
            Isolation("none", True, uids)]


def shared_user_namespace(uids: tuple[int, int]) -> int:
    """A user namespace mapping root and the call uids to themselves (for `shared_user_namespace`), as a file
    descriptor the calls enter. A child makes it and this process, still root outside it, writes its maps."""
    made_read, made_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            number = 0 if _libc.unshare(_CLONE_NEWUSER) == 0 else ctypes.get_errno()
            os.write(made_write, str(number).encode())
            os.read(done_read, 1)
        finally:
            os._exit(0)
    try:
        number = int(os.read(made_read, 16) or errno.EIO)
        if number:
            raise OSError(number, f"unshare(CLONE_NEWUSER): {os.strerror(number)}")
        first, count = uids
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(f"0 0 1\n{first} {first} {count}\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.write(done_write, b"x")
        os.waitpid(pid, 0)
        for fd in (made_read, made_write, done_read, done_write):
            os.close(fd)


def enter_outer(isolation: Isolation, user_namespace: int | None) -> None:
    """In the outer process: a session of its own (the server kills the group), death with the server, and the
    new namespaces, which the next fork's child is the first process of."""
    os.setsid()
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if not isolation.isolated:
        return
    if isolation.entry == "shared_user_namespace":
        _check(_libc.setns(user_namespace, _CLONE_NEWUSER), "setns(the sandbox's user namespace)")
        os.close(user_namespace)
    own = isolation.entry == "own_user_namespace"
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(_CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWIPC | (_CLONE_NEWUSER if own else 0)),
           "unshare")
    if own:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            with open(path, "w") as f:
                f.write(text)
    # a change of credentials (entering a user namespace) clears the death signal
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def private_workdir(isolation: Isolation, uid: int) -> str | None:
    """Without namespaces: an empty temporary directory for the call (the server removes it when the call ends);
    with them, None (the inner process mounts its own tmpfs)."""
    if isolation.isolated:
        return None
    path = tempfile.mkdtemp(prefix="swiftlike-tool-")
    if isolation.as_root:
        os.chown(path, uid, uid)
    return path


def enter_inner(isolation: Isolation, *, uid: int, cpu_s: int, memory_mb: int, workdir: str | None) -> None:
    """In the process that runs the tool, before it runs: everything the module docstring lists, in order.
    `uid`: the call's own as root, the caller's otherwise."""
    with open("/proc/self/statm") as f:
        size_at_fork = int(f.read().split()[0]) * resource.getpagesize()
    path = SAFE_PATH
    if isolation.isolated:
        shown = rootfs.view()
        rootfs.enter(shown, uid, uid if isolation.as_root else os.getgid())
        workdir, path = "/tmp", f"{os.path.dirname(shown.interpreter)}:{SAFE_PATH}"
        sys.executable = shown.interpreter  # the venv the server ran in is not in the new root
    megabyte = 1 << 20
    for limit, value in ((resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)),
                         (resource.RLIMIT_AS, (size_at_fork + memory_mb * megabyte,) * 2),
                         (resource.RLIMIT_FSIZE, (MAX_FILE_MB * megabyte,) * 2),
                         (resource.RLIMIT_NPROC, (MAX_PROCESSES,) * 2),
                         (resource.RLIMIT_NOFILE, (MAX_OPEN_FILES,) * 2), (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(limit, value)
    if isolation.as_root:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    else:  # the caller's own capabilities, and in a user namespace those over its namespaces
        header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
        _check(_libc.capset(ctypes.byref(header), data), "capset(no capabilities)")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(PATH=path, HOME=workdir, TMPDIR=workdir, LANG="C.UTF-8", **SINGLE_THREADED)
    seccomp.install()  # last: the setup above mounts and unshares, which the filter refuses


def _capabilities() -> tuple[int, int]:
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    return data[0].effective | data[1].effective << 32, data[0].permitted | data[1].permitted << 32


def verify(isolation: Isolation, uid: int, hidden: str) -> None:
    """In a probe's inner process, after `enter_inner`: raise naming the first protection that does not hold.
    `hidden`: a path of the caller's that must not be visible (the package the server imported)."""
    failed = []
    if os.getpid() != 1:
        failed.append(f"processes: the call is pid {os.getpid()}, not 1 of a pid namespace of its own")
    if (os.getuid(), os.geteuid(), os.getgid() if isolation.as_root else uid) != (uid, uid, uid):
        failed.append(f"identity: the call runs as uid {os.getuid()} gid {os.getgid()}, not {uid}")
    if any(_capabilities()):
        failed.append("identity: the call holds capabilities")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        reached = probe.connect_ex(("127.0.0.1", 9))
    if reached != errno.ENETUNREACH:
        failed.append(f"network: a connection to 127.0.0.1 answered {os.strerror(reached)}, not 'Network is "
                      "unreachable'")
    if os.path.exists(hidden) or os.listdir("/tmp") or os.getcwd() != "/tmp":
        failed.append(f"files: {hidden} is visible, or /tmp is not an empty working directory")
    if _libc.unshare(_CLONE_NEWUSER) == 0 or ctypes.get_errno() != errno.EPERM:
        failed.append("system calls: unshare(CLONE_NEWUSER) was not refused")
    try:
        os.mkdir("/swiftlike-probe")
        failed.append("files: the root is writable")
    except OSError:
        pass
    if failed:
        raise RuntimeError("; ".join(failed))
