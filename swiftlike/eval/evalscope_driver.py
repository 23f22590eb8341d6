"""Runs inside evalscope's own virtualenv (.venv-evalscope), executed by path: evalscope 1.14's pins conflict with
swiftlike's, so this file imports only evalscope and the standard library, never swiftlike.

argv[1] is a JSON file of TaskConfig fields; evalscope writes its predictions, reviews and reports under the
config's work_dir, which the parent process reads back (evalscope_backend.py)."""
import json
import sys


def main() -> None:
    from evalscope import TaskConfig, run_task
    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    run_task(task_cfg=TaskConfig(**config))


if __name__ == "__main__":
    main()
