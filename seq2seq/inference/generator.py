"""The Python API for models whose source is a file: captioning (image) and speech-to-text (audio).

    from seq2seq import Captioner, Transcriber
    Captioner.load("runs/captions").caption(["a.png", "b.png"], beam=5)   # -> ["a red circle ...", ...]
    Transcriber.load("runs/digits").transcribe(["one.wav"])                # -> ["three one four"]
    Generator.load(model_dir).generate(paths, nbest=3, attention_layer=-1) # -> n-best `Translation`s

A `Generator` is a `Translator` (the same generation loop, search options and results) that insists
on a file-reading model: each file is read by the modality's `SourceProcessor` with the settings
saved in the model directory (the same preprocessing as in training). A file that cannot be read
raises `SourceError` naming it, or with `skip_bad=True` gives an empty n-best list and a warning, so
that every input still has exactly one result. Each result's `source` is its file.
"""

from __future__ import annotations

from typing import Any, Callable

from seq2seq.inference.results import Translation
from seq2seq.inference.sources import is_text
from seq2seq.inference.translator import Translator
from seq2seq.model.encoders.base import SourceError, get_modality
from seq2seq.storage.model_dir import LoadedModel

COMMANDS = {"text": "`seq2seq translate` (Translator)", "image": "`seq2seq caption` (Captioner)",
            "audio": "`seq2seq transcribe` (Transcriber)"}


class Generator(Translator):
    """Generates text from image/audio files with a loaded model directory.

    precision: as for `Translator` ("fp32" with the decoder pre-packed on CPU, "bf16", "int8").
    """

    kind: str | None = None  # the encoder type a subclass insists on ("image", "audio")

    def _check_model(self, loaded: LoadedModel) -> None:
        encoder_cfg = loaded.config.model.encoder
        if self.kind is not None and encoder_cfg.type != self.kind:
            raise SourceError(f"{loaded.path} is a model for {encoder_cfg.type} sources, not {self.kind}: "
                              f"use {COMMANDS.get(encoder_cfg.type, 'the API of its modality')}")
        if is_text(encoder_cfg.type):
            raise SourceError(f"{loaded.path} is a model for {encoder_cfg.type} sources: use {COMMANDS['text']}")

    def __init__(self, loaded: LoadedModel, precision: str = "fp32", _owns_model: bool = False) -> None:
        super().__init__(loaded, precision, _owns_model=_owns_model)
        self.modality = get_modality(loaded.config.model.encoder.type)
        self.processor = self.reader.processor
        self.tokenizer = loaded.tokenizers.tgt

    def generate(self, paths: list[str], batch_tokens: int = 4000, skip_bad: bool = False,
                 warn: Callable[[str], None] | None = None, **options: Any) -> list[list[Translation]]:
        """n-best hypotheses (best first) for each file, in input order (`translate_nbest`)."""
        return self.translate_nbest(paths, batch_tokens, warn=warn, skip_bad=skip_bad, **options)

    def __call__(self, paths: list[str], **options: Any) -> list[str]:
        """Best text for each file, in input order ("" for a skipped file)."""
        return self.translate(paths, **options)

    def plot_attention(self, generation: Translation, png_path: str) -> None:
        """Draw `generation`'s cross-attention (generated with attention_layer set) over its source."""
        if self.modality.draw_attention is None:
            raise ValueError(f"drawing attention is not supported for {self.modality.name} sources")
        if generation.attention is None:
            raise ValueError("this generation has no attention: generate with attention_layer=-1")
        example = self.processor.load(generation.source)
        words = generation.pieces + ["</s>"]
        from seq2seq.report.plots import save_figure

        encoder_cfg = self.loaded.config.model.encoder
        save_figure(self.modality.draw_attention(encoder_cfg, example, generation.attention, words), png_path)


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
