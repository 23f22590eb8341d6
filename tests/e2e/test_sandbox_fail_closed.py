"""Commands that run model output stop at their start where the tool sandbox cannot isolate it, and run with a loud
warning under --allow_unisolated_execution (saved in args.json).

The kernel is made to refuse every namespace the way Docker's default seccomp profile does: the command runs under
a seccomp filter (swiftlike/tools/seccomp.py) that answers unshare and setns with EPERM and clone with namespace
flags too, installed before the CLI starts, so the sandbox server inherits it; as root it also runs without
CAP_SYS_ADMIN (setpriv). So each command is a process of its own (not tests/helpers/cli.py's in-process run): a
seccomp filter cannot be taken off the process that installed it.
"""
import json
import os
import shutil
import subprocess
import sys

from model_ids import TINY

from swiftlike.rl.online.sandbox_check import sandbox_users
from swiftlike.train.outputs import read_log

REFUSING = ("import ctypes, runpy, sys; from swiftlike.tools import seccomp; "
            "ctypes.CDLL(None).prctl(38, 1, 0, 0, 0); seccomp.install(denied=('unshare', 'setns')); "
            "sys.argv = ['swiftlike'] + sys.argv[1:]; runpy.run_module('swiftlike.cli.main', run_name='__main__')")
WITHOUT_SYS_ADMIN = (["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"]
                     if os.geteuid() == 0 and shutil.which("setpriv") else [])
GRPO = ["rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/code-tasks#4", "--reward_funcs",
        "code_exec", "--num_generations", "4", "--per_device_train_batch_size", "4", "--max_completion_length", "16",
        "--logging_steps", "1", "--report_to", "none", "--save_steps", "100", "--torch_dtype", "float32",
        "--gradient_checkpointing", "false", "--max_steps", "1"]


def run_refused(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWIFTLIKE_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("SWIFTLIKE_ALLOW_UNISOLATED", None)
    return subprocess.run(WITHOUT_SYS_ADMIN + [sys.executable, "-c", REFUSING, *argv], env=env, capture_output=True,
                          text=True, timeout=900, cwd=tmp_path)


def assert_refused(result: subprocess.CompletedProcess, command: str) -> None:
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"swiftlike {command}: error: the tool sandbox cannot isolate model-written code"), last
    assert "--allow_unisolated_execution true" in last and "Traceback" not in result.stderr, result.stderr[-3000:]


def test_grpo_with_a_code_reward_stops_before_the_model_loads(tmp_path):
    result = run_refused(tmp_path, *GRPO, "--output_dir", str(tmp_path / "out"))
    assert_refused(result, "rlhf")
    assert not list((tmp_path / "out").glob("v0-*/logging.jsonl")), "the run trained before it was stopped"


def test_grpo_opted_out_runs_with_a_loud_warning_and_saves_the_choice(tmp_path):
    result = run_refused(tmp_path, *GRPO, "--output_dir", str(tmp_path / "out"), "--allow_unisolated_execution",
                         "true")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "TOOL SANDBOX NOT ISOLATED" in result.stderr and "network: NOT ISOLATED" in result.stderr
    run_dir = next((tmp_path / "out").glob("v0-*"))
    assert json.loads((run_dir / "args.json").read_text())["allow_unisolated_execution"] is True
    # scored, or missing where the call's uid cannot run our interpreter (a root-only home): the report says so
    assert [entry for entry in read_log(run_dir) if {"rewards/code_exec/mean", "rewards/code_exec/missing"} & set(entry)]


def test_sample_and_rollout_stop_at_their_start(tmp_path):
    assert_refused(run_refused(tmp_path, "sample", "--model", TINY, "--dataset", "swiftlike/code-tasks#2",
                               "--orm_model", "code_exec", "--num_return_sequences", "2", "--n_best_to_keep", "1", "--output_dir",
                               str(tmp_path / "sample")), "sample")
    assert_refused(run_refused(tmp_path, "rollout", "--model", TINY, "--multi_turn_scheduler", "tool_call_scheduler",
                               "--port", "1"), "rollout")


def test_only_runs_that_execute_model_output_need_the_sandbox():
    assert sandbox_users(["accuracy", "format"], "math_tip_trick") == []
    assert sandbox_users(["format", "code_exec"], "tool_call_scheduler") == [
        "--reward_funcs code_exec", "--multi_turn_scheduler tool_call_scheduler"]
