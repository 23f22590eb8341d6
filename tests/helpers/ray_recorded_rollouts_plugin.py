"""An --external_plugins file for tests/e2e/test_ray.py: the GRPO train workers of a Ray job train on the rollouts
tests/e2e/test_grpo_ddp.py records, and save what the test compares with a one-process run.

Ray imports it in every worker process as it starts (the driver's worker_process_setup_hook), before the
trainer is built, which is the same point at which tests/helpers/grpo_ddp_worker.py puts its trainer in place; the
trainer itself is that worker's `InjectedRolloutTrainer` (see there). Environment: SWIFTLIKE_TEST_ROLLOUTS and
SWIFTLIKE_TEST_OUT (the driver forwards SWIFTLIKE_* variables to every actor), handed to that worker's `configure`.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_ddp_worker as recorded  # noqa: E402

recorded.configure(os.environ["SWIFTLIKE_TEST_ROLLOUTS"], os.environ["SWIFTLIKE_TEST_OUT"])


class SavingTrainer(recorded.InjectedRolloutTrainer):
    """Writes this rank's prompts and local metrics, and on rank 0 the parameters before and after."""

    def train(self, *args, **kwargs):
        result = super().train(*args, **kwargs)
        rank = int(os.environ.get("RANK", "0"))
        (recorded.OUT / f"ray.rank{rank}.json").write_text(json.dumps(
            {"prompts": self.prompts_seen, "metrics": self.local_metrics, "run_dir": self.args.output_dir}))
        if rank == 0:
            after = {n: p.detach().clone() for n, p in self.model.named_parameters()}
            torch.save({"before": self.params_before, "after": after}, recorded.OUT / "ray.params.pt")
        return result


recorded.grpo_trainer.GrpoTrainer = SavingTrainer
recorded.train_trainer.plot_curves = lambda *a, **kw: []
