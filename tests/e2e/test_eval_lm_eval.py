"""`swiftlike eval --eval_backend lm_eval`: lm-evaluation-harness's own gsm8k and arc_easy configs on local
files written here, against what we serve and against bare `vllm serve` of the same model (greedy: the same
replies, verdicts and log-likelihoods), and once through the CLI path."""
import json

import httpx
import pytest
from model_ids import TINY

from swiftlike.arguments.eval_args import EvalArguments
from swiftlike.commands.eval import eval_main
from swiftlike.eval.lm_eval_backend import run_lm_eval
from swiftlike.eval.served import Endpoint, serving

MAX_NEW_TOKENS = 12
LL_TOLERANCE = 1e-3  # fp32 on both servers; only the batching of the forward passes differs


@pytest.fixture(scope="module")
def local_files(tmp_path_factory):
    """Made-up rows in the shapes of the hub's openai/gsm8k and allenai/ai2_arc."""
    d = tmp_path_factory.mktemp("lm_eval_data")
    gsm = [{"question": f"A box holds {a} pens and {b} more are added. How many pens are in the box?",
            "answer": f"{a} + {b} = {a + b}\n#### {a + b}"} for a, b in ((3, 4), (10, 5), (7, 8), (12, 30))]
    arc = [{"id": f"q{i}", "question": q, "choices": {"text": c, "label": ["A", "B", "C", "D"]}, "answerKey": k}
           for i, (q, c, k) in enumerate([
               ("Which of these is a liquid at room temperature?", ["iron", "water", "salt", "wood"], "B"),
               ("What do plants take in to make food?", ["carbon dioxide", "sand", "plastic", "glass"], "A"),
               ("Which tool measures temperature?", ["ruler", "scale", "thermometer", "clock"], "C")])]
    paths = {"gsm8k": d / "gsm8k.jsonl", "arc_easy": d / "arc_easy.jsonl"}
    for name, rows in (("gsm8k", gsm), ("arc_easy", arc)):
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def dataset_args(files):
    return {"gsm8k": {"local_path": str(files["gsm8k"]), "few_shot_num": 1},
            "arc_easy": {"local_path": str(files["arc_easy"])}}


def lm_eval_args(files, **kw):
    return EvalArguments(eval_url="http://unused/v1", eval_backend="lm_eval", eval_dataset=["gsm8k", "arc_easy"],
                         eval_dataset_args=dataset_args(files), max_new_tokens=MAX_NEW_TOKENS, eval_num_proc=4,
                         temperature=0.0, **kw)


def test_lm_eval_ours_matches_vllm_serve(vllm_tiny, vllm_serve_tiny, tiny_resolved, local_files, tmp_path):
    args = lm_eval_args(local_files)
    tok = str(tiny_resolved.model_dir)
    with serving(vllm_tiny, MAX_NEW_TOKENS, 4) as url:
        ours = {r.name: r for r in run_lm_eval(args, Endpoint(url, TINY, None, tok), tmp_path / "ours")}
    theirs = {r.name: r for r in run_lm_eval(args, Endpoint(vllm_serve_tiny, TINY, None, tok), tmp_path / "vllm")}
    assert set(ours) == set(theirs) == {"gsm8k", "arc_easy"}
    gsm, arc = ours["gsm8k"], ours["arc_easy"]
    assert (gsm.metrics["metric"], gsm.metrics["questions"], gsm.metrics["num_fewshot"]) == (
        "exact_match,strict-match", 4, 1)
    assert (arc.metrics["metric"], arc.metrics["questions"]) == ("acc,none", 3)
    assert "exact_match,flexible-extract" in gsm.metrics["harness_metrics"]
    # the task's own prompt, with one example drawn from the same file (never the question itself)
    first = gsm.predictions[0]
    assert first["prompt"].count("Question:") == 2 and first["prompt"].endswith(
        "Question: A box holds 3 pens and 4 more are added. How many pens are in the box?\nAnswer:")
    assert first["gold"].endswith("#### 7") and isinstance(first["reply"], str)
    assert arc.predictions[0]["choices"] == [" iron", " water", " salt", " wood"] and arc.predictions[0]["gold"] == 1
    for name in ("gsm8k", "arc_easy"):
        a, b = ours[name].predictions, theirs[name].predictions
        assert [p["doc_id"] for p in a] == [p["doc_id"] for p in b] == list(range(len(a)))
        assert [p["prompt"] for p in a] == [p["prompt"] for p in b]
        assert [p["correct"] for p in a] == [p["correct"] for p in b], name
        assert ours[name].metrics["accuracy"] == theirs[name].metrics["accuracy"]
    assert [p["reply"] for p in gsm.predictions] == [p["reply"] for p in theirs["gsm8k"].predictions]
    assert [p["extracted"] for p in gsm.predictions] == [p["extracted"] for p in theirs["gsm8k"].predictions]
    for p, q in zip(arc.predictions, theirs["arc_easy"].predictions):
        assert p["loglikelihoods"] == pytest.approx(q["loglikelihoods"], abs=LL_TOLERANCE)
        assert p["extracted"] == q["extracted"] and p["correct"] == (p["extracted"] == p["gold"])
    assert all(ll < 0 for p in arc.predictions for ll in p["loglikelihoods"])
    # lm-eval's own output kept beside ours
    saved = json.loads((tmp_path / "ours" / "results.json").read_text())
    assert set(saved["results"]) == {"swiftlike_gsm8k", "swiftlike_arc_easy"}
    assert (tmp_path / "ours" / "samples_swiftlike_arc_easy.jsonl").is_file()


