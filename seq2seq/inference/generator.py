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

import dataclasses
import logging
import sys
from typing import Any, Callable

from torch import Tensor

from seq2seq.inference.audio_windows import Window, join_texts, split_windows, word_times
from seq2seq.inference.results import Segment, Translation
from seq2seq.inference.sources import COMMANDS, is_text
from seq2seq.inference.translator import Translator
from seq2seq.model.encoders.base import SourceError, get_modality
from seq2seq.storage.model_dir import LoadedModel

log = logging.getLogger(__name__)


class Generator(Translator):
    """Generates text from image/audio files with a loaded model directory.

    precision: as for `Translator` ("fp32" with the decoder pre-packed on CPU, "bf16", "int8").
    """

    kind: str | None = None  # the encoder type a subclass insists on ("image", "audio")

    def _check_model(self, loaded: LoadedModel) -> None:
        encoder_cfg = loaded.config.model.encoder
        kind = encoder_cfg.source_kind  # `type: hf` reads images or audio, after its backbone
        if self.kind is not None and kind != self.kind:
            raise SourceError(f"{loaded.path} is a model for {kind} sources, not {self.kind}: "
                              f"use {COMMANDS.get(kind, 'the API of its modality')}")
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
    """A `Generator` for audio models: `transcribe(paths, **options) -> texts`, recordings of any length.

    A recording longer than `max_window_seconds` is cut into windows at its pauses
    (`seq2seq.inference.audio_windows`: energy-based, the longest pauses first; fixed windows with
    1 s of overlap where there is no pause), the windows of all files are searched together in
    token-bounded batches, and each file's text is its windows' texts joined in order. Its n-best
    list is then that one joined hypothesis: score, logprob and tokens are the windows' summed and
    concatenated (no attention). A recording no longer than the window is decoded whole, exactly as
    by a `Generator`. `model.encoder.max_seconds`, when the model sets it, is the default window
    (and refuses nothing here); otherwise `DEFAULT_WINDOW_SECONDS`: the trainer does not record
    how long its utterances were, so pass the longest training utterance, or a little more, for a
    model trained on short ones. Models whose files are read by another processor than the audio
    encoder's `AudioProcessor` (`type: hf`) decode each file whole, as a `Generator` does.
    """

    kind = "audio"
    DEFAULT_WINDOW_SECONDS = 20.0
    GROUP_SECONDS = 3600.0  # audio held in memory at a time: files are read and decoded in groups of this

    def __init__(self, loaded: LoadedModel, precision: str = "fp32", _owns_model: bool = False) -> None:
        from seq2seq.model.encoders.audio import AudioProcessor

        super().__init__(loaded, precision, _owns_model=_owns_model)
        self.windows = isinstance(self.processor, AudioProcessor)  # else each file is decoded whole
        enc = self.processor.cfg if self.windows else None
        self.max_window_seconds = float(getattr(enc, "max_seconds", None) or self.DEFAULT_WINDOW_SECONDS)
        if enc is not None and enc.max_seconds is not None:  # a longer file is split into windows, not refused
            self.reader.processor = self.processor = AudioProcessor(dataclasses.replace(enc, max_seconds=None))
        self.sample_rate: int = getattr(enc, "sample_rate", 0)

    def transcribe(self, paths: list[str], **options: Any) -> list[str]:
        """Best text of each file, in input order; options: search options, max_window_seconds."""
        return self(paths, **options)

    def segments(self, paths: list[str], **options: Any) -> list[list[Segment]]:
        """Each file's windows in order, with start/end seconds, text and approximate word times
        ([] for a file skipped with skip_bad=True); options as for `transcribe`."""
        return [nbest[0].segments or [] if nbest else [] for nbest in
                self.translate_nbest(paths, timestamps=True, **options)]

    def translate_nbest(  # type: ignore[override]
        self,
        texts: list[str],
        batch_tokens: int = 4000,
        first_line: int = 1,
        warn: Callable[[str], None] | None = None,
        *,
        skip_bad: bool = False,
        max_window_seconds: float | None = None,
        timestamps: bool = False,
        progress: bool = False,
        **options: Any,
    ) -> list[list[Translation]]:
        """n-best hypotheses of each audio file (`texts`: paths), long ones in windows (see the class).

        max_window_seconds: the longest window (default: `self.max_window_seconds`). timestamps:
        each hypothesis carries `segments` (its windows' times and texts). progress: a bar on stderr
        counting windows. The rest as for `Translator.translate_nbest`.
        """
        if not self.windows:
            return super().translate_nbest(texts, batch_tokens, first_line, warn, skip_bad=skip_bad, **options)
        cfg = self.search_config(**options)
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
        window = self.max_window_seconds if max_window_seconds is None else float(max_window_seconds)
        if not window > 0:
            raise ValueError(f"max_window_seconds must be positive, got {max_window_seconds}")
        from tqdm import tqdm

        results: list[list[Translation]] = [[] for _ in texts]
        group: dict[int, tuple[Tensor, list[Window]]] = {}
        with tqdm(total=0, unit=" windows", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
            for i, path in enumerate(texts):
                wave = self.reader.prepare([path], first_line + i, warn or log.warning, skip_bad).get(0)
                if wave is None:
                    continue
                group[i] = wave, split_windows(wave.numpy(), self.sample_rate, window)
                bar.total += len(group[i][1])
                bar.refresh()
                if sum(w.numel() for w, _ in group.values()) >= self.GROUP_SECONDS * self.sample_rate:
                    self._transcribe_group(group, texts, cfg, batch_tokens, timestamps, bar.update, results)
                    group = {}
            self._transcribe_group(group, texts, cfg, batch_tokens, timestamps, bar.update, results)
        return results

    def _transcribe_group(self, group: dict[int, tuple[Tensor, list[Window]]], paths: list[str], cfg: Any,
                          batch_tokens: int, timestamps: bool, on_batch: Callable[[int], Any],
                          results: list[list[Translation]]) -> None:
        """Search every window of the files in `group` ({index: (wave [T], windows)}) in shared
        batches; results[index] = the file's n-best list."""
        examples = {(i, k): wave[w.start:w.end] for i, (wave, windows) in group.items() for k, w in enumerate(windows)}
        done = self._search(examples, cfg, batch_tokens, lambda key: {"source": str(paths[key[0]])}, on_batch)
        rate = self.sample_rate
        for i, (wave, windows) in group.items():
            nbests = [done[(i, k)] for k in range(len(windows))]
            whole = len(windows) == 1 and windows[0].start == 0 and windows[0].end == wave.numel()
            hyps = nbests[0] if whole else [self._joined(str(paths[i]), windows, [n[0] for n in nbests])]
            if timestamps:
                for h in hyps:
                    texts = [h.text] if whole else [n[0].text for n in nbests]
                    h.segments = [Segment(w.start / rate, w.end / rate, t,
                                          word_times(t, w.speech_start / rate, w.speech_end / rate))
                                  for w, t in zip(windows, texts)]
            results[i] = hyps

    @staticmethod
    def _joined(source: str, windows: list[Window], best: list[Translation]) -> Translation:
        """One hypothesis for a file from its windows' best ones (no windows: an empty text)."""
        return Translation(
            text=join_texts([h.text for h in best], windows),
            score=sum(h.score for h in best), logprob=sum(h.logprob for h in best),
            token_ids=[t for h in best for t in h.token_ids], pieces=[p for h in best for p in h.pieces],
            token_logprobs=[x for h in best for x in h.token_logprobs], source=source)
