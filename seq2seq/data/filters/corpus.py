"""`clean_corpus`: two line-aligned files (.gz ok) through the filters, the kept pairs written to two new
files, every removed pair traceable (the report's counts and examples; with `removed_path`, each one
with its input line, filter and reason, as JSON lines). Streams: memory holds the first
`clean.sample_size` pairs (what the filters learn from), the chunks in flight and dedup's digests.
The inputs are only read; the outputs are written under temporary names and renamed into place when
the whole corpus is done (`seq2seq.storage.outputs.open_output`), so a failure leaves none.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack
from typing import BinaryIO

from seq2seq.config.clean_section import CleanConfig
from seq2seq.data.filters import build_filters
from seq2seq.data.filters.base import FilterError, Pair
from seq2seq.data.filters.pipeline import verdicts
from seq2seq.data.filters.report import CleanReport
from seq2seq.storage.outputs import open_output
from seq2seq.text.lines import decoded_lines, json_line, open_binary

log = logging.getLogger("seq2seq.clean")
CHUNK_PAIRS = 1000  # pairs a worker judges at a time: large enough to amortise the pickling


def check_input(path: str) -> None:
    """FilterError naming `path` when it is not a file to read ('-': stdin)."""
    if path == "-" or os.path.isfile(path):
        return
    if os.path.isdir(path):
        raise FilterError(f"input {path} is a directory; give a file")
    raise FilterError(f"input file not found: {path}")


def read_pairs(src_path: str, tgt_path: str) -> Iterator[Pair]:
    """The pairs of two line-aligned files, lazily, as read (unstripped; `decoded_lines`: invalid UTF-8
    replaced with a warning naming the line). FilterError naming the file that ends first and the line
    the other goes on with."""
    for path in (src_path, tgt_path):
        check_input(path)
    with open_binary(src_path, "rb") as src_file, open_binary(tgt_path, "rb") as tgt_file:
        pairs = itertools.zip_longest(decoded_lines(src_file, src_path), decoded_lines(tgt_file, tgt_path))
        for number, (src, tgt) in enumerate(pairs, 1):
            if src is None or tgt is None:
                short, other = (src_path, tgt_path) if src is None else (tgt_path, src_path)
                ends = "is empty" if number == 1 else f"ends after line {number - 1:,}"
                raise FilterError(f"{short} {ends} but {other} goes on (line {number:,}): the files must be "
                                  "aligned line by line")
            yield src, tgt


def _stripped(pairs: list[Pair]) -> list[Pair]:
    return [(s.strip(), t.strip()) for s, t in pairs]


def clean_corpus(src_path: str, tgt_path: str, out_src: str, out_tgt: str, cfg: CleanConfig, *,
                 workers: int = 1, removed_path: str | None = None, progress: bool = False,
                 total: int | None = None, chunk_pairs: int = CHUNK_PAIRS) -> CleanReport:
    """Filter the corpus `src_path` + `tgt_path` by `cfg` into `out_src` + `out_tgt` (kept lines as they
    were read, in input order); `removed_path`: the removed pairs as JSON lines {"line", "filter", "reason",
    "src", "tgt"}. `total`: the number of pairs, for the progress bar. Returns the report."""
    from tqdm import tqdm

    started = time.perf_counter()
    filters = build_filters(cfg)
    report = CleanReport.for_filters({f.name: f.reasons for f in filters}, cfg.examples)
    pairs = read_pairs(src_path, tgt_path)
    sample = list(itertools.islice(pairs, cfg.sample_size))
    stripped_sample = _stripped(sample)
    for rule in filters:
        report.learnt[rule.name] = rule.prepare(stripped_sample)
    del stripped_sample
    raw_chunks: deque[list[Pair]] = deque()

    def chunks() -> Iterator[list[Pair]]:
        stream = itertools.chain(sample, pairs)
        while chunk := list(itertools.islice(stream, chunk_pairs)):
            raw_chunks.append(chunk)
            yield _stripped(chunk)

    names = [f.name for f in filters]
    line = 0
    with ExitStack() as stack:
        src_out = stack.enter_context(open_output(out_src))
        tgt_out = stack.enter_context(open_output(out_tgt))
        removed_out: BinaryIO | None = stack.enter_context(open_output(removed_path)) if removed_path else None
        bar = stack.enter_context(tqdm(total=total, unit=" pairs", disable=not progress, desc="clean",
                                       dynamic_ncols=True))
        for _, judged in verdicts(chunks(), filters, workers):
            raw = raw_chunks.popleft()
            kept_src, kept_tgt = [], []
            for (src, tgt), verdict in zip(raw, judged):
                line += 1
                if verdict is None:
                    kept_src.append(src)
                    kept_tgt.append(tgt)
                    continue
                name, reason = names[verdict[0]], verdict[1]
                report.record(line, name, reason, src, tgt)
                if removed_out is not None:
                    removed_out.write(json_line({"line": line, "filter": name, "reason": reason, "src": src,
                                                 "tgt": tgt}).encode("utf-8") + b"\n")
            if kept_src:
                src_out.write(("\n".join(kept_src) + "\n").encode("utf-8"))
                tgt_out.write(("\n".join(kept_tgt) + "\n").encode("utf-8"))
            report.kept += len(kept_src)
            bar.update(len(raw))
    report.pairs = line
    report.seconds = time.perf_counter() - started
    return report
