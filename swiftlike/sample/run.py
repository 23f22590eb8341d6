"""`swiftlike sample`: prompts -> answers (pt / vLLM / a server) -> ORM / PRM scores -> kept rows, in prompt order.

Scoring runs on its own thread while the engine generates the next prompts, and rows are written as soon as
every earlier prompt's are, so the engine never waits on a reward and a killed run loses at most the prompts in
flight (output.py).
"""
from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..arguments.sample_args import SampleArguments
from ..infer.protocol import InferRequest
from ..rl.online.sandbox_check import require_sandbox
from ..utils import get_logger
from ..utils.errors import UsageError
from .output import ResumableJsonl
from .scoring import AnswerScores, PromptScorer, build_orm, build_prm
from .selection import select_answers
from .sources import client_answers, pt_answers, vllm_answers

logger = get_logger("swiftlike.sample")

# The flags whose values decide the rows: a resumed run must have the same ones (output.py).
ROW_SETTINGS = ("model", "adapters", "template", "system", "dataset", "seed", "data_range", "sampler_type",
                "sampler_engine", "num_return_sequences", "n_best_to_keep", "temperature", "top_p", "top_k",
                "repetition_penalty", "max_new_tokens", "stop_words", "orm_model", "prm_model", "prm_threshold",
                "easy_query_threshold", "num_sampling_batch_size", "num_sampling_batches")


@dataclass
class SampleResult:
    """What a sampling run did, as its summary prints it."""

    output: Path
    prompts: int = 0
    resumed_from: int = 0
    rows: int = 0
    answers: int = 0
    passed: int = 0
    too_easy: int = 0
    rewarded: bool = False
    nothing_kept: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def summary(self, engine: str) -> str:
        rate = self.tokens / max(self.seconds, 1e-9)
        lines = [f"[swiftlike sample] {self.prompts} prompts ({self.resumed_from} done before --resume), "
                 f"{self.answers} answers, {self.tokens} tokens in {self.seconds:.1f}s ({rate:.1f} tokens/s on "
                 f"{engine})",
                 f"  rows written: {self.rows}; prompts with nothing kept: {self.nothing_kept}; dropped as too "
                 f"easy: {self.too_easy}"]
        if self.rewarded and self.answers:
            lines.append(f"  answers passing the ORM: {self.passed} ({100 * self.passed / self.answers:.1f}%)")
        lines.append(f"  output: {self.output}")
        return "\n".join(lines)


def seeded_vllm_kwargs(args: SampleArguments, options) -> dict:
    """vLLM's engine arguments for seeded requests. On CPU, vLLM (0.32) fails a seeded request whose prompt is
    prefilled in chunks (it rewinds the request's generator, which torch's CPU generators cannot do: "CPU Generator
    does not use offset"), and continuous batching chunks prompts whenever a step's token budget runs out. So on
    CPU chunked prefill is off, with a token budget that holds the longest prompt whole; --vllm_engine_kwargs
    still override both."""
    import torch
    if torch.cuda.is_available():
        return dict(options.engine_kwargs or {})
    max_len = options.max_model_len
    if max_len is None:
        from ..model import resolve_model
        config = json.loads((Path(resolve_model(args.model, args.model_type, args.use_hf, args.model_revision)
                                  .model_dir) / "config.json").read_text())
        max_len = int(config.get("max_position_embeddings") or 8192)
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_len, 2048),
            **(options.engine_kwargs or {})}


