"""Resolve `--dataset` specs to normalized rows, the way ms-swift reads them.

A spec is a local `.jsonl`/`.json`/`.csv` file, a local dataset directory (a ModelScope or Hugging Face
dataset repository on disk), a registered built-in name, or an `owner/name` hub id, optionally followed
by `#N` to take N rows. `load_dataset` reads sources whole into lists (every row checked before `#N`
sampling, and every step deterministic); `iter_dataset` reads them row by row as they are consumed, for
`--streaming`.
"""
from __future__ import annotations

import copy
import csv
import itertools
import json
import math
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..utils.errors import MissingInputError, UsageError
from ..utils.hub import offline_variable
from .formats import ROW_KINDS, DatasetRowError, RowFormat, check_row_kind, detect_format, normalize_row
from .registry import DATASET_REGISTRY, SELF_COGNITION_TAG, DatasetMeta

LocatedRow = tuple[str, dict]  # ("data.jsonl line 3", row)

FILE_SUFFIXES = (".jsonl", ".json", ".csv")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_PLACEHOLDERS = ("{{NAME}}", "{{AUTHOR}}")


def _jsonl_rows(lines: Iterable[str], label: str) -> Iterator[LocatedRow]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{label} line {number}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as error:
            raise DatasetRowError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None


def _json_rows(text: str, label: str) -> Iterator[LocatedRow]:
    """A `.json` file is either one array of rows or, as often on the hubs, JSON lines."""
    if not text.lstrip().startswith("["):
        yield from _jsonl_rows(text.splitlines(), label)
        return
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetRowError(f"{label} line {error.lineno}: not valid JSON ({error.msg})") from None
    for index, row in enumerate(rows):
        yield f"{label} row {index + 1}", row


def _csv_rows(path: Path, label: str) -> Iterator[LocatedRow]:
    """Line numbers count the header as line 1, as a spreadsheet or editor shows them."""
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header_width = len(reader.fieldnames or ())
        start = reader.line_num + 1
        for row in reader:
            where = f"{label} line {start}"
            start = reader.line_num + 1
            if None in row:
                raise DatasetRowError(f"{where}: {header_width + len(row[None])} cells, "
                                      f"but the header names {header_width} columns")
            # A short line leaves its last columns unset; treat them as missing, not as text.
            yield where, {key: value for key, value in row.items() if value is not None}


def _file_rows(path: Path, label: str) -> Iterator[LocatedRow]:
    """`.jsonl` and `.csv` are read line by line; a `.json` file is read whole (an array parses only whole)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        yield from _csv_rows(path, label)
    elif suffix == ".json":
        yield from _json_rows(path.read_text(encoding="utf-8"), label)
    else:
        with path.open(encoding="utf-8") as f:
            yield from _jsonl_rows(f, label)


def _hub_rows(dataset_id: str, use_hf: bool, streaming: bool) -> Iterator[LocatedRow]:
    hub = "the Hugging Face hub" if use_hf else "ModelScope"
    advice = "download it and pass the local .jsonl/.json/.csv file to --dataset instead"
    if switch := offline_variable():
        raise RuntimeError(f"could not load dataset {dataset_id!r} from {hub}: {switch} is set; {advice}")
    try:
        if use_hf:
            import datasets
            rows = datasets.load_dataset(dataset_id, split="train", streaming=streaming)
        else:
            from modelscope import MsDataset
            rows = MsDataset.load(dataset_id, split="train", use_streaming=streaming)
        for index, row in enumerate(rows):
            yield f"{dataset_id} row {index + 1}", dict(row)
    except Exception as error:
        raise RuntimeError(f"could not load dataset {dataset_id!r} from {hub} "
                           f"({type(error).__name__}: {error}); {advice}") from error


def _dir_rows(path: Path, use_hf: bool) -> list[LocatedRow]:
    """A local dataset directory: a ModelScope (or, with use_hf, Hugging Face) dataset repository on disk.

    The hub library reads it as it reads a downloaded repository (data files, README `configs`), with no
    network. Split checks are off: ModelScope downloads carry a `dataset_infos.json` that often lists other
    splits than the data files hold, which `datasets` would refuse (ms-swift sidesteps the same file).
    """
    library = "datasets" if use_hf else "modelscope"
    try:
        if use_hf:
            import datasets
            rows = datasets.load_dataset(str(path), split="train", verification_mode="no_checks")
        else:
            from modelscope import MsDataset
            rows = MsDataset.load(str(path), split="train", verification_mode="no_checks")
        return [(f"{path} row {index + 1}", dict(row)) for index, row in enumerate(rows)]
    except Exception as error:
        raise RuntimeError(f"could not load the dataset directory {path} with {library} "
                           f"({type(error).__name__}: {error}); it needs a 'train' split "
                           "(a train.jsonl file, or README configs naming one)") from error


def _normalize(located: Iterable[LocatedRow], row_kind: str | None = None) -> Iterator[dict]:
    """The first row fixes the format every other row of the same source must have; `row_kind` is what the
    trainer needs of each row (see `check_row_kind`), checked here where the row's file and line are known."""
    expected: RowFormat | None = None
    for where, row in located:
        expected = expected or detect_format(row, where)
        normalized = normalize_row(row, where, expected=expected)
        if row_kind is not None:
            check_row_kind(normalized, row_kind, where)
        yield normalized


