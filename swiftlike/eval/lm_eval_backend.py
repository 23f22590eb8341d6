"""`--eval_backend lm_eval`: lm-evaluation-harness run in this process against the served model.

Every task goes through lm-eval's `local-completions` client (our /v1/completions), not `local-chat-completions`:
the harness's task configs are written for raw text (gsm8k's "Question: ...\\nAnswer:" with few-shot examples
and a "Question:" stop), which is how its published numbers are measured, and only the completions route gives
the prompt's log-probabilities (echo + logprobs + max_tokens 0) that multiple-choice / loglikelihood tasks
score with. One client for both kinds keeps a run with gsm8k and arc_easy on one set of model settings.
`--extra_eval_args '{"model": "local-chat-completions", "apply_chat_template": true}'` still picks the chat
client for generation-only tasks: extra_eval_args go to `lm_eval.simple_evaluate` as they are, and a
`model_args` dict there is merged into ours.

`--eval_dataset_args '{"gsm8k": {"local_path": "x.jsonl"}}'` keeps the task's own lm-eval config (prompt,
filters, metrics) but reads the local file: a task YAML written into the work dir `include:`s the installed one
and only swaps the dataset for `json` on that file, its one split being `test`. Few-shot examples then come from
the same file (lm-eval's sampler leaves the question being asked out of its own prompt), so `few_shot_num` must
be below the file's row count; it defaults to the task's own count (gsm8k: 5, arc_easy: 0).
"""
from __future__ import annotations

import difflib
import functools
import json
from pathlib import Path

from ..arguments.eval_args import EvalArguments
from ..utils import atomic_write_text, get_logger
from ..utils.errors import MissingInputError, UsageError
from .report import BenchmarkResult
from .served import Endpoint

logger = get_logger("swiftlike.eval")

LOCAL_PREFIX = "swiftlike_"  # derived tasks get their own name: lm-eval skips a second task of the same name
DATASET_ARG_KEYS = ("local_path", "few_shot_num")


def _import_lm_eval():
    try:
        import lm_eval
    except ImportError as e:
        raise RuntimeError("--eval_backend lm_eval needs lm-evaluation-harness: pip install 'swiftlike[eval]' "
                           f"({e})") from e
    return lm_eval


@functools.cache
def task_manager():
    """lm-eval's index of its installed tasks, built once per process: it parses every task YAML (seconds).
    Derived tasks are handed to lm-eval as YAML paths, which it loads without indexing them."""
    from lm_eval.tasks import TaskManager
    return TaskManager()


def run_lm_eval(args: EvalArguments, endpoint: Endpoint, work_dir: Path) -> list[BenchmarkResult]:
    lm_eval = _import_lm_eval()
    work_dir = Path(work_dir)
    manager = task_manager()
    specs, names = [], {}  # what lm-eval is given (a name or a derived YAML); its task name -> ours
    for name in args.eval_dataset:
        _check_known(name, manager.task_index)
        ds_args = args.dataset_args(name)
        if ds_args:
            specs.append(str(_derive_task(name, ds_args, manager.task_index[name], work_dir / "tasks")))
            names[LOCAL_PREFIX + name] = name
        else:
            specs.append(name)
    kwargs = {"model": "local-completions", "model_args": model_args(args, endpoint), "tasks": specs,
              "limit": args.eval_limit, "gen_kwargs": gen_kwargs(args), "log_samples": True,
              "task_manager": manager}
    if args.seed is not None:
        kwargs.update(random_seed=args.seed, numpy_random_seed=args.seed, torch_random_seed=args.seed,
                      fewshot_random_seed=args.seed)
    extra = dict(args.extra_eval_args or {})
    if isinstance(extra.get("model_args"), dict):
        kwargs["model_args"].update(extra.pop("model_args"))
    kwargs.update(extra)
    logger.info("lm-eval on %s: %s", endpoint.base_url, ", ".join(args.eval_dataset))
    try:
        out = lm_eval.simple_evaluate(**kwargs)
    except OSError as e:  # the tokenizer: loglikelihood requests need one to split context and continuation
        if "tokenizer" in str(e).lower() or "huggingface.co" in str(e):
            raise RuntimeError(f"lm-eval could not load a tokenizer for {endpoint.model!r}: local-completions "
                               "counts tokens for loglikelihood tasks. Serve --model here (its tokenizer is used), "
                               "or name a local tokenizer with --extra_eval_args '{\"model_args\": {\"tokenizer\": "
                               f"\"/path/to/model\", \"tokenizer_backend\": \"huggingface\"}}}}' ({e})") from e
        raise
    _save(out, work_dir)
    return [to_result(names.get(task, task), task, out) for task in out["samples"]]


def model_args(args: EvalArguments, endpoint: Endpoint) -> dict:
    """The local tokenizer when the model is served here (or the served name is a local directory); otherwise
    lm-eval's `auto`: the server's /tokenizer_info + /tokenize when it has both (`swiftlike deploy` has them, and
    vLLM with --enable-tokenizer-info-endpoint), else the hub under the served name. --extra_eval_args'
    model_args can name one."""
    margs = {"model": endpoint.model, "base_url": endpoint.completions_url, "num_concurrent": args.eval_num_proc,
             "max_gen_toks": args.max_new_tokens, "max_retries": 1}
    local = endpoint.tokenizer_dir or (endpoint.model if Path(endpoint.model).is_dir() else None)
    if local:
        margs.update(tokenizer=local, tokenizer_backend="huggingface")
    else:
        margs["tokenizer_backend"] = "auto"
    if args.seed is not None:
        margs["seed"] = args.seed
    if endpoint.api_key:
        margs["auth_token"] = endpoint.api_key
    return margs


