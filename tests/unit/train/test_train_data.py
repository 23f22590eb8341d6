"""Training data path: encoding with --max_length rules, packing, collators, argument checks."""
import pytest
import torch
from model_ids import TINY

from swiftlike.template.base import IGNORE_INDEX
from swiftlike.train.data import EncodeStats, PackedCollator, PaddingCollator, RowEncoder, encode_rows, pack_samples


def chat(question, answer):
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}


ROWS = [chat("Hi", "Hello there."), chat("Count", "one two three four five six seven eight nine ten " * 4),
        chat("Bye", "Goodbye.")]


def encode(template, strategy, max_length, pt=False, rows=ROWS):
    return encode_rows(rows, RowEncoder(template, max_length, strategy, loss_on_all_tokens=pt))


def test_sft_labels_only_on_answers(tiny_template):
    samples, stats = encode(tiny_template, "delete", None)
    assert stats.kept == 3 and stats.truncated == 0
    first = samples[0]
    answer = tiny_template.tokenizer.decode([t for t in first["labels"] if t != IGNORE_INDEX])
    assert answer.startswith("Hello there.") and "Hi" not in answer


def test_truncation_strategies_count_and_cut(tiny_template):
    full, _ = encode(tiny_template, "delete", None)
    long_len = len(full[1]["input_ids"])
    limit = long_len - 10
    deleted, stats = encode(tiny_template, "delete", limit)
    assert stats.dropped_too_long == 1 and stats.kept == 2 and len(deleted) == 2
    assert "1 longer than --max_length" in stats.describe(limit, "delete")
    left, stats = encode(tiny_template, "left", limit)
    assert stats.truncated == 1 and left[1]["input_ids"] == full[1]["input_ids"][-limit:]
    right, stats = encode(tiny_template, "right", limit)
    assert stats.truncated == 1 and right[1]["input_ids"] == full[1]["input_ids"][:limit]
    assert "1 truncated on the right" in stats.describe(limit, "right")


def test_sample_cut_to_prompt_only_is_dropped(tiny_template):
    prompt_len = len(tiny_template.encode_prompt(ROWS[1]["messages"][:1]))
    _, stats = encode(tiny_template, "right", prompt_len - 2)
    assert stats.dropped_no_target >= 1


def test_pt_learns_every_token(tiny_template):
    samples, _ = encode(tiny_template, "delete", None, pt=True, rows=[{"messages": [
        {"role": "assistant", "content": "Plain text for pre-training."}]}])
    ids = samples[0]["input_ids"]
    assert samples[0]["labels"] == ids
    assert ids[-1] == tiny_template.tokenizer.eos_token_id
    assert tiny_template.tokenizer.decode(ids[:-1]) == "Plain text for pre-training."


def test_sft_row_without_answer_is_a_clear_error(tiny_template):
    with pytest.raises(ValueError, match="training row 1 ends with a user turn"):
        encode(tiny_template, "delete", None, rows=[{"messages": [{"role": "user", "content": "q"}]}])


def test_packing_fits_and_keeps_every_sample():
    samples = [{"input_ids": list(range(100 + n, 100 + n + length)), "labels": list(range(length))}
               for n, length in enumerate([7, 3, 5, 2, 8, 4, 1, 6])]
    packed = pack_samples(samples, 10)
    assert all(len(p["input_ids"]) <= 10 for p in packed)
    assert sum(len(p["input_ids"]) for p in packed) == 36
    assert len(packed) == 4  # 36 tokens fit in 4 rows of 10 with best-fit-decreasing
    for p in packed:
        starts = [i for i, pos in enumerate(p["position_ids"]) if pos == 0]
        assert all(p["labels"][i] == IGNORE_INDEX for i in starts)
    seen = sorted(tuple(p["input_ids"][s:e]) for p in packed for s, e in
                  zip([i for i, pos in enumerate(p["position_ids"]) if pos == 0],
                      [i for i, pos in enumerate(p["position_ids"]) if pos == 0][1:] + [len(p["input_ids"])]))
    assert seen == sorted(tuple(s["input_ids"]) for s in samples)


def test_packed_forward_equals_separate_forwards(tiny_resolved, tiny_template):
    """transformers keeps packed samples apart (per-sample position_ids, no mask): same logits as one by one."""
    from swiftlike.model import load_model
    model = load_model(tiny_resolved, "float32", "cpu")
    samples, _ = encode(tiny_template, "delete", None)
    batch = PackedCollator()(pack_samples(samples, 4096))
    with torch.no_grad():
        packed_logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                              use_cache=batch["use_cache"]).logits[0]
        offset = 0
        for sample in samples:  # within a row, samples keep their original order
            n = len(sample["input_ids"])
            alone = model(input_ids=torch.tensor([sample["input_ids"]])).logits[0]
            assert torch.allclose(packed_logits[offset:offset + n], alone, atol=1e-4)
            offset += n


def test_padding_collator_masks_padding():
    batch = PaddingCollator(pad_token_id=0)([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]},
                                             {"input_ids": [8], "labels": [8]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["use_cache"] is False


def test_encode_stats_describe_all_kept():
    assert EncodeStats(rows=2, kept=2, tokens=10, longest=6).describe(None, "delete") == \
        "2/2 samples kept, 10 tokens, longest 6"


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "x.jsonl"], "--model is required"),
    (["--model", TINY], "--dataset is required"),
    (["--model", "m", "--dataset", "d", "--packing", "true"], "--packing true needs --max_length"),
    (["--model", "m", "--dataset", "d", "--tuner_type", "full", "--adapters", "a"], "cannot be combined"),
    (["--model", "m", "--dataset", "d", "--target_modules", "all-linear", "q_proj", "--lora_rank", "0"],
     "--lora_rank must be positive"),
    (["--model", "m", "--dataset", "d", "--resume_from_checkpoint", "/nonexistent/checkpoint-3"],
     "no such directory"),
    (["--model", "m", "--dataset", "d", "--report_to", "mlflow"], "--report_to mlflow"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    from swiftlike.arguments import parse_args
    from swiftlike.arguments.train_args import TrainArguments
    with pytest.raises(SystemExit):
        parse_args(TrainArguments, argv)
    assert message in capsys.readouterr().err


def test_defaults_follow_ms_swift():
    from swiftlike.arguments import parse_args
    from swiftlike.arguments.train_args import TrainArguments
    args = parse_args(TrainArguments, ["--model", "m", "--dataset", "d", "--train_type", "full"])
    assert args.tuner_type == "full" and args.learning_rate == 1e-5
    assert args.gradient_accumulation_steps == 16 and args.eval_steps == args.save_steps
    lora = parse_args(TrainArguments, ["--model", "m", "--dataset", "d", "--per_device_train_batch_size", "4"])
    assert lora.learning_rate == 1e-4 and lora.gradient_accumulation_steps == 4
    assert lora.lora_rank == 8 and lora.lora_alpha == 32 and lora.target_modules == ["all-linear"]
