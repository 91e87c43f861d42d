"""An experiment's training pipeline: data -> model -> Trainer -> model directory.

    run_training(cfg): prepare data -> build model -> Trainer -> model directory

The root `Config` lives in `seq2seq.config.root`, and the model directory's layout, read and
written, in `seq2seq.storage.model_dir`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, cast

import torch

from seq2seq import __version__
from seq2seq.storage.model_dir import ModelDir
from seq2seq.training import distributed
from seq2seq.training import finetune
from seq2seq.training import adapter as adapter_run
from seq2seq.data.batching import Batch, IndexedRows, TokenBatchSampler, collate_text
from seq2seq.config import ConfigError, ModelConfig
from seq2seq.config.model_section import check_fits_in_memory
from seq2seq.data import prepare
from seq2seq.data.mixing import CorpusMix, MixedBatches
from seq2seq.data.filters.training import cleaned_data
from seq2seq.inference.scoring import register_model_filters
from seq2seq.data.modifiers import PairModifier
from seq2seq.data.shards import ShardedRows, pair_lengths
from seq2seq.data.sampling import ResegmentedBatches, SubwordSampler
from seq2seq.data.terminology import TermSampler, term_token_weights
from seq2seq.accel.device import choose_device
from seq2seq.model.encoders import Encoder, get_modality
from seq2seq.model.encoders.base import resolve_encoder_config, source_kind
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.config.root import Config, config_yaml
from seq2seq.data.media import collate_media, prepare_media, source_lengths
from seq2seq.text.languages import model_languages, reserved_pieces
from seq2seq.text.terminology import TERM, word_counts
from seq2seq.text.tokenizer import PAD_ID, UNK_ID, TokenizerPair
from seq2seq.training.trainer import Trainer, TrainResult, ValidData

if TYPE_CHECKING:
    import datasets

log = logging.getLogger(__name__)


@dataclass
class TrainingData:
    """What the trainer needs from the data, whatever the modality."""

    tokenizers: TokenizerPair
    sampler: TokenBatchSampler  # batches of training row indices
    collate: Callable[[list[int]], Batch]  # row indices -> Batch
    valid: ValidData | None
    fingerprint: str
    summary: str  # what cleaning kept and dropped
    n_train: int
    n_valid: int
    examples: list[object] = dataclasses.field(default_factory=list)  # image/audio: the training examples, loaded
    corpora: list[dict[str, object]] = dataclasses.field(default_factory=list)  # data.corpora: each one's share


class RunResult(TrainResult):
    """What `run_training` returns: the trainer's result and the model directory."""

    out_dir: str


def valid_batches(dataset: datasets.Dataset, max_tokens: int, multiple: int = 1) -> list[Batch]:
    """Validation batches in length order (fixed across validations)."""
    sampler = TokenBatchSampler(list(dataset["src_len"]), list(dataset["tgt_len"]), max_tokens=max_tokens,
                                shuffle=False, seed=0, multiple=multiple)
    rows = IndexedRows(dataset)
    return [collate_text(rows.__getitems__(idx), multiple=multiple) for idx in sampler]


