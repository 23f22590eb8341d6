"""`swiftlike eval`: generate answers (in-process engine or a running OpenAI-compatible server), check them,
and write report.json, report.md and predictions.jsonl.

Why not evalscope (what ms-swift uses): installing it here would move datasets, huggingface_hub and fsspec
to other versions than the training stack's, and its built-in benchmarks download their data from the
ModelScope hub, which an offline machine cannot reach. The checking that matters (math-verify
equivalence, choice extraction, unbiased pass@k) is a few pure functions in scoring.py; generation goes
through the same engines and registries as every other command.
"""
from __future__ import annotations

import time
from pathlib import Path

from tqdm import tqdm

from ..arguments.eval_args import EvalArguments
from ..utils import atomic_write_json, atomic_write_jsonl, atomic_write_text, get_logger
from .data import Question, load_benchmark
from .scoring import extract_choice, extract_final, pass_at_k, qa_correct

logger = get_logger("swiftlike.eval")
CHUNK = 32  # prompts per progress step


class EngineAnswers:
    """Answers from an engine: loaded in this process (pt or vLLM), resolved like every other command, or a
    running OpenAI-compatible server (--eval_url) behind the same interface, `eval_concurrency` at a time."""

    def __init__(self, args: EvalArguments):
        from ..infer.engine import build_engine
        from ..infer.protocol import RequestConfig
        self.engine = build_engine(args.engine_spec())
        self.adapter = None if args.eval_url else next(iter(self.engine.adapters), None)
        self.config = RequestConfig(max_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                                    top_k=args.top_k, repetition_penalty=args.repetition_penalty,
                                    n=args.eval_num_samples)
        self.name = self.engine.model_name if self.adapter is None else f"{args.model} + {self.adapter}"

    def answer(self, prompts: list[str], desc: str) -> list[list[str]]:
        from ..infer.protocol import InferRequest
        out: list[list[str]] = []
        with tqdm(total=len(prompts), desc=desc, unit="q") as bar:
            for start in range(0, len(prompts), CHUNK):
                chunk = prompts[start:start + CHUNK]
                requests = [InferRequest(messages=[{"role": "user", "content": p}], adapter=self.adapter)
                            for p in chunk]
                out += [[c.text for c in r.choices] for r in self.engine.infer(requests, self.config)]
                bar.update(len(chunk))
        return out

    def close(self) -> None:
        self.engine.close()


def score(question: Question, text: str) -> tuple[bool, str | None]:
    if question.kind == "mcq":
        found = extract_choice(text, len(question.choices or []))
        return found == question.answer, found
    return qa_correct(text, question.answer), extract_final(text)


def run_eval(args: EvalArguments) -> dict:
    start = time.time()
    answers = EngineAnswers(args)
    k = args.eval_num_samples
    benchmarks, predictions = {}, []
    try:
        for name in args.eval_dataset:
            questions = load_benchmark(name, args.eval_limit)
            replies = answers.answer([q.prompt for q in questions], desc=name)
            n_correct = []
            for q, texts in zip(questions, replies):
                scored = [score(q, t) for t in texts]
                n_correct.append(sum(ok for ok, _ in scored))
                predictions += [{"benchmark": name, "prompt": q.prompt, "gold": q.answer, "reply": t,
                                 "extracted": found, "correct": ok} for t, (ok, found) in zip(texts, scored)]
            result = {"questions": len(questions), "samples_per_question": k,
                      "accuracy": sum(n_correct) / (len(questions) * k)}
            if k > 1:
                result[f"pass@{k}"] = sum(pass_at_k(k, c, k) for c in n_correct) / len(questions)
            benchmarks[name] = result
    finally:
        answers.close()
    report = {"model": answers.name, "source": args.eval_url or args.infer_backend, "benchmarks": benchmarks,
              "settings": {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
                           "repetition_penalty": args.repetition_penalty, "max_new_tokens": args.max_new_tokens,
                           "eval_num_samples": k, "eval_limit": args.eval_limit},
              "elapsed_s": round(time.time() - start, 1)}
    out_dir = Path(args.eval_output_dir) / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(out_dir / "predictions.jsonl", predictions)
    atomic_write_text(out_dir / "report.md", markdown(report))
    atomic_write_json(out_dir / "report.json", report)
    report["output_dir"] = str(out_dir)
    return report


def markdown(report: dict) -> str:
    ks = sorted({key for r in report["benchmarks"].values() for key in r if key.startswith("pass@")})
    head = ["benchmark", "questions", "samples", "accuracy", *ks]
    lines = [f"Model: {report['model']} ({report['source']})", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for name, r in report["benchmarks"].items():
        cells = [name, str(r["questions"]), str(r["samples_per_question"]), f"{r['accuracy']:.4f}",
                 *(f"{r[key]:.4f}" for key in ks)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
