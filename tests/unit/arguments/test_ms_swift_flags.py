"""ms-swift's data, attention and kernel flags: accepted with ms-swift's names and defaults, and doing what
they do there where that means something on a CPU machine. Each flag runs a 2-step sft on the tiny model."""
import json
import logging

import pytest
import torch

from swiftlike.arguments import parse_args
from swiftlike.arguments.eval_args import EvalArguments
from swiftlike.arguments.infer_args import InferArguments
from swiftlike.arguments.rlhf_args import RlhfArguments
from swiftlike.arguments.train_args import PtArguments, TrainArguments
from swiftlike.dataset import DatasetRowError
from swiftlike.template import IGNORE_INDEX, Template
from swiftlike.train import data as train_data
from swiftlike.train import prepare
from swiftlike.utils import logging as swiftlike_logging

TINY = "tiny-random/qwen2_5"
FAST = ["--report_to", "none", "--gradient_checkpointing", "false", "--gradient_accumulation_steps", "1",
        "--logging_steps", "1", "--save_steps", "100"]
MS_SWIFT_FLAGS = {"--load_from_cache_file": "true", "--dataset_num_proc": "4", "--attn_impl": "flash_attn",
                  "--lazy_tokenize": "true", "--padding_free": "true", "--use_liger_kernel": "true",
                  "--loss_scale": "last_round", "--streaming": "false"}
on_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")


def multi_turn(i):
    return {"messages": [{"role": "user", "content": f"Name colour {i}."}, {"role": "assistant", "content": "Blue."},
                         {"role": "user", "content": "Another?"}, {"role": "assistant", "content": f"Green {i}."}]}


def write_rows(path, rows, bad_line=None):
    lines = [json.dumps(row) for row in rows]
    if bad_line is not None:
        lines[bad_line - 1] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def sft(tmp_path, *argv):
    from swiftlike import sft_main
    return sft_main(["--model", TINY, "--max_steps", "2", "--output_dir", str(tmp_path / "out"), *FAST,
                     *map(str, argv)])


def args_of(*argv, cls=TrainArguments):
    return parse_args(cls, ["--model", TINY, "--dataset", "swiftlike/alpaca-mini#6", *map(str, argv)])


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """warn_once remembers for the process; each test sees its own first warning."""
    monkeypatch.setattr(swiftlike_logging, "_WARNED", set())


@pytest.fixture
def encode_calls(monkeypatch):
    """Counts Template.encode calls: the observable difference between encoding, lazy encoding and cache reuse."""
    calls = []
    original = Template.encode

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Template, "encode", counted)
    return calls


@pytest.fixture
def loaded_models(monkeypatch):
    from swiftlike.train import tuner
    models = []
    original = tuner.prepare_model

    def keep(*args, **kwargs):
        models.append(original(*args, **kwargs))
        return models[-1]
    monkeypatch.setattr(tuner, "prepare_model", keep)
    return models


def test_ms_swift_command_line_parses_with_ms_swift_defaults():
    args = parse_args(TrainArguments, ["--model", TINY, "--dataset", "d.jsonl",
                                       *[x for kv in MS_SWIFT_FLAGS.items() for x in kv]])
    assert (args.load_from_cache_file, args.dataset_num_proc, args.attn_impl, args.lazy_tokenize, args.padding_free,
            args.use_liger_kernel, args.loss_scale, args.streaming) == \
        (True, 4, "flash_attn", True, True, True, "last_round", False)
    defaults = parse_args(TrainArguments, ["--model", TINY, "--dataset", "d.jsonl"])
    assert (defaults.load_from_cache_file, defaults.dataset_num_proc, defaults.attn_impl, defaults.lazy_tokenize,
            defaults.padding_free, defaults.use_liger_kernel, defaults.loss_scale, defaults.streaming) == \
        (False, 1, None, False, False, False, "default", False)
    assert parse_args(PtArguments, ["--model", TINY, "--dataset", "d.jsonl"]).loss_scale == "all"
    assert parse_args(EvalArguments, ["--model", TINY]).eval_backend == "swiftlike"


