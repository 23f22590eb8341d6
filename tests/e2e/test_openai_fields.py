"""Every field of OpenAI's and vLLM's chat / completions requests is applied with vLLM's meaning or refused by
name (issue 27): checked against the installed vLLM's and openai's request models, and for real on
`swiftlike deploy`'s app over the vLLM CPU engine and the pt engine, and on the rollout server, with the real
`openai` client over loopback (uvicorn on a thread, sharing the session's engines)."""
import re
import threading
import time

import httpx
import openai
import pytest
from model_ids import TINY
from servers import free_port

HELLO = [{"role": "user", "content": "hello"}]
PROMPT = "The sky is blue and the grass"


def _serve(app):
    import uvicorn
    port = free_port()
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    while not http.started:
        time.sleep(0.05)
    return port, http, thread


@pytest.fixture(scope="module")
def servers(vllm_tiny, pt_tiny):
    """{"vllm": port, "pt": port, "rollout": port}: deploy's app over each engine, the rollout server's over vLLM."""
    from swiftlike.arguments.rollout_args import RolloutServerArguments
    from swiftlike.deploy.server import ServeSettings, create_app
    from swiftlike.rollout.server.app import create_app as rollout_app
    from swiftlike.rollout.server.service import RolloutService
    started = {}
    for name, engine in (("vllm", vllm_tiny), ("pt", pt_tiny)):
        started[name] = _serve(create_app(engine, ServeSettings(max_new_tokens=16)))
    service = RolloutService(RolloutServerArguments(model=TINY, port=free_port(), default_max_tokens=16),
                             lambda: vllm_tiny)
    started["rollout"] = _serve(rollout_app(service))
    yield {name: port for name, (port, _, _) in started.items()}
    for _, http, thread in started.values():
        http.should_exit = True
        thread.join(30)
    service._engine_thread.shutdown()
    vllm_tiny.stop_concurrent_serving()  # the session's later tests drive it with `infer` again


def client(port: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)


def complete(port: int, **body) -> dict:
    """A completions answer through the openai client; vLLM's fields go in extra_body, as a client sends them."""
    known = {"prompt", "max_tokens", "temperature", "seed", "stop", "logprobs", "echo", "n", "top_p"}
    extra = {k: v for k, v in body.items() if k not in known}
    args = {k: v for k, v in body.items() if k in known}
    return client(port).completions.create(model=TINY, **{"prompt": PROMPT, **args},
                                           extra_body=extra or None).model_dump()


def test_the_table_holds_every_field_of_the_installed_request_models():
    """An upgrade of vllm or openai that adds a request field fails here until the field is applied or refused."""
    from openai.types import completion_create_params
    from openai.types.chat import completion_create_params as chat_params
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from swiftlike.infer.openai_fields import FIELDS, rule
    models = {"chat": [ChatCompletionRequest.model_fields, chat_params.CompletionCreateParamsBase.__annotations__],
              "completions": [CompletionRequest.model_fields,
                              completion_create_params.CompletionCreateParamsBase.__annotations__]}
    missing = sorted({(route, name) for route, fields in models.items() for names in fields for name in names
                      if rule(name, route) is None})
    assert not missing, f"request fields with no rule in swiftlike/infer/openai_fields.py: {missing}"
    vllm_fields = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    statuses = [FIELDS[name].status for name in vllm_fields if name in FIELDS]
    assert len(vllm_fields) == 71 or statuses  # the count is reported, not pinned: it moves with vLLM
    assert all(r.note for r in FIELDS.values())


def test_seed_same_seed_same_text_other_seed_other_text(servers):
    for name in ("vllm", "pt", "rollout"):
        port = servers[name]
        texts = [complete(port, max_tokens=12, temperature=1.0, seed=s)["choices"][0]["text"] for s in (7, 7, 8)]
        assert texts[0] == texts[1] != texts[2], (name, texts)
        chat = [client(port).chat.completions.create(model=TINY, messages=HELLO, max_tokens=10, temperature=1.0,
                                                     seed=s).choices[0].message.content for s in (3, 3)]
        assert chat[0] == chat[1], name


def test_min_tokens_with_ignore_eos_min_p_and_top_k_spellings(servers):
    for name in ("vllm", "pt", "rollout"):
        port = servers[name]
        long = complete(port, max_tokens=20, min_tokens=20, ignore_eos=True, temperature=1.0)
        assert long["usage"]["completion_tokens"] == 20 and long["choices"][0]["finish_reason"] == "length", name
        greedy = complete(port, max_tokens=10, temperature=0)["choices"][0]["text"]
        # min_p 1.0 keeps only the most likely token, top_k 1 too: both sample the greedy answer at temperature 1
        assert complete(port, max_tokens=10, temperature=1.0, min_p=1.0)["choices"][0]["text"] == greedy, name
        assert complete(port, max_tokens=10, temperature=1.0, top_k=1)["choices"][0]["text"] == greedy, name
        for no_top_k in (0, -1):
            assert complete(port, max_tokens=10, temperature=0, top_k=no_top_k)["choices"][0]["text"] == greedy


