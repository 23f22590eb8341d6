"""The sandbox's isolation, attacked from inside (tests/helpers/sandbox_attacks.py) wherever it runs: here (root with
CAP_SYS_ADMIN), root without CAP_SYS_ADMIN (a container's default: a user namespace the sandbox makes), nobody (a
user namespace per call), and where the kernel refuses every namespace, where it must refuse to run anything
(`SandboxUnavailable`) unless the caller opted out, and then run with a loud warning.

Each setting is a "trainer" process started by the test, with a secret in its environment, a 0600 file, a file it
owns and a loopback listener of the test's; the settings run at once, and each attack's outcome comes back as JSON.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from paths import REPO
from sandbox_attacks import attacks, leftover_after_setsid, threads_beside_a_fork_bomb
from sandbox_checks import sandbox_processes, settled

from swiftlike.tools import seccomp
from swiftlike.tools.isolation import NOBODY, UID_RANGES
from swiftlike.tools.sandbox import (ALLOW_UNISOLATED_ENV, ToolLimits, require_isolation,
                                     run_program_isolated)

SECRET = "swiftlike-isolation-secret-" + uuid.uuid4().hex
REFERENCE = REPO / "swiftlike" / "dataset" / "data" / "code_tasks.jsonl"  # the code tasks' reference answers
SYSTEM_PYTHON = "/usr/bin/python3"  # a Python nobody can run (ours may live in a root-only home)
DRIVER = REPO / "tests" / "helpers" / "sandbox_attacks.py"
DENIED_WITH_EPERM = ("unshare", "mount", "ptrace", "bpf", "keyctl", "perf_event_open", "setns", "clone_namespace")
CALL_UIDS = range(UID_RANGES[0][0], UID_RANGES[0][0] + UID_RANGES[0][1])

# Runs a command in a user namespace (uids 0-65534 mapped to themselves) that allows no nested one, as a kernel
# without unprivileged user namespaces would: a helper left outside writes the maps, as newuidmap would.
_REFUSE_USER_NAMESPACES = '''
import ctypes, os, sys
read, write = os.pipe()
helper = os.fork()
if helper == 0:
    os.read(read, 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{os.getppid()}/{name}", "w") as f:
            f.write("0 0 65535")
    os._exit(0)
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:
    sys.exit("unshare(CLONE_NEWUSER) failed")
os.write(write, b"x")
os.waitpid(helper, 0)
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")
os.execvp(sys.argv[1], sys.argv[1:])
'''
# nobody keeps one capability, to read directories (the repository may live under /root, mode 0700); the
# sandbox's children lose it with every other
_AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=+dac_read_search",
              "--ambient-caps=+dac_read_search"]
_WITHOUT_SYS_ADMIN = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"]
# setting -> (command prefix, interpreter, extra config, the isolation entry expected; None: refused)
SETTINGS = {
    "root": ([], sys.executable, {"fork_bomb": True}, "namespaces"),
    "root without CAP_SYS_ADMIN": (_WITHOUT_SYS_ADMIN, sys.executable, {"fork_bomb": True}, "shared_user_namespace"),
    "nobody": (_AS_NOBODY, SYSTEM_PYTHON, {}, "own_user_namespace"),
    "root, namespaces refused": (_WITHOUT_SYS_ADMIN, SYSTEM_PYTHON, {"refuse": "namespaces"}, None),
    "root, namespaces refused, opted out": (_WITHOUT_SYS_ADMIN, SYSTEM_PYTHON,
                                            {"refuse": "namespaces", "allow": True, "fork_bomb": True}, "none"),
    "nobody, user namespaces refused": ([sys.executable, "-c", _REFUSE_USER_NAMESPACES] + _AS_NOBODY, SYSTEM_PYTHON,
                                        {}, None),
    "nobody, user namespaces refused, opted out": ([sys.executable, "-c", _REFUSE_USER_NAMESPACES] + _AS_NOBODY,
                                                   SYSTEM_PYTHON, {"allow": True}, "none"),
}
ISOLATED = [name for name, (*_, entry) in SETTINGS.items() if entry not in (None, "none")]
REFUSED = [name for name, (*_, entry) in SETTINGS.items() if entry is None]
OPTED_OUT = [name for name, (*_, entry) in SETTINGS.items() if entry == "none"]

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not Path(SYSTEM_PYTHON).exists(),
                                reason="starts trainers as nobody and without capabilities (needs root, setpriv and "
                                       f"{SYSTEM_PYTHON})")


def _files(directory: Path, owner: int) -> dict:
    """A 0600 secret and a file the setting's trainer owns, in a directory of its own."""
    directory.mkdir(mode=0o755)
    secret, own = directory / "id_rsa", directory / "own.txt"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    secret.chmod(0o600)
    own.write_text("the trainer's\n")
    for path in (directory, secret, own):
        os.chown(path, owner, owner)
    return {"secret": str(secret), "caller_file": str(own)}


