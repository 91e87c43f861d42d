"""The source side shared by every modality: the `Encoder` interface, the `SourceProcessor` that turns
raw inputs into encoder batches, and the registry that maps `model.encoder.type` to both.

A modality is one module under `seq2seq/model/encoders/` that defines

* a config dataclass (a subclass of `seq2seq.config.sections.EncoderConfig`, registered with
  `@register_encoder_config`), saved in the model directory's config.yaml, so that training and
  inference preprocess alike;
* an `Encoder`: src batch -> (memory [B, S, D], memory_pad_mask [B, S], True at padding);
* a `SourceProcessor` of a `SourceKind` (TEXT, IMAGE, AUDIO, or its own): the one owner of what
  follows from the kind of source: probing a file and checking limits, splitting a long source,
  preparing examples, their lengths, collating batches, describing a source and what attention is
  drawn over. A modality that reads sentences leaves it out and gets the `TextProcessor`;

and calls `register(Modality(...))`. The decoder, trainer, search, server and CLI need no change:
they call the processor (`source_processor(model_cfg, tokenizer)`) and read its `kind`, never the
encoder's type.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.sections import EncoderConfig, discover_encoder_types
from seq2seq.text.languages import language_tag
from seq2seq.text.tokenizer import EOS_ID, PAD_ID

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.sections import ModelConfig
    from seq2seq.model.encoders.audio_windows import Window
    from seq2seq.model.layers import Embedding
    from seq2seq.text.tokenizer import Tokenizer


class SourceError(ValueError):
    """A source file that cannot be used (missing, unreadable, empty, not an image/audio file);
    the message names the path."""


class Encoder(nn.Module):
    """Maps a source batch to the memory the decoder attends to.

    forward(src) -> (memory [B, S, d_model], memory_pad_mask [B, S], True at padding), d_model being the
    encoder's own width (the model projects the memory to the decoder's width when the two differ).
    `src` is whatever the modality's `SourceProcessor.collate` makes: token ids [B, S] for text,
    images [B, C, H, W], padded waveforms with their lengths, ... Every memory row must have at
    least one non-padding position. The encoder must be batch invariant: a source encoded inside a
    padded batch gives the same memory rows as encoded alone (up to float rounding).
    """

    d_model: int

    def forward(self, src: Any) -> tuple[Tensor, Tensor]:  # pragma: no cover - interface
        raise NotImplementedError

    def source_lengths(self, src: Any) -> Tensor | None:
        """Source length per example [B] for search's max length (max_len_a * len + max_len_b);
        None (the default) counts the memory's real positions instead."""
        return None

    def on_train_step(self, step: int) -> None:
        """Called by the trainer before each optimizer step (`step`: the steps done so far, also after a
        resume), e.g. to unfreeze a pretrained backbone at a given step. Default: nothing."""

    def fit_statistics(self, examples: Sequence[Any]) -> None:
        """Called once before training (fresh runs; fine-tuning and --resume then load the saved
        weights over it) with the training examples as `SourceProcessor.load` made them, for an
        encoder that normalises with corpus statistics kept in its buffers. Default: nothing."""


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


