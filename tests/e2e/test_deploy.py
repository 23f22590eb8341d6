"""`swiftlike deploy` as a real process (vLLM engine on CPU, tiny model + a LoRA adapter), spoken to with the
real `openai` client."""
import json
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from cli import run_cli
from model_ids import TINY
from servers import free_port, start

KEY = "deploy-key"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def deploy(tmp_path_factory, tiny_adapter):
    """Deployed from a training checkpoint alone: no --model, it comes from the run's args.json (as
    `swiftlike sft` writes it next to its checkpoint-N directories)."""
    port = free_port()
    work = tmp_path_factory.mktemp("deploy")
    log_path = work / "deploy.log"
    checkpoint = work / "run" / "checkpoint-1"
    shutil.copytree(tiny_adapter, checkpoint)
    (work / "run" / "args.json").write_text(json.dumps({"model": TINY, "model_type": "qwen2_5"}))
    proc = start(["deploy", "--adapters", f"lora={checkpoint}", "--infer_backend", "vllm", "--port", str(port),
                  "--torch_dtype", "float32", "--vllm_max_model_len", "1024", "--api_key", KEY], port, log_path)
    yield port, proc, log_path
    if proc.poll() is None:
        proc.kill()


def client(port: int, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)


def test_models_chat_completions_n_and_logprobs(deploy):
    c = client(deploy[0])
    assert [m.id for m in c.models.list().data] == [TINY, "lora"]
    r = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=6, n=2, logprobs=True, top_logprobs=2,
                                  temperature=1.0)
    assert len(r.choices) == 2 and r.usage.completion_tokens == sum(len(ch.logprobs.content) for ch in r.choices)
    first = r.choices[0].logprobs.content[0]
    assert first.logprob <= 0 and len(first.top_logprobs) == 2
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    done = c.completions.create(model=TINY, prompt="The sky is", max_tokens=5, logprobs=1, stop=["\n\n"])
    assert done.choices[0].finish_reason in ("stop", "length") and len(done.choices[0].logprobs.token_logprobs) >= 1


def test_streaming_chat_and_completions(deploy):
    c = client(deploy[0])
    plain = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=8, temperature=0)
    chunks = list(c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=8, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == plain.choices[0].message.content  # greedy: the stream adds up to the whole answer
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == plain.choices[0].finish_reason
    pieces = list(c.completions.create(model=TINY, prompt="Once upon", max_tokens=6, temperature=0, stream=True))
    assert len(pieces) > 1 and "".join(p.choices[0].text for p in pieces) == c.completions.create(
        model=TINY, prompt="Once upon", max_tokens=6, temperature=0).choices[0].text


def test_adapter_selected_by_model_name(deploy):
    c = client(deploy[0])
    base = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=12, temperature=0)
    tuned = c.chat.completions.create(model="lora", messages=HELLO, max_tokens=12, temperature=0)
    assert tuned.model == "lora" and tuned.choices[0].message.content != base.choices[0].message.content


def test_32_concurrent_requests_all_succeed(deploy):
    c = client(deploy[0])

    def ask(i):
        return c.chat.completions.create(model=TINY if i % 2 else "lora", max_tokens=16,
                                         messages=[{"role": "user", "content": f"question {i}"}])
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(ask, range(32)))
    assert all(a.choices[0].finish_reason in ("stop", "length") and a.usage.completion_tokens > 0 for a in answers)


def test_bad_requests_get_4xx_and_the_server_keeps_answering(deploy):
    port = deploy[0]
    c = client(port)
    headers = {"Authorization": f"Bearer {KEY}"}
    bad_json = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=b"{oops", headers=headers)
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="unknown model 'nope'"):
        c.chat.completions.create(model="nope", messages=HELLO)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        c.chat.completions.create(model=TINY, messages=HELLO, temperature=-1)
    with pytest.raises(openai.BadRequestError, match="messages"):
        c.chat.completions.create(model=TINY, messages=[])
    with pytest.raises(openai.AuthenticationError):
        client(port, "wrong").chat.completions.create(model=TINY, messages=HELLO)
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401
    assert c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=3).usage.completion_tokens > 0


