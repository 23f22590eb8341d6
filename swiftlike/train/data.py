"""From dataset rows to training batches: encode, enforce --max_length, pack, collate.

Encoding goes through the chat template (sft) or plain text (pt); by default once, up front, so
the counts of truncated and dropped samples are known and logged before the first step
(`prepare.py` also encodes on access or as a stream, with the same `RowEncoder`).
Packing is written here rather than taken from TRL because it must keep our labels
(loss only on assistant turns) and our truncation rules; the attention separation itself
is transformers' own: with `position_ids` restarting at 0 and no attention mask, its
mask builder keeps each packed sample attending only to itself.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass

from ..template.base import IGNORE_INDEX, Template
from ..utils.errors import UsageError
from ..utils.version import __version__


@dataclass
class EncodeStats:
    """What happened to the rows on the way in; logged and kept in the run summary."""

    rows: int = 0
    kept: int = 0
    truncated: int = 0
    dropped_too_long: int = 0
    dropped_no_target: int = 0
    tokens: int = 0
    longest: int = 0

    def add(self, other: EncodeStats) -> None:
        """Fold in the counts of another shard of the same dataset."""
        for name in ("rows", "kept", "truncated", "dropped_too_long", "dropped_no_target", "tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.longest = max(self.longest, other.longest)

    def describe(self, max_length: int | None, strategy: str) -> str:
        parts = [f"{self.kept}/{self.rows} samples kept, {self.tokens} tokens, longest {self.longest}"]
        if self.truncated:
            where = f"on the {strategy} to --max_length {max_length}" if max_length else "to --max_completion_length"
            parts.append(f"{self.truncated} truncated {where}")
        if self.dropped_too_long:
            parts.append(f"{self.dropped_too_long} longer than --max_length {max_length} dropped "
                         "(--truncation_strategy delete)")
        if self.dropped_no_target:
            parts.append(f"{self.dropped_no_target} dropped with no tokens to learn from")
        return "; ".join(parts)


def encode_pretrain_text(messages: list[dict], tokenizer) -> tuple[list[int], list[int]]:
    """pt learns raw text: the turns' contents joined by newlines, then EOS; every token carries loss."""
    text = "\n".join(m["content"] for m in messages if m["role"] != "system")
    ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    if tokenizer.eos_token_id is not None:
        ids = ids + [tokenizer.eos_token_id]
    return ids, list(ids)


@dataclass(frozen=True)
class RowEncoder:
    """Everything the encoding of one row depends on: the one object handed to worker processes, lazy and
    streaming datasets, and the encoded-data cache key."""

    template: Template
    max_length: int | None
    truncation_strategy: str
    loss_on_all_tokens: bool
    loss_scale: str = "default"

    def __call__(self, row: dict, index: int, stats: EncodeStats) -> dict | None:
        """The sample of row `index` (0-based), or None when the truncation rule leaves nothing to learn."""
        stats.rows += 1
        if self.loss_on_all_tokens:
            ids, labels = encode_pretrain_text(row["messages"], self.template.tokenizer)
        else:
            if row["messages"][-1]["role"] != "assistant":
                raise UsageError(f"training row {index + 1} ends with a {row['messages'][-1]['role']} turn: "
                                 "sft learns from assistant answers, so each row needs one "
                                 "(query/response, messages ending with an assistant turn or tool call, ...)")
            encoded = self.template.encode(row["messages"], loss_scale=self.loss_scale, tools=row.get("tools"))
            ids, labels = encoded.input_ids, encoded.labels
        stats.longest = max(stats.longest, len(ids))
        if self.max_length is not None and len(ids) > self.max_length:
            if self.truncation_strategy == "delete":
                stats.dropped_too_long += 1
                return None
            stats.truncated += 1
            cut = (slice(len(ids) - self.max_length, None) if self.truncation_strategy == "left"
                   else slice(0, self.max_length))
            ids, labels = ids[cut], labels[cut]
        if all(label == IGNORE_INDEX for label in labels[1:]):
            stats.dropped_no_target += 1
            return None
        stats.kept += 1
        stats.tokens += len(ids)
        return {"input_ids": ids, "labels": labels}

    def fingerprint(self) -> str:
        """What the samples depend on besides the rows themselves."""
        return json.dumps([self.template.fingerprint(), self.max_length, self.truncation_strategy,
                           self.loss_on_all_tokens, self.loss_scale, __version__])


