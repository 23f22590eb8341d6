"""The CLI's thread settings: passive OpenMP waiting unless the environment chooses (utils/threads.py)."""
import os
import subprocess
import sys

from swiftlike.utils.threads import thread_environment, usable_cpus


def test_passive_waiting_unless_the_user_chose_a_policy():
    assert thread_environment({}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert thread_environment({"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)


def test_the_cli_sets_the_policy_before_torch_loads_and_keeps_a_users_choice():
    """A command that fails on its arguments has still configured its process: the policy is in place, and
    torch, imported by the command after it, was loaded with it (torch not yet loaded when it was set)."""
    probe = ("import os, sys; from swiftlike.cli.main import main; assert 'torch' not in sys.modules\n"
             "try:\n    rc = main(['export'])\nexcept SystemExit as e:\n    rc = e.code\n"
             "print(rc, os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[1:] == ["PASSIVE", "True"], out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[1:] == ["ACTIVE", "True"], out.stderr[-2000:]
