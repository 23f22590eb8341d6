"""`swiftlike rlhf --use_ray true` with no cluster running: the job starts a local Ray cluster itself and stops it
after. (tests/e2e/test_ray.py runs its jobs on a `ray start` head, which runs only while that module does.) The
driver runs in this process (run_cli), so the cluster it starts is this process's children, stopped by its
ray.shutdown()."""
import pytest

from test_ray import GRPO, check_synced, finished_log, run_job, write_job

pytest.importorskip("ray")


def test_grpo_colocate_train_and_rollout(tmp_path):
    config = write_job(tmp_path, GRPO, """
        colocate_groups: [[train, rollout]]
        offload_model: true
        offload_optimizer: true
        sleep_level: 1
        vllm_enable_lora: true
        train: {gpus: 1, tuner_type: lora, lora_rank: 8}
        rollout: {gpus: 1, vllm_max_model_len: 512}
        """)
    result = run_job(config)
    check_synced(finished_log(result, tmp_path))
    assert "colocated vLLM engines" in result.stderr and "(started here)" in result.stderr
    assert "no-op in this run (no CUDA device)" in result.stderr  # the ms-swift memory knobs, said once
