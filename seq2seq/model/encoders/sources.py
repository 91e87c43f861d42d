"""What a model reads, whatever its modality: the `SourceKind` of its sources (TEXT, IMAGE, AUDIO, or a
plugin's own) and the `SourceProcessor` contract, the one owner of what follows from that kind:
probing a file and checking it against a caller's `SourceLimits`, preparing examples, their
lengths, collating batches, describing a source and what attention is drawn over (`AttentionView`).
What only some processors can do is a capability of its own, checked where it is used
(`PrefixedSource`: sources that can start with extra pieces, a language tag; `WindowedSource`:
recordings cut into windows at their pauses). A source that cannot be used is a `SourceError` naming
it (`SourceTooLarge` over the limits). Sentences are `seq2seq.model.encoders.text_processor`'s;
`seq2seq.model.encoders.base` maps `model.encoder.type` to a processor.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError, Warn

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.model.encoders.audio_windows import Window
    from seq2seq.text.tokenizer import Tokenizer

ExampleT = TypeVar("ExampleT")  # one source as a processor's `load`/`prepare` make it
BatchT = TypeVar("BatchT")  # what its `collate` makes of examples: the src its encoder's forward takes


class SourceError(Seq2SeqError, ValueError):
    """A source file that cannot be used (missing, unreadable, empty, not an image/audio file);
    the message names the path."""


@dataclass(frozen=True)
class SourceKind:
    """What one source is: the single answer to "what does this model read?".

    name: "text", "image", "audio" (or a plugin's own). noun: one source in messages ("sentence",
    "audio file"). reads_files: sources are file paths (False: sentences, tokenized by the model's
    source tokenizer; the data comes as parallel text). command / api: the CLI command and the Python
    class that decode it (what a message tells a user who picked the wrong one). The server answers
    sentences at /translate and files at /generate.
    """

    name: str
    noun: str
    reads_files: bool = True
    command: str = ""
    api: str = "Generator"

    def decoded_by(self) -> str:
        """"`seq2seq caption` (Captioner)": how messages name what decodes this kind."""
        return f"`seq2seq {self.command}` ({self.api})" if self.command else f"the {self.api} API"


TEXT = SourceKind("text", "sentence", reads_files=False, command="translate", api="Translator")
IMAGE = SourceKind("image", "image", command="caption", api="Captioner")
AUDIO = SourceKind("audio", "audio file", command="transcribe", api="Transcriber")
FILE = SourceKind("file", "source")  # a plugin's processor that names no kind of its own


@dataclass(frozen=True)
class SourceLimits:
    """The largest source a caller accepts (None: no limit), checked from the file's header before
    anything is decoded (`SourceProcessor.check_limits`; the server's --max-pixels and
    --max-audio-seconds)."""

    max_pixels: int | None = None
    max_seconds: float | None = None


@dataclass(frozen=True)
class SourceInfo:
    """What a file's header says about its size. size: (width, height) of an image; pixels: width x
    height, or a lower bound where the header is refused before its size is known (an image over
    Pillow's own limit); seconds: an audio file's duration."""

    size: tuple[int, int] | None = None
    pixels: int | None = None
    seconds: float | None = None


class SourceTooLarge(SourceError):
    """A source over a caller's `SourceLimits` (the server answers 413)."""


class SourceProcessor(Generic[ExampleT, BatchT]):
    """The contract of one kind of source: how a source is opened and probed, checked against limits,
    prepared into an example, measured, collated and described. Built from the encoder config alone
    (`Modality.processor`); every consumer (training data, `Translator` and `Generator`, the CTranslate2
    engine, the server, fine-tuning) calls these methods and never asks which class it has.

    kind: the `SourceKind` (TEXT processors read sentences, the others files).
    sample_rate: audio kinds only, the rate of their waveform examples (what `WindowedSource.split`
        counts in).
    max_seconds: the longest source `load` accepts (None: any); `without_length_limit()` lifts it
        for a caller that splits long sources itself (`Transcriber`).
    encoder_seconds: the longest example the encoder itself can read (a Whisper backbone's window;
        None: any): a caller that splits never makes longer windows.
    """

    kind: SourceKind = FILE
    sample_rate: int = 0
    max_seconds: float | None = None
    encoder_seconds: float | None = None

    # ---- one file --------------------------------------------------------------------------

    def probe(self, path: str) -> SourceInfo | None:
        """The file's size from its header, nothing decoded; None where the header says nothing this
        kind limits (or cannot be read: `load` then says what is wrong)."""
        return None

    def check_limits(self, path: str, limits: SourceLimits, name: str | None = None) -> None:
        """SourceTooLarge naming the file (`name`, default the path) when its header shows more pixels
        or seconds than `limits` allow; a file that cannot be probed passes (`load` refuses it)."""
        info = self.probe(path)
        if info is None:
            return
        name = name or path
        if limits.max_pixels is not None and info.pixels is not None and info.pixels > limits.max_pixels:
            most = f"the limit is {limits.max_pixels} ({limits.max_pixels / 1e6:g} megapixels)"
            if info.size is None:
                raise SourceTooLarge(f"{name} has more than {info.pixels - 1} pixels; {most}")
            width, height = info.size
            raise SourceTooLarge(f"{name} has {width}x{height} pixels ({info.pixels / 1e6:.1f} megapixels); {most}")
        if limits.max_seconds is not None and info.seconds is not None and info.seconds > limits.max_seconds:
            raise SourceTooLarge(f"{name} lasts {info.seconds:.1f} s; the limit is {limits.max_seconds:g} s")

    def load(self, path: str) -> ExampleT:
        """Read and preprocess one source file into a compact example (what `collate` takes);
        SourceError naming the path when it is missing, empty, unreadable or over the model's limits."""
        raise NotImplementedError

    def without_length_limit(self) -> SourceProcessor:
        """This processor with `max_seconds` lifted (a copy), for a caller that splits long sources
        into windows of at most `max_seconds` itself; self where there is no such limit."""
        if self.max_seconds is None:
            return self
        unlimited = copy.copy(self)
        unlimited.max_seconds = None
        return unlimited

    # ---- a call's sources ------------------------------------------------------------------

    def bind(self, tokenizer: Tokenizer | None, max_positions: int) -> None:
        """Called once the model is known: its source tokenizer (None for a model without one) and
        model.max_positions. Sentences are tokenized and truncated with them; files need neither."""

    def prepare(self, sources: Sequence[str], first_line: int = 1, warn: Warn | None = None,
                skipped: dict[int, str] | None = None) -> dict[int, ExampleT]:
        """A call's sources -> {index: example}. A source without an example (an empty sentence) gets
        no entry. A file that cannot be read raises `SourceError` naming it; or, given a `skipped`
        dict, gets no entry and its message in `skipped[index]` (and `warn`, "...; its output is
        empty"). `first_line`: the line number of sources[0], for messages."""
        examples: dict[int, ExampleT] = {}
        for i, path in enumerate(sources):
            try:
                examples[i] = self.load(str(path))
            except SourceError as e:
                if skipped is None:
                    raise
                skipped[i] = str(e)
                if warn is not None:
                    warn(Diagnostic(f"{e}; its output is empty", code="unreadable_source"))
        return examples

    def describe(self, source: str, example: ExampleT) -> dict[str, object]:
        """The fields of a `Translation` that tell about its source."""
        return {"source": str(source)}

    # ---- batches ---------------------------------------------------------------------------

    def length(self, example: ExampleT) -> int:
        """Encoder positions this example becomes (memory rows), for token-bounded batching."""
        raise NotImplementedError

    def collate(self, examples: Sequence[ExampleT]) -> BatchT:
        """Examples -> one src batch for `Encoder.forward`, padded where lengths differ."""
        raise NotImplementedError

    def collate_augmented(self, examples: Sequence[ExampleT], rngs: Sequence[np.random.Generator]) -> BatchT:
        """Training batches only: each example randomly transformed with its own generator (seeded
        from training.seed, epoch and row index by `seq2seq.data.media.example_rng`), then collated.
        Default, and whenever the modality's augmentation is off: `collate(examples)`, unchanged."""
        return self.collate(examples)

    # ---- display ---------------------------------------------------------------------------

    def attention_view(self, example: ExampleT) -> AttentionView | None:
        """What cross-attention is drawn over for this example (`seq2seq.report.source_attention`
        draws it); None: not supported for this kind."""
        return None


@dataclass(frozen=True)
class AttentionView:
    """What one source looks like to a person, and where its encoder positions lie on it.

    image: uint8 [H, W, C] pixels with `grid` (rows, cols) of patches in row-major memory order
        (`skip` leading positions, e.g. class tokens, are not on the grid).
    spectrogram: float [frames, bins] with `frame_seconds` per frame and `position_seconds` per
        encoder position.
    """

    image: np.ndarray | None = None
    grid: tuple[int, int] | None = None
    skip: int = 0
    spectrogram: np.ndarray | None = None
    frame_seconds: float = 0.0
    position_seconds: float = 0.0


@runtime_checkable
class WindowedSource(Protocol[ExampleT]):
    """A capability of recordings (`WaveformProcessor`, an ensemble of them): a long example cut into
    windows at its pauses (`seq2seq.model.encoders.audio_windows`) and each window cropped out as an
    example of its own; checked with isinstance where it is used (`Transcriber`). Other kinds are
    decoded whole."""

    sample_rate: int  # what `split` counts in

    def split(self, example: ExampleT, max_seconds: float) -> list[Window]: ...

    def crop(self, example: ExampleT, window: Window) -> ExampleT: ...


@runtime_checkable
class PrefixedSource(Protocol):
    """A capability of tokenized sources (`TextProcessor`): a copy of the processor that puts `pieces`
    (each one piece of the source tokenizer) before every source, as a multilingual model's target
    language tag; checked with isinstance where it is used (`Translator.processor_for`)."""

    def with_prefix(self, pieces: Sequence[str]) -> SourceProcessor: ...