def test_stop_strings_stop_token_ids_and_token_ids_in_the_answer(servers):
    for name in ("vllm", "pt", "rollout"):
        port = servers[name]
        full = complete(port, max_tokens=16, temperature=0, ignore_eos=True, return_token_ids=True)["choices"][0]
        ids, text = full["token_ids"], full["text"]
        assert len(ids) == 16 and full["prompt_token_ids"], name
        word = text[len(text) // 2: len(text) // 2 + 3]
        cut = complete(port, max_tokens=16, temperature=0, ignore_eos=True, stop=[word])["choices"][0]
        assert cut["finish_reason"] == "stop" and text.startswith(cut["text"]) and word not in cut["text"], name
        kept = complete(port, max_tokens=16, temperature=0, ignore_eos=True, stop=[word],
                        include_stop_str_in_output=True)["choices"][0]["text"]
        assert kept == cut["text"] + word, name
        at = ids.index(ids[5])
        by_id = complete(port, max_tokens=16, temperature=0, ignore_eos=True, stop_token_ids=[ids[5]],
                         return_token_ids=True)["choices"][0]
        assert by_id["token_ids"] == ids[:at + 1] and by_id["finish_reason"] == "stop", name


def test_logprobs_fields_and_tokens_as_ids(servers):
    for name in ("vllm", "pt", "rollout"):
        port = servers[name]
        c = client(port)
        r = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=4, logprobs=True, top_logprobs=3,
                                      extra_body={"return_tokens_as_token_ids": True, "return_token_ids": True})
        first = r.choices[0].logprobs.content[0]
        assert len(first.top_logprobs) == 3 and re.fullmatch(r"token_id:\d+", first.token), name
        extra = r.model_dump()
        assert extra["choices"][0]["token_ids"] and extra["prompt_token_ids"], name
        with pytest.raises(openai.BadRequestError, match="top_logprobs"):  # without logprobs: vLLM's 400 too
            c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=4, top_logprobs=2)


def test_echo_prepends_the_prompt_and_its_logprobs_as_legacy_completions(servers):
    """lm-eval's log-likelihood request: echo, logprobs 1, max_tokens 1, temperature 0."""
    for name in ("vllm", "pt", "rollout"):
        port = servers[name]
        r = complete(port, echo=True, logprobs=1, max_tokens=1, temperature=0)
        choice, prompt_tokens = r["choices"][0], r["usage"]["prompt_tokens"]
        lp = choice["logprobs"]
        assert choice["text"].startswith(PROMPT) and len(choice["text"]) > len(PROMPT), name
        assert len(lp["token_logprobs"]) == len(lp["tokens"]) == prompt_tokens + 1, name
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert all(x <= 0 for x in lp["token_logprobs"][1:])
        assert all(max(top.values()) >= tok for tok, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:]))
        scored = complete(port, prompt_logprobs=0, max_tokens=1, temperature=0)["choices"][0]["prompt_logprobs"]
        ids = complete(port, max_tokens=1, return_token_ids=True)["choices"][0]["prompt_token_ids"]
        expected = [scored[i][str(t)]["logprob"] for i, t in enumerate(ids) if i]
        assert lp["token_logprobs"][1:prompt_tokens] == pytest.approx(expected, abs=1e-4), name
        alone = complete(port, echo=True, max_tokens=0)["choices"][0]
        assert alone["text"] == PROMPT, name
        assert complete(port, request_id="abc", max_tokens=1)["id"] == "cmpl-abc"