def gen_kwargs(args: EvalArguments) -> dict:
    """Ours over the task's (lm-eval lets these win over its generation_kwargs); the task keeps its stops."""
    out = {"max_gen_toks": args.max_new_tokens, "temperature": args.temperature,
           "do_sample": bool(args.temperature)}
    if args.top_p is not None:
        out["top_p"] = args.top_p
    return out


def _check_known(name: str, known: dict) -> None:
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else " (`lm_eval ls tasks` lists them)"
        raise UsageError(f"--eval_dataset {name}: not an lm-evaluation-harness task, group or tag{hint}")


def _derive_task(name: str, ds_args: dict, entry, tasks_dir: Path) -> Path:
    """A task YAML that includes `name`'s installed one and reads local_path (when given) with few_shot_num."""
    unknown = sorted(set(ds_args) - set(DATASET_ARG_KEYS))
    if unknown:
        raise UsageError(f"--eval_dataset_args {name}: unknown key(s) {', '.join(unknown)} for lm_eval; it takes "
                         f"{', '.join(DATASET_ARG_KEYS)}")
    if entry.yaml_path is None or entry.cfg is None or "task" not in entry.cfg:
        raise UsageError(f"--eval_dataset_args {name}: {name} is an lm-eval group or tag, not one task with its "
                         "own YAML; give the dataset args per task (e.g. arc_easy, not arc)")
    task = LOCAL_PREFIX + name
    cfg = {"include": str(Path(entry.yaml_path).resolve()), "task": task, "tag": []}
    local = ds_args.get("local_path")
    if local is not None:
        path = Path(local).expanduser().resolve()
        if not path.is_file():
            raise MissingInputError(f"--eval_dataset_args {name}: local_path {local} is not a file (give a .jsonl "
                                    "or .json file with the rows the task's own dataset has)")
        rows = sum(1 for line in path.open() if line.strip()) if path.suffix == ".jsonl" else None
        cfg.update(dataset_path="json", dataset_name=None, dataset_kwargs={"data_files": {"test": str(path)}},
                   training_split=None, validation_split=None, test_split="test", fewshot_split="test")
        shots = ds_args.get("few_shot_num", entry.cfg.get("num_fewshot") or 0)
        if rows is not None and shots >= rows:
            raise UsageError(f"--eval_dataset_args {name}: few_shot_num {shots} needs more than {shots} rows in "
                             f"{local} (the examples come from the same file, without the question asked); it has "
                             f"{rows}; set few_shot_num lower, e.g. 0")
    if "few_shot_num" in ds_args:
        cfg["num_fewshot"] = int(ds_args["few_shot_num"])
    path = tasks_dir / f"{task}.yaml"
    atomic_write_text(path, json.dumps(cfg, indent=2) + "\n")  # JSON is YAML
    return path


def main_metric(task: str, out: dict) -> str:
    """The task's first metric under its first filter, lm-eval's own key: `exact_match,strict-match` for gsm8k
    (the answer must be in the "#### N" form the task's few-shot examples teach, as the harness reports first;
    `flexible-extract` stays in `harness_metrics`), `acc,none` for arc_easy."""
    cfg = out["configs"][task]
    metric = cfg["metric_list"][0]["metric"]
    filters = cfg.get("filter_list") or []
    return f"{metric},{filters[0]['name'] if filters else 'none'}"


def to_result(name: str, task: str, out: dict) -> BenchmarkResult:
    key = main_metric(task, out)
    metric, filter_name = key.split(",", 1)
    numbers = {k: v for k, v in out["results"][task].items() if isinstance(v, (int, float))}
    samples = [s for s in out["samples"][task] if s["filter"] == filter_name]
    output_type = out["configs"][task]["output_type"]
    predictions = [_prediction(name, s, metric, output_type) for s in samples]
    metrics = {"metric": key, "questions": len(samples), "accuracy": numbers[key], "samples_per_question": 1,
               "num_fewshot": out["n-shot"].get(task), "harness_metrics": numbers}
    return BenchmarkResult(name, metrics, predictions)


def _prediction(name: str, s: dict, metric: str, output_type: str) -> dict:
    row = {"benchmark": name, "doc_id": s["doc_id"], "prompt": s["arguments"][0][0], "gold": s["target"]}
    if output_type == "generate_until":
        row.update(reply=s["resps"][0][0], extracted=s["filtered_resps"][0])
    else:  # one loglikelihood request per choice: (context, continuation) -> (log-prob, is greedy)
        lls = [float(r[0]) for r in s["filtered_resps"]]
        pick = max(range(len(lls)), key=lls.__getitem__)
        row.update(reply=s["arguments"][pick][1], extracted=pick, choices=[a[1] for a in s["arguments"]],
                   loglikelihoods=lls)
    row["correct"] = bool(s[metric] == 1)
    return row


def _save(out: dict, work_dir: Path) -> None:
    """lm-eval's own results (results.json, as simple_evaluate returns them) and per-sample logs
    (samples_<task>.jsonl), kept beside our report for what it holds beyond it (configs, versions, stderr)."""
    from lm_eval.utils import handle_non_serializable

    def dumps(obj, **kw) -> str:
        return json.dumps(obj, default=handle_non_serializable, ensure_ascii=False, **kw)
    atomic_write_text(work_dir / "results.json", dumps({k: v for k, v in out.items() if k != "samples"}, indent=2))
    for task, samples in out["samples"].items():
        atomic_write_text(work_dir / f"samples_{task}.jsonl", "".join(dumps(s) + "\n" for s in samples))
