"""A generative judge against a real one: `swiftlike deploy` of the tiny model (pt, one request per forward pass, so
a greedy reply does not depend on what else is in flight) scores GRPO through a judge plugin loaded from an
--external_plugins file. The rewards a run logs equal an offline temperature-0 re-scoring of its completions.jsonl
through the same server, missing where missing; a missing reward is left out of its group's advantage; a judge that
is not listening stops the run at start, one that dies mid-run stops it within about --reward_server_timeout naming
the server and the call, and under --reward_on_error skip the affected groups are dropped and counted instead.

A random-weight judge writes word salad, so the plugin's rule is arbitrary on purpose: a reply ending in a lower-case
letter scores that letter's place (a = 0, z = 1); any other reply has no score (missing). Its replies are cut at
--judge_max_tokens, which the plugin reads (`reads_cut_replies`; the built-in judge scores a cut reply missing).

The judge is a `deploy` of its own, not the session's shared `pt_deploy`: it runs one request per forward pass
(--max_batch_size 1), which the offline re-scoring's equality needs. The GRPO runs are in this process (`run_cli`);
the server-mode one samples on the session's shared `rollout_server`, syncing its LoRA adapter only."""
import json
import re
import time

import pytest
import torch
from cli import run_cli
from model_ids import TINY
from servers import FaultyProxy, free_port, start

from swiftlike.rl.core.advantages import group_advantages
from swiftlike.rl.core.options import RewardOptions
from swiftlike.rl.online.grpo_recipe import build_judge_server
from swiftlike.rl.rewards import plugins
from swiftlike.rl.rewards.functions import MISSING, build_reward_funcs
from swiftlike.train.outputs import read_log
from swiftlike.utils.registry import restore_registries, snapshot_registries
from swiftlike.utils.service_client import ServerUnavailable