@pytest.mark.parametrize("cls, argv, message", [
    (TrainArguments, ["--attn_impl", "flash"], "--attn_impl 'flash': choose from sdpa, eager"),
    (TrainArguments, ["--loss_scale", "bogus"], "--loss_scale 'bogus': unknown part 'bogus'; base strategies"),
    (TrainArguments, ["--streaming", "true"], "--streaming true needs --max_steps"),
    (TrainArguments, ["--streaming", "true", "--max_steps", "2", "--split_dataset_ratio", "0.1"], "--val_dataset"),
    (TrainArguments, ["--lazy_tokenize", "true", "--packing", "true", "--max_length", "64"], "use --padding_free"),
    (TrainArguments, ["--dataset_num_proc", "0"], "--dataset_num_proc must be >= 1"),
    (PtArguments, ["--loss_scale", "default"], "pt learns plain text"),
    (RlhfArguments, ["--rlhf_type", "grpo", "--reward_funcs", "accuracy", "--num_generations", "2", "--padding_free", "true"],
     "--padding_free: not built for GRPO"),
    (RlhfArguments, ["--rlhf_type", "grpo", "--reward_funcs", "accuracy", "--num_generations", "2", "--loss_scale", "all"],
     "sampled completions only"),
    (RlhfArguments, ["--rlhf_type", "grpo", "--reward_funcs", "accuracy", "--num_generations", "2", "--streaming", "true"],
     "--streaming: not built for GRPO"),
    (RlhfArguments, ["--rlhf_type", "gkd", "--teacher_model", TINY, "--torch_compile", "true"],
     "--torch_compile: not built for gkd"),
])
def test_flag_misuse_is_a_clear_error(cls, argv, message, capsys):
    with pytest.raises(SystemExit):
        args_of(*argv, cls=cls)
    assert message in capsys.readouterr().err


def test_torch_compile_reaches_the_trainer_for_sft_and_dpo(tmp_path):
    """ms-swift's --torch_compile (transformers' own field) reaches the Trainer's arguments; off by default."""
    from swiftlike.train.run import training_arguments
    assert training_arguments(args_of("--torch_compile", "true"), tmp_path, has_eval=False).torch_compile is True
    assert training_arguments(args_of(), tmp_path, has_eval=False).torch_compile is False
    dpo = args_of("--rlhf_type", "dpo", "--torch_compile", "true", cls=RlhfArguments)
    assert training_arguments(dpo, tmp_path, has_eval=False).torch_compile is True


# --- --attn_impl ----------------------------------------------------------------------------------------------

def test_attn_impl_sets_the_attention_of_the_trained_and_the_served_model(tmp_path, loaded_models):
    from swiftlike.infer.engine import build_engine
    result = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#4", "--attn_impl", "eager")
    assert result.global_step == 2
    assert loaded_models[0].config._attn_implementation == "eager"
    engine = build_engine(parse_args(InferArguments, ["--model", TINY, "--attn_impl", "eager"]).engine_spec())
    assert engine.model.config._attn_implementation == "eager"
    default = build_engine(parse_args(InferArguments, ["--model", TINY]).engine_spec())
    assert default.model.config._attn_implementation == "sdpa"


@on_gpu
def test_gpu_only_flags_fall_back_with_one_warning_each(tmp_path, loaded_models, caplog):
    """ms-swift GPU command lines run here: flash_attn becomes sdpa, Liger is left off; each said once."""
    from swiftlike.train.run import training_arguments
    with caplog.at_level(logging.WARNING, logger="swiftlike"):
        result = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#4", "--attn_impl", "flash_attn",
                     "--use_liger_kernel", "true")
        again = training_arguments(args_of("--use_liger_kernel", "true"), tmp_path, has_eval=False)
    assert result.global_step == 2 and again.use_liger_kernel is False
    assert loaded_models[0].config._attn_implementation == "sdpa"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("FlashAttention needs a CUDA GPU" in w for w in warnings) == 1
    assert sum("--use_liger_kernel" in w for w in warnings) == 1


# --- --padding_free -------------------------------------------------------------------------------------------

def test_padding_free_collator_flattens_without_padding():
    batch = train_data.PaddingFreeCollator()([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]},
                                              {"input_ids": [8], "labels": [8]},
                                              {"input_ids": [9, 10], "labels": [9, 10]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, -100, 10]]  # no sample learns from the previous one
    assert "attention_mask" not in batch and batch["use_cache"] is False
    assert batch["cu_seq_lens_q"].tolist() == batch["cu_seq_lens_k"].tolist() == [0, 3, 4, 6]
    assert batch["max_length_q"] == batch["max_length_k"] == 3


def test_packed_rows_carry_their_samples_bounds():
    rows = [train_data.flatten([{"input_ids": [1, 2], "labels": [1, 2]}, {"input_ids": [3, 4, 5], "labels": [3, 4, 5]}]),
            train_data.flatten([{"input_ids": [6], "labels": [6]}])]
    batch = train_data.PackedCollator()(rows)
    assert batch["position_ids"].tolist() == [[0, 1, 0, 1, 2, 0]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 2, 5, 6] and batch["max_length_q"] == 3


