"""Translating a text file, of any size, into a parallel corpus: back-translation and sequence-level
distillation (`seq2seq back-translate`, `seq2seq distill`; docs/back-translation.md).

One job: read the input lines in chunks, translate each chunk with a `Translator` (one model or an
ensemble), drop the degenerate pairs, write the rest as two line-aligned files:

* back-translation (direction "back"): the input is target-language monolingual text, the model the
  reverse one; synthetic source = the model's output (noised for "noised-beam"), target = the line;
* distillation ("distill"): the input is the training sources, the model the teacher; source = the
  line, target = the teacher's output.

Methods (Edunov et al. 2018): "beam" (beam search, beam 5 unless the search options say), "sample"
(unrestricted sampling, or top-k / top-p / temperature as given), "noised-beam" (beam output, then
`seq2seq.corpora.noise.noise_line`: deletions, fillers, bounded swaps). Distillation is "beam".

The output directory, when finished:

    train.src, train.tgt    the pairs, one per line, aligned
    corpus.yaml             the `data.corpora` entry that reads them ({train_src, train_tgt, src_lang,
                            tgt_lang, weight, tag}), ready to paste into a training config
    summary.json            the settings and the counts (input lines, pairs, each filter's drops)

Resuming. While it runs, the outputs are train.src.partial / train.tgt.partial and `state.json`.
After each chunk both files are flushed and fsynced, then state.json is replaced atomically with the
input lines consumed, the byte size of each output and the counts so far. A run killed at any moment
(SIGKILL included) and started again with the same command truncates the outputs to the recorded
sizes, skips the consumed lines and goes on: no line is written twice or lost. Sampling and noise
are seeded from (seed, chunk index), so a resumed run writes byte for byte what an uninterrupted one
writes. A run with other settings (models, method, search, seed, chunking, filters, input) is refused
in one line; the input is checked by a chained digest of the chunks consumed so far, so a line after
them may be fixed (a bad byte the run stopped at) and the run resumed.

Filters, each line dropped from both sides and counted (log and summary.json), first match wins:
empty_input (a blank line), too_long_input (more source tokens than the model's positions allow, or
`max_len`), empty_output, copy (the output is the input), bad_ratio (the longer side has more than
`max_ratio` times the subword tokens of the shorter, unless it has at most RATIO_EXEMPT_LEN: the
trainer's `data.max_ratio` rule). Input that is not UTF-8 (or binary: NUL bytes) stops the run with
`InputError` naming the file and line, after the chunks before it were saved.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator, Mapping, Sequence, TypedDict

import numpy as np

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.config.diagnostics import Diagnostic, Warn
from seq2seq.corpora.noise import WordNoise, noise_line
from seq2seq.storage.atomic import read_json, write_json_atomic, write_text_atomic
from seq2seq.text.languages import source_prefix
from seq2seq.text.lines import InputError, decoded_lines, one_line, open_binary

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.inference.translator import Translator
    from seq2seq.text.tokenizer import Tokenizer

log = logging.getLogger(__name__)

METHODS = ("beam", "sample", "noised-beam")
DIRECTIONS = ("back", "distill")
DEFAULT_BEAM = 5
RATIO_EXEMPT_LEN = 5  # as the trainer's cleaning (seq2seq.data.cleaning): a pair this short skips the ratio check
FILTERS = ("empty_input", "too_long_input", "empty_output", "copy", "bad_ratio")

SRC_FILE, TGT_FILE = "train.src", "train.tgt"
PARTIAL = ".partial"
class CorpusEntry(TypedDict, total=False):
    """What corpus.yaml says of a synthetic corpus besides its files (a `CorpusConfig`'s fields)."""

    src_lang: str | None
    tgt_lang: str | None
    weight: float
    tag: str | None


STATE_FILE, SUMMARY_FILE, CORPUS_FILE = "state.json", "summary.json", "corpus.yaml"
STATE_VERSION = 1


class CorpusRunError(Seq2SeqError, ValueError):
    """An output directory this job cannot write into (another run's, or damaged); one line."""


@dataclass
class CorpusJob:
    """What to translate and how; every field but `progress`-like ones is part of the settings a
    resumed run must repeat (`settings`).

    input: the text file (.gz ok). output_dir: where the corpus goes (see the module docstring).
    direction: "back" or "distill". method: one of METHODS. search: search options on top of the
    model's decoding defaults (beam, lenpen, topk, topp, temperature, max_len_a, ...), as
    `Translator.translate_nbest` takes them. seed: of sampling and noise. chunk_lines: lines read,
    translated and saved at a time. batch_tokens: padded source tokens per batch. max_len: skip input
    lines with more source tokens (None: the model's limit). max_ratio: see the module docstring.
    noise: the word noise of "noised-beam". tgt_lang: the target language of a multilingual model.
    corpus: what corpus.yaml says besides the files ({src_lang, tgt_lang, weight, tag}); not a setting.
    """

    input: str
    output_dir: str
    direction: str = "back"
    method: str = "beam"
    search: dict[str, Any] = field(default_factory=dict)
    seed: int = 1
    chunk_lines: int = 500
    batch_tokens: int = 4000
    max_len: int | None = None
    max_ratio: float = 3.0
    noise: WordNoise = field(default_factory=WordNoise)
    tgt_lang: str | None = None
    corpus: CorpusEntry = field(default_factory=lambda: CorpusEntry())

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.chunk_lines < 1 or self.batch_tokens < 1:
            raise ValueError("chunk_lines and batch_tokens must be >= 1")
        if self.max_len is not None and self.max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {self.max_len}")
        if not self.max_ratio >= 1.0:
            raise ValueError(f"max_ratio must be at least 1, got {self.max_ratio}")

    def search_options(self) -> dict[str, Any]:
        """The search options of every chunk but its sampling seed: the method's strategy (beam 5 unless
        `search` gives a beam; sampling for "sample") with `search` applied."""
        if self.method == "sample":
            return {**self.search, "sample": True}
        return {"beam": DEFAULT_BEAM, **self.search}

    def settings(self, translator: Translator, models: str) -> dict[str, object]:
        """What a resumed run must repeat: models (their fingerprint), direction, method, the resolved
        search, seed, chunking, filters, noise and target language."""
        search = dataclasses.asdict(translator.search_config(**self.search_options()))
        return {"models": models, "direction": self.direction, "method": self.method, "search": search,
                "seed": self.seed, "chunk_lines": self.chunk_lines, "batch_tokens": self.batch_tokens,
                "max_len": self.max_len, "max_ratio": self.max_ratio, "tgt_lang": self.tgt_lang,
                "noise": dataclasses.asdict(self.noise) if self.method == "noised-beam" else None}


def chunk_seed(seed: int, chunk: int) -> int:
    """The sampling seed of chunk `chunk` (0-based): a function of (seed, chunk) alone, so that a
    resumed run draws what an uninterrupted one drew."""
    digest = hashlib.sha256(f"{seed}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # 63 bits: a torch.Generator seed


def _strict(name: str) -> Warn:
    """The `warn` of `decoded_lines` that stops at invalid UTF-8 instead of replacing it."""

    def refuse(message: Diagnostic) -> None:
        raise InputError(str(message).replace(" replaced with U+FFFD", "") + f": not UTF-8 text; fix or remove the line "
                         f"(e.g. iconv -f utf-8 -t utf-8 -c {name}) and run the same command again to continue")

    return refuse


def _chain(digest: str, lines: Sequence[str]) -> str:
    """The input digest after one more chunk of lines."""
    h = hashlib.sha256(digest.encode())
    for line in lines:
        h.update(line.encode("utf-8", errors="surrogatepass") + b"\n")
    return h.hexdigest()


class CorpusState(TypedDict):
    """state.json: how far a run got (see the module docstring). settings: `CorpusJob.settings`; bytes:
    the sizes of the partial files ({"src", "tgt"}); counts: input_lines, pairs and each of FILTERS."""

    version: int
    settings: dict[str, object]
    input: str
    lines_consumed: int
    chunks: int
    input_digest: str
    bytes: dict[str, int]
    counts: dict[str, int]


@dataclass
class _Outputs:
    """The two partial files, opened for appending at their recorded sizes."""

    src: BinaryIO
    tgt: BinaryIO

    def write(self, pairs: list[tuple[str, str]]) -> dict[str, int]:
        """Append the pairs, flush and fsync both files; returns their byte sizes."""
        for stream, side in ((self.src, 0), (self.tgt, 1)):
            stream.write("".join(p[side] + "\n" for p in pairs).encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        return {"src": self.src.tell(), "tgt": self.tgt.tell()}

    def close(self) -> None:
        self.src.close()
        self.tgt.close()


class CorpusTranslation:
    """Runs one `CorpusJob` with a loaded `Translator` (see the module docstring).

    models: the fingerprint of the model files (`seq2seq.corpora.fingerprint.model_fingerprint`), part of the
    settings.
    """

    def __init__(self, translator: Translator, job: CorpusJob, models: str) -> None:
        self.translator = translator
        self.job = job
        self.out = Path(job.output_dir)
        self.settings = job.settings(translator, models)
        self.search = job.search_options()
        self.prefix = source_prefix(translator.loaded.config, job.tgt_lang)  # LanguageError for a wrong language
        self.limits = self._limits()

    # ---- paths --------------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        return self.out / name

    def _limits(self) -> list[tuple[Tokenizer, int]]:
        """(source tokenizer, most source tokens a line may have) of each distinct member tokenizer."""
        seen: dict[bytes, tuple[Tokenizer, int]] = {}
        for member in self.translator.members:
            room = member.config.model.max_positions - 1 - len(self.prefix)  # EOS and the tags take positions
            if self.job.max_len is not None:
                room = min(room, self.job.max_len)
            tok = member.tokenizers.src
            key = hashlib.sha256(tok.model_proto).digest()
            seen[key] = (tok, min(room, seen[key][1]) if key in seen else room)
        return list(seen.values())

    # ---- state --------------------------------------------------------------------------------

    def _fresh_state(self) -> CorpusState:
        return {"version": STATE_VERSION, "settings": self.settings, "input": str(self.job.input),
                "lines_consumed": 0, "chunks": 0, "input_digest": "", "bytes": {"src": 0, "tgt": 0},
                "counts": {"input_lines": 0, "pairs": 0, **{k: 0 for k in FILTERS}}}

    def _differences(self, settings: Mapping[str, object]) -> list[str]:
        keys = sorted(set(settings) | set(self.settings))
        return [k for k in keys if json.dumps(settings.get(k), sort_keys=True)
                != json.dumps(self.settings.get(k), sort_keys=True)]

    def _refuse_other(self, settings: Mapping[str, object], what: str) -> None:
        differ = self._differences(settings)
        if differ:
            raise CorpusRunError(f"{self.out} holds {what} made with other settings ({', '.join(differ)} differ); "
                                 f"repeat its command to continue it, or write to another output directory")

    def _load_state(self) -> CorpusState | None:
        """The state to continue from (None: start afresh); CorpusRunError for another run's directory."""
        state_path = self.path(STATE_FILE)
        if not state_path.is_file():
            return None
        try:
            state = read_json(state_path)
        except ValueError as e:
            raise CorpusRunError(f"{e}; remove {self.out} to start again") from None
        if state.get("version") != STATE_VERSION:
            raise CorpusRunError(f"{state_path} was written by another version (format {state.get('version')}); "
                                 f"remove {self.out} to start again")
        self._refuse_other(state["settings"], "an unfinished run")
        return state

    def _open_outputs(self, state: CorpusState) -> _Outputs:
        """The partial files truncated to the recorded sizes (a file a finishing run had already moved
        to its final name is moved back first)."""
        files = []
        for side, name in (("src", SRC_FILE), ("tgt", TGT_FILE)):
            partial, final = self.path(name + PARTIAL), self.path(name)
            if not partial.exists() and final.exists() and state["lines_consumed"]:
                os.replace(final, partial)  # killed while finishing: finish again
            size = state["bytes"][side]
            stream = open(partial, "r+b" if partial.exists() else "w+b")  # noqa: SIM115 - closed by _Outputs.close
            if os.fstat(stream.fileno()).st_size < size:
                stream.close()
                raise CorpusRunError(f"{partial} is shorter ({os.path.getsize(partial)} bytes) than state.json records "
                                     f"({size}); the directory was changed by hand: remove {self.out} to start again")
            stream.truncate(size)
            stream.seek(size)
            files.append(stream)
        return _Outputs(*files)

    # ---- running ------------------------------------------------------------------------------

    def run(self, progress: bool = False, total: int | None = None, stop_after_chunks: int | None = None,
            warn: Warn | None = None) -> dict[str, Any]:
        """Translate the input (or what a killed run left of it) and finish the directory; returns the
        summary (summary.json). A directory that holds this job's finished corpus is left as it is.
        stop_after_chunks: return after this many chunks of this call, unfinished (as if killed
        there; for tests). progress: a progress bar on stderr (of `total` lines if known)."""
        from tqdm import tqdm

        summary_path = self.path(SUMMARY_FILE)
        if summary_path.is_file() and not self.path(STATE_FILE).is_file():
            summary = read_json(summary_path)
            self._refuse_other(summary.get("settings", {}), "a finished corpus")
            log.info("%s already holds this corpus (%d pairs); nothing to do", self.out, summary["counts"]["pairs"])
            return summary
        self.out.mkdir(parents=True, exist_ok=True)
        state = self._load_state()
        resumed = state is not None
        state = state or self._fresh_state()
        if not resumed:
            summary_path.unlink(missing_ok=True)
            write_json_atomic(self.path(STATE_FILE), state)
        outputs = self._open_outputs(state)
        try:
            with open_binary(self.job.input, "rb") as f:
                lines = decoded_lines(f, self.job.input, warn=_strict(self.job.input))
                if resumed:
                    self._skip(lines, state)
                    log.info("resuming %s after %d input lines (%d pairs so far)", self.out, state["lines_consumed"],
                             state["counts"]["pairs"])
                with tqdm(total=total, initial=state["lines_consumed"], unit=" lines", disable=not progress,
                          file=sys.stderr, dynamic_ncols=True) as bar:
                    for done in itertools.count():
                        if stop_after_chunks is not None and done >= stop_after_chunks:
                            return {"finished": False, **state}
                        chunk = list(itertools.islice(lines, self.job.chunk_lines))
                        if not chunk:
                            break
                        pairs, counts = self.translate_chunk(chunk, state["chunks"], state["lines_consumed"] + 1, warn)
                        state["bytes"] = outputs.write(pairs)
                        state["lines_consumed"] += len(chunk)
                        state["chunks"] += 1
                        state["input_digest"] = _chain(state["input_digest"], chunk)
                        for key, n in counts.items():
                            state["counts"][key] += n
                        write_json_atomic(self.path(STATE_FILE), state)
                        bar.update(len(chunk))
        finally:
            outputs.close()
        return self._finish(state)

    def _skip(self, lines: Iterator[str], state: CorpusState) -> None:
        """Read past the consumed lines, checking them against the state's digest chunk by chunk."""
        digest = ""
        for _ in range(state["chunks"]):
            chunk = list(itertools.islice(lines, self.job.chunk_lines))
            digest = _chain(digest, chunk)
        if digest != state["input_digest"]:
            raise CorpusRunError(f"{self.job.input} is not the input this run started on: its first "
                                 f"{state['lines_consumed']:,} lines differ from the ones translated; give that file, "
                                 f"or write to another output directory")

    def translate_chunk(self, chunk: list[str], index: int, first_line: int,
                        warn: Warn | None = None) -> tuple[list[tuple[str, str]], dict[str, int]]:
        """One chunk of input lines (chunk number `index`, its first line numbered `first_line`) ->
        the pairs kept (source, target) in input order and the counts (input_lines, pairs, FILTERS)."""
        counts = {"input_lines": len(chunk), "pairs": 0, **{k: 0 for k in FILTERS}}
        texts = [one_line(line).strip() for line in chunk]
        todo = [i for i, t in enumerate(texts) if t]
        counts["empty_input"] = len(chunk) - len(todo)
        lengths: dict[int, int] = {}  # source tokens (the first member's tokenizer)
        too_long: set[int] = set()
        for tok, room in self.limits:
            for i, ids in zip(todo, tok.encode([texts[i] for i in todo])):
                lengths.setdefault(i, len(ids))
                if len(ids) > room:
                    too_long.add(i)
        counts["too_long_input"] = len(too_long)
        todo = [i for i in todo if i not in too_long]
        search = dict(self.search)
        if self.job.method == "sample":
            search["seed"] = chunk_seed(self.job.seed, index)
        results = self.translator.translate_nbest([texts[i] for i in todo], batch_tokens=self.job.batch_tokens,
                                                  first_line=first_line, warn=warn, tgt_lang=self.job.tgt_lang or None,
                                                  **search)
        rng = np.random.default_rng([self.job.seed, index])
        pairs = []
        for i, nbest in zip(todo, results):
            text, n_out = (one_line(nbest[0].text).strip(), len(nbest[0].token_ids)) if nbest else ("", 0)
            reason = self.degenerate(texts[i], lengths[i], text, n_out)
            if reason is not None:
                counts[reason] += 1
                continue
            if self.job.direction == "distill":
                pairs.append((texts[i], text))
            else:
                noised = noise_line(text, rng, self.job.noise) if self.job.method == "noised-beam" else text
                pairs.append((noised, texts[i]))
        counts["pairs"] = len(pairs)
        return pairs, counts

    def degenerate(self, text: str, n_in: int, output: str, n_out: int) -> str | None:
        """Why a translation (output, n_out tokens) of `text` (n_in tokens) is dropped; None: kept."""
        if not output:
            return "empty_output"
        if " ".join(output.split()) == " ".join(text.split()):
            return "copy"
        longer, shorter = max(n_in, n_out), min(n_in, n_out)
        if longer > RATIO_EXEMPT_LEN and longer > self.job.max_ratio * max(shorter, 1):
            return "bad_ratio"
        return None

    def _finish(self, state: CorpusState) -> dict[str, Any]:
        """Move the partial files to their final names, write corpus.yaml and summary.json, drop the state."""
        for name in (SRC_FILE, TGT_FILE):
            if self.path(name + PARTIAL).exists():
                os.replace(self.path(name + PARTIAL), self.path(name))
        counts = state["counts"]
        entry = self.corpus_entry()
        summary = {"finished": True, "direction": self.job.direction, "method": self.job.method,
                   "input": str(self.job.input), "counts": counts, "corpus": entry, "settings": self.settings}
        write_text_atomic(self.path(CORPUS_FILE), corpus_yaml(entry))
        write_json_atomic(self.path(SUMMARY_FILE), summary)
        self.path(STATE_FILE).unlink(missing_ok=True)
        dropped = ", ".join(f"{counts[k]:,} {k}" for k in FILTERS if counts[k]) or "none"
        what = "back-translation" if self.job.direction == "back" else "distillation"
        log.info("%s: %s pairs from %s input lines (dropped: %s) in %s", what, f"{counts['pairs']:,}",
                 f"{counts['input_lines']:,}", dropped, self.out)
        return summary

    def corpus_entry(self) -> dict[str, str | float]:
        """The `data.corpora` entry of the finished files (absolute paths)."""
        entry: dict[str, str | float] = {"train_src": str(self.path(SRC_FILE).resolve()),
                                 "train_tgt": str(self.path(TGT_FILE).resolve())}
        corpus = self.job.corpus
        languages = {"src_lang": corpus.get("src_lang"), "tgt_lang": corpus.get("tgt_lang")}
        entry.update({key: lang for key, lang in languages.items() if lang})
        entry["weight"] = float(corpus.get("weight", 1.0))
        tag = corpus.get("tag")
        if tag:
            entry["tag"] = tag
        return entry


def corpus_yaml(entry: Mapping[str, object]) -> str:
    """corpus.yaml: the entry as a one-item `data.corpora` list, with how to use it."""
    import yaml

    head = ("# The data.corpora entry of this corpus: add it to a training config's data.corpora list, beside\n"
            "# the real pairs (docs/back-translation.md). Keys: train_src, train_tgt, src_lang, tgt_lang, weight, tag.\n")
    return head + yaml.safe_dump({"data": {"corpora": [entry]}}, sort_keys=False, allow_unicode=True)


def translate_corpus(translator: Translator, job: CorpusJob, models: str, progress: bool = False,
                     total: int | None = None, warn: Warn | None = None) -> dict[str, Any]:
    """Run `job` with `translator` (see `CorpusTranslation.run`); returns the summary."""
    return CorpusTranslation(translator, job, models).run(progress=progress, total=total, warn=warn)