def _pick_name(names: list[str], lang: str) -> str:
    """ms-swift convention: with two names the first is Chinese and the second English."""
    return names[0] if lang == "zh" or len(names) == 1 else names[1]


def _check_identity(dataset: str, model_name: list[str] | None, model_author: list[str] | None) -> None:
    if not model_name or not model_author:
        raise UsageError(f"{dataset} needs --model_name and --model_author, e.g. "
                         "--model_name 小黄 'Xiao Huang' --model_author 魔搭 ModelScope")
    for flag, names in (("--model_name", model_name), ("--model_author", model_author)):
        if len(names) > 2:
            raise UsageError(f"{flag} takes one or two values (Chinese, then English), got {len(names)}")


def _fill_identity(row: dict, model_name: list[str], model_author: list[str]) -> dict:
    """Replace the placeholders; the hidden `lang` column picks the name's language and is dropped."""
    lang = row.pop("lang", "en")
    values = (_pick_name(model_name, lang), _pick_name(model_author, lang))
    for message in row["messages"]:
        for placeholder, value in zip(_PLACEHOLDERS, values, strict=True):
            message["content"] = message["content"].replace(placeholder, value)
    return row


def _builtin_rows(meta: DatasetMeta, model_name: list[str] | None,
                  model_author: list[str] | None, row_kind: str | None = None) -> Iterator[dict]:
    rows = _normalize(_file_rows(meta.file, meta.file.name), row_kind)
    if SELF_COGNITION_TAG not in meta.tags:
        return rows
    _check_identity(meta.name, model_name, model_author)
    return (_fill_identity(row, model_name, model_author) for row in rows)


def _is_hub_id(source: str) -> bool:
    return bool(_HUB_ID.match(source)) and not source.lower().endswith(FILE_SUFFIXES)


def _local_rows(source: str, row_kind: str | None = None) -> Iterator[dict]:
    path = Path(source).expanduser()
    if not path.is_file():
        raise MissingInputError(f"dataset file not found: {source} (built-in datasets: "
                                f"{', '.join(sorted(DATASET_REGISTRY))}; hub ids look like owner/name)")
    if path.suffix.lower() not in FILE_SUFFIXES:
        raise UsageError(f"dataset file {source}: unsupported type {path.suffix!r}; "
                         "use .jsonl, .json or .csv")
    return _normalize(_file_rows(path, source), row_kind)


