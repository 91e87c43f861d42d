"""A run's tokenizers, trained once per data and settings: reused from the run's directory or the shared
cache when trained there with the same settings on the same data, else trained and cached
(`train_or_reuse_tokenizers`, its entries `tokenizer-<key>` of `seq2seq.data.shared_cache`).
"""

from __future__ import annotations

import ctypes
import json
import logging
import time
from pathlib import Path
from typing import Callable, Iterable

from seq2seq.config import TokenizerConfig, to_dict
from seq2seq.text.tokenizer import TokenizerError, TokenizerPair

from seq2seq.data.readers import _hash
from seq2seq.data.shards import sample_sentences
from seq2seq.data.shared_cache import CACHE_VERSION, publish, temporary_dir

logger = logging.getLogger("seq2seq.data")

TOKENIZER_META = "tokenizer.meta.json"


def train_or_reuse_tokenizers(tok_cfg: TokenizerConfig, out_dir: Path, cache_root: Path, train_fp: str,
                              lowercase: bool, texts: Callable[[tuple[int, ...]], Iterable[list[str]]],
                              reserved: list[str] | None = None,
                              tgt_reserved: list[str] | None = None) -> TokenizerPair:
    """Reuse the tokenizer in out_dir, or in the shared cache, if it was trained with these settings on
    this data, else train (with `reserved` source pieces: language and corpus tags; `tgt_reserved`
    target pieces: language tags on the decoder) on `texts((0,))` (sources) and `texts((1,))` (targets),
    or a joint one on `texts((0, 1))`, streamed as lists of sentences, and cache it."""
    meta = {"version": CACHE_VERSION, "tokenizer": to_dict(tok_cfg), "train_data": train_fp, "lowercase": lowercase}
    if reserved:
        meta["reserved"] = list(reserved)
    if tgt_reserved:
        meta["tgt_reserved"] = list(tgt_reserved)
    meta = json.loads(json.dumps(meta))
    meta_path = out_dir / TOKENIZER_META
    if tok_cfg.src_model is not None:
        pair = TokenizerPair.train(tok_cfg, [], [], out_dir)
        meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return pair
    shared = cache_root / f"tokenizer-{_hash(meta)[:20]}"
    for directory in (out_dir, shared):
        cached = _cached_tokenizer(directory, meta, tok_cfg.joint)
        if cached is not None:
            logger.info("reusing tokenizer %s in %s", "/".join(cached.files), directory)
            if directory != out_dir:
                cached.save(out_dir)
                meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            return cached
    t0 = time.perf_counter()
    # At most input_sentence_size sentences (of both sides together, for a joint tokenizer) train it, as
    # SentencePiece would sample them; drawn here, in one pass, so that its retries reuse them.
    size = tok_cfg.input_sentence_size
    if tok_cfg.joint:
        src_texts = sample_sentences(texts((0, 1)), size)
        tgt_texts: list[str] = []
    else:
        src_texts, tgt_texts = sample_sentences(texts((0,)), size), sample_sentences(texts((1,)), size)
    logger.info("training the tokenizer on %s sentences (%.1fs to read them)", f"{len(src_texts) + len(tgt_texts):,}",
                time.perf_counter() - t0)
    pair = TokenizerPair.train(tok_cfg, src_texts, tgt_texts, out_dir, reserved=reserved or (),
                               tgt_reserved=tgt_reserved or ())
    del src_texts, tgt_texts
    _return_freed_memory()
    logger.info("trained %s tokenizer (vocab %d/%d) in %.1fs", "joint" if pair.joint else "separate",
                pair.src.vocab_size, pair.tgt.vocab_size, time.perf_counter() - t0)
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tmp = temporary_dir(shared)
    pair.save(tmp)
    (tmp / TOKENIZER_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    publish(tmp, shared, TOKENIZER_META)
    return pair


def _return_freed_memory() -> None:
    """Hand the heap that SentencePiece's training (~1.4 GB a million sentences) freed back to the
    system, which glibc would keep: training's own peak then does not stack on it."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _cached_tokenizer(directory: Path, meta: dict, joint: bool) -> TokenizerPair | None:
    """The tokenizer saved in `directory` if its meta is `meta`, else None."""
    meta_path = directory / TOKENIZER_META
    if not meta_path.is_file():
        return None
    try:
        pair = TokenizerPair.load(directory) if json.loads(meta_path.read_text(encoding="utf-8")) == meta else None
    except (ValueError, TokenizerError):
        return None
    return pair if pair is not None and pair.joint == joint else None