NAME = "last_letter"
PLUGIN = '''
from swiftlike.rl.rewards import LlmJudge, register_judge


@register_judge("last_letter")
class LastLetter(LlmJudge):
    """A reply ending in a lower-case letter scores its place (a = 0, z = 1); any other reply is missing. A reply of
    --judge_max_tokens tokens is read too: the random judge never ends one on its own."""

    reads_cut_replies = True

    def extract_reward(self, reply):
        last = reply[-1:]
        return (ord(last) - ord("a")) / 25 if "a" <= last <= "z" else None
'''
TEMPLATE = "Question: {prompt}\nReference answer: {solution}\nAnswer: {completion}\nGrade it."
JUDGE_TOKENS = "2"


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("judge") / "deploy.log"
    proc = start(["deploy", "--model", TINY, "--port", str(port), "--torch_dtype", "float32", "--max_batch_size", "1"],
                 port, log)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    assert proc.wait(60) == 0, log.read_text()[-2000:]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The plugin and template files, the plugin imported here too (the offline re-scoring in this process judges
    with it); the registries and the plugin loader are put back afterwards, so the judge registered here does not
    reach the other test modules."""
    folder = tmp_path_factory.mktemp("judge_files")
    (folder / "judges.py").write_text(PLUGIN)
    (folder / "template.txt").write_text(TEMPLATE)
    before, loaded = snapshot_registries(), dict(plugins._LOADED)
    plugins.load_external_plugin(folder / "judges.py")
    yield folder
    restore_registries(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


def grpo(out, url: str, files, *extra: str, steps: int = 2, check: bool = True):
    """GRPO with the judge and format_hash, 2 prompts x 4 completions a step, in this process: its CliResult."""
    return run_cli("rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#16",
                   "--external_plugins", files / "judges.py", "--reward_funcs", NAME, "format_hash",
                   "--judge_model_server", url, "--judge_prompt_template", files / "template.txt",
                   "--judge_max_tokens", JUDGE_TOKENS, "--num_generations", "4", "--per_device_train_batch_size",
                   "8", "--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--max_steps", steps,
                   "--logging_steps", "1", "--log_completions", "true", "--report_to", "none",
                   "--gradient_checkpointing", "false", "--torch_dtype", "float32", "--use_vllm", "false",
                   "--save_steps", "100", "--output_dir", out, *extra, check=check)


def run_dir(out):
    return next(out.glob("v0-*"))


def completions(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]


def test_logged_rewards_equal_an_offline_rescoring_and_missing_ones_stay_out_of_the_advantage(judge, files,
                                                                                             tmp_path):
    grpo(tmp_path / "out", judge, files)
    run = run_dir(tmp_path / "out")
    lines = completions(run)
    assert len(lines) == 16
    # offline: the same plugin and template, a new connection to the same server, temperature 0
    offline = build_reward_funcs([NAME], judge_server=build_judge_server(RewardOptions(
        reward_funcs=[NAME], judge_model_server=[judge], reward_server_timeout=30)),
        judge_prompt_template=str(files / "template.txt"), judge_max_tokens=int(JUDGE_TOKENS))[NAME]
    rescored = offline([line["completion"] for line in lines],
                       prompts=[[{"role": "user", "content": line["prompt"]}] for line in lines],
                       solution=solutions(lines))
    logged = [MISSING if NAME in line.get("missing", []) else line["rewards"][NAME] for line in lines]
    assert logged == [r if r is MISSING else pytest.approx(r, abs=1e-6) for r in rescored]
    assert 0 < logged.count(MISSING) < len(logged)  # the rule parses some replies and not others
    assert len({r for r in logged if r is not MISSING}) > 1
    # totals: judge + format_hash, none where the judge's reward is missing; advantages leave those out
    for line, reward in zip(lines, logged):
        assert line["reward"] == (None if reward is MISSING else pytest.approx(reward + line["rewards"]["format_hash"]))
    mixed = []
    for step in (0, 1):
        batch = [line for line in lines if line["step"] == step]
        valid = torch.tensor([line["reward"] is not None for line in batch])
        rewards = torch.tensor([line["reward"] if line["reward"] is not None else float("nan") for line in batch])
        expected, _ = group_advantages(rewards, 4, valid=valid)
        assert [line["advantage"] for line in batch] == pytest.approx(expected.tolist(), abs=1e-5)
        assert all(line["advantage"] == 0.0 for line in batch if line["reward"] is None)
        mixed.extend(group for group in (batch[:4], batch[4:]) if any(line["reward"] is None for line in group)
                     and len({line["reward"] for line in group} - {None}) > 1)
    assert mixed  # a group with a missing reward and others that differ: the masked statistics were exercised
    counted = [e[f"rewards/{NAME}/missing"] for e in read_log(run) if f"rewards/{NAME}/missing" in e]
    assert counted == [sum(NAME in line.get("missing", []) for line in lines if line["step"] == s) for s in (0, 1)]


def solutions(lines: list[dict]) -> list[str]:
    """Each logged prompt's `solution`, from the dataset the run read."""
    from swiftlike.dataset import load_dataset
    by_prompt = {row["messages"][-1]["content"]: row["solution"] for row in load_dataset(["swiftlike/arithmetic#16"])}
    return [by_prompt[line["prompt"]] for line in lines]


def test_a_judge_that_is_not_listening_stops_the_run_at_start(files):
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match=rf"{url} is not answering GET /v1/models \(ConnectionError.*gave up "
                                                r"after 1\.\d s \(--reward_server_timeout 1\)"):
        build_judge_server(RewardOptions(reward_funcs=["llm_judge"], judge_model_server=[url],
                                         reward_server_timeout=1))
    assert time.monotonic() - started < 5