@pytest.fixture(scope="module")
def seen():
    """Every setting's outcomes (the trainers run at once), with the trainer's stderr."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not Path(SYSTEM_PYTHON).exists():
        pytest.skip("needs root, setpriv and " + SYSTEM_PYTHON)
    shared = Path(tempfile.mkdtemp(prefix="swiftlike-isolation-test-"))
    shared.chmod(0o755)
    running = {}
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            for index, (setting, (prefix, python, extra, _)) in enumerate(SETTINGS.items()):
                owner = NOBODY if "nobody" in setting else 0
                config = {"repo": str(REPO), "reference": str(REFERENCE), "listed": str(REPO.parent),
                          "port": listener.getsockname()[1],
                          "marker": f"swiftlike-leftover-{uuid.uuid4().hex}", **_files(shared / str(index), owner),
                          **extra}
                running[setting] = subprocess.Popen(
                    prefix + [python, "-I", str(DRIVER), json.dumps(config)], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, cwd=shared, env={"PATH": os.environ["PATH"], "MY_SECRET": SECRET})
            finished = {setting: process.communicate(timeout=240) for setting, process in running.items()}
        results = {}
        for setting, (stdout, stderr) in finished.items():
            assert running[setting].returncode == 0, (setting, stderr)
            results[setting] = {**json.loads(stdout), "stderr": stderr}
        return results
    finally:
        for process in running.values():
            process.kill()
        subprocess.run(["rm", "-rf", str(shared)], check=True, timeout=30)


def _assert_isolated(setting: str, attacked: dict) -> None:
    """Nothing of the trainer's reachable, every denied call refused, ordinary programs working."""
    for attempt in ("read_reference", "read_secret", "read_trainer_environ", "write_caller_file", "signal_trainer"):
        assert attacked[attempt].startswith("refused"), (setting, attempt, attacked[attempt])
    _assert_project_directory_hidden(attacked)
    assert attacked["environ_with_secret"] == "done: []", setting
    assert attacked["connect"] == "refused: ENETUNREACH", setting
    assert ".ssh" not in attacked["list_root"] and "id_rsa" not in json.dumps(attacked), setting
    assert attacked["installed_package"] == "refused: ModuleNotFoundError", setting  # numpy: not the stdlib
    _assert_ordinary_programs_work_and_the_filter_holds(setting, attacked)


def _assert_project_directory_hidden(attacked: dict) -> None:
    """The directory holding the project (/work here) is absent, or, where it is /tmp (a clone in /tmp), the call's
    own empty /tmp."""
    assert attacked["list_work"] == "refused: ENOENT" or (
        str(REPO.parent) == "/tmp" and attacked["list_work"] == "done: []"), attacked["list_work"]


def _assert_ordinary_programs_work_and_the_filter_holds(setting: str, attacked: dict) -> None:
    for attempt in DENIED_WITH_EPERM:
        assert attacked[attempt] == "refused: EPERM", (setting, attempt, attacked[attempt])
    assert attacked["clone3"] == "refused: ENOSYS", setting  # so that glibc falls back to clone, whose flags it reads
    assert attacked["seccomp"] == "done: '2'", setting
    assert (attacked["threads"], attacked["fork"], attacked["subprocess"]) == ("done: 8", "done: 3", "done: '1/3'")
    assert attacked["imports"] == "done: ['json', 'collections', 'fractions', 'decimal']", setting


@needs_root
@pytest.mark.parametrize("setting", ISOLATED)
def test_isolation_holds_where_namespaces_work(seen, setting):
    got = seen[setting]
    assert got["entry"] == SETTINGS[setting][3] and got["calculator"] == '{"result": 42}', got
    assert not [words for words in got["isolation"].values() if "NOT ISOLATED" in words], got["isolation"]
    _assert_isolated(setting, got["attacks"])
    assert got["setsid_left"] == [], setting  # a setsid() child dies with its call's pid namespace
    uid = int(got["attacks"]["uid"].removeprefix("done: "))
    assert uid in CALL_UIDS if setting.startswith("root") else uid == NOBODY, (setting, uid)
    if "fork_bomb" in got:
        _assert_fork_bomb_contained(got["fork_bomb"])


@needs_root
@pytest.mark.parametrize("setting", REFUSED)
def test_where_namespaces_are_refused_the_sandbox_fails_closed(seen, setting):
    got = seen[setting]
    assert got.get("refused", {}).get("type") == "SandboxUnavailable", got
    message = got["refused"]["message"]
    assert "cannot isolate model-written code" in message and "unshare" in message, message
    for remedy in ("CAP_SYS_ADMIN", "user namespaces", "--allow_unisolated_execution", ALLOW_UNISOLATED_ENV):
        assert remedy in message, (remedy, message)


