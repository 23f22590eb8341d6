"""The filesystem a sandboxed call sees: a new root holding the interpreter, the system's libraries and a scratch
directory, and nothing of the machine's files besides.

A read-only view of the whole tree would still show the project (its reference answers among them: a program
that read `swiftlike/dataset/data/code_tasks.jsonl` and ran the reference solutions passed their tests), the
trainer's checkpoints, every user's home and world-readable secrets. So the inner process builds a root of its own
in its private mount namespace, before it drops its privileges:

- a small tmpfs becomes the root (`pivot_root`), and the old tree is detached, so no path leads back to it;
- bind mounts of the system directories a program needs: `/usr` and `/bin`, `/sbin`, `/lib*` (as the symbolic
  links into /usr they are on a merged-/usr system); the interpreter's installation when it lives elsewhere (a
  pyenv or uv Python under /root, a conda environment), found from `sys._base_executable` and the standard
  library's paths; a virtual environment is not shown (the sandbox runs its base interpreter);
- every `site-packages` / `dist-packages` directory of those Pythons covered by an empty tmpfs: the standard
  library is importable, installed packages (the project's own, when it is installed, among them) are not;
- in `/etc` only what the dynamic loader and the C library read (`ld.so.cache`, `ld.so.conf*`, `localtime`,
  `alternatives`) and a `passwd`, `group`, `nsswitch.conf` and `hosts` written for the call;
- `/dev` with `null`, `zero`, `full`, `random`, `urandom` (bind mounts of the host's nodes), `fd`, `stdin`,
  `stdout`, `stderr` links into `/proc/self/fd`, and `shm` a link to `/tmp` (POSIX semaphores work);
- `/proc` of the call's own pid namespace (other processes, the trainer's environment among them, are not in
  it); where the kernel refuses a new procfs (a user namespace under a container that masks parts of the
  host's /proc), there is no /proc at all;
- the whole tree read-only and nosuid, then a fresh tmpfs at `/tmp` (the working directory, owned by the call's
  uid, `WORKDIR_MB`), the only place a call can write.

What the tools import therefore comes from the standard library or was imported by the sandbox server before it
forked the call: `swiftlike.tools` and each tool's plugin file (with whatever the file imports at its top). A
plugin tool that imports a package lazily, inside its function, fails with ModuleNotFoundError: import at the top
of the plugin file.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import glob
import os
import platform
import sys
import sysconfig
from dataclasses import dataclass

WORKDIR_MB = 32  # the tmpfs at /tmp: all files together
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives")
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("shm", "/tmp"))

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_MNT_DETACH = 0x2
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _AT_RECURSIVE, _AT_FDCWD = 0x1, 0x2, 0x8000, -100
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41}
_ST_FLAGS = ((os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC))
NEW_ROOT = "/tmp"  # where the new root is assembled, in the call's own mount namespace, before pivot_root

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


@dataclass(frozen=True)
class View:
    """What the new root shows, computed once in the sandbox server (resolving paths costs some milliseconds)."""
    directories: tuple[str, ...]  # bound recursively, at the same path
    files: tuple[str, ...]  # bound one by one (the /etc entries and device nodes that exist here)
    links: tuple[tuple[str, str], ...]  # (path, target): the system's symbolic links and /dev's
    hidden: tuple[str, ...]  # directories inside `directories` covered by an empty tmpfs (installed packages)
    interpreter: str  # the base interpreter's real path: `sys.executable` inside, the first entry of PATH


def _under(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _interpreter() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _python_roots(interpreter: str) -> list[str]:
    """The directories of the Python installation the sandbox runs: its prefix, its binary's directory and the
    standard library's paths, each only once (a path inside another is covered by it)."""
    base = {"base": sys.base_prefix, "installed_base": sys.base_prefix, "platbase": sys.base_exec_prefix,
            "installed_platbase": sys.base_exec_prefix}  # not a virtual environment's own lib directory
    paths = [sys.base_prefix, sys.base_exec_prefix, os.path.dirname(interpreter), os.path.dirname(os.__file__)]
    paths += [sysconfig.get_path(name, vars=base) for name in ("stdlib", "platstdlib")]
    real = sorted({os.path.realpath(p) for p in paths if p and os.path.isdir(p)}, key=len)
    roots: list[str] = []
    for path in real:
        if path != "/" and not _under(path, roots):
            roots.append(path)
    return roots