def text_training_data(cfg: Config, out_dir: Path) -> TrainingData:
    """Parallel text: tokenized, cleaned and cached by `seq2seq.data.prepare`; several corpora
    (data.corpora) sampled by temperature each epoch (`seq2seq.data.mixing`)."""
    data_cfg = cfg.data
    if cfg.clean is not None:  # the corpora filtered first (cached): seq2seq.data.filters.training
        register_model_filters()
        data_cfg = cleaned_data(cfg.data, cfg.clean, workers=min(2, os.cpu_count() or 1))
    prepared = prepare(data_cfg, cfg.tokenizer, out_dir)
    tok, train = prepared.tokenizers, prepared.train
    src_lengths, tgt_lengths = pair_lengths(train)  # from the memory-mapped shards, like every batch's rows
    max_tokens, seed, multiple = cfg.training.max_tokens, cfg.training.seed, cfg.training.shape_multiple
    segmenter = None
    terms = cfg.data.terminology
    modifiers = cfg.data.modifiers
    if cfg.data.subword_alpha is not None or (terms.on and terms.resample) or modifiers.on:
        # subword regularization, terms drawn anew or training-time modifiers: every epoch segmented,
        # annotated or modified anew (in memory)
        prefixes = tgt_prefixes = None
        if any(part.prefix_ids for part in prepared.corpora):
            prefixes = [part.prefix_ids for part in prepared.corpora for _ in part.rows]
        if any(part.tgt_prefix_ids for part in prepared.corpora):
            tgt_prefixes = [part.tgt_prefix_ids for part in prepared.corpora for _ in part.rows]
        columns = train.select_columns(["src_ids", "tgt_ids"]).to_dict()
        sources, targets = train["src"][:], train["tgt"][:]
        sampler_of_terms = TermSampler(terms, word_counts(targets)) if terms.on and terms.resample else None
        modifier = None
        if modifiers.on:  # a pair is merged only with pairs of its own corpus (the same tags)
            sharp_s = "ẞ" if UNK_ID not in tok.tgt.encode(["ẞ"])[0] else "SS"  # upper-cased ß (rare in corpora)
            modifier = PairModifier(modifiers, sources, targets, seed=seed,
                                    sizes=[part.size for part in prepared.corpora] or None, sharp_s=sharp_s)
        segmenter = SubwordSampler(tok, sources, targets, columns["src_ids"], columns["tgt_ids"],
                                   cfg.data.subword_alpha, cfg.data.subword_nbest, cfg.data.max_len, seed=seed,
                                   prefixes=prefixes, tgt_prefixes=tgt_prefixes, terms=sampler_of_terms,
                                   modifier=modifier)
    mix = None
    if cfg.data.corpora:
        mix = CorpusMix([part.size for part in prepared.corpora], [part.weight for part in prepared.corpora],
                        cfg.data.sampling_temperature, seed=seed)
        sampler: TokenBatchSampler = MixedBatches(mix, src_lengths, tgt_lengths, max_tokens=max_tokens, seed=seed,
                                                  segmenter=segmenter, multiple=multiple)
    elif segmenter is None:
        sampler = TokenBatchSampler(src_lengths, tgt_lengths, max_tokens=max_tokens, shuffle=True, seed=seed,
                                    multiple=multiple)
    else:  # and batched by the epoch's sampled lengths
        sampler = ResegmentedBatches(segmenter, max_tokens=max_tokens, seed=seed, multiple=multiple)
    rows = ShardedRows(train) if segmenter is None else sampler.rows  # type: ignore[attr-defined]

    term_id = tok.src.piece_id(TERM) if terms.on and terms.loss_weight != 1.0 else None
    to_target = None if tok.joint else lambda i: tok.tgt.piece_id(tok.src.id_to_piece(i))

    def collate(indices: list[int]) -> Batch:
        src_ids, tgt_ids = rows(indices)
        batch = collate_text([{"src_ids": s, "tgt_ids": t, "index": i} for s, t, i in zip(src_ids, tgt_ids, indices)],
                             multiple=multiple)
        if term_id is not None:  # a term's tokens weigh data.terminology.loss_weight in the loss
            assert batch.target_positions is not None  # collate_text finds them
            batch.target_weights = term_token_weights(src_ids, batch.tgt_out, batch.target_positions, term_id,
                                                      terms.loss_weight, to_target)
        return batch

    valid = None
    if prepared.valid is not None and len(prepared.valid):
        valid = ValidData(
            batches=valid_batches(prepared.valid, cfg.training.max_tokens, multiple),
            references=[[t] for t in prepared.valid["tgt"]],
            detokenize=tok.tgt.decode,
            groups={part.name: part.rows for part in prepared.valid_sets} or None,
            forced=len(prepared.valid_sets[0].tgt_prefix_ids) if prepared.valid_sets else 0,  # one tag per set
        )
    n_valid = 0 if prepared.valid is None else len(prepared.valid)
    corpora: list[dict[str, object]] = []
    if mix is not None:
        counts = mix.counts(0)
        for i, part in enumerate(prepared.corpora):
            corpora.append({"name": part.name, "src_lang": part.src_lang, "tgt_lang": part.tgt_lang,
                            "tag": part.tag, "prefix": part.prefix, "tgt_prefix": part.tgt_prefix,
                            "weight": part.weight, "pairs": part.size,
                            "probability": round(float(mix.probabilities[i]), 6), "rows_per_epoch": int(counts[i])})
            log.info("corpus %d (%s): %s pairs, weight %g, sampled with p=%.3f at temperature %g: %s rows an "
                     "epoch (%.2fx its size)%s%s", i, part.name, f"{part.size:,}", part.weight, mix.probabilities[i],
                     mix.temperature, f"{int(counts[i]):,}", counts[i] / part.size,
                     f"; sources start with {' '.join(part.prefix)}" if part.prefix else "",
                     f"; targets start with {' '.join(part.tgt_prefix)}" if part.tgt_prefix else "")
    return TrainingData(tok, sampler, collate, valid, prepared.fingerprint, prepared.report.summary(), len(train),
                        n_valid, corpora=corpora)


