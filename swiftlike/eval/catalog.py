"""What each backend can evaluate, asked of the backend itself: our sets and reasoning-gym's task registry,
lm-evaluation-harness's task index, evalscope's benchmark registry (in its own virtualenv). The web UI's eval
page searches these lists; nothing here is a copy that could drift from the installed harness.

Each list is built once per process: lm-eval indexes ~15,000 task configs (~7 s) and evalscope starts its own
interpreter (~4 s)."""
from __future__ import annotations

import functools
import json
import subprocess

from ..arguments.eval_args import BUILTIN_SETS, EVAL_BACKENDS, REASONING_GYM_PREFIX

EVALSCOPE_LIST = ("import json\nfrom evalscope.api.registry import BENCHMARK_REGISTRY\n"
                  "print(json.dumps(sorted(BENCHMARK_REGISTRY)))")


@functools.cache
def datasets_of(backend: str) -> tuple[str, ...]:
    if backend not in EVAL_BACKENDS:
        raise ValueError(f"unknown eval backend {backend!r}; choose one of {', '.join(EVAL_BACKENDS)}")
    if backend == "swiftlike":
        import reasoning_gym
        return (*BUILTIN_SETS, *(f"{REASONING_GYM_PREFIX}{t}" for t in sorted(reasoning_gym.factory.DATASETS)))
    if backend == "lm_eval":
        from .lm_eval_backend import task_manager
        return tuple(sorted(task_manager().all_tasks))
    from .evalscope_backend import evalscope_python
    done = subprocess.run([str(evalscope_python()), "-c", EVALSCOPE_LIST], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"evalscope could not list its benchmarks: {done.stderr.strip()[-2000:]}")
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


def search(backend: str, text: str, limit: int = 60) -> tuple[list[str], int]:
    """The names of `backend` that contain `text` (case-insensitive), the first `limit`, and how many match."""
    needle = text.strip().lower()
    found = [name for name in datasets_of(backend) if needle in name.lower()]
    return found[:limit], len(found)