@functools.lru_cache(maxsize=1)
def view() -> View:
    """The new root's contents on this machine (see the module docstring)."""
    directories, links = [], []
    for name in SYSTEM_DIRS:
        path = "/" + name
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            directories.append(path)
    interpreter = _interpreter()
    system = directories + [os.path.realpath(path) for path in directories]
    directories += [root for root in _python_roots(interpreter) if not _under(root, system)]
    patterns = [f"{root}/lib*/python3*/{kind}" for root in directories for kind in ("site-packages", "dist-packages")]
    patterns += [f"{root}/lib/python3/dist-packages" for root in directories]
    hidden = sorted({os.path.realpath(p) for pattern in patterns for p in glob.glob(pattern) if os.path.isdir(p)})
    hidden = [p for p in hidden if _under(p, directories)]
    files = [f"/etc/{name}" for name in ETC_ENTRIES if os.path.exists(f"/etc/{name}")]
    files += [f"/dev/{name}" for name in DEVICES if os.path.exists(f"/dev/{name}")]
    links += [(f"/dev/{name}", target) for name, target in DEV_LINKS]
    return View(tuple(directories), tuple(files), tuple(links), tuple(hidden), interpreter)


def _etc_files(uid: int, gid: int) -> dict[str, str]:
    return {"/etc/passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/tmp:"
                           "/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            "/etc/group": f"root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n",
            "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
            "/etc/hosts": "127.0.0.1 localhost\n::1 localhost\n"}


def _skeleton(shown: View, uid: int, gid: int) -> None:
    """The mount points and files of the new root, on its tmpfs at NEW_ROOT."""
    for path in (*shown.directories, "/etc", "/dev", "/proc", "/tmp", "/.old"):
        os.makedirs(NEW_ROOT + path, mode=0o755, exist_ok=True)
    for path in shown.files:
        os.makedirs(os.path.dirname(NEW_ROOT + path), mode=0o755, exist_ok=True)
        if os.path.isdir(path):
            os.makedirs(NEW_ROOT + path, mode=0o755, exist_ok=True)
        else:
            os.close(os.open(NEW_ROOT + path, os.O_CREAT | os.O_WRONLY, 0o644))
    for path, target in shown.links:
        os.makedirs(os.path.dirname(NEW_ROOT + path), mode=0o755, exist_ok=True)
        os.symlink(target, NEW_ROOT + path)
    for path, text in _etc_files(uid, gid).items():
        descriptor = os.open(NEW_ROOT + path, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(descriptor, text.encode())
        os.close(descriptor)


def _pivot_root(new_root: str, put_old: str) -> None:
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: no syscall number for {platform.machine()}")
    check(_libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def read_only(path: str) -> None:
    """`path` and every mount below it read-only and nosuid: mount_setattr (Linux 5.12+), else a remount of each
    mount (keeping the flags a user namespace locks)."""
    attr = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0)
    if _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), _AT_RECURSIVE, ctypes.byref(attr),
                     ctypes.sizeof(attr)) == 0:
        return
    if ctypes.get_errno() != errno.ENOSYS:
        check(-1, f"mount_setattr({path}, read-only)")
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    for mount in [m for m in mounts if _under(m, [path])] or [path]:
        flags = sum(ms for st, ms in _ST_FLAGS if os.statvfs(mount).f_flag & st)
        check(_libc.mount(None, mount.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | flags, None),
              f"mount(remount {mount} read-only)")


def enter(shown: View, uid: int, gid: int) -> None:
    """In the inner process, in its new mount (and pid) namespace, with the privileges to mount: build the new
    root, pivot into it, make it read-only, and mount the call's scratch tmpfs at /tmp."""
    check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(make / private)")
    # handles taken before the tmpfs covers NEW_ROOT (and while every path is still reachable)
    handles = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in (*shown.directories, *shown.files)}
    check(_libc.mount(b"tmpfs", NEW_ROOT.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=0755"),
          "mount(tmpfs, the new root)")
    _skeleton(shown, uid, gid)
    for path, handle in handles.items():
        flags = _MS_BIND | (_MS_REC if path in shown.directories else 0)
        check(_libc.mount(f"/proc/self/fd/{handle}".encode(), (NEW_ROOT + path).encode(), None, flags, None),
              f"mount(bind {path})")
        os.close(handle)
    for path in shown.hidden:
        check(_libc.mount(b"tmpfs", (NEW_ROOT + path).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                          b"size=4k,mode=0555"), f"mount(tmpfs over {path})")
    # before the old tree goes: a procfs mounts in a user namespace only where one is already fully visible
    if _libc.mount(b"proc", (NEW_ROOT + "/proc").encode(), b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) != 0:
        os.rmdir(NEW_ROOT + "/proc")
    _pivot_root(NEW_ROOT, NEW_ROOT + "/.old")
    os.chdir("/")
    check(_libc.umount2(b"/.old", _MNT_DETACH), "umount2(the old root)")
    os.rmdir("/.old")
    read_only("/")
    options = f"size={WORKDIR_MB}m,mode=0700,uid={uid},gid={gid}".encode()
    check(_libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, options), "mount(tmpfs /tmp)")