def media_training_data(cfg: Config, out_dir: Path) -> TrainingData:
    """Image or audio files with their texts (see `seq2seq.data.media`): every file loaded up front."""
    if cfg.data.subword_alpha is not None:
        raise ConfigError(f"data.subword_alpha (subword regularization) is for text sources; "
                          f"model.encoder.type {cfg.model.encoder.type!r} does not support it")
    if cfg.clean is not None:
        raise ConfigError(f"clean: filters parallel text; model.encoder.type {cfg.model.encoder.type!r} reads files")
    if cfg.data.modifiers.on:
        raise ConfigError(f"data.modifiers (training-time text modifiers) are for text sources; "
                          f"model.encoder.type {cfg.model.encoder.type!r} does not support them")
    processor = get_modality(cfg.model.encoder.type).processor(cfg.model.encoder)
    data = prepare_media(cfg.data, cfg.tokenizer, processor, out_dir)
    train, valid_split = data.train, data.valid
    tgt_lens = [len(t) + 1 for t in train.tgt_ids]
    multiple = cfg.training.shape_multiple  # (the target's length; a source's shape is its processor's)
    sampler = TokenBatchSampler(source_lengths(train, processor), tgt_lens, max_tokens=cfg.training.max_tokens,
                                shuffle=True, seed=cfg.training.seed, multiple=multiple)
    valid = None
    if valid_split is not None:
        order = TokenBatchSampler(source_lengths(valid_split, processor), [len(t) + 1 for t in valid_split.tgt_ids],
                                  max_tokens=cfg.training.max_tokens, shuffle=False, seed=0, multiple=multiple)
        valid = ValidData(batches=[collate_media(valid_split, processor, idx, multiple=multiple) for idx in order],
                          references=data.valid_references, detokenize=data.tokenizers.tgt.decode)
    seed = cfg.training.seed

    def collate(indices: list[int]) -> Batch:  # augmented by (seed, epoch, row) where model.encoder.augment says
        return collate_media(train, processor, indices, epoch=sampler.epoch, seed=seed, multiple=multiple)

    return TrainingData(data.tokenizers, sampler, collate, valid, data.fingerprint, data.summary, len(train),
                        0 if valid_split is None else len(valid_split), list(train.examples.values()))


def run_training(cfg: Config, resume: bool = False, config_source: str | None = None,
                 encoder: Encoder | None = None, init_from: str | Path | None = None,
                 overwrite: bool = False) -> RunResult:
    """Prepare data, build the model and train it into cfg.training.output_dir.

    A directory that already holds a finished model (its weights, and no run to resume) is refused
    unless `overwrite` (`train --overwrite`): a finished model is never replaced unasked. A run in
    progress there is continued with `resume`, and refused without it.

    init_from: a model directory to fine-tune: its weights, tokenizer and model config, with a fresh
    optimizer and schedule (see `seq2seq.training.finetune`; cfg's model/tokenizer sections must fit it).

    encoder: an `Encoder` instance to use instead of the one model.encoder.type builds (e.g. a
    pretrained backbone); it keeps its weights. Pass the same kind of instance to
    `load_model_dir(..., encoder=...)` to load the result.

    Started by torchrun, every process runs this (see `seq2seq.training.distributed`): rank 0 prepares the
    data and tokenizer first, the others then reuse them; only rank 0 writes the model directory.

    A run that fails (bad data, an interrupt) before its first checkpoint leaves no output directory
    behind if it made it: nothing in it could be used or resumed.
    """
    started = distributed.init(choose_device(cfg.training.device).type, cfg.training.collective_timeout_s)
    out_dir = Path(cfg.training.output_dir)
    made_here = not out_dir.exists()
    failed = True
    try:
        result = _run_training(cfg, resume, config_source, encoder, init_from, overwrite)
        failed = False
        return result
    except BaseException:
        model_dir = ModelDir(out_dir)
        if made_here and distributed.is_main() and out_dir.is_dir() and model_dir.train_state() is None \
                and not model_dir.weights_path.exists():
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        if started:
            distributed.shutdown(clean=not failed)


