"""--eval_backend Native: evalscope (in .venv-evalscope, as a subprocess) scoring gsm8k and arc from local folders
in the benchmarks' own hub layout, against our server and bare `vllm serve` of the same model.

The rows are made up here (arithmetic and letter questions), in each benchmark's real record format: GSM8K's
{question, answer: "<reasoning>\\n#### <number>"} and ARC's {id, question, choices: {text, label}, answerKey},
under the hub mirror's layout that evalscope's `local_path` reads with `datasets` (README.md naming the configs,
<config>/test.jsonl)."""
import json

import pytest
from model_ids import TINY

from swiftlike.arguments.eval_args import EvalArguments
from swiftlike.commands import arguments_of
from swiftlike.commands.eval import eval_main
from swiftlike.eval.evalscope_backend import PYTHON_VARIABLE, evalscope_python, run_evalscope
from swiftlike.eval.report import PREDICTION_KEYS
from swiftlike.eval.served import Endpoint, serving

ROWS = 6
MAX_NEW_TOKENS = 24
CONCURRENCY = 4


def hub_folder(root, config: str, rows: list[dict]) -> str:
    """A dataset folder as the hub mirrors it: the README's YAML names the config and its test split's file."""
    (root / config).mkdir(parents=True)
    (root / config / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "README.md").write_text(f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: test\n"
                                    f"    path: {config}/test.jsonl\n---\n")
    return str(root)


@pytest.fixture(scope="module")
def dataset_args(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalscope_data")
    gsm8k = [{"question": f"A box holds {i + 3} pens and {2 * i} pencils. How many items are in the box?",
              "answer": f"{i + 3} + {2 * i} = {3 * i + 3}\n#### {3 * i + 3}"} for i in range(ROWS)]
    arc = [{"id": f"q{i}", "question": f"Which of these numbers is the largest ({i})?",
            "choices": {"text": [str(i), str(i + 9), str(i + 1), str(i + 2)], "label": ["A", "B", "C", "D"]},
            "answerKey": "B"} for i in range(ROWS)]
    return {"gsm8k": {"local_path": hub_folder(root / "gsm8k", "main", gsm8k), "few_shot_num": 0},
            "arc": {"local_path": hub_folder(root / "arc", "ARC-Easy", arc), "subset_list": ["ARC-Easy"]}}


def native_args(url: str, dataset_args: dict, *extra: str) -> list[str]:
    return ["--eval_backend", "Native", "--eval_url", url, "--eval_dataset", "gsm8k", "arc",
            "--eval_dataset_args", json.dumps(dataset_args), "--max_new_tokens", str(MAX_NEW_TOKENS),
            "--temperature", "0", "--eval_num_proc", str(CONCURRENCY), *extra]


def by_question(results) -> dict:
    return {(r.name, p["subset"], p["index"]): p for r in results for p in r.predictions}


def test_same_verdicts_and_replies_as_vllm_serve(vllm_tiny, vllm_serve_tiny, dataset_args, tmp_path):
    args = arguments_of(EvalArguments, native_args(vllm_serve_tiny, dataset_args))
    bare = run_evalscope(args, Endpoint(vllm_serve_tiny, TINY), tmp_path / "vllm_serve")
    with serving(vllm_tiny, MAX_NEW_TOKENS, CONCURRENCY) as url:
        ours = run_evalscope(args, Endpoint(url, vllm_tiny.model_name), tmp_path / "swiftlike")
    assert [r.name for r in ours] == ["gsm8k", "arc"]
    for r in ours:
        assert r.metrics["metric"] == "accuracy" and r.metrics["questions"] == ROWS
        assert [p["index"] for p in r.predictions] == list(range(ROWS))
    # evalscope's adapters read our rows: GSM8K's gold is what follows ####, ARC's the answerKey, in their prompts
    gsm8k, arc = (r.predictions for r in ours)
    assert [p["gold"] for p in gsm8k] == [str(3 * i + 3) for i in range(ROWS)]
    assert all("\\boxed{}" in p["prompt"] and "How many items" in p["prompt"] for p in gsm8k)
    assert [p["gold"] for p in arc] == ["B"] * ROWS and all("\nB) " in p["prompt"] for p in arc)
    theirs, mine = by_question(bare), by_question(ours)
    assert mine.keys() == theirs.keys() and len(mine) == 2 * ROWS
    for key in mine:
        assert mine[key]["reply"] == theirs[key]["reply"], key
        assert (mine[key]["correct"], mine[key]["extracted"]) == (theirs[key]["correct"], theirs[key]["extracted"])
    assert all(p["reply"] for p in mine.values())
    assert [r.metrics["accuracy"] for r in ours] == [r.metrics["accuracy"] for r in bare]


def test_eval_main_report_layout(vllm_serve_tiny, dataset_args, tmp_path):
    report = eval_main(native_args(vllm_serve_tiny, dataset_args, "--eval_limit", "3",
                                   "--eval_output_dir", str(tmp_path)))
    run_dir = tmp_path / report["output_dir"].rsplit("/", 1)[-1]
    saved = json.loads((run_dir / "report.json").read_text())
    assert saved["backend"] == "Native" and saved["source"] == vllm_serve_tiny
    assert list(saved["benchmarks"]) == ["gsm8k", "arc"]
    for metrics in saved["benchmarks"].values():
        assert metrics["questions"] == 3 and metrics["samples_per_question"] == 1
        assert metrics["metric"] == "accuracy" and 0 <= metrics["accuracy"] <= 1
    assert "| gsm8k | accuracy | 3 | 1 |" in (run_dir / "report.md").read_text()
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert [r["benchmark"] for r in rows] == ["gsm8k"] * 3 + ["arc"] * 3
    assert all(set(PREDICTION_KEYS) <= r.keys() for r in rows)
    # evalscope's own outputs stay beside the report
    assert sorted(p.name for p in (run_dir / "evalscope" / "reports").glob("*/*.json")) == ["arc.json", "gsm8k.json"]


def test_evalscope_errors_surface(vllm_serve_tiny, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = arguments_of(EvalArguments, ["--eval_backend", "Native", "--eval_url", vllm_serve_tiny, "--eval_dataset",
                                        "gsm8k", "--eval_dataset_args",
                                        json.dumps({"gsm8k": {"local_path": str(empty)}})])
    with pytest.raises(RuntimeError, match="evalscope failed.*\n(.|\n)*(Error|error)"):
        run_evalscope(args, Endpoint(vllm_serve_tiny, TINY), tmp_path / "out")
    monkeypatch.setenv(PYTHON_VARIABLE, str(tmp_path / "nope" / "python"))
    with pytest.raises(FileNotFoundError, match=PYTHON_VARIABLE):
        evalscope_python()
