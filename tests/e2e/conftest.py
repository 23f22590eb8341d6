"""Fixtures several end-to-end files share because they are expensive."""
from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="session")
def grpo_one_process(tmp_path_factory, tiny_adapter):
    """(base, results): every run of test_grpo_ddp.RUNS in one process on the recorded rollouts written into
    `base`. The reference that two processes (test_grpo_ddp.py) and the Megatron backend (test_megatron_rl.py)
    must both match, launched once for both."""
    from test_grpo_ddp import RUNS, launch_one_and_two
    base = tmp_path_factory.mktemp("grpo_one_process")
    runs = {name: [a.format(adapter=tiny_adapter) for a in argv] for name, argv in RUNS.items()}
    (base / "runs.json").write_text(json.dumps(runs))
    return base, launch_one_and_two(base, runs, processes=(1,))[1]