def _run_training(cfg: Config, resume: bool, config_source: str | None, encoder: Encoder | None,
                  init_from: str | Path | None, overwrite: bool = False) -> RunResult:
    out_dir = Path(cfg.training.output_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"training.output_dir {out_dir} is a file; the model directory must be a directory")
    model_dir = ModelDir(out_dir)
    state_dir = model_dir.train_state()
    if state_dir is None and model_dir.weights_path.is_file() and not overwrite:
        raise ConfigError(
            f"{out_dir} already holds a trained model ({model_dir.WEIGHTS}); pass --overwrite to replace it, "
            f"or set training.output_dir (-o) to a new directory"
        )
    if state_dir is not None and not resume:
        raise ConfigError(
            f"{out_dir} already holds a training run; pass --resume to continue it, or set "
            f"training.output_dir to a new directory"
        )
    if resume and state_dir is None:
        log.warning("--resume: nothing to resume in %s, starting a new run", out_dir)
    cfg, parent = finetune.setup(cfg, init_from, out_dir, resume)  # fine-tuning: cfg takes the parent's model + tokenizer
    adapter_run.check_start(cfg, parent, out_dir, overwrite)
    cfg = resolved_encoder(cfg)
    check_fits_in_memory(cfg.model)
    out_dir.mkdir(parents=True, exist_ok=True)
    if distributed.is_main():
        for leftover in model_dir.discard_partial_writes():
            log.info("removed %s, left by a save that was interrupted", leftover)

    data = training_data(cfg, out_dir)
    pretrained = get_modality(cfg.model.encoder.type).pretrained
    source: Encoder | Callable[[ModelConfig], Encoder] | None = encoder
    if encoder is None and pretrained is not None and parent is None and state_dir is None:
        source = pretrained  # a fresh run starts from a pretrained backbone's weights
    cfg, model = build_model(cfg, data, source)
    if parent is not None:
        parent.init_weights(model)
    adapted = adapter_run.attach(cfg, model, parent, out_dir)  # training.adapter: LoRA updates only (seq2seq.adapters)

    if distributed.is_main():
        write_static_files(out_dir, cfg, data, model, config_source, parent)

    trainer = make_trainer(cfg, data, model, out_dir)
    if adapted is not None:
        adapter_run.own_checkpoints(trainer)
    log.info("resolved config:\n%s", config_yaml(cfg))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("model: %s parameters (%s trainable, %s frozen); device: %s; precision: %s; processes: %d",
             f"{model.num_parameters():,}", f"{trainable:,}", f"{model.num_parameters() - trainable:,}",
             trainer.device, trainer.precision, distributed.world_size())
    log.info(
        "data: %s train pairs, %s valid pairs; %s; %d batches/epoch, padding %.1f%%",
        f"{data.n_train:,}", f"{data.n_valid:,}", data.summary, len(data.sampler),
        100 * data.sampler.padding_ratio(),
    )
    if resume:
        trainer.resume()
    return RunResult(**trainer.train(), out_dir=str(out_dir))


def resolved_encoder(cfg: Config) -> Config:
    """cfg with model.encoder as a run starts with it (e.g. a pretrained backbone's config, read from
    name_or_path: `resolve_encoder_config`); cfg itself where there is nothing to resolve."""
    encoder = resolve_encoder_config(cfg.model.encoder)
    if encoder is cfg.model.encoder:
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, encoder=encoder))


