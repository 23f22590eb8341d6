"""The datasets and collator sft and pt train on, as the data flags ask for them.

- By default every row is encoded before the first step, so dropped and truncated samples are
  counted and logged first; `--dataset_num_proc N` encodes N shards in N processes, and
  `--load_from_cache_file` reuses the samples an earlier run encoded from the same rows with the
  same tokenizer, template and flags (the cache key covers all of them, so a stale hit cannot happen).
- `--lazy_tokenize` keeps the rows and encodes one when the Trainer reads it.
- `--streaming` reads the rows from their files (or hub) as the Trainer consumes them and encodes them
  on the way; the Trainer sees an iterable dataset, hence ms-swift's rule that `--max_steps` is required.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial

import torch

from ..arguments.train_args import TrainArguments
from ..dataset import iter_dataset
from ..template import Template
from ..utils import atomic_write_text, cache_dir, get_logger
from ..utils.errors import UsageError
from .data import (EncodeStats, ListDataset, PackedCollator, PaddingCollator, PaddingFreeCollator, RowEncoder,
                   encode_rows, pack_samples)
from .run import load_train_val_rows

logger = get_logger("swiftlike.train")


@dataclass
class TrainData:
    """What the Trainer is given. With --lazy_tokenize or --streaming, `stats` fills in as training reads."""

    train: object
    val: object | None
    collator: Callable
    stats: EncodeStats


def prepare_data(args: TrainArguments, template: Template) -> TrainData:
    encoder = RowEncoder(template, args.max_length, args.truncation_strategy, args.loss_on_all_tokens,
                         args.loss_scale)
    collator = (PackedCollator() if args.packing else PaddingFreeCollator() if args.padding_free
                else PaddingCollator(template.tokenizer.pad_token_id))
    if args.streaming:
        read = partial(iter_dataset, model_name=args.model_name, model_author=args.model_author, use_hf=args.use_hf)
        train = StreamingDataset(partial(read, args.dataset), encoder)
        val = StreamingDataset(partial(read, args.val_dataset), encoder) if args.val_dataset else None
        logger.info("train data: streamed from %s and encoded as training reads it (--streaming)",
                    " ".join(args.dataset))
        return TrainData(train, val, collator, train.stats)
    train_rows, val_rows = load_train_val_rows(args)
    if args.lazy_tokenize:
        logger.info("train data: %d rows, each encoded when training reads it (--lazy_tokenize)", len(train_rows))
        train = LazyDataset(train_rows, encoder)
        return TrainData(train, LazyDataset(val_rows, encoder) if val_rows else None, collator, train.stats)
    train_samples, stats = encode_upfront(args, train_rows, encoder, "train")
    val_samples = encode_upfront(args, val_rows, encoder, "validation")[0] if val_rows else []
    if args.packing:
        train_samples = pack_samples(train_samples, args.max_length)
        val_samples = pack_samples(val_samples, args.max_length) if val_samples else []
        logger.info("packed %d samples into %d rows of <= %d tokens", stats.kept, len(train_samples),
                    args.max_length)
    return TrainData(ListDataset(train_samples), ListDataset(val_samples) if val_samples else None, collator, stats)


def encode_upfront(args: TrainArguments, rows: list[dict], encoder: RowEncoder,
                   what: str) -> tuple[list[dict], EncodeStats]:
    """Encode (or, with --load_from_cache_file, reuse) every row; stop if nothing is left to train on."""
    path = cache_dir() / "encoded" / f"{cache_key(rows, encoder)}.json" if args.load_from_cache_file else None
    if path is not None and path.is_file():
        cached = json.loads(path.read_text(encoding="utf-8"))
        samples, stats = cached["samples"], EncodeStats(**cached["stats"])
        logger.info("%s data: reusing the samples encoded in %s (--load_from_cache_file); no row encoded", what, path)
    else:
        samples, stats = encode_in_processes(rows, encoder, args.dataset_num_proc)
        if path is not None:
            atomic_write_text(path, json.dumps({"samples": samples, "stats": stats.__dict__}))
    logger.info("%s data: %s", what, stats.describe(args.max_length, args.truncation_strategy))
    if not samples:
        raise UsageError(f"no {what} samples left after encoding "
                         f"({stats.describe(args.max_length, args.truncation_strategy)}); raise --max_length or use "
                         "--truncation_strategy left|right")
    return samples, stats


def cache_key(rows: list[dict], encoder: RowEncoder) -> str:
    digest = hashlib.sha256(encoder.fingerprint().encode())
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def encode_in_processes(rows: list[dict], encoder: RowEncoder, num_proc: int) -> tuple[list[dict], EncodeStats]:
    """Contiguous shards, one per process, joined back in order; a bad row still fails naming its number."""
    if num_proc <= 1 or len(rows) < 2:
        return encode_rows(rows, encoder)
    size = math.ceil(len(rows) / min(num_proc, len(rows)))
    starts = list(range(0, len(rows), size))
    with ProcessPoolExecutor(max_workers=len(starts)) as pool:
        parts = list(pool.map(encode_rows, [rows[s:s + size] for s in starts], [encoder] * len(starts), starts))
    logger.info("encoded %d rows in %d processes (--dataset_num_proc %d)", len(rows), len(starts), num_proc)
    samples: list[dict] = []
    stats = EncodeStats()
    for part_samples, part_stats in parts:
        samples += part_samples
        stats.add(part_stats)
    return samples, stats


class LazyDataset(torch.utils.data.Dataset):
    """--lazy_tokenize: rows are encoded when read. A map-style dataset has a fixed length, so a row the
    truncation rule drops is stood in for by the next row that leaves a sample (ms-swift draws another row)."""

    def __init__(self, rows: list[dict], encoder: RowEncoder):
        self.rows, self.encoder, self.stats = rows, encoder, EncodeStats()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        for step in range(len(self.rows)):
            at = (index + step) % len(self.rows)
            sample = self.encoder(self.rows[at], at, self.stats)
            if sample is not None:
                return sample
        raise UsageError("no row leaves a sample after encoding (every one is too long or has nothing to learn); "
                         "raise --max_length or use --truncation_strategy left|right")


class StreamingDataset(torch.utils.data.IterableDataset):
    """--streaming: rows read and encoded as the Trainer iterates; each data-loader worker takes every n-th row."""

    def __init__(self, read: Callable[[], Iterator[dict]], encoder: RowEncoder):
        read()  # reads no row, but a missing file or bad spec fails now rather than after the model loads
        self.read, self.encoder, self.stats = read, encoder, EncodeStats()

    def __iter__(self) -> Iterator[dict]:
        worker = torch.utils.data.get_worker_info()
        shard, shards = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        for index, row in enumerate(self.read()):
            if index % shards == shard and (sample := self.encoder(row, index, self.stats)) is not None:
                yield sample
