"""ms-swift's data, attention and kernel flags: accepted with ms-swift's names and defaults, and doing what
they do there where that means something on a CPU machine: parsed, refused, and what each does to the data, the
collators and the model. The 2-step sft run of each flag is in tests/e2e/test_arguments_runs.py."""

import pytest
import torch
from flag_runs import args_of, multi_turn, write_rows
from model_ids import TINY

from swiftlike.arguments import parse_args
from swiftlike.arguments.eval_args import EvalArguments
from swiftlike.arguments.rlhf_args import RlhfArguments
from swiftlike.arguments.train_args import PtArguments, TrainArguments
from swiftlike.dataset import DatasetRowError
from swiftlike.template import IGNORE_INDEX
from swiftlike.train import data as train_data
from swiftlike.train import prepare

pytestmark = pytest.mark.usefixtures("fresh_warnings")  # each test sees its own first warning

MS_SWIFT_FLAGS = {"--load_from_cache_file": "true", "--dataset_num_proc": "4", "--attn_impl": "flash_attn",
                  "--lazy_tokenize": "true", "--padding_free": "true", "--use_liger_kernel": "true",
                  "--loss_scale": "last_round", "--streaming": "false"}


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