def prompt_seed(seed: int, index: int) -> int:
    """A prompt's own sampling seed, from --seed and its index in the whole dataset (not in the shard or batch)."""
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def row_id(row: dict) -> str:
    """ms-swift's `id` column: the md5 of the row, so rows of one prompt are grouped downstream."""
    return hashlib.md5(json.dumps(row, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def prompt_rows(args: SampleArguments) -> list[tuple[int, dict, list[dict]]]:
    """(index in the whole dataset, row, prompt messages) of this shard's prompts, within --num_sampling_batches."""
    from ..dataset import load_dataset
    rows = load_dataset(args.dataset, seed=args.seed, model_name=args.model_name, model_author=args.model_author,
                        use_hf=args.use_hf)
    start, end = 0, len(rows)
    if args.data_range:
        shard, shards = args.data_range
        size, extra = divmod(len(rows), shards)
        start = shard * size + min(shard, extra)
        end = start + size + (shard < extra)
    if args.num_sampling_batches is not None:
        end = min(end, start + args.num_sampling_batches * args.num_sampling_batch_size)
    out = []
    for index in range(start, end):
        messages = list(rows[index]["messages"])
        if messages and messages[-1]["role"] == "assistant":
            messages = messages[:-1]
        if not messages or messages[-1]["role"] != "user":
            raise UsageError(f"--dataset row {index} does not end in a user turn (or a user turn and its answer); "
                             "sample needs a question to answer")
        if args.sampler_engine == "client" and args.system and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": args.system}, *messages]
        out.append((index, rows[index], messages))
    if not out:
        raise UsageError(f"--dataset {' '.join(args.dataset)} has no prompts in --data_range {args.data_range}")
    return out


def output_lines(row: dict, prompt: list[dict], answers: list[str], scores: AnswerScores, args: SampleArguments,
                 result: SampleResult) -> list[str]:
    """One prompt's rows: each kept answer in the messages format, the worst as `rejected_response`."""
    selection = select_answers(len(answers), scores.orm, scores.prm, n_best=args.n_best_to_keep,
                               prm_threshold=args.prm_threshold, easy_query_threshold=args.easy_query_threshold)
    result.answers += len(answers)
    if scores.orm is not None:
        result.rewarded = True
        result.passed += sum(1 for s in scores.orm if s > 0)
    result.too_easy += selection.too_easy
    result.nothing_kept += not selection.kept and not selection.too_easy
    extra = {k: v for k, v in row.items() if k not in ("messages", "rejected_response", "id")}
    rewarded = scores.orm is not None or scores.prm is not None
    lines = []
    for i in selection.kept:
        out = {**extra, "messages": [*prompt, {"role": "assistant", "content": answers[i]}]}
        if rewarded:
            # every row of a rewarded file has the column (one row format per file, as datasets need); where no
            # answer ranks below this one, its own answer: a pair DPO's gradient is zero on, never a tie
            out["rejected_response"] = answers[selection.rejected if selection.rejected is not None else i]
        out["id"] = row_id(row)
        lines.append(json.dumps(out, ensure_ascii=False) + "\n")
    result.rows += len(lines)
    return lines


def run_sampling(args: SampleArguments, engine=None) -> SampleResult:
    """`engine`: one already built for --sampler_engine, left open (a benchmark times several runs on one);
    by default the run builds its own and closes it."""
    from ..rl.rewards.plugins import load_external_plugins
    output = ResumableJsonl(Path(args.output_dir) / args.output_file,
                            {k: getattr(args, k) for k in ROW_SETTINGS}, resume=args.resume,
                            override=args.override_exist_file)
    result = SampleResult(output.path)
    if output.complete:
        return result
    load_external_plugins(args.external_plugins)
    # the rewards first: a bad --orm_model / --prm_model stops the run before the sampler's model loads
    scorer = PromptScorer(
        build_orm(args.orm_model, max_new_tokens=args.max_new_tokens, use_hf=args.use_hf,
                  torch_dtype=args.torch_dtype) if args.orm_model else None,
        build_prm(args.prm_model, torch_dtype=args.torch_dtype) if args.prm_model else None)
    # an ORM that runs the answers' code stops here, before any model loads, where the sandbox cannot isolate it
    require_sandbox(args.allow_unisolated_execution, [args.orm_model] if args.orm_model else [])
    prompts = prompt_rows(args)
    result.prompts, result.resumed_from = len(prompts), output.prompts_done
    todo = prompts[output.prompts_done:]
    by_index = {index: (row, messages) for index, row, messages in todo}
    owned = engine is None
    engine = build_sampler_engine(args) if owned else engine
    output.start()
    items = ((index, InferRequest(messages=messages), args.request_config(prompt_seed(args.seed, index)))
             for index, _, messages in todo)
    if args.sampler_engine == "vllm":
        answered = vllm_answers(engine, items, args.num_return_sequences, args.vllm_max_num_seqs)
    elif args.sampler_engine == "pt":
        answered = pt_answers(engine, items)
    else:
        answered = client_answers(engine, items, keep_reasoning=args.sampler_type == "distill")
    start = time.perf_counter()
    order = [index for index, _, _ in todo]
    scored: dict[int, Future] = {}
    written = 0
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="swiftlike-sample-score") as scoring, \
                tqdm(total=len(prompts), initial=output.prompts_done, desc="sample", unit="prompt") as bar:
            def write_ready(block: bool) -> None:
                nonlocal written
                while written < len(order) and order[written] in scored and (block or scored[order[written]].done()):
                    output.append_prompt(scored.pop(order[written]).result())
                    written += 1
                    bar.update(1)
                    bar.set_postfix(rows=result.rows)

            for index, texts, token_ids, tokens in answered:
                result.tokens += tokens
                row, messages = by_index[index]
                scored[index] = scoring.submit(
                    lambda r=row, m=messages, t=texts, ids=token_ids: output_lines(r, m, t, scorer(r, m, t, ids),
                                                                                  args, result))
                write_ready(block=False)
            write_ready(block=True)
    finally:
        result.seconds = time.perf_counter() - start
        if owned:
            engine.close()
    output.publish()
    return result


def build_sampler_engine(args: SampleArguments):
    """The engine --sampler_engine names: pt or vLLM (set up for seeded requests) in this process, or the client."""
    from ..infer.engine.factory import build_engine
    if args.sampler_engine == "vllm":
        import dataclasses
        spec = args.engine_spec()
        options = dataclasses.replace(spec.options, engine_kwargs=seeded_vllm_kwargs(args, spec.options))
        return build_engine(dataclasses.replace(spec, options=options))
    if args.sampler_engine == "client":
        from ..infer.engine.openai_engine import OpenAIEngine, OpenAIOptions
        kwargs = args.engine_kwargs
        options = OpenAIOptions(kwargs["base_url"], kwargs.get("api_key"), int(kwargs.get("max_concurrency", 16)),
                                kwargs.get("timeout"), url_flag="--engine_kwargs base_url",
                                key_flag="--engine_kwargs api_key")
        return OpenAIEngine(options, args.model)
    return build_engine(args.engine_spec())