@pytest.mark.parametrize("attn_impl", ["sdpa", "eager", "segments"])
def test_padding_free_forward_equals_separate_forwards(tiny_resolved, tiny_template, attn_impl):
    """Without a mask, transformers keeps flattened samples apart by their restarting position_ids; segment
    attention (what sft switches an SDPA model to for flat rows) by the bounds the collator adds."""
    from swiftlike.model import load_model
    from swiftlike.model.segment_attention import use_segment_attention
    model = load_model(tiny_resolved, "float32", "cpu", "sdpa" if attn_impl == "segments" else attn_impl)
    if attn_impl == "segments":
        assert use_segment_attention(model)
    encoder = train_data.RowEncoder(tiny_template, None, "delete", False)
    samples, _ = train_data.encode_rows([multi_turn(1), multi_turn(22)], encoder)
    batch = train_data.PaddingFreeCollator()(samples)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        flat = model(**inputs).logits[0]
        offset = 0
        for sample in samples:
            n = len(sample["input_ids"])
            alone = model(input_ids=torch.tensor([sample["input_ids"]])).logits[0]
            assert torch.allclose(flat[offset:offset + n], alone, atol=1e-4)
            offset += n


def test_padding_free_sft_trains_on_flattened_batches(tmp_path, monkeypatch):
    batches = []
    original = train_data.PaddingFreeCollator.__call__

    def keep(self, batch):
        batches.append((batch, original(self, batch)))
        return batches[-1][1]
    monkeypatch.setattr(train_data.PaddingFreeCollator, "__call__", keep)
    result = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#8", "--padding_free", "true",
                 "--per_device_train_batch_size", "3")
    assert result.global_step == 2
    samples, flat = batches[0]
    lengths = [len(s["input_ids"]) for s in samples]
    assert len(samples) == 3 and len(set(lengths)) > 1  # samples of different lengths, where padding would appear
    assert flat["input_ids"].shape == (1, sum(lengths))  # not one pad token
    starts = [sum(lengths[:i]) for i in range(3)]
    assert [i for i, p in enumerate(flat["position_ids"][0].tolist()) if p == 0] == starts
    assert all(flat["labels"][0, s] == IGNORE_INDEX for s in starts)
    assert flat["cu_seq_lens_q"].tolist() == [*starts, sum(lengths)]


# --- --loss_scale ---------------------------------------------------------------------------------------------

def test_loss_scale_picks_the_turns_that_carry_loss(tiny_template):
    tokenizer = tiny_template.tokenizer

    def trained_text(loss_scale):
        encoder = train_data.RowEncoder(tiny_template, None, "delete", False, loss_scale)
        sample = train_data.encode_rows([multi_turn(1)], encoder)[0][0]
        return sample, tokenizer.decode([t for t in sample["labels"] if t != IGNORE_INDEX])
    assert trained_text("default")[1] == "Blue.<|im_end|>Green 1.<|im_end|>"
    assert trained_text("last_round")[1] == "Green 1.<|im_end|>"
    everything, _ = trained_text("all")
    assert everything["labels"] == everything["input_ids"]


def test_loss_scale_last_round_sft(tmp_path, monkeypatch, tiny_template):
    batches = []
    original = train_data.PaddingCollator.__call__
    monkeypatch.setattr(train_data.PaddingCollator, "__call__",
                        lambda self, batch: batches.append(batch) or original(self, batch))
    data = tmp_path / "multi.jsonl"
    result = sft(tmp_path, "--dataset", write_rows(data, [multi_turn(i) for i in range(4)]),
                 "--loss_scale", "last_round")
    assert result.global_step == 2
    labels = batches[0][0]["labels"]
    assert tiny_template.tokenizer.decode([t for t in labels if t != IGNORE_INDEX]).startswith("Green")


# --- --dataset_num_proc, --load_from_cache_file, --lazy_tokenize, --streaming ---------------------------------

def test_dataset_num_proc_encodes_in_processes_like_one(tiny_template):
    rows = [multi_turn(i) for i in range(7)]
    encoder = train_data.RowEncoder(tiny_template, 40, "delete", False)
    one = train_data.encode_rows(rows, encoder)
    three = prepare.encode_in_processes(rows, encoder, 3)
    assert three[0] == one[0] and three[1] == one[1] and one[1].dropped_too_long > 0
    rows[5] = {"messages": rows[5]["messages"][:1]}
    with pytest.raises(ValueError, match="training row 6 ends with a user turn"):  # a later shard's row, by number
        prepare.encode_in_processes(rows, encoder, 3)


def test_dataset_num_proc_sft(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="swiftlike"):
        result = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#8", "--dataset_num_proc", "2")
    assert result.global_step == 2 and result.data.kept == 8
    assert "encoded 8 rows in 2 processes (--dataset_num_proc 2)" in caplog.text


