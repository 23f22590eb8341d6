"""`swiftlike sample` end to end: the pt, vLLM and client engines, ORM and PRM filtering, exact resume, shards."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from cli import BASE_ENV, run_cli
from model_ids import TINY

from swiftlike.commands.sample import sample_main
# Deterministic rewards with passing and failing answers even for a random model's text.
PLUGIN = '''
from swiftlike.rl.rewards import register_prm, register_reward

@register_reward("length_mod")
def length_mod(completions, solution=None, **kwargs):
    assert solution is not None and len(solution) == len(completions)  # the row's columns reach the reward
    return [len(c) % 7 - 3 for c in completions]

@register_reward("one_short")
def one_short(completions, **kwargs):
    return [0.0] * (len(completions) - 1)

@register_prm("word_steps")
def word_steps(completions, **kwargs):
    return [word_step_scores(c) for c in completions]

def word_step_scores(text):
    return [len(w) % 4 / 3 for w in text.split()[:3]]
'''


def length_mod(text: str) -> int:
    return len(text) % 7 - 3


def read(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


@pytest.fixture(autouse=True)
def clean_registries():
    """The rewards and PRMs a test's plugin registers in this process do not outlive the test (later tests list the
    registered names)."""
    from swiftlike.rl.rewards import plugins
    from swiftlike.utils.registry import restore_registries, snapshot_registries
    before, loaded = snapshot_registries(), dict(plugins._LOADED)
    yield
    restore_registries(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugin") / "rewards.py"
    path.write_text(PLUGIN)
    return str(path)


def common(tmp_path, *extra):
    return ["--model", TINY, "--dataset", "swiftlike/arithmetic#8", "--max_new_tokens", "24",
            "--output_dir", str(tmp_path), "--torch_dtype", "float32", *extra]


def test_pt_keeps_the_best_passing_answers_with_the_worst_rejected(tmp_path, plugin):
    result = sample_main(common(tmp_path, "--num_return_sequences", "6", "--n_best_to_keep", "2", "--orm_model",
                                "length_mod", "--external_plugins", plugin, "--output_file", "pt.jsonl"))
    rows = read(tmp_path / "pt.jsonl")
    assert result.prompts == 8 and result.answers == 48 and result.rows == len(rows) > 0
    by_prompt = {}
    for row in rows:
        by_prompt.setdefault(row["id"], []).append(row)
        assert row["messages"][-1]["role"] == "assistant" and row["solution"]  # the row's columns travel
    for kept in by_prompt.values():
        assert len(kept) <= 2
        scores = [length_mod(r["messages"][-1]["content"]) for r in kept]
        assert all(s > 0 for s in scores) and scores == sorted(scores, reverse=True)
        for row in kept:  # the worst answer ranked below every kept one, else the row's own (one format per file)
            rejected = row["rejected_response"]
            assert length_mod(rejected) < min(scores) or rejected == row["messages"][-1]["content"]
    assert result.passed >= result.rows and result.nothing_kept == 8 - len(by_prompt)


def refused(capsys, argv, match):
    """A bad flag stops the parser (exit 2) with the message on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        sample_main(argv)
    assert exit_info.value.code == 2
    assert re.search(match, capsys.readouterr().err), match


def test_bad_input_is_refused_and_nothing_is_written(tmp_path, plugin, capsys):
    with pytest.raises(ValueError, match="reward function 'one_short' returned 3 rewards for 4 completions"):
        sample_main(common(tmp_path, "--num_return_sequences", "4", "--n_best_to_keep", "1", "--orm_model",
                           "one_short", "--external_plugins", plugin, "--output_file", "bad.jsonl"))
    assert not (tmp_path / "bad.jsonl").exists()
    refused(capsys, common(tmp_path, "--num_return_sequences", "4", "--orm_model", "accuracy"),
            "--n_best_to_keep 5 must be between 1 and --num_return_sequences \\(4\\)")
    with pytest.raises(ValueError, match="is a Qwen2ForCausalLM, not a process reward model"):
        from swiftlike.model.resolve import resolve_model
        sample_main(common(tmp_path, "--num_return_sequences", "2", "--n_best_to_keep", "1", "--prm_model",
                           str(resolve_model(TINY).model_dir)))
    with pytest.raises(ValueError, match="--prm_model accuracy is an outcome reward function"):
        sample_main(common(tmp_path, "--num_return_sequences", "2", "--n_best_to_keep", "1", "--prm_model",
                           "accuracy"))
    (tmp_path / "old.jsonl").write_text("kept\n")
    with pytest.raises(ValueError, match="old.jsonl exists: pass --override_exist_file true"):
        sample_main(common(tmp_path, "--num_return_sequences", "2", "--n_best_to_keep", "1", "--output_file",
                           "old.jsonl"))
    assert (tmp_path / "old.jsonl").read_text() == "kept\n"


