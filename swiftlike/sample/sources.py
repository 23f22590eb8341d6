"""Where answers come from: each prompt's request answered as it finishes, whatever the engine.

Every prompt is one request for all its answers (`n`), seeded by the prompt's place in the dataset, so a prompt's
answers do not depend on which prompts share its batch: that is what makes a resumed or sharded run write the
same file as a whole one. The vLLM engine keeps its batch full across prompts (VllmEngine.generate_as_finished);
the pt engine answers one prompt at a time; the client keeps --engine_kwargs' max_concurrency requests in flight.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ..infer.protocol import InferRequest, RequestConfig

# (prompt index, request, its config)
Item = tuple[int, InferRequest, RequestConfig]
# (prompt index, answers' texts, answers' token ids, tokens generated)
Answered = tuple[int, list[str], list[list[int]], int]


def vllm_answers(engine, items: Iterable[Item], n: int, max_num_seqs: int) -> Iterator[Answered]:
    """Enough prompts in flight to fill vLLM's --vllm_max_num_seqs twice over (the next step's work is queued)."""
    max_in_flight = max(1, 2 * -(-max_num_seqs // n))
    for index, response in engine.generate_as_finished(items, max_in_flight):
        yield index, [c.text for c in response.choices], [c.token_ids for c in response.choices], \
            response.usage.completion_tokens


def pt_answers(engine, items: Iterable[Item]) -> Iterator[Answered]:
    for index, request, config in items:
        response = engine.infer([request], config)[0]
        yield index, [c.text for c in response.choices], [c.token_ids for c in response.choices], \
            response.usage.completion_tokens


def client_answers(engine, items: Iterable[Item], keep_reasoning: bool) -> Iterator[Answered]:
    """Chat completions over the OpenAI client. A reasoning model's `reasoning_content` (vLLM's reasoning parsers,
    DeepSeek's API) is kept with `keep_reasoning` as ms-swift's distill sampler writes it:
    `<think>reasoning</think>\\n\\n<answer>content</answer>`. The server's token ids are not sent back: empty."""

    def one(request: InferRequest, config: RequestConfig) -> tuple[list[str], int]:
        body = dict(engine.request_body(None, config), messages=request.messages)
        response = engine.client.chat.completions.create(**body)
        texts = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            content = choice.message.content or ""
            reasoning = getattr(choice.message, "reasoning_content", None)
            texts.append(f"<think>{reasoning}</think>\n\n<answer>{content}</answer>"
                         if keep_reasoning and reasoning else content)
        return texts, response.usage.completion_tokens if response.usage else 0

    pending = iter(items)
    with ThreadPoolExecutor(engine.options.max_concurrency) as pool:
        in_flight = {}

        def add_next() -> None:
            item = next(pending, None)
            if item is not None:
                in_flight[pool.submit(one, item[1], item[2])] = item[0]

        for _ in range(engine.options.max_concurrency):
            add_next()
        while in_flight:
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                index = in_flight.pop(future)
                add_next()
                texts, tokens = future.result()
                yield index, texts, [[] for _ in texts], tokens