def training_data(cfg: Config, out_dir: Path) -> TrainingData:
    """The run's data (`text_training_data` or `media_training_data`, by the encoder's kind of source);
    under torchrun rank 0 prepares it first, the others then read what it cached."""
    reads_files = source_kind(cfg.model.encoder).reads_files  # else sentences: text, or a custom text encoder
    with distributed.main_first():
        return media_training_data(cfg, out_dir) if reads_files else text_training_data(cfg, out_dir)


def build_model(cfg: Config, data: TrainingData, encoder: Encoder | Callable[[ModelConfig], Encoder] | None = None
                ) -> tuple[Config, Seq2SeqTransformer]:
    """cfg with its model section sized for `data`'s vocabularies, and the model it describes, initialised
    from training.seed; `encoder`: an instance to use, or a function of cfg.model that makes one."""
    tok = data.tokenizers
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, src_vocab_size=tok.src.vocab_size, tgt_vocab_size=tok.tgt.vocab_size, pad_id=PAD_ID
    ))
    check_fits_in_memory(cfg.model)  # with the vocabularies' real sizes
    if cfg.model.share_embeddings and not tok.joint:
        raise ConfigError("model.share_embeddings needs a joint tokenizer (tokenizer.joint: true)")
    torch.manual_seed(cfg.training.seed)
    if encoder is not None and not isinstance(encoder, torch.nn.Module):
        encoder = encoder(cfg.model)
    # a module passed in is the encoder (a function making one is told from it by not being a module)
    model = Seq2SeqTransformer(cfg.model, cast("Encoder | None", encoder))
    model.checkpoint_layers(cfg.training.gradient_checkpointing)
    fit = getattr(model.encoder, "fit_statistics", None)
    if fit is not None and data.examples:
        fit(data.examples)  # e.g. normalize: corpus; a parent's or resumed weights replace it
    return cfg, model


def make_trainer(cfg: Config, data: TrainingData, model: Seq2SeqTransformer, out_dir: Path) -> Trainer:
    """The run's Trainer: validation decodes greedily with cfg's decoding limits."""
    search_cfg = dataclasses.replace(cfg.decoding, strategy="greedy", beam=1, nbest=1)
    return Trainer(model, cfg.training, data.sampler, data.collate, data.valid, out_dir, search_cfg, pad_id=PAD_ID)


def build_run(cfg: Config) -> Trainer:
    """A Trainer for cfg as `run_training` builds it (data prepared or read from the cache, a fresh
    model), writing nothing but the tokenizer into training.output_dir: what the throughput probe times."""
    cfg = resolved_encoder(cfg)
    out_dir = Path(cfg.training.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = training_data(cfg, out_dir)
    cfg, model = build_model(cfg, data)
    return make_trainer(cfg, data, model, out_dir)


def write_static_files(out_dir: Path, cfg: Config, data: TrainingData, model: Seq2SeqTransformer,
                       config_source: str | None, parent: finetune.Parent | None) -> None:
    """The model directory's static part (config, tokenizer, metadata), written before training so
    that a checkpoint is always usable. What a recipe chose for earlier weights is forgotten."""
    model_dir = ModelDir(out_dir)
    model_dir.forget_choices()
    model_dir.write_config(cfg)
    data.tokenizers.save(out_dir)
    meta = model_dir.metadata()
    meta.update(
        {
            "seq2seq_version": __version__,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "config_source": config_source,
            "data_fingerprint": data.fingerprint,
            "cleaning": data.summary,
            "train_pairs": data.n_train,
            "valid_pairs": data.n_valid,
            "parameters": model.num_parameters(),
            # its pairs are single sentences unless data.modifiers.merge joins some: `translate` then splits a
            # line into its sentences and cases them by default (seq2seq.documents.line_translation.pipeline_defaults)
            "sentence_level": cfg.data.modifiers.merge == 0,
        }
    )
    if data.corpora:  # several corpora: their shares, and the tags the sources carry
        meta.update({"corpora": data.corpora, "sampling_temperature": cfg.data.sampling_temperature,
                     "languages": model_languages(cfg), "reserved_pieces": reserved_pieces(cfg)})
    else:
        for key in ("corpora", "sampling_temperature", "languages", "reserved_pieces"):
            meta.pop(key, None)  # left by an earlier run in this directory
    finetune.record(meta, parent, out_dir)
    model_dir.write_metadata(meta)
