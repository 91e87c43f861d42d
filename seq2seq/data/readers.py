"""Reading parallel data: aligned text files, tables (.tsv/.csv/.jsonl) and Hugging Face datasets.

Every reader returns a `datasets.Dataset` with string columns "src" and "tgt". Problems a user
can fix raise `DataError` naming the file and the 1-based line or the column.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import itertools
import json
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Mapping, Sequence

import datasets

from seq2seq.config import json_reader
from seq2seq.config.json_reader import JSONObject, JSONValue
from seq2seq.config.diagnostics import Seq2SeqError


class DataError(Seq2SeqError, ValueError):
    """A data problem a user can fix; the message names the file and line (1-based) or column."""


def _hash(obj: object) -> str:
    """Hex digest of a JSON-serialisable object (cache keys and dataset fingerprints)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


CHUNK_BYTES = 1 << 22  # bytes read at a time when streaming a file
CHUNK_PAIRS = 50_000  # pairs per chunk when streaming a corpus (`pair_chunks`)


def _open_binary(path: Path) -> BinaryIO:
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")  # type: ignore[return-value]
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from None


def _decode(raw: bytes, path: Path, first_line: int) -> str:
    """Strict UTF-8 of a run of whole lines that starts at line `first_line`; DataError naming the line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + raw.count(b"\n", 0, e.start)
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"{path}, line {line}: invalid UTF-8 at byte {column} of the line ({e.reason})") from None


def _normalise(text: str) -> str:
    """Line ends -> \\n; a carriage return that is not part of \\r\\n becomes a space, so a stray \\r can
    never split a line and break the alignment of two parallel files."""
    return text.replace("\r\n", "\n").replace("\r", " ")


def read_text(path: str | Path) -> str:
    """Whole file (gunzipped if .gz) as strictly decoded UTF-8, BOM dropped, line ends -> \\n (see `_normalise`).
    For files of any size, `iter_lines` streams the same lines."""
    path = Path(path)
    with _open_binary(path) as f:
        try:
            raw = f.read()
        except (OSError, EOFError) as e:
            raise DataError(f"cannot read {path}: {e}") from None
    return _normalise(_decode(raw, path, 1)).removeprefix("\ufeff")


def iter_line_blocks(path: str | Path) -> Iterator[list[str]]:
    """The lines of a file of any size (gunzipped if .gz), read `CHUNK_BYTES` at a time, as one list
    per block: the lines `read_text(path)` splits into, unstripped, without their line ends. DataError
    naming the line for invalid UTF-8, and for a file that cannot be read."""
    path = Path(path)
    line_no, rest, first = 1, b"", True
    with _open_binary(path) as f:
        while True:
            try:
                block = f.read(CHUNK_BYTES)
            except (OSError, EOFError) as e:
                raise DataError(f"cannot read {path}: {e}") from None
            if not block:
                break
            block = rest + block
            end = block.rfind(b"\n") + 1  # whole lines only: a UTF-8 character or \r\n is never cut
            rest = block[end:]
            if not end:
                continue
            text = _normalise(_decode(block[:end], path, line_no))
            if first:
                text, first = text.removeprefix("\ufeff"), False
            lines = text.split("\n")
            lines.pop()  # the text ends with \n: the empty string after it is not a line
            line_no += len(lines)
            yield lines
    if rest:
        text = _normalise(_decode(rest, path, line_no))
        yield (text.removeprefix("\ufeff") if first else text).split("\n")


def iter_lines(path: str | Path) -> Iterator[str]:
    """`iter_line_blocks`, line by line."""
    for block in iter_line_blocks(path):
        yield from block


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a new one
    return lines


def read_lines(path: str | Path) -> list[str]:
    """One stripped sentence per line; DataError if the file is missing, not UTF-8 or empty."""
    lines = [line.strip() for line in iter_lines(path)]
    if not lines:
        raise DataError(f"{path} is empty")
    return lines


Chunk = tuple[list[str], list[str]]  # (sources, targets) of consecutive pairs


def _chunked(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[Chunk]:
    while True:
        chunk = list(itertools.islice(pairs, size))
        if not chunk:
            return
        src, tgt = zip(*chunk)
        yield list(src), list(tgt)


def parallel_chunks(src_path: str | Path, tgt_path: str | Path, size: int = CHUNK_PAIRS) -> Iterator[Chunk]:
    """Two line-aligned files, streamed `size` stripped pairs at a time. DataError when a file is
    empty, or (once the shorter one ends) when they differ in length, naming both counts."""
    src_blocks, tgt_blocks = iter_line_blocks(src_path), iter_line_blocks(tgt_path)
    src: list[str] = []
    tgt: list[str] = []
    n = 0
    while True:  # whole blocks of each file, cut where the shorter buffer ends
        while len(src) < size and (block := next(src_blocks, None)) is not None:
            src += block
        while len(tgt) < size and (block := next(tgt_blocks, None)) is not None:
            tgt += block
        m = min(len(src), len(tgt), size)
        if not m:
            break
        yield [x.strip() for x in src[:m]], [x.strip() for x in tgt[:m]]
        n += m
        del src[:m], tgt[:m]
    extra_src = len(src) + sum(len(b) for b in src_blocks)
    extra_tgt = len(tgt) + sum(len(b) for b in tgt_blocks)
    if not n:
        raise DataError(f"{tgt_path if extra_src else src_path} is empty")
    if extra_src or extra_tgt:
        raise _mismatch(src_path, tgt_path, n + extra_src, n + extra_tgt)


def _mismatch(src_path: str | Path, tgt_path: str | Path, n_src: int, n_tgt: int) -> DataError:
    return DataError(f"parallel files differ in length: {src_path} has {n_src:,} lines but {tgt_path} has "
                     f"{n_tgt:,} lines; they must be aligned line by line")


def check_aligned(src_path: str | Path, tgt_path: str | Path) -> None:
    """DataError, before any reading, when two plain (not gzipped) parallel files differ in their
    number of lines (counted on the bytes: a second a few GB), or, then, when one is not UTF-8 text;
    `parallel_chunks` checks every pair of files."""
    counts = []
    for path in map(Path, (src_path, tgt_path)):
        if path.suffix == ".gz" or not path.is_file():
            return
        n, last = 0, b"\n"
        with path.open("rb") as f:
            for block in iter(lambda: f.read(CHUNK_BYTES), b""):
                n, last = n + block.count(b"\n"), block[-1:]
        counts.append(n + (last != b"\n"))
    if counts[0] != counts[1] and min(counts) > 0:
        for name in (src_path, tgt_path):  # a file that is not text at all: say that first, naming the line
            for _ in iter_line_blocks(name):
                pass
        raise _mismatch(src_path, tgt_path, *counts)


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> datasets.Dataset:
    """Two line-aligned files -> Dataset with columns "src", "tgt" (in memory: `parallel_chunks` streams)."""
    return _dataset(parallel_chunks(src_path, tgt_path))


def _dataset(chunks: Iterable[Chunk]) -> datasets.Dataset:
    src: list[str] = []
    tgt: list[str] = []
    for s, t in chunks:
        src += s
        tgt += t
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def _table_kind(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    kind = suffixes[-1] if suffixes else ""
    if kind not in (".tsv", ".csv", ".jsonl"):
        raise DataError(f"{path}: unsupported table format {kind or '(no suffix)'}; use .tsv, .csv or .jsonl (optionally .gz)")
    return kind


def _missing_column(path: Path, column: str, available: list[str]) -> DataError:
    return DataError(f"{path}: column '{column}' not found; available columns: {', '.join(available)}")


def _delimited_pairs(path: Path, delimiter: str, src_column: str, tgt_column: str) -> Iterator[tuple[str, str]]:
    """TSV (split on tabs, no quoting) or CSV (RFC 4180 quoting) -> (source, target) texts, streamed.

    The first row is a header when it contains both column names. Otherwise, with the default
    names "src"/"tgt", the file is headerless and columns 0/1 are used; with other names it is
    a header that lacks a column, which is an error listing the columns it has.
    """
    if delimiter == "\t":
        rows: Iterator[tuple[int, list[str]]] = ((i, line.split("\t")) for i, line in enumerate(iter_lines(path), 1))
    else:
        reader = csv.reader((line + "\n" for line in iter_lines(path)))
        rows = ((reader.line_num, fields) for fields in reader)  # line_num: where the row ends
    first = next(rows, None)
    if first is None:
        raise DataError(f"{path} is empty")
    header = [h.strip() for h in first[1]]
    if src_column in header and tgt_column in header:
        si, ti = header.index(src_column), header.index(tgt_column)
    elif (src_column, tgt_column) == ("src", "tgt") and not ({"src", "tgt"} & set(header)):
        si, ti = 0, 1
        rows = itertools.chain([first], rows)
    else:
        raise _missing_column(path, src_column if src_column not in header else tgt_column, header)
    need = max(si, ti) + 1
    n = 0
    for line_no, fields in rows:
        if fields in ([], [""]):  # blank line: an empty pair, counted (and dropped) by cleaning
            fields = [""] * need
        if len(fields) < need:
            raise DataError(f"{path}, line {line_no}: expected at least {need} columns, found {len(fields)}")
        n += 1
        yield fields[si].strip(), fields[ti].strip()
    if not n:
        raise DataError(f"{path} has a header but no data rows")


def _pair_from_row(row: Mapping[str, object], src_column: str, tgt_column: str, where: str) -> tuple[object, object]:
    """(src, tgt) from a dict row, direct columns or translation-style {"translation": {lang: text}}."""
    if src_column in row and tgt_column in row:
        return row[src_column], row[tgt_column]
    nested = row.get("translation")
    if isinstance(nested, dict) and src_column in nested and tgt_column in nested:
        return nested[src_column], nested[tgt_column]
    available = list(row) + ([f"translation.{k}" for k in nested] if isinstance(nested, dict) else [])
    missing = src_column if src_column not in row and not (isinstance(nested, dict) and src_column in nested) else tgt_column
    raise DataError(f"{where}: column '{missing}' not found; available columns: {', '.join(available)}")


def _as_text(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: expected a string, got {type(value).__name__} {value!r:.60}")
    return value.strip()


def jsonl_rows(path: Path, lines: Iterable[str]) -> Iterator[tuple[str, JSONObject]]:
    """(where, object) for each non-blank line of a JSONL file's lines; DataError naming the line for
    invalid JSON or a line that is not an object."""
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}, line {i}"
        try:
            row: JSONValue = json_reader.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: invalid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        yield where, row


def read_jsonl(path: Path, text: str, src_column: str, tgt_column: str,
               several_targets: bool = False) -> tuple[list[str], list[str], list[str]]:
    """(sources, targets, where each row is) of a JSONL text, stripped. several_targets (tables of
    media files): the target may be a list of strings (several captions of one file), one row each,
    and the source must be a path string; otherwise missing values read as "". DataError naming the
    line for a missing column or a value of the wrong type, or an empty file."""
    srcs, tgts, wheres = [], [], []
    for where, row in jsonl_rows(path, _split_lines(text)):
        src, tgt = _pair_from_row(row, src_column, tgt_column, where)
        if several_targets:
            values = tgt if isinstance(tgt, list) else [tgt]
            if not isinstance(src, str) or not all(isinstance(v, str) for v in values):
                raise DataError(f"{where}: '{src_column}' must be a path string and '{tgt_column}' a string or a "
                                f"list of strings")
        else:
            values = [tgt]
        for value in values:
            srcs.append(_as_text(src, where))
            tgts.append(_as_text(value, where))
            wheres.append(where)
    if not srcs:
        raise DataError(f"{path} is empty")
    return srcs, tgts, wheres


def table_chunks(path: str | Path, src_column: str = "src", tgt_column: str = "tgt",
                 size: int = CHUNK_PAIRS) -> Iterator[Chunk]:
    """A .tsv/.csv/.jsonl file (optionally .gz), streamed `size` (source, target) pairs at a time."""
    path = Path(path)
    kind = _table_kind(path)
    if kind == ".jsonl":
        def pairs() -> Iterator[tuple[str, str]]:
            n = 0
            for where, row in jsonl_rows(path, iter_lines(path)):
                src, tgt = _pair_from_row(row, src_column, tgt_column, where)
                n += 1
                yield _as_text(src, where), _as_text(tgt, where)
            if not n:
                raise DataError(f"{path} is empty")
        yield from _chunked(pairs(), size)
    else:
        yield from _chunked(_delimited_pairs(path, "\t" if kind == ".tsv" else ",", src_column, tgt_column), size)


def read_table(path: str | Path, src_column: str = "src", tgt_column: str = "tgt") -> datasets.Dataset:
    """A .tsv/.csv/.jsonl file (optionally .gz) -> Dataset with columns "src", "tgt" (in memory:
    `table_chunks` streams)."""
    return _dataset(table_chunks(path, src_column, tgt_column))


def hf_pairs(ds: datasets.Dataset, src_column: str, tgt_column: str, source: str = "dataset") -> datasets.Dataset:
    """A Hugging Face dataset -> columns "src", "tgt" (direct columns or translation-style rows)."""
    names = ds.column_names
    if src_column in names and tgt_column in names:
        def pick(batch: dict[str, list]) -> dict[str, list[str]]:
            return {"src": [_as_text(v, source) for v in batch[src_column]],
                    "tgt": [_as_text(v, source) for v in batch[tgt_column]]}
    elif "translation" in names and len(ds) > 0:
        _pair_from_row(ds[0], src_column, tgt_column, source)  # raises, listing the languages, if absent

        def pick(batch: dict[str, list]) -> dict[str, list[str]]:
            rows = batch["translation"]
            return {"src": [_as_text(r.get(src_column), source) for r in rows],
                    "tgt": [_as_text(r.get(tgt_column), source) for r in rows]}
    else:
        missing = src_column if src_column not in names else tgt_column
        raise DataError(f"{source}: column '{missing}' not found; available columns: {', '.join(names)}")
    # An explicit fingerprint: datasets would otherwise hash the closure, which may fall back
    # to a random fingerprint and defeat prepare's cache.
    return ds.map(pick, batched=True, remove_columns=names, desc=f"reading {source}",
                  new_fingerprint=_hash([ds._fingerprint, "pairs", src_column, tgt_column])[:32])


def load_hf(name: str, config: str | None, split: str, src_column: str, tgt_column: str) -> datasets.Dataset:
    """One split of a Hugging Face dataset -> columns "src", "tgt".

    Needs network access unless the dataset is already in the local Hugging Face cache.
    """
    source = f"Hugging Face dataset {name!r}" + (f" ({config})" if config else "") + f", split {split!r}"
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - many failure types (network, unknown split, ...); all get context
        raise DataError(f"cannot load {source}: {e}. Loading from the Hub needs network access.") from e
    return hf_pairs(ds, src_column, tgt_column, source)


def fingerprint(paths: Sequence[str | Path]) -> str:
    """Hex digest of the files' contents (in order): equal for equal data wherever it lives."""
    digest = hashlib.sha256()
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"data file not found: {path}")
        file_hash = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                file_hash.update(chunk)
        digest.update(file_hash.digest())
    return digest.hexdigest()