def encode_rows(rows: list[dict], encoder: RowEncoder, start: int = 0) -> tuple[list[dict], EncodeStats]:
    """Encode every row; apply the truncation rule; drop samples left with nothing to learn.

    `start` is the index of the first row in the whole dataset, so errors name the right row.
    """
    stats = EncodeStats()
    samples = [sample for index, row in enumerate(rows, start) if (sample := encoder(row, index, stats)) is not None]
    return samples, stats


def flatten(samples: list[dict]) -> dict:
    """Samples end to end in one row, `position_ids` restarting at 0 for each; the first label of every sample
    is masked, since there it would be predicted from the previous sample."""
    input_ids, labels, position_ids = [], [], []
    for sample in samples:
        input_ids += sample["input_ids"]
        labels += [IGNORE_INDEX] + sample["labels"][1:]
        position_ids += list(range(len(sample["input_ids"])))
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids}


def pack_samples(samples: list[dict], max_length: int) -> list[dict]:
    """Best-fit-decreasing packing into rows of at most `max_length` tokens.

    Each row is the `flatten` of its samples.
    """
    order = sorted(range(len(samples)), key=lambda i: -len(samples[i]["input_ids"]))
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (space left, bin index), sorted
    for i in order:
        length = len(samples[i]["input_ids"])
        at = bisect.bisect_left(free, (length, -1))
        if at < len(free):
            space, b = free.pop(at)
        else:
            space, b = max_length, len(bins)
            bins.append([])
        bins[b].append(i)
        if space - length > 0:
            bisect.insort(free, (space - length, b))
    return [flatten([samples[i] for i in sorted(members)]) for members in bins]


@dataclass
class PaddingCollator:
    """Right-pads a batch to its longest sample."""

    pad_token_id: int

    def __call__(self, batch: list[dict]) -> dict:
        import torch
        width = max(len(b["input_ids"]) for b in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, b in enumerate(batch):
            n = len(b["input_ids"])
            input_ids[row, :n] = torch.tensor(b["input_ids"])
            labels[row, :n] = torch.tensor(b["labels"])
            attention_mask[row, :n] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask, "use_cache": False}


@dataclass
class PackedCollator:
    """Concatenates packed rows into one padding-free row; position_ids tell samples apart.

    `use_cache=False` matters for correctness, not only memory: transformers builds the
    per-sample mask from position_ids only when no KV cache is passed.
    """

    def __call__(self, batch: list[dict]) -> dict:
        import torch
        out = {key: torch.tensor([[token for b in batch for token in b[key]]], dtype=torch.long)
               for key in ("input_ids", "labels", "position_ids")}
        return out | sample_bounds(out["position_ids"][0].tolist()) | {"use_cache": False}


def sample_bounds(position_ids: list[int]) -> dict:
    """Where each sample of a flat row starts (its position id restarts at 0), as flash-attn's varlen keywords:
    transformers hands them to every attention layer, where segment attention (model/segment_attention.py) and
    flash-attn keep each sample to itself without the row-wide mask."""
    from ..model.segment_attention import segment_bounds
    starts = [i for i, p in enumerate(position_ids) if p == 0 and i > 0]
    edges = [0, *starts, len(position_ids)]
    return segment_bounds([b - a for a, b in zip(edges[:-1], edges[1:])])


class PaddingFreeCollator:
    """--padding_free: a batch of samples flattened into one row by transformers' DataCollatorWithFlattening
    (the layout of a packed row, built per batch instead of up front); `use_cache=False` as for packing, and
    the samples' boundaries as PackedCollator gives them."""

    def __init__(self):
        from transformers import DataCollatorWithFlattening
        self.flatten = DataCollatorWithFlattening(return_position_ids=True, separator_id=IGNORE_INDEX,
                                                  return_flash_attn_kwargs=True)

    def __call__(self, batch: list[dict]) -> dict:
        return dict(self.flatten(batch)) | {"use_cache": False}


class ListDataset:
    """A torch map-style dataset over a list; the Trainer's sampler shuffles it with --seed."""

    def __init__(self, items: list[dict]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return self.items[index]