def test_vllm_only_fields_apply_on_vllm_and_are_refused_by_name_on_pt(servers, vllm_tiny):
    eos = vllm_tiny.template.stop_token_ids[0]
    eos_text = vllm_tiny.tokenizer.decode([eos])
    for name in ("vllm", "rollout"):
        port = servers[name]
        r = complete(port, max_tokens=20, temperature=1.0, structured_outputs={"regex": "[0-9]{3}-[a-z]{2}"})
        assert re.fullmatch("[0-9]{3}-[a-z]{2}", r["choices"][0]["text"]), (name, r["choices"][0]["text"])
        only = complete(port, max_tokens=6, temperature=1.0, allowed_token_ids=[11, 12], return_token_ids=True)
        assert set(only["choices"][0]["token_ids"]) <= {11, 12}, name
        biased = complete(port, max_tokens=5, temperature=1.0, logit_bias={"13": 100}, return_token_ids=True)
        assert biased["choices"][0]["token_ids"] == [13] * 5, name
        # min_tokens holds off the EOS the bias would pick at once; ignore_eos lets generation run through it
        forced = complete(port, max_tokens=10, min_tokens=5, allowed_token_ids=[eos, 11], logit_bias={str(eos): 100},
                          temperature=1.0, return_token_ids=True)["choices"][0]
        assert forced["token_ids"] == [11] * 5 + [eos] and forced["finish_reason"] == "stop", name
        special = dict(max_tokens=3, ignore_eos=True, allowed_token_ids=[eos], temperature=1.0)
        assert complete(port, **special)["choices"][0]["text"] == ""
        assert complete(port, **special, skip_special_tokens=False)["choices"][0]["text"] == eos_text * 3
        assert complete(port, max_tokens=6, bad_words=["the"], spaces_between_special_tokens=False)["choices"]
    for field, value in (("structured_outputs", {"regex": "[a-z]+"}), ("allowed_token_ids", [11]),
                         ("logit_bias", {"13": 5}), ("bad_words", ["x"]), ("spaces_between_special_tokens", False)):
        with pytest.raises(openai.BadRequestError, match=field):
            complete(servers["pt"], max_tokens=4, **{field: value})


# A value other than vLLM's default for every field, valid where the field is applied.
SAMPLES = {
    "model": TINY, "stream": False, "stream_options": None, "request_id": "r1", "n": 2, "temperature": 0.5,
    "top_p": 0.9, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1, "presence_penalty": 0.5,
    "frequency_penalty": 0.5, "seed": 1, "max_tokens": 4, "max_completion_tokens": 4, "min_tokens": 2,
    "ignore_eos": True, "stop": ["\n"], "stop_token_ids": [13], "include_stop_str_in_output": True,
    "skip_special_tokens": False, "spaces_between_special_tokens": False, "allowed_token_ids": [11, 12, 13],
    "bad_words": ["the"], "logit_bias": {"13": 1.0}, "structured_outputs": {"regex": "[a-z]{1,3}"},
    "logprobs": 2, "top_logprobs": 2, "prompt_logprobs": 1, "echo": True, "return_token_ids": True,
    "return_tokens_as_token_ids": True, "add_special_tokens": False, "user": "u", "session_id": "s",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": "none", "response_format": {"type": "json_object"}, "stream_interval": 2, "return_token_offsets": True, "mm_payload": "none", "return_mm_kwargs": False,
}


def _send(port: int, route: str, field: str, value) -> httpx.Response:
    body = {"model": TINY, "max_tokens": 4, field: value}
    if route == "chat":
        body["messages"] = HELLO
        if field == "logprobs":
            body["logprobs"] = True
        if field == "top_logprobs":
            body["logprobs"] = True
    else:
        body["prompt"] = PROMPT
    path = "/v1/chat/completions" if route == "chat" else "/v1/completions"
    return httpx.post(f"http://127.0.0.1:{port}{path}", json=body, timeout=120)


def _other_than(default):
    """A value that asks for something: not vLLM's default of a refused field."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 3
    return "x"


@pytest.mark.parametrize("server", ["vllm", "pt", "rollout"])
def test_every_field_of_vllms_request_models_is_applied_or_refused_by_name(servers, server, pt_tiny, vllm_tiny):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from swiftlike.infer.openai_fields import rule
    from swiftlike.infer.protocol import VLLM_EXTENSIONS
    engine = pt_tiny if server == "pt" else vllm_tiny
    port = servers[server]
    counts = {"applied": 0, "no effect": 0, "refused": 0}
    for route, model in (("chat", ChatCompletionRequest), ("completions", CompletionRequest)):
        for field in model.model_fields:
            if field in ("messages", "prompt"):
                continue
            found = rule(field, route)
            if found.status == "refused":
                answer = _send(port, route, field, _other_than(found.default))
                assert answer.status_code == 400 and f"`{field}`" in answer.json()["error"]["message"], \
                    (route, field, answer.text)
                counts["refused"] += 1
                continue
            answer = _send(port, route, field, SAMPLES[field])
            engine_refuses = (field in set(VLLM_EXTENSIONS) - engine.applied_extensions or
                              (field in ("presence_penalty", "frequency_penalty") and not engine.supports_penalties)
                              or (field == "response_format" and "structured_outputs" not in engine.applied_extensions))
            if engine_refuses:
                assert answer.status_code == 400 and field in answer.json()["error"]["message"], (route, field)
                counts["refused"] += 1
            else:
                assert answer.status_code == 200, (route, field, answer.text)
                counts[found.status] += 1
    print(server, counts)
    assert client(port).chat.completions.create(model=TINY, messages=HELLO, max_tokens=3).choices  # still serving
    with pytest.raises(openai.BadRequestError, match="`max_token` is not a field"):
        client(port).completions.create(model=TINY, prompt=PROMPT, extra_body={"max_token": 3})