def test_a_token_classification_prm_and_a_plugin_prm_filter_by_the_weakest_step(tmp_path, plugin):
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer
    from swiftlike.model.resolve import resolve_model
    from swiftlike.rl.rewards.prm import TokenClassifierPrm
    base = resolve_model(TINY).model_dir
    config = AutoConfig.from_pretrained(base, num_labels=2)
    prm_dir = tmp_path / "prm"
    AutoModelForTokenClassification.from_config(config).save_pretrained(prm_dir)
    AutoTokenizer.from_pretrained(base).save_pretrained(prm_dir)
    sample_main(common(tmp_path, "--num_return_sequences", "4", "--n_best_to_keep", "2", "--prm_model",
                       str(prm_dir), "--prm_threshold", "0.5", "--output_file", "prm.jsonl"))
    rows = read(tmp_path / "prm.jsonl")
    prm = TokenClassifierPrm(prm_dir)
    for row in rows:
        steps = prm([row["messages"][-1]["content"]], prompts=[row["messages"][:-1]])[0]
        assert min(steps) >= 0.5
    result = sample_main(common(tmp_path, "--num_return_sequences", "4", "--n_best_to_keep", "4", "--prm_model",
                                "word_steps", "--prm_threshold", "0.5", "--external_plugins", plugin,
                                "--output_file", "plugin.jsonl"))
    rows = read(tmp_path / "plugin.jsonl")
    assert 0 < len(rows) < result.answers
    for row in rows:  # the weakest of the first three words' steps
        assert min(len(w) % 4 / 3 for w in row["messages"][-1]["content"].split()[:3]) >= 0.5


def sample_argv(tmp_path, name, *extra):
    return ["sample", *common(tmp_path, "--sampler_engine", "vllm"), "--dataset", "swiftlike/arithmetic#40",
            "--num_return_sequences", "4", "--max_new_tokens", "32", "--vllm_max_num_seqs", "8",
            "--vllm_max_model_len", "512", "--output_file", name, *extra]


def test_vllm_resume_after_a_kill_and_shards_write_the_uninterrupted_file(tmp_path):
    """The whole run, then the second of two shards killed halfway and resumed: the shard's file is the tail of
    the whole run's, byte for byte (three engine starts, not four: the resumed shard checks both). The killed run
    is a process of its own (SIGKILL is what is under test), with this process's environment (its thread count
    among it), so that it samples what the in-process runs sample."""
    whole = run_cli(*sample_argv(tmp_path, "whole.jsonl"))
    assert "[swiftlike sample] 40 prompts" in whole.stdout and "tokens/s on vllm" in whole.stdout
    expected = (tmp_path / "whole.jsonl").read_bytes()
    assert expected.count(b"\n") == 160  # no reward: every answer is a row

    shard = ("--data_range", "1", "2")
    progress = tmp_path / "cut.jsonl.progress.json"
    killed = subprocess.Popen([sys.executable, "-m", "swiftlike.cli.main", *sample_argv(tmp_path, "cut.jsonl", *shard)],
                              env={**os.environ, **BASE_ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and killed.poll() is None:
        if progress.exists() and json.loads(progress.read_text())["prompts_done"] >= 10:
            killed.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL, "the run finished before it could be killed halfway"
    done = json.loads(progress.read_text())["prompts_done"]
    assert 10 <= done < 20
    resumed = run_cli(*sample_argv(tmp_path, "cut.jsonl", *shard, "--resume", "true"))
    assert f"({done} done before --resume)" in resumed.stdout
    cut = (tmp_path / "cut.jsonl").read_bytes()
    assert cut.count(b"\n") == 80 and expected.endswith(cut)


def test_distill_from_a_served_teacher(tmp_path, capsys, pt_tiny):
    """The teacher: deploy's OpenAI app over the session's pt engine of the tiny model, under the name
    --served_model_name gives it (the `swiftlike deploy` process itself: test_deploy.py)."""
    from test_openai_fields import _serve

    from swiftlike.arguments import parse_args
    from swiftlike.arguments.deploy_args import DeployArguments
    from swiftlike.deploy.server import ServeSettings, create_app
    settings = ServeSettings.of(parse_args(DeployArguments, ["--model", TINY, "--served_model_name", "teacher"]))
    port, http, thread = _serve(create_app(pt_tiny, settings))
    try:
        kwargs = json.dumps({"base_url": f"http://127.0.0.1:{port}/v1", "max_concurrency": 4})
        argv = ["--model", "teacher", "--sampler_type", "distill", "--engine_kwargs", kwargs, "--dataset",
                "swiftlike/arithmetic#6", "--num_return_sequences", "2", "--n_best_to_keep", "2",
                "--max_new_tokens", "16", "--output_dir", str(tmp_path), "--output_file", "distill.jsonl"]
        result = sample_main(argv)
    finally:
        http.should_exit = True
        thread.join(30)
    rows = read(tmp_path / "distill.jsonl")
    assert result.rows == len(rows) == 12 and result.tokens > 0
    assert all(r["messages"][-1]["content"] for r in rows)
    refused(capsys, ["--model", TINY, "--sampler_type", "distill", "--sampler_engine", "vllm", "--dataset", "x"],
            "--sampler_type distill .* use --sampler_engine client")