@needs_root
@pytest.mark.parametrize("setting", OPTED_OUT)
def test_opted_out_runs_unisolated_with_a_loud_warning_and_what_it_reports_holds(seen, setting):
    got = seen[setting]
    assert "TOOL SANDBOX NOT ISOLATED" in got["stderr"], got["stderr"]
    assert got["entry"] == "none" and got["calculator"] == '{"result": 42}', got
    report = got["isolation"]
    weak = {concern for concern, words in report.items() if "NOT ISOLATED" in words}
    assert {"network", "processes", "files"} <= weak, report
    attacked = got["attacks"]
    assert attacked["connect"] == "done: None", attacked  # the report says the network is reachable: it is
    _assert_ordinary_programs_work_and_the_filter_holds(setting, attacked)  # seccomp and limits still hold
    uid = int(attacked["uid"].removeprefix("done: "))
    if setting.startswith("root"):  # a uid of the call's own, whose every process is killed when the call ends
        assert uid in CALL_UIDS and "identity" not in weak and got["setsid_left"] == [], got
        assert attacked["read_secret"] == "refused: EACCES", attacked
        _assert_fork_bomb_contained(got["fork_bomb"])
    else:
        assert uid == NOBODY and "identity" in weak, got


def _assert_fork_bomb_contained(outcome: dict) -> None:
    assert outcome["held"] >= 20, outcome  # the bomb held its budget while the threaded program ran
    threaded = outcome["threaded"]
    assert (threaded["stdout"], threaded["stdout_cut"], threaded["error"]) == ("16\n", False, None), outcome
    assert outcome["bomb"]["error"] and "timed out" in outcome["bomb"]["error"], outcome


# ---------------------------------------------------------------- here, in this process (root or not)

@pytest.fixture(scope="module")
def attacked_here(tmp_path_factory):
    """The attacks from this process; the secret file is 0600 and the caller's file ours."""
    directory = tmp_path_factory.mktemp("isolation")
    os.environ["MY_SECRET"] = SECRET
    try:
        return attacks({"reference": str(REFERENCE), "listed": str(REPO.parent), "port": 9,
                        **_files(directory / "files", os.getuid())})
    finally:
        os.environ.pop("MY_SECRET")


def test_system_calls_that_attack_the_kernel_are_refused_and_programs_still_work(attacked_here):
    _assert_ordinary_programs_work_and_the_filter_holds("here", attacked_here)


def test_the_project_homes_and_the_trainer_are_out_of_sight(attacked_here):
    assert REFERENCE.exists() and attacked_here["read_reference"] == "refused: ENOENT", attacked_here
    for attempt in ("read_secret", "read_trainer_environ", "write_caller_file"):
        assert attacked_here[attempt].startswith("refused"), (attempt, attacked_here)
    _assert_project_directory_hidden(attacked_here)
    assert attacked_here["environ_with_secret"] == "done: []"
    assert attacked_here["installed_package"] == "refused: ModuleNotFoundError"


def test_a_setsid_child_dies_with_its_call():
    assert leftover_after_setsid(f"swiftlike-leftover-{uuid.uuid4().hex}") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="per-call uids are root's; not as root each call has a user "
                                               "namespace of its own, tested in test_isolation_holds_where_...")
def test_a_fork_bomb_does_not_starve_another_calls_threads():
    """Each call has a process budget of its own: a correct program with 16 threads passes while another call's
    fork bomb holds all the processes it can get (as nobody for every call, the two shared one budget)."""
    outcome = threads_beside_a_fork_bomb(lambda: len(sandbox_processes()))
    _assert_fork_bomb_contained(outcome)
    assert settled(lambda: not sandbox_processes()), sandbox_processes()


@pytest.mark.skipif(os.geteuid() != 0, reason="per-call uids are root's")
def test_the_calls_after_a_fork_bomb_run_on_other_uids():
    """A finished call's uid is taken last: a fork bomb's processes may still be dying when its call has answered,
    and they count against that uid's process limit (reused at once, the next call could not fork its program:
    EAGAIN, in code_exec's fork-bomb test, one full run in four)."""
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"

    def uid() -> str:
        outcome = run_program_isolated("import os\nprint(os.getuid())", limits=ToolLimits(timeout_s=20))
        assert outcome.error is None, outcome
        return outcome.stdout.strip()

    before = uid()
    run_program_isolated(bomb, limits=ToolLimits(timeout_s=2.0, cpu_s=1, memory_mb=64))  # its output is dropped
    after = [uid() for _ in range(3)]
    # each call on a uid no recent call had (a uid reused at once: the bomb on `before`'s, then all three on it)
    assert len({before, *after}) == 4, (before, after)


def test_require_isolation_answers_what_holds_here():
    report = require_isolation()
    assert not [words for words in report.values() if "NOT ISOLATED" in words], report
    assert run_program_isolated("print(sum(range(10)))", limits=ToolLimits(timeout_s=20)).stdout == "45\n"


def test_the_seccomp_filter_is_checked_and_refuses_unknown_names():
    program = seccomp.compiled()
    assert len(program) % 8 == 0 and 40 < len(program) // 8 < 255  # classic BPF, every jump within reach
    with pytest.raises(ValueError, match="no syscall numbers for frobnicate"):
        seccomp.compiled(("frobnicate",))
