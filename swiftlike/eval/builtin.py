"""The swiftlike backend: our own sets (eval/data.py) answered by an engine in this process (pt or vLLM, the
model loaded from --model or a training run's live one) or by a running server, and checked by scoring.py.

It stays beside the harness backends because it needs no served endpoint or second environment, checks math with
math-verify, samples k answers for unbiased pass@k, and scores reasoning-gym tasks with their own verifiers."""
from __future__ import annotations

from tqdm import tqdm

from ..arguments.eval_args import EvalArguments
from .data import Question, load_benchmark
from .report import BenchmarkResult
from .scoring import extract_choice, extract_final, pass_at_k, qa_correct, reasoning_gym_score

CHUNK = 32  # prompts per progress step


class EngineAnswers:
    """Answers from an engine (in-process, or a server behind the OpenAIEngine), `CHUNK` prompts at a time."""

    def __init__(self, engine, args: EvalArguments, adapter: str | None = None):
        from ..infer.protocol import RequestConfig
        self.engine = engine
        self.adapter = adapter
        self.config = RequestConfig(max_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                                    top_k=args.top_k, repetition_penalty=args.repetition_penalty,
                                    n=args.eval_num_samples)

    def answer(self, questions: list[Question], desc: str) -> list[list[str]]:
        from ..infer.protocol import InferRequest
        out: list[list[str]] = []
        with tqdm(total=len(questions), desc=desc, unit="q") as bar:
            for start in range(0, len(questions), CHUNK):
                chunk = questions[start:start + CHUNK]
                requests = [InferRequest(messages=[*([{"role": "system", "content": q.system}] if q.system else []),
                                                   {"role": "user", "content": q.prompt}], adapter=self.adapter)
                            for q in chunk]
                out += [[c.text for c in r.choices] for r in self.engine.infer(requests, self.config)]
                bar.update(len(chunk))
        return out


def score(question: Question, text: str) -> tuple[float, str | None]:
    """(score in [0, 1], the answer found in the reply); 1 is a right answer."""
    if question.kind == "rg":
        return reasoning_gym_score(question.rg_dataset, question.rg_entry, text)
    if question.kind == "mcq":
        found = extract_choice(text, len(question.choices or []))
        return float(found == question.answer), found
    return float(qa_correct(text, question.answer)), extract_final(text)


def evaluate(answers: EngineAnswers, args: EvalArguments) -> list[BenchmarkResult]:
    k = args.eval_num_samples
    results = []
    for name in args.eval_dataset:
        questions = load_benchmark(name, args.eval_limit, args.dataset_args(name))
        replies = answers.answer(questions, desc=name)
        n_correct, total, predictions = [], 0.0, []
        for q, texts in zip(questions, replies):
            scored = [score(q, t) for t in texts]
            n_correct.append(sum(s >= 1.0 for s, _ in scored))
            total += sum(s for s, _ in scored)
            predictions += [{"benchmark": name, "prompt": q.prompt, "gold": q.answer, "reply": t, "extracted": found,
                             "correct": s >= 1.0, **({"score": s} if q.kind == "rg" else {})}
                            for t, (s, found) in zip(texts, scored)]
        metric = "score_answer" if questions[0].kind == "rg" else "accuracy"
        metrics = {"metric": metric, "questions": len(questions), "samples_per_question": k,
                   "accuracy": total / (len(questions) * k)}
        if k > 1:
            metrics[f"pass@{k}"] = sum(pass_at_k(k, c, k) for c in n_correct) / len(questions)
        results.append(BenchmarkResult(name, metrics, predictions))
    return results
