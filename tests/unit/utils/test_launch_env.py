"""The launch environment is read in one module, and process-wide variables are written only at the edges."""
import re

import pytest
from model_ids import TINY

from swiftlike.utils.launch_env import LaunchEnv
from paths import REPO

ROOT = REPO / "swiftlike"
LAUNCH = ("NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")

# The modules that may touch os.environ, each for its reason. Anything else reads LaunchEnv or takes an argument.
ENVIRONMENT_EDGES = {
    "utils/launch_env.py": "the launch variables, and the settings libraries read only from the environment",
    "utils/threads.py": "OMP_NUM_THREADS in the environment is the user's fixed thread count (no adaptation)",
    "utils/hub.py": "the user's offline switches (HF_HUB_OFFLINE, SWIFTLIKE_OFFLINE, ...)",
    "utils/io.py": "SWIFTLIKE_CACHE",
    "utils/logging.py": "SWIFTLIKE_LOG_LEVEL",
    "train/launch.py": "the environment torchrun's workers inherit",
    "ray/cluster.py": "the Ray connection and the variables forwarded to the actors",
    "ray/actors.py": "a Ray actor is its own launch edge: it sets the rank variables torchrun would",
    "tools/sandbox.py": "the sandbox server is a launch edge: it starts with PATH and LANG only, none of the caller's "
                        "secrets; SWIFTLIKE_ALLOW_UNISOLATED is the Python API's opt-out of isolation",
    "tools/isolation.py": "a sandboxed tool's environment is cleared to a fixed minimal one before it runs",
    "tools/program.py": "a program's interpreter is exec'd with the sandboxed child's environment, which "
                        "isolation.py has already cleared to the minimal one",
    "commands/app.py": "Gradio's analytics switch",
    "commands/webui.py": "Gradio's analytics switch",
    "eval/evalscope_backend.py": "evalscope runs as a subprocess in its own virtualenv: $SWIFTLIKE_EVALSCOPE_PYTHON "
                                 "names it, and it inherits the caller's environment plus its datasets cache and "
                                 "the hub offline switches",
    "utils/side_venv.py": "$SWIFTLIKE_EVALSCOPE_PYTHON / $SWIFTLIKE_VERIFIERS_PYTHON name the virtualenvs beside ours; "
                          "the scrubbed environment a verifiers bridge starts with is cut from ours",
    "infer/engine/vllm_engine.py": "VLLM_CPU_KVCACHE_SPACE, vLLM's own CPU cache variable, read where the "
                                   "engine's arguments are built",
}


@pytest.fixture
def clean_launch(monkeypatch):
    for name in LAUNCH:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_plain_process_is_one_process_at_rank_zero(clean_launch):
    env = LaunchEnv.current()
    assert (env.planned_world_size, env.is_worker, env.wants_torchrun, env.is_rank_zero) == (1, False, False, True)
    assert not env.has_process_group_env


def test_the_launching_process_plans_the_workers_it_starts(clean_launch):
    clean_launch.setenv("NPROC_PER_NODE", "2")
    clean_launch.setenv("NNODES", "3")
    env = LaunchEnv.current()
    assert env.wants_torchrun and env.planned_world_size == 6


def test_a_torchrun_worker_uses_its_world_size(clean_launch):
    for name, value in {"NPROC_PER_NODE": "2", "LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2"}.items():
        clean_launch.setenv(name, value)
    env = LaunchEnv.current()
    assert not env.wants_torchrun and env.is_worker and not env.is_rank_zero and env.has_process_group_env
    assert env.planned_world_size == 2


def test_a_snapshot_is_frozen(clean_launch):
    with pytest.raises(AttributeError):
        LaunchEnv.current().world_size = 4


def test_a_bad_value_names_the_variable(clean_launch):
    clean_launch.setenv("NPROC_PER_NODE", "two")
    with pytest.raises(ValueError, match="NPROC_PER_NODE='two' must be an integer"):
        LaunchEnv.current()


def test_gradient_accumulation_default_counts_the_planned_processes(clean_launch):
    from swiftlike.arguments.train_args import TrainArguments
    one = TrainArguments(model=TINY, dataset=["swiftlike/alpaca-mini"], per_device_train_batch_size=2)
    clean_launch.setenv("NPROC_PER_NODE", "4")
    four = TrainArguments(model=TINY, dataset=["swiftlike/alpaca-mini"], per_device_train_batch_size=2)
    assert (one.gradient_accumulation_steps, four.gradient_accumulation_steps) == (8, 2)


def test_only_the_edges_touch_os_environ():
    touching = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
                if re.search(r"\bos\.(environ|getenv|putenv)\b", p.read_text(encoding="utf-8"))}
    assert touching - set(ENVIRONMENT_EDGES) == set(), \
        "read the launch variables through utils.launch_env.LaunchEnv, or take the value as an argument"
    assert set(ENVIRONMENT_EDGES) - touching == set(), "an edge no longer touches os.environ: drop it from the list"
