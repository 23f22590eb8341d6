"""Attacks on the tool sandbox, run by a "trainer" process wherever a test starts it (as root, without
CAP_SYS_ADMIN, as nobody, with namespaces refused), printing what each attack got as one JSON object.

Usage: python -I sandbox_attacks.py CONFIG_JSON, where the config names the repository, the reference answers, the
directory to list, a secret file, a file the caller owns, a listening port, a marker for leftover processes, and `allow` (opt out of isolation) and `refuse`
("namespaces": a seccomp filter of this process makes the kernel refuse every namespace, as Docker's default
profile does). The trainer's environment holds MY_SECRET, which no sandboxed code may read.
"""
import ctypes
import json
import os
import sys
import threading
import time

# Run inside the sandbox with the config on stdin: each attempt's outcome, "done: ..." or "refused: ERRNO".
ATTACKS = r'''
import ctypes, errno, json, os, platform, socket, subprocess, sys, threading
config = json.loads(sys.stdin.read())
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": {"bpf": 321, "keyctl": 250, "perf_event_open": 298, "clone": 56, "clone3": 435},
      "aarch64": {"bpf": 280, "keyctl": 219, "perf_event_open": 241, "clone": 220, "clone3": 435}}[platform.machine()]

def call(function, *arguments):
    result = function(*arguments)
    if result == -1:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result

def clone_namespace():
    pid = call(libc.syscall, NR["clone"], 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)

def perf_event():
    attr = (ctypes.c_char * 128)()
    ctypes.memmove(attr, (1).to_bytes(4, "little") + (128).to_bytes(4, "little"), 8)  # PERF_TYPE_SOFTWARE, size
    return call(libc.syscall, NR["perf_event_open"], attr, 0, -1, -1, 0)

def environ_with_secret():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                found += [pid] if config["secret_value"].encode() in f.read() else []
        except OSError:
            pass
    return found

def threads():
    started = [threading.Thread(target=lambda: None) for _ in range(8)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return len(started)

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

def seccomp_mode():
    with open("/proc/self/status") as f:
        return [line.split()[1] for line in f if line.startswith("Seccomp:")][0]

def write_caller_file():
    with open(config["caller_file"], "a") as f:
        f.write("written by the sandbox")

attempts = {
    "read_reference": lambda: open(config["reference"]).read(100),
    "read_secret": lambda: open(config["secret"]).read(),
    "read_trainer_environ": lambda: open(f"/proc/{config['trainer_pid']}/environ", "rb").read(100),
    "environ_with_secret": environ_with_secret,
    "list_work": lambda: os.listdir(config["listed"]),  # the directory holding the project (/work here)
    "list_root": lambda: sorted(os.listdir("/root")),
    "write_caller_file": write_caller_file,
    "connect": lambda: socket.create_connection(("127.0.0.1", config["port"]), timeout=2).close(),
    "signal_trainer": lambda: os.kill(config["trainer_pid"], 0),
    "unshare": lambda: call(libc.unshare, 0x10000000 | 0x00020000 | 0x40000000),  # USER | NS | NET
    "mount": lambda: call(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None),
    "bpf": lambda: call(libc.syscall, NR["bpf"], 0, (ctypes.c_char * 128)(), 128),  # BPF_MAP_CREATE
    "keyctl": lambda: call(libc.syscall, NR["keyctl"], 0, -3, 1),  # the session key ring's id, made if missing
    "perf_event_open": perf_event,
    "setns": lambda: call(libc.setns, os.open("/proc/self/ns/net", os.O_RDONLY), 0),
    "clone_namespace": clone_namespace,
    "clone3": lambda: call(libc.syscall, NR["clone3"], None, 0),
    "threads": threads,
    "fork": fork,
    "subprocess": lambda: subprocess.run(["python3", "-c", "import fractions; print(fractions.Fraction(1, 3))"],
                                         capture_output=True, text=True, timeout=20).stdout.strip(),
    "imports": lambda: [__import__(name).__name__ for name in ("json", "collections", "fractions", "decimal")],
    "installed_package": lambda: __import__("numpy").__name__,
    "uid": os.getuid,
    "seccomp": seccomp_mode,
    # last: where it is allowed, the process is traced from then on and stops at the next signal it gets
    "ptrace": lambda: call(libc.ptrace, 0, 0, None, None),  # PTRACE_TRACEME
}
seen = {}
for name, attempt in attempts.items():
    try:
        seen[name] = f"done: {attempt()!r}"[:300]
    except OSError as error:
        seen[name] = f"refused: {errno.errorcode.get(error.errno, error.errno)}"
    except Exception as error:
        seen[name] = f"refused: {type(error).__name__}"
print(json.dumps(seen))
'''
SETSID = '''
import subprocess, sys
subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", sys.stdin.read()], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''
# holds its whole process budget until the call's wall clock ends it
FORK_BOMB = '''
import os, time
while True:
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
time.sleep(60)
'''
THREADED = '''
import threading
results = []
threads = [threading.Thread(target=results.append, args=(i,)) for i in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(results))
'''


def _limits():
    from swiftlike.tools.sandbox import ToolLimits
    return ToolLimits(timeout_s=30, cpu_s=5, memory_mb=256, max_output_chars=20_000)


def marked_processes(marker: str) -> list[int]:
    """Processes with `marker` among their arguments (the setsid child, if it outlived its call)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):  # an argument of its own, not inside a config
                    found.append(int(pid))
        except OSError:
            pass
    return found


def leftover_after_setsid(marker: str) -> list[int]:
    """The processes a call's `setsid()` child left running after the call (killed here, whatever they are)."""
    from swiftlike.tools.sandbox import run_program_isolated
    run_program_isolated(SETSID, stdin=marker, limits=_limits())
    deadline = time.monotonic() + 3
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = marked_processes(marker)
    for pid in left:
        os.kill(pid, 9)
    return left


def attacks(config: dict) -> dict:
    """Each attack's outcome inside the sandbox; `config` as the module docstring says, less the process's own."""
    from swiftlike.tools.sandbox import run_program_isolated
    given = json.dumps({**config, "trainer_pid": os.getpid(), "secret_value": os.environ["MY_SECRET"]})
    outcome = run_program_isolated(ATTACKS, stdin=given, limits=_limits())
    return json.loads(outcome.stdout) if outcome.error is None else {"error": outcome.error}


def threads_beside_a_fork_bomb(count_processes) -> dict:
    """A correct threaded program run while another call's fork bomb holds every process it can get
    (`count_processes()`: how many the sandbox's users run now; the program starts once the bomb holds 20)."""
    from swiftlike.tools.sandbox import ToolLimits, run_program_isolated
    bomb = {}
    thread = threading.Thread(target=lambda: bomb.update(run_program_isolated(
        FORK_BOMB, limits=ToolLimits(timeout_s=4, cpu_s=3)).__dict__))
    thread.start()
    deadline = time.monotonic() + 4
    while count_processes() < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    held = count_processes()
    threaded = run_program_isolated(THREADED, limits=_limits()).__dict__
    thread.join()
    return {"held": held, "threaded": threaded, "bomb": bomb}


def main(config: dict) -> None:
    from swiftlike.tools import sandbox
    if config.get("allow"):
        sandbox.allow_unisolated_execution()
    out = {}
    try:
        out["isolation"] = sandbox.sandbox_isolation()
    except Exception as error:  # the named refusal where nothing isolates (SandboxUnavailable)
        out["refused"] = {"type": type(error).__name__, "message": str(error)}
        print(json.dumps(out))
        return
    out["entry"] = getattr(sandbox._running_server(), "started", {}).get("entry")
    out["calculator"] = sandbox.run_tool_isolated("calculator", {"expression": "6 * 7"}).text
    out["attacks"] = attacks(config)
    out["setsid_left"] = leftover_after_setsid(config["marker"])
    if config.get("fork_bomb"):
        from sandbox_checks import sandbox_processes
        out["fork_bomb"] = threads_beside_a_fork_bomb(lambda: len(sandbox_processes()))
    print(json.dumps(out))


if __name__ == "__main__":
    CONFIG = json.loads(sys.argv[1])
    sys.path[:0] = [CONFIG["repo"], os.path.dirname(os.path.abspath(__file__))]
    if CONFIG.get("refuse") == "namespaces":  # before the sandbox server starts: it inherits the filter
        from swiftlike.tools import seccomp
        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, which a filter needs
        seccomp.install(denied=("unshare", "setns"))
    main(CONFIG)
