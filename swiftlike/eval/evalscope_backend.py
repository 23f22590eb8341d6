"""--eval_backend Native: evalscope, as in ms-swift, against the model's OpenAI-compatible endpoint.

evalscope 1.14 pins packages that conflict with swiftlike's, so it lives in its own virtualenv
(.venv-evalscope, built by `make setup`) and runs there as a subprocess (evalscope_driver.py); this process
never imports it. evalscope writes its own outputs under work_dir, and those files, not its console, are what
the report is built from:

    reports/<model>/<dataset>.json             metrics[0]: the main metric's name, num and score, per subset
    reviews/<model>/<dataset>_<subset>.jsonl   per sample: messages (prompt, reply), target, sample_score
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

from ..arguments.eval_args import EvalArguments
from ..utils import get_logger
from ..utils.hub import offline_variable
from ..utils.side_venv import side_venv_python
from .report import BenchmarkResult
from .served import Endpoint

logger = get_logger("swiftlike.eval")

PYTHON_VARIABLE = "SWIFTLIKE_EVALSCOPE_PYTHON"
VENV_NAME = ".venv-evalscope"
DRIVER = Path(__file__).with_name("evalscope_driver.py")
ERROR_TAIL_LINES = 40
ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Exit)\b.*:")  # a traceback's last line, e.g. "ValueError: ..."


def evalscope_python() -> Path:
    """$SWIFTLIKE_EVALSCOPE_PYTHON, else .venv-evalscope beside .venv (utils.side_venv)."""
    return side_venv_python(
        PYTHON_VARIABLE, VENV_NAME, "evalscope", "--eval_backend Native needs evalscope",
        f"Build it with `make setup` (scripts/setup.sh) in the swiftlike checkout, or `python -m venv {VENV_NAME} && "
        f"{VENV_NAME}/bin/pip install evalscope==1.14.1`, or point ${PYTHON_VARIABLE} at a python that has evalscope.")


def task_config(args: EvalArguments, endpoint: Endpoint, work_dir: Path) -> dict:
    """evalscope's TaskConfig fields; --extra_eval_args go over them as they are."""
    generation = {"max_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
                  "top_k": args.top_k, "repetition_penalty": args.repetition_penalty, "seed": args.seed}
    config = {"model": endpoint.model, "api_url": endpoint.base_url, "api_key": endpoint.api_key or "EMPTY",
              "eval_type": "openai_api", "datasets": list(args.eval_dataset),
              "dataset_args": {name: args.dataset_args(name) for name in args.eval_dataset if args.dataset_args(name)},
              "limit": args.eval_limit, "eval_batch_size": args.eval_num_proc,
              "generation_config": {k: v for k, v in generation.items() if v is not None},
              # a fixed folder rather than evalscope's timestamped one, so the outputs are where we read them
              "work_dir": str(work_dir), "no_timestamp": True}
    return {**config, **(args.extra_eval_args or {})}


def run_evalscope(args: EvalArguments, endpoint: Endpoint, work_dir: Path) -> list[BenchmarkResult]:
    python = evalscope_python()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = task_config(args, endpoint, work_dir)
    config_path = work_dir / "swiftlike_task_config.json"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    logger.info("evalscope (%s) on %s against %s", python, ", ".join(args.eval_dataset), endpoint.base_url)
    local = any(options.get("local_path") for options in config["dataset_args"].values())
    cache = work_dir / "datasets_cache" if local else None
    try:
        run_driver(python, config_path, cache)
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    repeats = int(config.get("repeats") or 1)
    return [read_benchmark(Path(config["work_dir"]), name, repeats) for name in args.eval_dataset]


def run_driver(python: Path, config_path: Path, datasets_cache: Path | None) -> None:
    """evalscope's console (progress bars, its tables) goes through to ours as it comes; on failure its error
    and last lines go into the exception.

    `datasets_cache`: a cache of `datasets` of this run's own for local folders. `datasets` keys a folder's
    split by the folder's name and its README's relative paths, so another folder named like an earlier one
    (a second gsm8k/) would be answered from the earlier one's cache, and forcing a rebuild fails on the split
    sizes recorded there."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if datasets_cache is not None:
        env["HF_DATASETS_CACHE"] = str(datasets_cache)
    if offline_variable():  # evalscope reads hub datasets through `datasets` / modelscope, which have their own
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", MODELSCOPE_OFFLINE="1")
    tail: deque[str] = deque(maxlen=ERROR_TAIL_LINES)
    with subprocess.Popen([str(python), str(DRIVER), str(config_path)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env, text=True, errors="replace") as proc:
        for line in proc.stdout:
            sys.stderr.write(line)
            tail.append(line.rstrip())
    if proc.returncode != 0:
        errors = [line for line in tail if ERROR_LINE.match(line)]
        raise RuntimeError(f"evalscope failed (exit code {proc.returncode}): {errors[-1] if errors else ''}\n"
                           "its last lines:\n" + "\n".join(tail))


def read_benchmark(work_dir: Path, name: str, repeats: int) -> BenchmarkResult:
    reports = sorted((work_dir / "reports").glob(f"*/{name}.json"))
    if not reports:
        raise RuntimeError(f"evalscope wrote no report for {name} under {work_dir / 'reports'}")
    report = json.loads(reports[0].read_text(encoding="utf-8"))
    main = report["metrics"][0]
    subsets = {s["name"]: s["score"] for c in main["categories"] for s in c["subsets"] if not s.get("is_aggregate")}
    reviews = work_dir / "reviews" / reports[0].parent.name
    # evalscope appends each review as its answer comes back; ordered by question, like the other backends
    predictions = [prediction_row(name, subset, json.loads(line)) for subset in subsets
                   for line in read_lines(reviews / f"{name}_{subset}.jsonl")]
    predictions.sort(key=lambda row: (list(subsets).index(row["subset"]), row["index"]))
    metrics = {"metric": main["identity"]["name"], "questions": main["num"] // repeats, "accuracy": main["score"],
               "samples_per_question": repeats, "subsets": subsets}
    return BenchmarkResult(name, metrics, predictions)


def read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise RuntimeError(f"evalscope's per-sample file {path} is missing")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def prediction_row(benchmark: str, subset: str, review: dict) -> dict:
    score = review["sample_score"]["score"]
    main_score = score["value"][score.get("main_score_name") or next(iter(score["value"]))]
    replies = [m for m in review["messages"] if m["role"] == "assistant"]
    prompts = [text_of(m["content"]) for m in review["messages"] if m["role"] != "assistant"]
    target = review["target"]
    return {"benchmark": benchmark, "prompt": "\n\n".join(prompts),
            "gold": target[0] if isinstance(target, list) and len(target) == 1 else target,
            "reply": text_of(replies[-1]["content"]) if replies else score.get("prediction"),
            "extracted": score.get("extracted_prediction"), "correct": main_score >= 1,
            "score": main_score, "subset": subset, "index": review["index"],
            "sample_id": review["sample_score"].get("sample_id")}


def text_of(content) -> str:
    """A message's text: evalscope keeps a string, or a list of content parts (text, images)."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
