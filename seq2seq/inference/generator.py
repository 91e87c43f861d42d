"""The Python API for models whose source is a file: captioning (image) and speech-to-text (audio).

    from seq2seq import Captioner, Transcriber
    Captioner.load("runs/captions").caption(["a.png", "b.png"], beam=5)   # -> ["a red circle ...", ...]
    Transcriber.load("runs/digits").transcribe(["one.wav"])                # -> ["three one four"]
    Generator.load(model_dir).generate(paths, nbest=3, attention_layer=-1) # -> n-best `Generation`s

Each file is read by the modality's `SourceProcessor` with the settings saved in the model
directory (the same preprocessing as in training); files are sorted by source length, grouped
into batches of at most `batch_tokens` encoder positions, searched with the shared search module
and returned in input order. Search options are those of `Translator.search_config` (beam, nbest,
lenpen, max_len_a/b, greedy, sample, ...); unset options keep the model's `decoding` config.
A file that cannot be read raises `SourceError` naming it, or with `skip_bad=True` gives an
empty n-best list and a warning, so that every input still has exactly one result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from seq2seq.data.batching import length_batches, to_device
from seq2seq.accel.device import autocast_context
from seq2seq.model.encoders.base import Encoder, SourceError, get_modality
from seq2seq.storage.model_dir import LoadedModel, load_model_dir
from seq2seq.inference.search import Hypothesis, search
from seq2seq.inference.translator import Translator

log = logging.getLogger(__name__)

COMMANDS = {"text": "`seq2seq translate` (Translator)", "image": "`seq2seq caption` (Captioner)",
            "audio": "`seq2seq transcribe` (Transcriber)"}


@dataclass
class Generation:
    """One hypothesis for one source file."""

    source: str  # the file
    text: str
    score: float  # length-penalised log-probability (see seq2seq.inference.search)
    logprob: float
    token_ids: list[int]
    pieces: list[str]  # target subword pieces (without EOS)
    token_logprobs: list[float]  # per target token, EOS included
    attention: list[list[float]] | None = None  # [target pieces + EOS, memory positions]

    def to_json(self) -> dict[str, Any]:
        out = {"source": self.source, "text": self.text, "score": round(self.score, 4),
               "logprob": round(self.logprob, 4), "tokens": self.pieces}
        if self.attention is not None:
            out["attention"] = [[round(w, 4) for w in row] for row in self.attention]
        return out


class Generator:
    """Generates text from image/audio files with a loaded model directory.

    precision: as for `Translator` ("fp32" with the decoder pre-packed on CPU, "bf16", "int8").
    """

    kind: str | None = None  # the encoder type a subclass insists on ("image", "audio")

    def __init__(self, loaded: LoadedModel, precision: str = "fp32", _owns_model: bool = False) -> None:
        encoder_cfg = loaded.config.model.encoder
        if self.kind is not None and encoder_cfg.type != self.kind:
            raise SourceError(f"{loaded.path} is a model for {encoder_cfg.type} sources, not {self.kind}: "
                              f"use {COMMANDS.get(encoder_cfg.type, 'the API of its modality')}")
        self.modality = get_modality(encoder_cfg.type)
        if self.modality.processor is None:
            raise SourceError(f"{loaded.path} is a model for {encoder_cfg.type} sources: use {COMMANDS['text']}")
        self.processor = self.modality.processor(encoder_cfg)
        # The Translator does the precision setup (packing, bf16, int8) and checks search options.
        self._translator = Translator(loaded, precision, _owns_model=_owns_model)
        self.loaded, self.model, self.device = loaded, self._translator.model, self._translator.device
        self.precision = precision
        self.tokenizer = loaded.tokenizers.tgt

    @classmethod
    def load(cls, model_dir: str | Path, device: str = "auto", precision: str = "fp32",
             weights: str | Path | None = None, encoder: Encoder | None = None) -> Generator:
        """Load a model directory; `weights` replaces its model.safetensors (e.g. averaged
        checkpoints); `encoder` is the injected encoder instance it was trained with, if any."""
        if precision == "int8" and device == "auto":
            device = "cpu"
        loaded = load_model_dir(model_dir, device=device, weights=weights, encoder=encoder)
        return cls(loaded, precision, _owns_model=True)

    def search_config(self, **options: Any) -> Any:
        """The model's decoding defaults with `options` applied; ValueError for bad options."""
        return self._translator.search_config(**options)

    def generate(self, paths: list[str], batch_tokens: int = 4000, skip_bad: bool = False,
                 warn: Callable[[str], None] | None = None, **options: Any) -> list[list[Generation]]:
        """n-best hypotheses (best first) for each file, in input order."""
        cfg = self.search_config(**options)
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
        warn = warn or log.warning
        examples: dict[int, Any] = {}
        for i, path in enumerate(paths):
            try:
                examples[i] = self.processor.load(str(path))
            except SourceError as e:
                if not skip_bad:
                    raise
                warn(f"{e}; its output is empty")
        results: list[list[Generation]] = [[] for _ in paths]
        lengths = {i: self.processor.length(x) for i, x in examples.items()}
        autocast = "bf16" if self.precision == "bf16" else "fp32"
        for batch in length_batches(lengths, batch_tokens):
            src = to_device(self.processor.collate([examples[i] for i in batch]), self.device)
            with torch.inference_mode(), autocast_context(self.device, autocast):
                hyps = search(self.model, src, cfg)
            for i, nbest in zip(batch, hyps):
                results[i] = [self._generation(str(paths[i]), h) for h in nbest]
        return results

    def __call__(self, paths: list[str], **options: Any) -> list[str]:
        """Best text for each file, in input order ("" for a skipped file)."""
        return [nbest[0].text if nbest else "" for nbest in self.generate(paths, **options)]

    def plot_attention(self, generation: Generation, png_path: str) -> None:
        """Draw `generation`'s cross-attention (generated with attention_layer set) over its source."""
        if self.modality.plot_attention is None:
            raise ValueError(f"drawing attention is not supported for {self.modality.name} sources")
        if generation.attention is None:
            raise ValueError("this generation has no attention: generate with attention_layer=-1")
        example = self.processor.load(generation.source)
        words = generation.pieces + ["</s>"]
        self.modality.plot_attention(self.loaded.config.model.encoder, example, generation.attention, words, png_path)

    def _generation(self, path: str, h: Hypothesis) -> Generation:
        tok = self.tokenizer
        return Generation(
            source=path,
            text=tok.decode([h.tokens])[0],
            score=float(h.score),
            logprob=float(h.logprob),
            token_ids=list(h.tokens),
            pieces=[tok.id_to_piece(t) for t in h.tokens],
            token_logprobs=[float(x) for x in h.token_logprobs],
            attention=None if h.attention is None else h.attention.float().tolist(),
        )


class Captioner(Generator):
    """A `Generator` for image models: `caption(paths, **options) -> texts`."""

    kind = "image"

    def caption(self, paths: list[str], **options: Any) -> list[str]:
        return self(paths, **options)


class Transcriber(Generator):
    """A `Generator` for audio models: `transcribe(paths, **options) -> texts`."""

    kind = "audio"

    def transcribe(self, paths: list[str], **options: Any) -> list[str]:
        return self(paths, **options)