def test_lm_eval_through_the_cli(vllm_tiny, local_files, tmp_path):
    """--eval_url names no tokenizer: lm-eval reads ours from the server's /tokenizer_info and /tokenize, as from
    vLLM's (arc_easy's log-likelihoods need one)."""
    out = tmp_path / "eval"
    with serving(vllm_tiny, MAX_NEW_TOKENS, 4) as url:
        report = eval_main(["--eval_url", url, "--eval_backend", "lm_eval", "--eval_dataset", "gsm8k", "arc_easy",
                            "--eval_dataset_args", json.dumps(dataset_args(local_files)), "--eval_limit", "2",
                            "--max_new_tokens", str(MAX_NEW_TOKENS),
                            "--eval_num_proc", "2", "--eval_output_dir", str(out)])
        base = url.removesuffix("/v1")
        info = httpx.get(f"{base}/tokenizer_info").json()
        ids = httpx.post(f"{base}/tokenize", json={"prompt": "Hello there", "add_special_tokens": False}).json()
        text = httpx.post(f"{base}/detokenize", json={"tokens": ids["tokens"]}).json()["prompt"]
        bad = httpx.post(f"{base}/detokenize", json={"tokens": [10 ** 9]})
    assert info["eos_token"] == vllm_tiny.tokenizer.eos_token and "{%" in info["chat_template"]
    assert text == "Hello there" and bad.status_code == 400 and "outside the served tokenizer" in bad.text
    run_dir = next(out.iterdir())
    saved = json.loads((run_dir / "report.json").read_text())
    assert saved["backend"] == "lm_eval" and saved["model"] == TINY and report["output_dir"] == str(run_dir)
    assert {n: b["questions"] for n, b in saved["benchmarks"].items()} == {"gsm8k": 2, "arc_easy": 2}
    md = (run_dir / "report.md").read_text()
    assert "| gsm8k | exact_match,strict-match | 2 | 1 |" in md and "| arc_easy | acc,none | 2 | 1 |" in md
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert [r["benchmark"] for r in rows] == ["gsm8k"] * 2 + ["arc_easy"] * 2
    assert all({"prompt", "gold", "reply", "extracted", "correct", "doc_id"} <= set(r) for r in rows)
    assert (run_dir / "lm_eval" / "results.json").is_file()


def test_lm_eval_errors(local_files, tmp_path):
    endpoint = Endpoint("http://127.0.0.1:9/v1", TINY)
    with pytest.raises(ValueError, match="did you mean gsm8k"):
        run_lm_eval(EvalArguments(eval_url="http://x/v1", eval_backend="lm_eval", eval_dataset=["gsm8kk"]),
                    endpoint, tmp_path)
    missing = {"gsm8k": {"local_path": str(tmp_path / "nope.jsonl")}}
    with pytest.raises(FileNotFoundError, match="nope.jsonl is not a file"):
        run_lm_eval(EvalArguments(eval_url="http://x/v1", eval_backend="lm_eval", eval_dataset=["gsm8k"],
                                  eval_dataset_args=missing), endpoint, tmp_path)
    too_many = {"gsm8k": {"local_path": str(local_files["gsm8k"]), "few_shot_num": 4}}
    with pytest.raises(ValueError, match="few_shot_num 4 needs more than 4 rows"):
        run_lm_eval(EvalArguments(eval_url="http://x/v1", eval_backend="lm_eval", eval_dataset=["gsm8k"],
                                  eval_dataset_args=too_many), endpoint, tmp_path)


def test_an_adapter_given_with_model_is_what_the_harness_scores(pt_tiny, tiny_adapter, local_files, tmp_path):
    """--model with --adapters is served here with the adapter under its own name, and that is the model the
    harness asks for: its replies are the adapter's (as served by the session's pt engine), not the base model's."""
    files = {"gsm8k": {"local_path": str(local_files["gsm8k"]), "few_shot_num": 0}}
    common = ["--eval_backend", "lm_eval", "--eval_dataset", "gsm8k", "--eval_dataset_args", json.dumps(files),
              "--eval_limit", "2", "--max_new_tokens", "8", "--torch_dtype", "float32", "--infer_backend", "pt"]

    def replies(report):
        rows = (tmp_path / report["output_dir"] / "predictions.jsonl").read_text().splitlines()
        return [json.loads(line)["reply"] for line in rows]
    adapted = eval_main(["--model", TINY, "--adapters", f"lora={tiny_adapter}", *common,
                         "--eval_output_dir", str(tmp_path / "adapted")])
    base = eval_main(["--model", TINY, *common, "--eval_output_dir", str(tmp_path / "base")])
    assert adapted["model"] == "lora" and base["model"] == TINY
    args = EvalArguments(eval_url="http://unused/v1", eval_backend="lm_eval", eval_dataset=["gsm8k"],
                         eval_dataset_args=files, eval_limit=2, max_new_tokens=8, temperature=0.0)
    with serving(pt_tiny, 8, 4) as url:
        served = run_lm_eval(args, Endpoint(url, "lora", None, str(pt_tiny.model_dir)), tmp_path / "served")
    assert replies(adapted) == [p["reply"] for p in served[0].predictions] != replies(base)
