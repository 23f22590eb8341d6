"""The 2-step sft runs of ms-swift's data, attention and kernel flags on the tiny model, moved from
tests/unit/arguments/test_ms_swift_flags.py (issue 51: the unit tier trains nothing; what each flag does to the data,
collators and model without a run stays there). In this process through sft_main, the Python API of `swiftlike sft`,
so a test can watch the collators, the encoder and the loaded model."""
import logging

import pytest
import torch
from flag_runs import args_of, multi_turn, write_rows
from model_ids import TINY

from swiftlike.arguments import parse_args
from swiftlike.arguments.infer_args import InferArguments
from swiftlike.template import IGNORE_INDEX
from swiftlike.train import data as train_data
from swiftlike.train import prepare

pytestmark = pytest.mark.usefixtures("fresh_warnings")  # each test sees its own first warning

FAST = ["--report_to", "none", "--gradient_checkpointing", "false", "--gradient_accumulation_steps", "1",
        "--logging_steps", "1", "--save_steps", "100"]
on_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")


def sft(tmp_path, *argv):
    from swiftlike import sft_main
    return sft_main(["--model", TINY, "--max_steps", "2", "--output_dir", str(tmp_path / "out"), *FAST,
                     *map(str, argv)])


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


def test_lazy_tokenize_sft(tmp_path, encode_calls):
    result = sft(tmp_path, "--dataset", "swiftlike/alpaca-mini#16", "--lazy_tokenize", "true")
    # only the rows the two steps read (and the data loader's one batch of look-ahead) are encoded, not all 16
    assert result.global_step == 2 and 2 <= len(encode_calls) <= 3 and result.data.kept == len(encode_calls)


def test_streaming_sft_never_reads_past_what_it_trains_on(tmp_path):
    """Row 20 is not JSON: loading the file whole would fail; a 2-step streamed run reads only its first rows."""
    path = write_rows(tmp_path / "stream.jsonl", [multi_turn(i) for i in range(30)], bad_line=20)
    result = sft(tmp_path, "--dataset", path, "--streaming", "true")
    assert result.global_step == 2 and 2 <= result.data.rows < 20