class SourceProcessor:
    """The contract of one kind of source: how a source is opened and probed, checked against limits,
    split when long, prepared into an example, measured, collated and described. Built from the
    encoder config alone (`Modality.processor`); every consumer (training data, `Translator` and
    `Generator`, the CTranslate2 engine, the server, fine-tuning) calls these methods and never asks
    which class it has.

    kind: the `SourceKind` (TEXT processors read sentences, the others files).
    sample_rate: audio kinds only, the rate of their waveform examples (what `split` counts in).
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

    def load(self, path: str) -> Any:
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

    def split(self, example: Any, max_seconds: float) -> list[Window] | None:
        """A long example cut into windows of at most `max_seconds` (audio kinds: at its pauses,
        `seq2seq.model.encoders.audio_windows`); None: this kind is decoded whole."""
        return None

    def crop(self, example: Any, window: Window) -> Any:
        """The part of `example` that `window` covers, as an example of its own."""
        raise NotImplementedError(f"{type(self).__name__} does not split its sources")

    # ---- a call's sources ------------------------------------------------------------------

    def bind(self, tokenizer: Tokenizer | None, max_positions: int) -> None:
        """Called once the model is known: its source tokenizer (None for a model without one) and
        model.max_positions. Sentences are tokenized and truncated with them; files need neither."""

    def prepare(self, sources: Sequence[str], first_line: int = 1, warn: Callable[[str], None] | None = None,
                skipped: dict[int, str] | None = None) -> dict[int, Any]:
        """A call's sources -> {index: example}. A source without an example (an empty sentence) gets
        no entry. A file that cannot be read raises `SourceError` naming it; or, given a `skipped`
        dict, gets no entry and its message in `skipped[index]` (and `warn`, "...; its output is
        empty"). `first_line`: the line number of sources[0], for messages."""
        examples: dict[int, Any] = {}
        for i, path in enumerate(sources):
            try:
                examples[i] = self.load(str(path))
            except SourceError as e:
                if skipped is None:
                    raise
                skipped[i] = str(e)
                if warn is not None:
                    warn(f"{e}; its output is empty")
        return examples

    def describe(self, source: str, example: Any) -> dict[str, Any]:
        """The fields of a `Translation` that tell about its source."""
        return {"source": str(source)}

    # ---- batches ---------------------------------------------------------------------------

    def length(self, example: Any) -> int:
        """Encoder positions this example becomes (memory rows), for token-bounded batching."""
        raise NotImplementedError

    def collate(self, examples: Sequence[Any]) -> Any:
        """Examples -> one src batch for `Encoder.forward`, padded where lengths differ."""
        raise NotImplementedError

    def collate_augmented(self, examples: Sequence[Any], rngs: Sequence[np.random.Generator]) -> Any:
        """Training batches only: each example randomly transformed with its own generator (seeded
        from training.seed, epoch and row index by `seq2seq.data.media.example_rng`), then collated.
        Default, and whenever the modality's augmentation is off: `collate(examples)`, unchanged."""
        return self.collate(examples)

    # ---- display ---------------------------------------------------------------------------

    def attention_view(self, example: Any) -> AttentionView | None:
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


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID, multiple: int = 1) -> Tensor:
    """Id lists -> LongTensor [len(seqs), max length rounded up to a multiple of `multiple`], right-padded
    with pad_id."""
    width = round_up(max((len(s) for s in seqs), default=0), multiple)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def round_up(n: int, multiple: int) -> int:
    """n rounded up to a multiple of `multiple` (>= 1)."""
    return -(-n // multiple) * multiple


class TextProcessor(SourceProcessor):
    """Sentences: stripped, tokenized by the model's source tokenizer in one call, truncated to the
    model's positions (a warning names the line), EOS appended; an empty sentence has no example.
    Examples are id lists ending in EOS (as the training data's "src_ids"), batches [B, S] ids padded
    with pad_id. Nothing is read from files.

    Tags: `with_target_language(lang, tags)` (or `with_prefix(pieces)`) is a copy that puts reserved
    pieces before every source's ids, as training did for a multilingual or tagged corpus
    (`seq2seq.text.languages`): example = prefix_ids + the sentence's ids + [EOS]. Truncation cuts the
    sentence, never the tags. The processor itself is left as it was (no tags)."""

    kind = TEXT
    prefix_ids: tuple[int, ...] = ()
    prefix_pieces: tuple[str, ...] = ()

    def __init__(self, cfg: EncoderConfig | None = None, pad_id: int = PAD_ID) -> None:
        self.cfg = cfg
        self.pad_id = pad_id
        self.tokenizer: Tokenizer | None = None
        self.max_tokens: int | None = None

    def bind(self, tokenizer: Tokenizer | None, max_positions: int) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_positions - 1  # the encoder sees ids + EOS

    def with_prefix(self, pieces: Sequence[str]) -> TextProcessor:
        """A copy (bound like this one) that puts `pieces`, each one piece of the source tokenizer,
        before every source; `pieces` empty: a copy without tags. ValueError naming a piece the
        tokenizer does not have as one piece."""
        if self.tokenizer is None or self.max_tokens is None:
            raise RuntimeError("TextProcessor.bind(tokenizer, max_positions) first")
        ids = []
        for piece in pieces:
            token_id = self.tokenizer.piece_id(piece)
            if token_id is None:
                reserved = self.tokenizer.user_defined_pieces()
                raise ValueError(f"the source tokenizer has no piece {piece!r} (its reserved pieces: "
                                 f"{', '.join(reserved) or 'none'})")
            ids.append(token_id)
        if len(ids) >= self.max_tokens:
            raise ValueError(f"{len(ids)} tag pieces leave no room in the model's {self.max_tokens} source positions")
        tagged = copy.copy(self)
        tagged.prefix_ids, tagged.prefix_pieces = tuple(ids), tuple(pieces)
        return tagged

    def with_target_language(self, lang: str | None, tags: Sequence[str] = ()) -> TextProcessor:
        """A copy that starts every source with `<2lang>` (lang None: no language tag), then `tags`
        (corpus tags such as "<BT>"), as training did for that target language. ValueError (a
        `LanguageError` for a malformed code) naming a tag the source tokenizer lacks, with the
        reserved pieces it has. Which languages a model translates into, and whether it needs one,
        is `seq2seq.text.languages.model_languages` / `source_prefix` of its config."""
        return self.with_prefix(([language_tag(lang)] if lang is not None else []) + list(tags))

    def load(self, path: str) -> Any:
        raise SourceError(f"{path}: this model reads sentences (tokenized by its source tokenizer), not files")

    def prepare(self, sources: Sequence[str], first_line: int = 1, warn: Callable[[str], None] | None = None,
                skipped: dict[int, str] | None = None) -> dict[int, list[int]]:
        if self.tokenizer is None or self.max_tokens is None:
            raise RuntimeError("TextProcessor.bind(tokenizer, max_positions) first")
        texts = [t.strip() for t in sources]
        todo = [i for i, t in enumerate(texts) if t]
        examples = {}
        prefix = list(self.prefix_ids)
        room = self.max_tokens - len(prefix)
        for i, ids in zip(todo, self.tokenizer.encode([texts[i] for i in todo])):
            if len(ids) > room:
                if warn is not None:
                    warn(f"line {first_line + i}: {len(prefix) + len(ids)} source tokens, truncated to the model's "
                         f"limit of {self.max_tokens}")
                ids = ids[:room]
            examples[i] = prefix + ids + [EOS_ID]
        return examples

    def describe(self, source: str, example: list[int]) -> dict[str, Any]:
        assert self.tokenizer is not None
        n_text = len(example) - 1 - len(self.prefix_ids)
        return {"src_pieces": [*self.prefix_pieces, *self.tokenizer.pieces(source.strip())[:n_text], "</s>"]}

    def length(self, example: Sequence[int]) -> int:
        return len(example)

    def collate(self, examples: Sequence[Sequence[int]]) -> Tensor:
        return pad_sequences(examples, self.pad_id)


@dataclass(frozen=True)
class Modality:
    """What `model.encoder.type: <name>` means.

    build_encoder(model_cfg, shared_embedding) -> Encoder: `model_cfg.encoder` holds this
        modality's config; `shared_embedding` is the target embedding when
        model.share_embeddings is set (text only), else None.
    processor(encoder_cfg) -> SourceProcessor; left out (None): `TextProcessor`, sources are sentences.
    kind: the `SourceKind` its sources are, or kind(encoder_cfg) where the config decides (`type: hf`
        reads images or audio after its backbone); None: the processor class's `kind`.
    pretrained(model_cfg) -> Encoder: the encoder with the weights a training run starts from (e.g. a
        pretrained backbone read from the config's `name_or_path`), kept as they are (the model
        initialises only the rest); None (the default): `build_encoder`'s fresh initialisation. A model
        directory is always loaded through `build_encoder`, its weights replacing the initial ones.
    resolve(encoder_cfg): fills in, when a run starts, what the config names but does not hold (`type:
        hf` reads its backbone's config from `name_or_path`), so that parsing a config reads nothing;
        ConfigError naming the key. None: nothing to resolve.
    """

    name: str
    build_encoder: Callable[["ModelConfig", "Embedding | None"], Encoder]
    processor: Callable[[EncoderConfig], SourceProcessor] = None  # type: ignore[assignment] - None: TextProcessor
    kind: SourceKind | Callable[[EncoderConfig], SourceKind] | None = None
    pretrained: Callable[["ModelConfig"], Encoder] | None = None
    resolve: Callable[[EncoderConfig], None] | None = None

    def __post_init__(self) -> None:
        if self.processor is None:
            object.__setattr__(self, "processor", TextProcessor)

    def source_kind(self, encoder_cfg: EncoderConfig) -> SourceKind:
        """The kind of source a model with this encoder config reads (no processor built where the
        modality or its processor class says)."""
        if isinstance(self.kind, SourceKind):
            return self.kind
        if self.kind is not None:
            return self.kind(encoder_cfg)
        if isinstance(self.processor, type) and issubclass(self.processor, SourceProcessor):
            return self.processor.kind
        return self.processor(encoder_cfg).kind


_MODALITIES: dict[str, Modality] = {}


def register(modality: Modality) -> Modality:
    _MODALITIES[modality.name] = modality
    return modality


def load_plugins() -> None:
    """Register the built-in modalities and those of installed packages: a package adds a modality
    by naming a module in the `seq2seq.model.encoders` entry-point group, e.g. in its pyproject.toml

        [project.entry-points."seq2seq.model.encoders"]
        my_encoder = "my_package.my_encoder"

    (importing that module registers its config and `Modality`). The config layer finds them
    (`seq2seq.config.sections.discover_encoder_types`), importing them by name."""
    discover_encoder_types(loaded=_MODALITIES)


def get_modality(name: str) -> Modality:
    if name not in _MODALITIES:
        load_plugins()
    if name not in _MODALITIES:
        raise ConfigError(f"unknown encoder type {name!r}; choose one of {sorted(_MODALITIES)}")
    return _MODALITIES[name]



def source_kind(encoder_cfg: EncoderConfig) -> SourceKind:
    """The kind of source `model.encoder` reads."""
    return get_modality(encoder_cfg.type).source_kind(encoder_cfg)


def resolve_encoder_config(encoder_cfg: EncoderConfig) -> None:
    """What a run does first with `model.encoder`: its modality's `resolve` (see `Modality`)."""
    resolve = get_modality(encoder_cfg.type).resolve
    if resolve is not None:
        resolve(encoder_cfg)


def source_processor(model_cfg: ModelConfig, tokenizer: Tokenizer | None = None) -> SourceProcessor:
    """The processor of a model's sources, bound to its source tokenizer and positions."""
    processor = get_modality(model_cfg.encoder.type).processor(model_cfg.encoder)
    processor.bind(tokenizer, model_cfg.max_positions)
    return processor
