"""Dataset loading: every row format, the file readers, `#N`, splits, built-ins and error messages."""
from __future__ import annotations

import collections
import importlib.util
import itertools
import json
import re
import sys
import types
from pathlib import Path

import pytest

from paths import REPO

from swiftlike.dataset import (DATASET_REGISTRY, DatasetRowError, iter_dataset, load_dataset, normalize_row,
                               split_dataset)

REPO_ROOT = REPO
NAMES = {"model_name": ["小黄", "Xiao Huang"], "model_author": ["魔搭", "ModelScope"]}


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def load_one(path: Path, rows: list[dict]) -> list[dict]:
    return load_dataset([write_jsonl(path, rows)])


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def system(text: str) -> dict:
    return {"role": "system", "content": text}


# --- one test per input format ---------------------------------------------------------------

def test_messages_rows_keep_extra_columns(tmp_path):
    messages = [system("Be brief."), user("Hi"), assistant("Hello!")]
    rows = load_one(tmp_path / "chat.jsonl", [{"messages": messages, "label": 1}])
    assert rows == [{"messages": messages, "label": 1}]


def test_sharegpt_conversations_map_roles(tmp_path):
    conversation = [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                    {"from": "gpt", "value": "Hello!"}, {"from": "user", "value": "Bye"},
                    {"from": "assistant", "value": "Bye!"}]
    rows = load_one(tmp_path / "sharegpt.jsonl", [{"conversations": conversation}])
    assert rows == [{"messages": [system("Be brief."), user("Hi"), assistant("Hello!"), user("Bye"),
                                  assistant("Bye!")]}]


def test_query_response_with_history_and_system(tmp_path):
    row = {"system": "You are terse.", "history": [["1+1?", "2"], ["2+2?", "4"]], "query": "3+3?",
           "response": "6", "source": "quiz"}
    rows = load_one(tmp_path / "qr.jsonl", [row])
    assert rows == [{"messages": [system("You are terse."), user("1+1?"), assistant("2"), user("2+2?"),
                                  assistant("4"), user("3+3?"), assistant("6")], "source": "quiz"}]


def test_alpaca_joins_instruction_and_input(tmp_path):
    rows = load_one(tmp_path / "alpaca.jsonl", [
        {"instruction": "Translate to French.", "input": "Hello", "output": "Bonjour"},
        {"instruction": "Name a color.", "input": "", "output": "Blue", "system": "Answer in one word."},
    ])
    assert rows[0] == {"messages": [user("Translate to French.\nHello"), assistant("Bonjour")]}
    assert rows[1] == {"messages": [system("Answer in one word."), user("Name a color."), assistant("Blue")]}


def test_preference_chosen_rejected_strings(tmp_path):
    rows = load_one(tmp_path / "pref.jsonl", [{"query": "2+2?", "chosen": "4", "rejected": "5"},
                                              {"query": "3+3?", "chosen": "6", "rejected": "7"}])
    assert rows[0] == {"messages": [user("2+2?"), assistant("4")], "rejected_response": "5"}


def test_preference_prompt_column_is_read_as_query(tmp_path):
    rows = load_one(tmp_path / "pref.jsonl", [{"prompt": "2+2?", "chosen": "4", "rejected": "5"}])
    assert rows == [{"messages": [user("2+2?"), assistant("4")], "rejected_response": "5"}]


def test_preference_chosen_rejected_message_lists(tmp_path):
    row = {"chosen": [user("2+2?"), assistant("4")], "rejected": [user("2+2?"), assistant("5")]}
    rows = load_one(tmp_path / "pref.jsonl", [row])
    assert rows == [{"messages": [user("2+2?"), assistant("4")], "rejected_response": "5"}]


def test_messages_with_rejected_response(tmp_path):
    row = {"messages": [user("2+2?"), assistant("4")], "rejected_response": "5"}
    assert load_one(tmp_path / "dpo.jsonl", [row]) == [row]


def test_rl_prompt_rows_keep_solution(tmp_path):
    rows = load_one(tmp_path / "rl.jsonl", [{"query": "What is 2+3?", "solution": "5"},
                                            {"query": "What is 4+4?", "solution": "8"}])
    assert rows[0] == {"messages": [user("What is 2+3?")], "solution": "5"}
    rows = load_one(tmp_path / "rl_messages.jsonl", [{"messages": [user("What is 2+3?")], "solution": "5"}])
    assert rows == [{"messages": [user("What is 2+3?")], "solution": "5"}]