def test_load_from_cache_file_second_run_skips_encoding(tmp_path, monkeypatch, encode_calls, caplog, tiny_template):
    monkeypatch.setattr(prepare, "cache_dir", lambda: tmp_path / "cache")
    first = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#8", "--load_from_cache_file", "true")
    assert len(encode_calls) == 8 and len(list((tmp_path / "cache" / "encoded").glob("*.json"))) == 1
    encode_calls.clear()
    with caplog.at_level(logging.INFO, logger="swiftlike"):
        second = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#8", "--load_from_cache_file", "true")
    assert encode_calls == [] and "no row encoded" in caplog.text
    assert second.data == first.data and second.global_step == 2
    # anything the samples depend on changes the key: another --max_length encodes again
    prepare.prepare_data(args_of("--dataset", "swiftlike/alpaca-mini#8", "--load_from_cache_file", "true",
                                 "--max_length", "60"), tiny_template)
    assert len(encode_calls) == 8


def test_lazy_tokenize_encodes_on_access(tmp_path, encode_calls, tiny_template):
    rows = [multi_turn(i) for i in range(3)]
    upfront = train_data.encode_rows(rows, train_data.RowEncoder(tiny_template, None, "delete", False))[0]
    encode_calls.clear()
    data = prepare.prepare_data(args_of("--dataset", write_rows(tmp_path / "d.jsonl", rows),
                                        "--lazy_tokenize", "true"), tiny_template)
    assert isinstance(data.train, prepare.LazyDataset) and len(data.train) == 3 and encode_calls == []
    assert data.train[1] == upfront[1] and len(encode_calls) == 1
    long_first = [{"messages": [{"role": "user", "content": "x " * 200}, {"role": "assistant", "content": "y"}]},
                  *rows[:2]]
    lazy = prepare.LazyDataset(long_first, train_data.RowEncoder(tiny_template, 64, "delete", False))
    assert lazy[0] == upfront[0] and lazy.stats.dropped_too_long == 1  # the next row stands in for a dropped one


def test_lazy_tokenize_sft(tmp_path, encode_calls):
    result = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#16", "--lazy_tokenize", "true")
    # only the rows the two steps read (and the data loader's one batch of look-ahead) are encoded, not all 16
    assert result.global_step == 2 and 2 <= len(encode_calls) <= 3 and result.data.kept == len(encode_calls)


def test_streaming_reads_rows_lazily(tmp_path, tiny_template):
    path = write_rows(tmp_path / "stream.jsonl", [multi_turn(i) for i in range(30)], bad_line=20)
    data = prepare.prepare_data(args_of("--dataset", path, "--streaming", "true", "--max_steps", "2"), tiny_template)
    assert isinstance(data.train, torch.utils.data.IterableDataset) and data.stats.rows == 0
    stream = iter(data.train)
    assert [next(stream)["input_ids"] for _ in range(3)] == \
        [s["input_ids"] for s in train_data.encode_rows([multi_turn(i) for i in range(3)],
                                                        train_data.RowEncoder(tiny_template, None, "delete", False))[0]]
    assert data.stats.rows == 3
    with pytest.raises(DatasetRowError, match="line 20"):
        list(stream)


def test_streaming_sft_never_reads_past_what_it_trains_on(tmp_path):
    """Row 20 is not JSON: loading the file whole would fail; a 2-step streamed run reads only its first rows."""
    path = write_rows(tmp_path / "stream.jsonl", [multi_turn(i) for i in range(30)], bad_line=20)
    result = sft(tmp_path, "--dataset", path, "--streaming", "true")
    assert result.global_step == 2 and 2 <= result.data.rows < 20


# --- --eval_backend -------------------------------------------------------------------------------------------

def test_eval_backend_is_chosen_by_the_datasets_and_others_are_named(tmp_path, capsys):
    from swiftlike import eval_main
    report = eval_main(["--model", TINY, "--eval_dataset", "mcq", "--eval_limit", "2", "--max_new_tokens", "2",
                        "--eval_output_dir", str(tmp_path)])
    assert report["backend"] == "swiftlike"
    assert parse_args(EvalArguments, ["--model", TINY, "--eval_dataset", "gsm8k"]).eval_backend == "Native"
    for backend in ("OpenCompass", "native"):
        with pytest.raises(SystemExit):
            parse_args(EvalArguments, ["--model", TINY, "--eval_backend", backend])
        assert "choose from 'Native', 'lm_eval', 'swiftlike'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(EvalArguments, ["--model", TINY, "--eval_backend", "swiftlike", "--eval_dataset", "gsm8k"])
    assert "--eval_backend Native (evalscope) or lm_eval" in capsys.readouterr().err