def test_a_judge_that_dies_mid_run_stops_it_naming_the_server_and_the_call(judge, files, tmp_path):
    # the judge answers the probe at start, then dies at the run's first judge call, after the policy generated
    proxy = FaultyProxy(judge, die_at=2)
    try:
        result = grpo(tmp_path / "out", proxy.url, files, "--reward_server_timeout", "2", steps=1, check=False)
        assert time.monotonic() - proxy.died_at < 2 + 3  # the deadline, plus the call that was cut
    finally:
        proxy.close()
    assert result.returncode == 1 and "(ServerUnavailable; traceback above)" in result.stderr, result.stderr[-3000:]
    assert re.search(rf"{proxy.url} is not answering POST /v1/chat/completions \(ConnectionError.*"
                     r"\(--reward_server_timeout 2\)", result.stderr), result.stderr[-3000:]
    assert not (next((tmp_path / "out").glob("v0-*")) / "completions.jsonl").exists()  # nothing trained on 0s


def test_under_skip_the_groups_of_a_dead_judge_are_dropped_counted_and_training_goes_on(judge, files, tmp_path):
    # POSTs: the probe at start and the 8 judge calls of step 1; the first call of step 2 kills it. The deadline
    # leaves step 1's calls time to be answered on a loaded machine (the judge runs them one after another: with
    # 1 s, some timed out and were retried, so the proxy counted to 10 and died within step 1)
    proxy = FaultyProxy(judge, die_at=10)
    try:
        grpo(tmp_path / "out", proxy.url, files, "--reward_server_timeout", "5", "--reward_on_error", "skip")
    finally:
        proxy.close()
    run = run_dir(tmp_path / "out")
    steps = [e for e in read_log(run) if "reward_on_error/dropped_groups" in e]
    assert [e["reward_on_error/dropped_groups"] for e in steps] == [0.0, 2.0]
    assert [e[f"rewards/{NAME}/failed"] for e in steps] == [0.0, 8.0]
    assert "reward" in steps[0] and "reward" not in steps[1]  # no valid reward left to average
    assert steps[1]["loss"] == 0.0  # no completion left to learn from
    lines = completions(run)
    dropped = [line for line in lines if line["step"] == 1]
    assert len(dropped) == 8 and all(line["failed"] == [NAME] and line["dropped"] and line["reward"] is None
                                     and line["advantage"] == 0.0 for line in dropped)
    assert not any("failed" in line or "dropped" in line for line in lines if line["step"] == 0)


def test_a_slow_judge_is_scored_while_the_servers_generate(judge, files, rollout_server, tmp_path):
    """Server mode on the session's rollout server, where groups are scored while others generate; the LoRA
    adapter is synced alone (--vllm_enable_lora), so the served base weights stay the checkpoint's."""
    # every judge call held 2 s: scored one after another after the batch, a step would take generation + 16 s. (A
    # step also syncs and learns, which a loaded machine slows: with calls held 1 s, 8 s of margin was not enough.)
    delay, calls_per_step = 2.0, 8
    proxy = FaultyProxy(judge, delay=delay)
    try:
        grpo(tmp_path / "out", proxy.url, files, "--use_vllm", "true", "--vllm_mode", "server",
             "--vllm_server_host", "127.0.0.1", "--vllm_server_port", str(rollout_server), "--vllm_enable_lora",
             "true", "--max_completion_length", "32", steps=3)
    finally:
        proxy.close()
    assert proxy.posts == 1 + 3 * calls_per_step  # the probe at start, then every completion judged once
    steps = [e for e in read_log(run_dir(tmp_path / "out")) if "timing/reward_wait" in e]
    assert len(steps) == 3 and all(f"rewards/{NAME}/mean" in e or e[f"rewards/{NAME}/missing"] == 8 for e in steps)
    for before, after in zip(steps, steps[1:]):  # a step's time: between two log lines (the first has the warm-up)
        step_s = after["elapsed_s"] - before["elapsed_s"]
        assert step_s < after["timing/generate"] + calls_per_step * delay, (step_s, after)
        assert after["timing/reward_wait"] < calls_per_step * delay / 2, after