def _source_rows(source: str, *, model_name: list[str] | None, model_author: list[str] | None,
                 use_hf: bool, streaming: bool, row_kind: str | None = None) -> Iterator[dict]:
    """The source's rows, read as they are consumed; what can be checked without reading is checked now."""
    if source in DATASET_REGISTRY:
        return _builtin_rows(DATASET_REGISTRY[source], model_name, model_author, row_kind)
    if _is_hub_id(source) and not Path(source).expanduser().exists():
        return _normalize(_hub_rows(source, use_hf, streaming), row_kind)
    if Path(source).expanduser().is_dir():
        return _normalize(_dir_rows(Path(source).expanduser(), use_hf), row_kind)
    return _local_rows(source, row_kind)


def _parse_spec(spec: str) -> tuple[str, int | None]:
    """Split `source#N` into the source and the number of rows to take (None: all)."""
    source, hash_sign, count = spec.rpartition("#")
    if not hash_sign:
        return spec, None
    if not re.fullmatch(r"[0-9]+", count) or int(count) == 0:
        raise UsageError(f"dataset spec {spec!r}: the part after '#' must be a positive number of rows, "
                         f"got {count!r}")
    return source, int(count)


def _sample_rows(rows: list[dict], count: int, seed: int) -> list[dict]:
    """Take `count` rows; past the dataset's size, repeat it whole and sample the remainder (as ms-swift).

    Repeated rows are copies, so a later in-place edit of one does not change its twins.
    """
    repeats, remainder = divmod(count, len(rows))
    picked = [copy.deepcopy(row) for _ in range(repeats) for row in rows] if repeats else []
    return picked + [rows[i] for i in random.Random(seed).sample(range(len(rows)), remainder)]


def load_dataset(datasets: list[str], *, seed: int = 42, model_name: list[str] | None = None,
                 model_author: list[str] | None = None, use_hf: bool = False,
                 row_kind: str | None = None) -> list[dict]:
    """Load every spec and concatenate the normalized rows, in spec order.

    Each row is checked in full before `#N` sampling, so a bad row fails the run whatever
    the sample. `row_kind` (`pair`, `kto`) also holds each row to what a preference trainer needs.
    """
    if row_kind is not None and row_kind not in ROW_KINDS:
        raise ValueError(f"row_kind must be one of {ROW_KINDS}, got {row_kind!r}")
    rows: list[dict] = []
    for spec in datasets:
        source, count = _parse_spec(spec)
        loaded = list(_source_rows(source, model_name=model_name, model_author=model_author, use_hf=use_hf,
                                   streaming=False, row_kind=row_kind))
        if not loaded:
            raise UsageError(f"dataset {source!r} has no rows")
        rows += loaded if count is None else _sample_rows(loaded, count, seed)
    return rows


def iter_dataset(datasets: list[str], *, model_name: list[str] | None = None,
                 model_author: list[str] | None = None, use_hf: bool = False) -> Iterator[dict]:
    """The rows of every spec one at a time, each source read only as far as it is consumed (--streaming).

    A stream cannot be sampled without reading it whole, so `#N` takes the first N rows (as ms-swift
    does when streaming), and a bad row fails when it is reached. Missing files, bad specs and missing
    self-cognition names fail here, before any row is read; hub ids stream through the hub library.
    """
    sources = []
    for spec in datasets:
        source, count = _parse_spec(spec)
        sources.append((_source_rows(source, model_name=model_name, model_author=model_author, use_hf=use_hf,
                                     streaming=True), count))
    return itertools.chain.from_iterable(itertools.islice(rows, count) for rows, count in sources)


def split_dataset(rows: list[dict], ratio: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Shuffle with `seed` and hold out `ratio` of the rows (at least one) for validation."""
    if not 0 <= ratio < 1:
        raise UsageError(f"split ratio must be in [0, 1), got {ratio}")
    if ratio == 0:
        return list(rows), []
    if len(rows) < 2:
        raise UsageError(f"cannot split {len(rows)} row(s) into train and validation sets")
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    val_size = min(len(rows) - 1, max(1, math.ceil(len(rows) * ratio)))
    return shuffled[val_size:], shuffled[:val_size]
