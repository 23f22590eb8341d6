"""The OpenAI-client checks of tests/e2e/test_deploy.py, against any running `swiftlike deploy` URL.

run_gpu_checks.sh runs it once per backend and model on a GPU machine; by hand:
    python tests/gpu/check_openai_client.py --url http://127.0.0.1:8000/v1 --model M --api-key K
Prints one line per check and exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

HELLO = [{"role": "user", "content": "hello"}]


def check_models(c: openai.OpenAI, model: str, **_) -> None:
    ids = [m.id for m in c.models.list().data]
    assert model in ids, f"{model} not in /v1/models: {ids}"


def check_chat_plain_and_streamed(c: openai.OpenAI, model: str, **_) -> None:
    plain = c.chat.completions.create(model=model, messages=HELLO, max_tokens=16, temperature=0)
    assert plain.choices[0].finish_reason in ("stop", "length") and plain.usage.completion_tokens > 0
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens
    chunks = list(c.chat.completions.create(model=model, messages=HELLO, max_tokens=16, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == plain.choices[0].message.content, f"greedy stream {text!r} != {plain.choices[0].message.content!r}"
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens, "streamed usage differs"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == plain.choices[0].finish_reason


def check_completions_plain_and_streamed(c: openai.OpenAI, model: str, **_) -> None:
    plain = c.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=0)
    pieces = list(c.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=0,
                                       stream=True))
    assert len(pieces) > 1, "the completion arrived in one piece"
    assert "".join(p.choices[0].text for p in pieces) == plain.choices[0].text
    stopped = c.completions.create(model=model, prompt="The sky is", max_tokens=8, logprobs=1, stop=["\n\n"])
    assert stopped.choices[0].finish_reason in ("stop", "length")
    assert len(stopped.choices[0].logprobs.token_logprobs) >= 1


def check_n_choices(c: openai.OpenAI, model: str, **_) -> None:
    r = c.chat.completions.create(model=model, messages=HELLO, max_tokens=8, n=2, temperature=1.0)
    assert sorted(ch.index for ch in r.choices) == [0, 1], f"choices {[ch.index for ch in r.choices]}"
    streamed = {ch.choices[0].index for ch in c.chat.completions.create(
        model=model, messages=HELLO, max_tokens=8, n=2, temperature=1.0, stream=True) if ch.choices}
    assert streamed == {0, 1}, f"streamed choice indices {streamed}"


def check_logprobs(c: openai.OpenAI, model: str, **_) -> None:
    r = c.chat.completions.create(model=model, messages=HELLO, max_tokens=6, logprobs=True, top_logprobs=2,
                                  temperature=1.0)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens, f"{len(content)} log-probs for {r.usage.completion_tokens} tokens"
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in content), "bad log-prob entries"


def check_32_concurrent(c: openai.OpenAI, model: str, **_) -> None:
    def ask(i):
        return c.chat.completions.create(model=model, max_tokens=16,
                                         messages=[{"role": "user", "content": f"question {i}"}])
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(ask, range(32)))
    assert all(a.choices[0].finish_reason in ("stop", "length") and a.usage.completion_tokens > 0 for a in answers)


def check_bad_requests(c: openai.OpenAI, model: str, base: str, key: str) -> None:
    bad = httpx.post(f"{base}/chat/completions", content=b"{oops", headers={"Authorization": f"Bearer {key}"})
    assert bad.status_code == 400, f"malformed JSON answered {bad.status_code}"
    try:
        c.chat.completions.create(model=model, messages=HELLO, temperature=-1)
        raise AssertionError("temperature=-1 was accepted")
    except openai.BadRequestError:
        pass
    assert c.chat.completions.create(model=model, messages=HELLO, max_tokens=3).usage.completion_tokens > 0


def check_api_key(c: openai.OpenAI, model: str, base: str, key: str) -> None:
    try:
        openai.OpenAI(base_url=base, api_key=key + "-wrong", max_retries=0).models.list()
        raise AssertionError("a wrong API key was accepted")
    except openai.AuthenticationError:
        pass
    assert httpx.get(f"{base}/models").status_code == 401, "no API key was accepted"


CHECKS = [check_models, check_chat_plain_and_streamed, check_completions_plain_and_streamed, check_n_choices,
          check_logprobs, check_32_concurrent, check_bad_requests, check_api_key]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the server's /v1 base URL")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", required=True)
    args = parser.parse_args(argv)
    base = args.url.rstrip("/")
    client = openai.OpenAI(base_url=base, api_key=args.api_key, max_retries=0, timeout=300)
    failed = 0
    for check in CHECKS:
        try:
            check(client, args.model, base=base, key=args.api_key)
            print(f"  ok    {check.__name__}", flush=True)
        except Exception as e:
            failed += 1
            print(f"  FAIL  {check.__name__}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(limit=3, file=sys.stdout)
    print(f"  {len(CHECKS) - failed}/{len(CHECKS)} checks passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
