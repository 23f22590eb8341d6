"""A seccomp filter: the system calls a sandboxed tool has no use for, refused by the kernel before they run.

The sandbox's child runs without capabilities as a uid that owns nothing, but the kernel still offers it calls whose
only use to a tool is attacking the kernel or escaping: a new user namespace (which hands back every capability
inside it, and with it the code of nf_tables, mounts and the like), mounts, ptrace and reading other processes'
memory, bpf, the key rings, perf events, kexec, modules, userfaultfd and io_uring (the last two the raw material of
many kernel exploits). The filter answers those with EPERM, as a kernel that refuses them would, so a program that
tries one sees an ordinary error and goes on.

`clone` is allowed unless its flags ask for a namespace; `clone3` passes its flags in memory that a filter cannot
read, so it answers ENOSYS, on which glibc (2.34 and later) falls back to `clone`: threads, `fork` and
`subprocess` work as before. A call from another architecture than the two we list (32-bit x86 calls from a 64-bit
process, x32) never reaches a table it could dodge: another audit architecture kills the process, an x32 call on
x86_64 answers ENOSYS.

Why a hand-written classic BPF program through `prctl(PR_SET_SECCOMP)` and not a library: no maintained Python
binding of libseccomp ships wheels (PyPI has `pyseccomp` 0.1.2, a ctypes wrapper last released in 2021 that needs
the system's libseccomp.so.2), and the filter is a few dozen instructions with the numbers of two architectures,
which `tests/unit/tools/test_isolation.py` checks call by call. The kernel requires `no_new_privs` (or
CAP_SYS_ADMIN) before a filter is installed; filters stack and are inherited by every child, and none can be
removed.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import struct
from collections.abc import Iterable

# the calls denied with EPERM inside the sandbox, by name (see the module docstring for why each)
DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
          "move_mount", "open_tree", "open_tree_attr", "mount_setattr", "chroot", "ptrace", "process_vm_readv",
          "process_vm_writev", "pidfd_getfd", "bpf", "keyctl", "add_key", "request_key", "perf_event_open",
          "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "userfaultfd",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at")
# the namespace flags of clone(2) (CLONE_NEWTIME does not fit clone's flags, only unshare's and clone3's)
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_AUDIT_ARCH_X86_64, _AUDIT_ARCH_AARCH64 = 0xC000003E, 0xC00000B7
_X32_SYSCALL_BIT = 0x40000000
# syscall numbers: x86_64 (arch/x86/entry/syscalls/syscall_64.tbl), aarch64 (include/uapi/asm-generic/unistd.h)
_NUMBERS = {
    "unshare": (272, 97), "setns": (308, 268), "clone": (56, 220), "clone3": (435, 435), "mount": (165, 40),
    "umount2": (166, 39), "pivot_root": (155, 41), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "move_mount": (429, 429), "open_tree": (428, 428),
    "open_tree_attr": (467, 467), "mount_setattr": (442, 442), "chroot": (161, 51), "ptrace": (101, 117),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "pidfd_getfd": (438, 438), "bpf": (321, 280),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "perf_event_open": (298, 241),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "open_by_handle_at": (304, 265),
}
_ARCHES = ((_AUDIT_ARCH_X86_64, 0), (_AUDIT_ARCH_AARCH64, 1))
_MACHINES = {"x86_64", "aarch64", "arm64"}  # platform.machine() of the two

# classic BPF opcodes and seccomp's return values (linux/filter.h, linux/seccomp.h)
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low half (both are little-endian)
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _program(denied: tuple[str, ...], clone_flags: int, enosys: tuple[str, ...]) -> list[tuple]:
    """The filter as (opcode, jump-if-true, jump-if-false, k) with symbolic jump targets (resolved by `_assemble`)."""
    code: list[tuple] = [(_LD_ABS, None, None, _OFFSET_ARCH)]
    for arch, _ in _ARCHES:
        code.append((_JEQ, f"arch{arch}", None, arch))
    code.append((_RET, None, None, _RET_KILL_PROCESS))
    for arch, column in _ARCHES:
        code += [f"arch{arch}", (_LD_ABS, None, None, _OFFSET_NR)]
        if arch == _AUDIT_ARCH_X86_64:
            code.append((_JGE, "enosys", None, _X32_SYSCALL_BIT))
        if clone_flags:
            code.append((_JEQ, "clone", None, _NUMBERS["clone"][column]))
        code += [(_JEQ, "enosys", None, _NUMBERS[name][column]) for name in enosys]
        code += [(_JEQ, "eperm", None, _NUMBERS[name][column]) for name in denied]
        code.append((_RET, None, None, _RET_ALLOW))
    if clone_flags:
        code += ["clone", (_LD_ABS, None, None, _OFFSET_ARG0), (_JSET, "eperm", None, clone_flags),
                 (_RET, None, None, _RET_ALLOW)]
    return code + ["eperm", (_RET, None, None, _RET_ERRNO | errno.EPERM),
                   "enosys", (_RET, None, None, _RET_ERRNO | errno.ENOSYS)]


def _assemble(code: list) -> bytes:
    """Labels resolved to the relative jumps classic BPF takes (forward only, at most 255 instructions)."""
    labels, position = {}, 0
    for item in code:
        if isinstance(item, str):
            labels[item] = position
        else:
            position += 1
    out, position = [], 0
    for item in code:
        if isinstance(item, str):
            continue
        opcode, true, false, k = item
        jumps = [0 if target is None else labels[target] - position - 1 for target in (true, false)]
        if not all(0 <= jump <= 255 for jump in jumps):
            raise ValueError(f"seccomp filter: a jump of {jumps} instructions does not fit classic BPF")
        out.append(struct.pack("=HBBI", opcode, *jumps, k))
        position += 1
    return b"".join(out)


@functools.lru_cache(maxsize=4)
def compiled(denied: tuple[str, ...] = DENIED, clone_flags: int = CLONE_NAMESPACES,
             enosys: tuple[str, ...] = ("clone3",)) -> bytes:
    """The filter's instructions: `denied` calls answer EPERM, `clone` with any of `clone_flags` EPERM, `enosys`
    calls ENOSYS, every other call of x86_64 and aarch64 runs, and another architecture is killed."""
    unknown = sorted((set(denied) | set(enosys)) - set(_NUMBERS))
    if unknown:
        raise ValueError(f"seccomp filter: no syscall numbers for {', '.join(unknown)}; known: {', '.join(_NUMBERS)}")
    return _assemble(_program(tuple(denied), clone_flags, tuple(enosys)))


def install(denied: Iterable[str] = DENIED, clone_flags: int = CLONE_NAMESPACES,
            enosys: Iterable[str] = ("clone3",)) -> None:
    """Install the filter on this process (inherited by its children; permanent). Needs no_new_privs or
    CAP_SYS_ADMIN; raises OSError when the kernel refuses it."""
    if platform.machine() not in _MACHINES:  # the filter would kill the process at its next call
        raise OSError(errno.ENOSYS, f"seccomp filter: no syscall table for {platform.machine()} (only "
                                    f"{', '.join(sorted(_MACHINES))})")
    program = compiled(tuple(denied), clone_flags, tuple(enosys))
    instructions = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(instructions, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"prctl(PR_SET_SECCOMP): {os.strerror(number)}")
