"""Training data: reading, tokenizing, cleaning, caching, batching, and feeding the training loop.

    readers          two aligned text files, a .tsv/.csv/.jsonl table or a Hugging Face dataset
                     -> chunks of (sources, targets), streamed (`parallel_chunks`, `table_chunks`), or a
                     `datasets.Dataset` with string columns "src", "tgt"; `DataError` names the
                     file and the 1-based line or the column
    cleaning         `keep_mask` (drop empty, over-long and badly length-ratioed training pairs,
                     counted), `truncate_ids` (validation: keep every pair, cut to max_len)
    filters          the rule filters of `seq2seq clean` over raw text pairs (duplicates, ratios, HTML,
                     numbers, copies, script, language, misalignments), streamed in worker processes
    shards           chunks -> tokenized, cleaned, memory-mapped Arrow shards, in parallel processes;
                     `ShardedRows` reads a batch's rows from them
    splits           where each corpus and validation set comes from (`Split`, tagged as a `Source`)
    shared_cache     the on-disk cache every run shares: its root, entries built aside and renamed
                     into place
    tokenizer_cache  the run's tokenizers, reused when trained on the same data, else trained and cached
    cache            `prepare(cfg, tok_cfg, out_dir)`: all of the above, plus training or reusing the
                     tokenizer, cached on disk (shared by runs) under a key of the data, tokenizer and
                     settings; several corpora (data.corpora) each tagged and cleaned, then concatenated
                     (`CorpusPart`)
    batching         `Batch`, collation into padded tensors, `TokenBatchSampler` (token-bounded,
                     length-bucketed), `length_batches`
    sampling         subword regularization: each training pair segmented anew every epoch
    modifiers        training-time text modifiers: a share of the pairs upper-cased, title-cased, given typos or merged
    mixing           temperature sampling over several corpora, epoch by epoch (`CorpusMix`, `MixedBatches`)
    terminology      training sources annotated with words of their own targets (`data.terminology`)
    prefetch         training steps' batches made ahead on a background thread (`training_steps`, `Prefetcher`)
    media            image and audio training data: tables of (file, text) rows -> batches (`prepare_media`)
    synthetic        the seeded English -> German corpus of `seq2seq quickstart`
    dcce             dual conditional cross-entropy: the formula and `DualCrossEntropyFilter`

Sources (one per split, see `DataConfig`):
  * two aligned plain-text files, one sentence per line, optionally gzipped;
  * one table: `.tsv`, `.csv` or `.jsonl` (optionally gzipped) with source/target columns;
  * a Hugging Face dataset via `datasets.load_dataset` (needs network access the first time,
    then reads the local Hugging Face cache). Rows may hold the two columns directly, or be
    translation-style, `{"translation": {"en": ..., "de": ...}}`, with the language codes
    given as `src_column` / `tgt_column`.

`prepare` gives each split the columns src_ids, tgt_ids, src_len, tgt_len (see `cleaning`) and
src, tgt (the optionally lowercased texts).
"""

from seq2seq.config import DataConfig

from seq2seq.data.cache import CorpusPart, PreparedData, prepare
from seq2seq.data.shared_cache import CACHE_VERSION
from seq2seq.data.tokenizer_cache import TOKENIZER_META
from seq2seq.data.cleaning import FEATURES, RATIO_EXEMPT_LEN, CleaningReport, keep_mask, truncate_ids
from seq2seq.data.readers import (
    DataError, fingerprint,
    hf_pairs, load_hf, read_lines, read_parallel, read_table, read_text,
)

__all__ = [
    "CACHE_VERSION", "FEATURES", "RATIO_EXEMPT_LEN", "TOKENIZER_META", "CleaningReport", "CorpusPart", "DataConfig",
    "DataError",
    "PreparedData", "fingerprint", "hf_pairs", "keep_mask", "load_hf", "prepare", "read_lines", "read_parallel",
    "read_table", "read_text", "truncate_ids",
]
