"""What `swiftlike <command>` prints and returns when it stops (docs/commands.md, "Exit status"), run in-process
through cli/main.py: a usage error is one line, any other failure its traceback, SWIFTLIKE_LOG_LEVEL=DEBUG every
traceback; and bad input is refused before a model loads (issue 50, items 20 and 21)."""
import json
import shutil

import pytest
from cli import run_cli

NO_MODEL = "/nonexistent/h4-model"  # a model load would fail on this path, naming it: the checks must come first


@pytest.fixture
def questions(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i} + 1?"}]}) + "\n"
                            for i in range(3)))
    return path


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_usage_error_found_while_running_is_one_line_and_costs_no_model_load(tmp_path):
    """The dataset is read before the engine is built: a wrong --val_dataset path is the one line printed, not the
    model load's error (nor its log)."""
    missing = tmp_path / "missing.jsonl"
    run = run_cli("infer", "--model", NO_MODEL, "--val_dataset", missing, env=QUIET, check=False)
    assert run.returncode == 1
    err = lines(run.stderr)
    assert len(err) == 1 and err[0].startswith(f"swiftlike infer: error: dataset file not found: {missing} "), err


def test_a_failure_from_deep_inside_prints_its_traceback(tmp_path, questions, tiny_resolved):
    """A checkpoint whose config.json disagrees with its weights: transformers raises a RuntimeError (a shape error)
    deep in the load. Its traceback is printed, then the one-line summary, so the web UI finds the message."""
    broken = tmp_path / "broken"
    shutil.copytree(tiny_resolved.model_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    config["intermediate_size"] *= 2
    (broken / "config.json").write_text(json.dumps(config))
    run = run_cli("infer", "--model", broken, "--val_dataset", questions, "--max_new_tokens", "2", env=QUIET,
                  check=False)
    assert run.returncode == 1
    err = run.stderr
    assert "Traceback (most recent call last)" in err and "transformers" in err and "\nRuntimeError: " in err
    assert lines(err)[-1].startswith("swiftlike infer: error: ") and lines(err)[-1].endswith(
        "(RuntimeError; traceback above)")


# SWIFTLIKE_LOG_LEVEL unset (the one-line messages) or DEBUG (every traceback)
QUIET, LOUD = {"SWIFTLIKE_LOG_LEVEL": None}, {"SWIFTLIKE_LOG_LEVEL": "DEBUG"}


def test_debug_log_level_shows_the_traceback_of_usage_errors_too(tmp_path):
    missing = str(tmp_path / "missing.jsonl")
    quiet, loud = (run_cli("infer", "--model", NO_MODEL, "--val_dataset", missing, env=env, check=False)
                   for env in (QUIET, LOUD))
    assert quiet.returncode == loud.returncode == 1
    assert "Traceback" not in quiet.stderr and len(lines(quiet.stderr)) == 1
    assert "Traceback (most recent call last)" in loud.stderr and "MissingInputError" in loud.stderr
    assert lines(loud.stderr)[-1] == lines(quiet.stderr)[0]
    # an argument check (exit status 2) as well
    quiet, loud = (run_cli("infer", "--model", NO_MODEL, "--max_batch_size", "0", env=env, check=False)
                   for env in (QUIET, LOUD))
    assert quiet.returncode == loud.returncode == 2
    assert lines(quiet.stderr) == ["swiftlike infer: error: --max_batch_size must be >= 1, got 0"]
    assert "Traceback (most recent call last)" in loud.stderr and lines(loud.stderr)[-1] == lines(quiet.stderr)[0]


@pytest.mark.parametrize("argv", [
    ["infer", "--val_dataset", "QUESTIONS"],
    ["eval", "--eval_dataset", "math"],
    ["sample", "--dataset", "QUESTIONS"],
])
def test_max_batch_size_0_is_refused_before_the_model_loads(argv, questions):
    argv = [str(questions) if a == "QUESTIONS" else a for a in argv]
    run = run_cli(*argv, "--model", NO_MODEL, "--max_batch_size", "0", env=QUIET, check=False)
    assert run.returncode == 2
    assert lines(run.stderr) == [f"swiftlike {argv[0]}: error: --max_batch_size must be >= 1, got 0"]


@pytest.mark.parametrize("sample", ["-1", "0"])
def test_val_dataset_sample_below_1_is_refused(sample, questions):
    """-1 once answered every row but the last (a Python slice), silently."""
    run = run_cli("infer", "--model", NO_MODEL, "--val_dataset", questions, "--val_dataset_sample", sample,
                  check=False)
    assert run.returncode == 2
    assert f"--val_dataset_sample N answers the first N rows of --val_dataset, N >= 1; got {sample}" in run.stderr


@pytest.mark.parametrize("argv, named", [
    (["infer", "--infer_backend", "sglang"], "--infer_backend sglang in swiftlike infer"),
    (["infer", "--infer_backend", "lmdeploy"], "--infer_backend lmdeploy in swiftlike infer"),
    (["rollout", "--vllm_data_parallel_size", "2"], "--vllm_data_parallel_size 2: one engine per server"),
])
def test_options_that_are_not_built_exit_with_status_3(argv, named):
    run = run_cli(*argv, "--model", NO_MODEL, env=QUIET, check=False)
    assert run.returncode == 3
    err = lines(run.stderr)
    assert len(err) == 1 and err[0].startswith(f"swiftlike {argv[0]}: not built: {named}")