def test_openai_schema_parts_penalties_and_refused_fields(deploy):
    """Requests are checked against the openai package's request types; fields that are not built are refused
    by name rather than ignored, and vLLM applies OpenAI's penalties."""
    c = client(deploy[0])
    parts = c.chat.completions.create(model=TINY, max_tokens=8, temperature=0, messages=[
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "What is 2"}, {"type": "text", "text": " + 3?"}]}])
    same = c.chat.completions.create(model=TINY, max_tokens=8, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}])
    assert parts.choices[0].message.content == same.choices[0].message.content
    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    # tools are served (tests/e2e/test_tool_serving.py); the legacy functions API is refused by name
    assert c.chat.completions.create(model=TINY, messages=HELLO, tools=[tool], max_tokens=2).choices
    with pytest.raises(openai.BadRequestError, match="`functions` is not supported"):
        c.chat.completions.create(model=TINY, messages=HELLO, functions=[tool["function"]])
    with pytest.raises(openai.BadRequestError, match="image_url part is not supported"):
        c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])
    with pytest.raises(openai.BadRequestError, match=r"messages\.0"):
        c.chat.completions.create(model=TINY, messages=[{"role": "wizard", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="presence_penalty must be in"):
        c.chat.completions.create(model=TINY, messages=HELLO, presence_penalty=5)
    # a penalty vLLM applies: a strong frequency penalty changes a long greedy answer
    plain = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=40, temperature=0)
    penalised = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=40, temperature=0,
                                          frequency_penalty=2.0)
    assert penalised.choices[0].message.content != plain.choices[0].message.content


def test_gpu_only_backends_exit_with_a_clear_message():
    r = run_cli("deploy", "--model", TINY, "--infer_backend", "sglang", check=False)
    assert r.returncode == 1 and "needs an NVIDIA GPU" in r.stderr


def test_sigterm_finishes_the_request_in_flight(deploy):
    port, proc, log_path = deploy
    c = client(port)
    result = {}

    def long_request():
        result["answer"] = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=300, temperature=1.0)
    worker = threading.Thread(target=long_request)
    worker.start()
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    worker.join(120)
    assert proc.wait(120) == 0, log_path.read_text()[-2000:]
    assert result["answer"].choices[0].finish_reason in ("stop", "length")
    assert "swiftlike deploy stopped" in log_path.read_text()


def test_pt_backend_streams_token_by_token(pt_deploy):
    """On the session's pt deploy of the tiny model (its base model here; a clean SIGTERM of a pt deploy is checked
    on the one the next test starts)."""
    port = int(pt_deploy.rsplit(":", 1)[1])
    c = client(port, "unused")
    whole = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=8, temperature=0)
    chunks = [ch.choices[0].delta.content for ch in c.chat.completions.create(
        model=TINY, messages=HELLO, max_tokens=8, temperature=0, stream=True) if ch.choices]
    assert len([x for x in chunks if x]) > 1 and "".join(x or "" for x in chunks) == whole.choices[0].message.content
    with pytest.raises(openai.BadRequestError, match="presence_penalty is not supported by the PtEngine"):
        c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=4, presence_penalty=1.0)


def test_a_pt_stream_cut_by_its_client_stops_before_the_next_lora_request(tmp_path, tiny_adapter):
    """A client that disconnects mid-stream must not leave the pt engine's `generate` running: its thread held the
    base model's adapter-disabled context, and a LoRA request served at once after it ran inside that context
    (without its adapter) for as long as the abandoned generation went on. Each round streams a long base-model
    answer, reads a few chunks, hangs up, and asks the adapter at once; every answer must be the adapter's."""
    port = free_port()
    proc = start(["deploy", "--model", TINY, "--adapters", f"lora={tiny_adapter}", "--infer_backend", "pt", "--port",
                  str(port), "--torch_dtype", "float32"], port, tmp_path / "deploy-pt-lora.log")
    try:
        c = client(port, "unused")
        ask_lora = dict(model="lora", messages=HELLO, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
        reference = c.chat.completions.create(**ask_lora).choices[0].message.content
        base = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=16, temperature=0,
                                         extra_body={"ignore_eos": True}).choices[0].message.content
        assert reference != base  # the adapter changes the answer, so an answer without it is told apart
        answers = []
        for _ in range(8):
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60,
                              json={"model": TINY, "messages": HELLO, "max_tokens": 3000, "temperature": 0,
                                    "stream": True, "ignore_eos": True}) as long:
                lines = long.iter_lines()
                for _ in range(4):  # the role chunk and three token chunks: generation is under way
                    next(lines)
            # the connection is closed here, mid-generation; the adapter's request goes in at once
            answers.append(c.chat.completions.create(**ask_lora).choices[0].message.content)
        assert answers == [reference] * len(answers), [a == reference for a in answers]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