def test_text_rows_become_one_assistant_turn(tmp_path):
    rows = load_one(tmp_path / "text.jsonl", [{"text": "The Sun is a star.", "source": "notes"},
                                              {"text": "Bees carry pollen."}])
    assert rows == [{"messages": [assistant("The Sun is a star.")], "source": "notes"},
                    {"messages": [assistant("Bees carry pollen.")]}]
    with pytest.raises(DatasetRowError, match=r"line 1: field 'text' must be a string, got int$"):
        load_one(tmp_path / "bad.jsonl", [{"text": 3}])
    rows = load_dataset(["swiftlike/text-mini"])
    assert len(rows) == 40
    assert all([m["role"] for m in row["messages"]] == ["assistant"] and row["messages"][0]["content"]
               for row in rows)


def test_normalize_row_directly():
    row = {"query": "Hi", "response": "Hello", "id": 7}
    assert normalize_row(row, "inline row 1") == {"messages": [user("Hi"), assistant("Hello")], "id": 7}


# --- file readers ------------------------------------------------------------------------------

def test_csv_reader(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text('query,response,answer\n"Hello, you",Hi,1\nBye,"See you\nsoon",2\n', encoding="utf-8")
    rows = load_dataset([str(path)])
    assert rows == [{"messages": [user("Hello, you"), assistant("Hi")], "answer": "1"},
                    {"messages": [user("Bye"), assistant("See you\nsoon")], "answer": "2"}]


def test_json_array_reader(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([{"query": "a", "response": "b"}, {"query": "c", "response": "d"}]))
    assert [row["messages"][-1]["content"] for row in load_dataset([str(path)])] == ["b", "d"]


def test_json_file_holding_json_lines(tmp_path):
    path = tmp_path / "data.json"
    write_jsonl(path, [{"query": "a", "response": "b"}, {"query": "c", "response": "d"}])
    assert len(load_dataset([str(path)])) == 2


def test_specs_concatenate_in_order(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", [{"query": "a", "response": "1"}])
    second = write_jsonl(tmp_path / "b.jsonl", [{"query": "b", "response": "2"}])
    assert [row["messages"][0]["content"] for row in load_dataset([first, second, first])] == ["a", "b", "a"]


# --- #N sampling -------------------------------------------------------------------------------

@pytest.fixture
def ten_rows(tmp_path) -> str:
    return write_jsonl(tmp_path / "ten.jsonl", [{"query": f"q{i}", "response": f"r{i}"} for i in range(10)])


def queries(rows: list[dict]) -> list[str]:
    return [row["messages"][0]["content"] for row in rows]


def test_sample_fewer_rows_than_the_dataset(ten_rows):
    rows = load_dataset([f"{ten_rows}#4"], seed=1)
    assert len(rows) == 4 and len(set(queries(rows))) == 4
    assert queries(rows) == queries(load_dataset([f"{ten_rows}#4"], seed=1))
    assert queries(rows) != queries(load_dataset([f"{ten_rows}#4"], seed=2))


def test_sample_more_rows_than_the_dataset_repeats_it_whole(ten_rows):
    rows = load_dataset([f"{ten_rows}#25"], seed=1)
    counts = collections.Counter(queries(rows))
    assert len(rows) == 25 and len(counts) == 10
    assert sorted(counts.values()) == [2] * 5 + [3] * 5
    assert queries(rows) == queries(load_dataset([f"{ten_rows}#25"], seed=1))
    assert queries(rows) != queries(load_dataset([f"{ten_rows}#25"], seed=2))


def test_repeated_rows_are_independent_copies(ten_rows):
    rows = load_dataset([f"{ten_rows}#20"])
    rows[0]["messages"][0]["content"] = "changed"
    assert queries(rows).count("changed") == 1


@pytest.mark.parametrize("suffix", ["0", "-3", "abc", "", "2.5"])
def test_sample_count_must_be_a_positive_integer(ten_rows, suffix):
    with pytest.raises(ValueError, match="the part after '#' must be a positive number of rows"):
        load_dataset([f"{ten_rows}#{suffix}"])


# --- split_dataset -----------------------------------------------------------------------------

def test_split_dataset():
    rows = [{"messages": [user(str(i))]} for i in range(100)]
    assert split_dataset(rows, 0, seed=0) == (rows, [])
    train, val = split_dataset(rows, 0.1, seed=0)
    assert len(train) == 90 and len(val) == 10
    assert sorted(map(id, train + val)) == sorted(map(id, rows))
    assert (train, val) == split_dataset(rows, 0.1, seed=0)
    assert val != split_dataset(rows, 0.1, seed=1)[1]


def test_split_dataset_keeps_one_row_on_each_side():
    rows = [{"messages": [user(str(i))]} for i in range(3)]
    train, val = split_dataset(rows, 0.01, seed=0)
    assert (len(train), len(val)) == (2, 1)
    with pytest.raises(ValueError, match=r"split ratio must be in \[0, 1\)"):
        split_dataset(rows, 1.0, seed=0)


# --- self-cognition ----------------------------------------------------------------------------

def self_cognition_by_lang() -> dict[str, list[str]]:
    """The answers in the data file, grouped by their hidden `lang` column."""
    answers = collections.defaultdict(list)
    for line in DATASET_REGISTRY["swiftlike/self-cognition"].file.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        answers[row["lang"]].append(row["messages"][-1]["content"])
    return answers


def test_self_cognition_two_names_pick_by_language():
    rows = load_dataset(["swiftlike/self-cognition"], **NAMES)
    by_lang = self_cognition_by_lang()
    assert by_lang["zh"] and by_lang["en"]
    def fill(lang: str, name: str, author: str) -> list[str]:
        return [answer.replace("{{NAME}}", name).replace("{{AUTHOR}}", author) for answer in by_lang[lang]]
    expected = fill("en", "Xiao Huang", "ModelScope") + fill("zh", "小黄", "魔搭")
    assert [row["messages"][-1]["content"] for row in rows] == expected
    assert all(set(row) == {"messages"} for row in rows)
    assert not any("{{" in message["content"] for row in rows for message in row["messages"])


def test_self_cognition_one_name_serves_every_language():
    rows = load_dataset(["swiftlike/self-cognition"], model_name=["Robo"], model_author=["Acme"])
    answers = [row["messages"][-1]["content"] for row in rows]
    assert all("Robo" in answer or "Acme" in answer for answer in answers)
    assert any(re.search("[\u4e00-\u9fff]", answer) and "Robo" in answer for answer in answers)


@pytest.mark.parametrize("names", [{}, {"model_name": ["Robo"]}, {"model_author": ["Acme"]}])
def test_self_cognition_needs_name_and_author(names):
    with pytest.raises(ValueError, match="needs --model_name and --model_author"):
        load_dataset(["swiftlike/self-cognition"], **names)


# --- built-in datasets -------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(DATASET_REGISTRY))
def test_builtin_dataset_loads_and_every_row_normalizes(name):
    rows = load_dataset([name], **NAMES)
    assert len(rows) >= 30
    plain_text = "pt" in DATASET_REGISTRY[name].tags  # text rows: one assistant turn, no user
    agent = "agent" in DATASET_REGISTRY[name].tags  # tool calls and tool results
    for row in rows:
        roles = [message["role"] for message in row["messages"]]
        if plain_text:
            assert roles == ["assistant"]
        else:
            assert "user" in roles and set(roles) <= {"system", "user", "assistant"} | ({"tool"} if agent else set())
        assert all(isinstance(message["content"], str) and (message["content"] or message.get("tool_calls"))
                   for message in row["messages"])


def test_builtin_files_match_the_generator_script(monkeypatch):
    spec = importlib.util.spec_from_file_location("make_builtin_datasets",
                                                  REPO_ROOT / "scripts" / "make_builtin_datasets.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)  # dataclasses look their module up there
    spec.loader.exec_module(script)
    generated = script.builtin_files()
    assert sorted(generated) == sorted(meta.path for meta in DATASET_REGISTRY.values())
    for meta in DATASET_REGISTRY.values():
        lines = meta.file.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == generated[meta.path], f"rerun {script.__file__}"


def arithmetic_expression(question: str) -> str:
    match = re.match(r"(?:What is|Calculate|Compute|What does) ([\d +*-]+?)(?: equal)?[?.] ", question)
    return match.group(1)


@pytest.mark.parametrize("name", ["swiftlike/arithmetic", "swiftlike/arithmetic-sft"])
def test_arithmetic_solutions_are_correct(name):
    for row in load_dataset([name]):
        expression = arithmetic_expression(row["messages"][0]["content"])
        assert row["solution"] == str(eval(expression)), expression  # digits and + - * only
        if row["messages"][-1]["role"] == "assistant":
            assert row["messages"][-1]["content"].endswith(f"#### {row['solution']}")


def test_arithmetic_rl_and_sft_share_no_question():
    def expressions(name: str) -> set[str]:
        return {arithmetic_expression(row["messages"][0]["content"]) for row in load_dataset([name])}
    assert not expressions("swiftlike/arithmetic") & expressions("swiftlike/arithmetic-sft")


# --- bad rows and bad specs --------------------------------------------------------------------

def test_missing_response_names_file_line_and_field(tmp_path):
    rows = [{"query": "a", "response": "b"}, {"query": "c", "response": "d"}, {"query": "e"}]
    with pytest.raises(DatasetRowError, match=re.escape(
            "data.jsonl line 3: missing field 'response' (query/response rows need 'query' and 'response')")):
        load_one(tmp_path / "data.jsonl", rows)


def test_wrong_field_type_names_field_and_type(tmp_path):
    expected = r"data\.jsonl line 2: field 'response' must be a string, got int$"
    with pytest.raises(DatasetRowError, match=expected):
        load_one(tmp_path / "data.jsonl", [{"query": "a", "response": "b"}, {"query": "c", "response": 42}])


def test_messages_must_be_a_list(tmp_path):
    expected = r"line 1: field 'messages' must be a list of messages, got str$"
    with pytest.raises(DatasetRowError, match=expected):
        load_one(tmp_path / "data.jsonl", [{"messages": "hello"}])


def test_bad_message_role(tmp_path):
    with pytest.raises(DatasetRowError, match=r"line 1: messages\[1\] has role 'bot'"):
        load_one(tmp_path / "data.jsonl", [{"messages": [user("hi"), {"role": "bot", "content": "yo"}]}])


def test_unrecognised_row_shape_lists_formats(tmp_path):
    with pytest.raises(DatasetRowError, match=r"data\.jsonl line 1: no known row format fits columns "
                                              r"\['body', 'foo'\]; recognised formats: .*query/response.*text"):
        load_one(tmp_path / "data.jsonl", [{"body": "hello", "foo": 1}])


def test_rows_of_one_file_share_one_format(tmp_path):
    with pytest.raises(DatasetRowError, match=r"line 2: has the columns of a query/response row, "
                                              r"but earlier rows are query \(RL prompt\) rows"):
        load_one(tmp_path / "data.jsonl", [{"query": "a"}, {"query": "b", "response": "c"}])


def test_invalid_json_line_names_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"query": "a", "response": "b"}\n\n{"query": "c",\n', encoding="utf-8")
    with pytest.raises(DatasetRowError, match=r"data\.jsonl line 3: not valid JSON"):
        load_dataset([str(path)])


def test_json_array_bad_row_names_row(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([{"query": "a", "response": "b"}, {"query": "c", "response": None}]))
    with pytest.raises(DatasetRowError, match=r"data\.json row 2: missing field 'response'"):
        load_dataset([str(path)])


def test_csv_bad_row_names_line(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("query,response\nHello,Hi\nBye\n", encoding="utf-8")
    with pytest.raises(DatasetRowError, match=r"data\.csv line 3: missing field 'response'"):
        load_dataset([str(path)])


def test_csv_row_with_extra_cells_names_line(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("query,response\nHello,Hi,oops\n", encoding="utf-8")
    with pytest.raises(DatasetRowError, match=r"data\.csv line 2: 3 cells, but the header names 2 columns"):
        load_dataset([str(path)])


def test_missing_file_names_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        load_dataset([str(missing)])


def test_unsupported_file_type(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("hello\n")
    with pytest.raises(ValueError, match="unsupported type '.txt'"):
        load_dataset([str(path)])


def test_streaming_reads_rows_only_as_far_as_consumed(tmp_path):
    """A bad row 40 fails load_dataset at once, but a stream yields the rows before it and fails on reaching it."""
    rows = [{"query": f"q{i}", "response": f"r{i}"} for i in range(60)]
    path = tmp_path / "big.jsonl"
    lines = [json.dumps(row) for row in rows]
    lines[39] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetRowError, match="line 40"):
        load_dataset([str(path)])
    stream = iter_dataset([f"{path}#3", "swiftlike/alpaca-mini#2"])
    first = next(stream)
    assert first["messages"][0]["content"] == "q0"
    assert [row["messages"][0]["content"] for row in stream][:2] == ["q1", "q2"]  # #3 takes the first three
    again = iter_dataset([str(path)])
    assert [row["messages"][1]["content"] for row in itertools.islice(again, 39)][-1] == "r38"
    with pytest.raises(DatasetRowError, match="line 40"):
        next(again)


def test_streaming_fails_before_reading_on_a_missing_file_or_identity(tmp_path):
    with pytest.raises(FileNotFoundError):
        iter_dataset([str(tmp_path / "missing.jsonl")])
    with pytest.raises(ValueError, match="needs --model_name and --model_author"):
        iter_dataset(["swiftlike/self-cognition"])


def test_streaming_hub_id_asks_the_hub_library_for_a_stream(monkeypatch):
    calls = []

    def fake_load(dataset_id: str, split: str, streaming: bool = False):
        calls.append(streaming)
        return iter([{"query": "a", "response": "b"}])
    monkeypatch.delenv("SWIFTLIKE_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load))
    assert list(iter_dataset(["someone/some-data"], use_hf=True)) == [{"messages": [user("a"), assistant("b")]}]
    assert calls == [True]


# --- hub ids (offline: only the error path) ----------------------------------------------------

@pytest.mark.parametrize(("use_hf", "hub"), [(False, "ModelScope"), (True, "the Hugging Face hub")])
def test_offline_hub_fails_at_once_with_advice(monkeypatch, use_hf, hub):
    monkeypatch.setenv("SWIFTLIKE_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=f"could not load dataset 'someone/some-data' from {hub}: "
                                           "SWIFTLIKE_OFFLINE is set; download it and pass the local"):
        load_dataset(["someone/some-data#10"], use_hf=use_hf)


def test_hub_library_failure_is_wrapped(monkeypatch):
    def refuse(dataset_id: str, split: str, streaming: bool = False):
        raise ConnectionError("no route to host")
    monkeypatch.delenv("SWIFTLIKE_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=refuse))
    expected = ("could not load dataset 'someone/some-data' from the Hugging Face hub "
                "(ConnectionError: no route to host); download it")
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        load_dataset(["someone/some-data"], use_hf=True)


def test_hub_rows_are_normalized_with_null_columns_as_absent(monkeypatch):
    def fake_load(dataset_id: str, split: str, streaming: bool = False) -> list[dict]:
        return [{"query": "a", "response": "b", "chosen": None}]
    monkeypatch.delenv("SWIFTLIKE_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load))
    assert load_dataset(["someone/some-data"], use_hf=True) == [
        {"messages": [user("a"), assistant("b")], "chosen": None}]


# --- local dataset directories: the ModelScope / Hugging Face loaders, offline -------------------

def modelscope_dataset_dir(root: Path) -> Path:
    """A dataset repository laid out as a ModelScope download leaves it: data files named by split under data/,
    README front matter naming them, the `dataset_infos.json` ModelScope adds (here listing only `train`,
    which `datasets` would refuse without the split checks off) and ModelScope's hidden marker files."""
    repo = root / "someone___some-data"
    (repo / "data").mkdir(parents=True)
    write_jsonl(repo / "data" / "train-00000-of-00001.jsonl",
                [{"query": "What is 2 + 3?", "response": "5"}, {"query": "And 2 * 3?", "response": "6"}])
    write_jsonl(repo / "data" / "test-00000-of-00001.jsonl", [{"query": "held out", "response": "x"}])
    (repo / "README.md").write_text("---\nlicense: apache-2.0\nconfigs:\n- config_name: default\n  data_files:\n"
                                    "  - split: train\n    path: data/train-*.jsonl\n"
                                    "  - split: test\n    path: data/test-*.jsonl\n---\n# some-data\n")
    (repo / "dataset_infos.json").write_text(json.dumps(
        {"default": {"splits": {"train": {"name": "train", "num_examples": 2}}}}))
    (repo / ".msc").write_bytes(b"")
    (repo / ".mv").write_text("master")
    return repo


@pytest.mark.parametrize("use_hf", [False, True], ids=["modelscope", "hf"])
def test_local_dataset_directory_loads_its_train_split_offline(tmp_path, monkeypatch, use_hf):
    """The ModelScope path (MsDataset.load) really runs here, on a directory: no hub, no mock."""
    monkeypatch.setenv("SWIFTLIKE_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = modelscope_dataset_dir(tmp_path)
    expected = [{"messages": [user("What is 2 + 3?"), assistant("5")]},
                {"messages": [user("And 2 * 3?"), assistant("6")]}]
    assert load_dataset([str(repo)], use_hf=use_hf) == expected
    assert len(load_dataset([f"{repo}#5"], use_hf=use_hf)) == 5


def test_local_dataset_directory_without_train_split_says_so(tmp_path):
    repo = tmp_path / "empty-repo"
    repo.mkdir()
    write_jsonl(repo / "validation.jsonl", [{"query": "a", "response": "b"}])
    with pytest.raises(RuntimeError, match=f"could not load the dataset directory {re.escape(str(repo))} with "
                                           "modelscope .*needs a 'train' split"):
        load_dataset([str(repo)])
