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

One loader for every engine and every front-end (the commands, the server, the Python API): the class
that decodes a model directory is chosen from what it reads, or named by the caller:

    engine = load_engine("runs/m30k")          # a Translator (sentences)
    engine = load_engine("runs/speech")        # a Transcriber (recordings of any length, in windows)
    engine = load_engine("runs/captions")      # a Generator (other files: images)
    engine = load_engine("runs/m30k", decodes=Translator)   # `translate`: refuses an image or audio model
    engine = load_engine("runs/m30k", export=CTranslate2Translator.from_model_dir)  # its CTranslate2 export

`engine_class(kind)` is the choice itself. The commands that decode one kind of source (`translate`,
`caption`, `transcribe`) name their class, which refuses a model of another kind naming the command that
decodes it; the server takes the model's own. An exported engine (`seq2seq.deploy`, a layer above this
one) is passed in as its loader (`ExportLoader`), so this module imports none.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
from pathlib import Path
from typing import Callable, Protocol, Sequence, TypeVar, overload

from typing_extensions import Unpack

from torch import Tensor

from seq2seq.config.diagnostics import Warn
from seq2seq.config.search import SearchConfig
from seq2seq.inference.controls import SourceControls
from seq2seq.inference.results import Segment, Translation
from seq2seq.inference.engine import Call, Engine, PreparedCall
from seq2seq.config.search import SearchOptions
from seq2seq.inference.inputs import CallKeywords, SourceInput, fields_for
from seq2seq.inference.steering import SteeringError
from seq2seq.inference.translator import EnsembleKeywords, Translator
from seq2seq.model.encoders.audio_windows import Window, join_texts, word_times
from seq2seq.model.encoders.sources import AUDIO, IMAGE, AttentionView, SourceError, SourceKind, WindowedSource
from seq2seq.model.encoders.base import source_kind
from seq2seq.storage import CheckpointError
from seq2seq.storage.model_dir import LoadedModel, ModelDir
from seq2seq.text import lines

log = logging.getLogger(__name__)


class Generator(Translator):
    """Generates text from image/audio files with a loaded model directory.

    precision: as for `Translator` ("fp32" with the decoder pre-packed on CPU, "bf16", "int8").
    """

    kind: SourceKind | None = None  # the kind of source a subclass insists on (IMAGE, AUDIO); None: any file

    @classmethod
    def decodes(cls, kind: SourceKind) -> bool:
        return kind.reads_files and (cls.kind is None or kind == cls.kind)

    @classmethod
    def wanted(cls) -> str:
        return f"{cls.kind.name}" if cls.kind is not None else "files"

    def __init__(self, loaded: LoadedModel | Sequence[LoadedModel], precision: str = "fp32", _owns_model: bool = False,
                 *, ensemble_weights: Sequence[float] | None = None, ensemble_combine: str = "prob") -> None:
        super().__init__(loaded, precision, _owns_model=_owns_model, ensemble_weights=ensemble_weights,
                         ensemble_combine=ensemble_combine)
        self.tokenizer = self.tokenizers.tgt

    def generate(self, paths: list[str], batch_tokens: int = 4000, skip_bad: bool = False,
                 warn: Warn | None = None, first_line: int = 1,
                 **options: Unpack[SearchOptions]) -> list[list[Translation]]:
        """n-best hypotheses (best first) for each file, in input order (`translate_nbest`; first_line:
        the input line of paths[0], for messages)."""
        return self.translate_nbest(paths, batch_tokens, first_line, warn=warn, skip_bad=skip_bad, **options)

    def __call__(self, paths: list[str], **options: Unpack[CallKeywords]) -> list[str]:
        """Best text for each file, in input order ("" for a skipped file)."""
        return self.translate(paths, **options)

    def attention_view(self, source: str) -> AttentionView:
        """What `plot_attention` draws the attention of `source` over (see `SourceProcessor.attention_view`);
        SourceError naming the model where its kind of source has nothing to draw over."""
        processor = self.processor.without_length_limit()  # the source was decoded, however long
        view = processor.attention_view(processor.load(source))
        if view is None:
            raise SourceError(f"drawing attention is not supported for the sources of {self.path}")
        return view

    def plot_attention(self, generation: Translation, png_path: str, view: AttentionView | None = None) -> None:
        """Draw `generation`'s cross-attention (generated with attention_layer set) over its source
        (`view`: its `attention_view`, read again when not given)."""
        if generation.attention is None:
            raise ValueError("this generation has no attention: generate with attention_layer=-1")
        from seq2seq.report.plots import save_figure
        from seq2seq.report.source_attention import draw_source_attention

        if view is None:
            if generation.source is None:  # (a text's Translation: a Generator's name their file)
                raise ValueError("this generation names no source file to draw its attention over")
            view = self.attention_view(generation.source)
        save_figure(draw_source_attention(view, generation.attention, generation.pieces + ["</s>"]), png_path)


class Captioner(Generator):
    """A `Generator` for image models: `caption(paths, **options) -> texts`."""

    kind = IMAGE

    def caption(self, paths: list[str], **options: Unpack[CallKeywords]) -> list[str]:
        return self(paths, **options)


class Transcriber(Generator):
    """A `Generator` for audio models: `transcribe(paths, **options) -> texts`, recordings of any length.

    A recording longer than `max_window_seconds` is cut into windows at its pauses (the processor's
    `split`, `seq2seq.model.encoders.audio_windows`: energy-based, the longest pauses first; fixed
    windows with 1 s of overlap where there is no pause), the windows of all files are searched
    together in token-bounded batches, and each file's text is its windows' texts joined in order. Its
    n-best list is then that one joined hypothesis: score, logprob and tokens are the windows' summed
    and concatenated (no attention). A recording no longer than the window is decoded whole, exactly
    as by a `Generator`. The processor's `max_seconds` (`model.encoder.max_seconds` when the model
    sets it; a Whisper backbone's window) is the default window, and refuses nothing here; otherwise
    `DEFAULT_WINDOW_SECONDS`: the trainer does not record how long its utterances were, so pass the
    longest training utterance, or a little more, for a model trained on short ones. No window is
    longer than the encoder can read (`encoder_seconds`, a Whisper backbone's 30 s).
    """

    kind = AUDIO
    DEFAULT_WINDOW_SECONDS = 20.0
    GROUP_SECONDS = 3600.0  # audio held in memory at a time: files are read and decoded in groups of this

    def __init__(self, loaded: LoadedModel | Sequence[LoadedModel], precision: str = "fp32", _owns_model: bool = False,
                 *, ensemble_weights: Sequence[float] | None = None, ensemble_combine: str = "prob") -> None:
        super().__init__(loaded, precision, _owns_model=_owns_model, ensemble_weights=ensemble_weights,
                         ensemble_combine=ensemble_combine)
        self.longest_window = self.processor.encoder_seconds  # None: any
        self.max_window_seconds = float(self.processor.max_seconds or self.DEFAULT_WINDOW_SECONDS)
        self.processor = self.processor.without_length_limit()  # reads a whole recording, however long
        if not isinstance(self.processor, WindowedSource):
            raise TypeError(f"{type(self.processor).__name__} does not cut its recordings into windows "
                            "(seq2seq.model.encoders.sources.WindowedSource)")
        self.windows: WindowedSource = self.processor
        self.sample_rate: int = self.processor.sample_rate

    def transcribe(self, paths: list[str], **options: Unpack[CallKeywords]) -> list[str]:
        """Best text of each file, in input order; options: search options, max_window_seconds."""
        return self(paths, **options)

    def segments(self, paths: list[str], **options: Unpack[CallKeywords]) -> list[list[Segment]]:
        """Each file's windows in order, with start/end seconds, text and approximate word times
        ([] for a file skipped with skip_bad=True); options as for `transcribe`."""
        options["timestamps"] = True
        return [nbest[0].segments or [] if nbest else [] for nbest in self.translate_nbest(paths, **options)]

    def window_seconds(self, requested: float | None) -> float:
        """The window a call uses: `requested` (default `max_window_seconds`), at most the processor's
        longest (a warning says so where it is cut)."""
        window = self.max_window_seconds if requested is None else float(requested)
        if not window > 0:
            raise ValueError(f"max_window_seconds must be positive, got {requested}")
        if self.longest_window is not None and window > self.longest_window:
            if requested is not None and not math.isinf(window):
                log.warning("max_window_seconds %g: this model reads at most %g s at a time; windows of %g s",
                            window, self.longest_window, self.longest_window)
            window = self.longest_window
        return window

    def _terms(self, call: Call) -> str | None:
        """A recording model takes its constraints as constraints (it is never trained with terms)."""
        return "constrain"

    def _decode(self, prepared: PreparedCall, call: Call, first_line: int, warn: Warn,
                skipped: dict[int, str] | None) -> dict[int, list[Translation]]:
        """n-best hypotheses of each audio file (the sources: paths), long ones in windows (see the class).

        call.max_window_seconds: the longest window (default: `self.max_window_seconds`).
        call.timestamps: each hypothesis carries `segments` (its windows' times and texts).
        call.progress: a bar on stderr counting windows. Steering goes to the windows by each field's
        rule (`seq2seq.inference.inputs.FieldRule.parts`; which field has which: docs/decoding-controls.md):
        in the first window, in every window, or only where the recording fits in one window.
        """
        texts, cfg = prepared.texts, prepared.cfg
        self.processor_for(call.tgt_lang)  # a recording model translates into one language: refuses any
        window = self.window_seconds(call.max_window_seconds)
        controls: dict[tuple[int, int], SourceControls] = {}
        from tqdm import tqdm

        results: dict[int, list[Translation]] = {}
        group: dict[int, tuple[Tensor, list[Window]]] = {}
        problems: dict[int, str] = {}
        with tqdm(total=0, unit=" windows", disable=not call.progress, file=sys.stderr, dynamic_ncols=True) as bar:
            for i, path in enumerate(texts):
                wave = self.processor.prepare([path], first_line + i, warn, problems if call.skip_bad else None).get(0)
                if wave is None:
                    if skipped is not None and 0 in problems:
                        skipped[i] = problems.pop(0)
                    continue
                windows = self.windows.split(wave, window)
                group[i] = wave, windows
                if i in prepared.controls:
                    controls.update(self._window_controls(i, prepared.inputs[i], prepared.controls[i], len(windows),
                                                          first_line + i))
                bar.total += len(windows)
                bar.refresh()
                if sum(_samples(w) for w, _ in group.values()) >= self.GROUP_SECONDS * self.sample_rate:
                    self._transcribe_group(group, texts, cfg, call, bar.update, results, controls, first_line)
                    group = {}
            self._transcribe_group(group, texts, cfg, call, bar.update, results, controls, first_line)
        return results

    def _transcribe_group(self, group: dict[int, tuple[Tensor, list[Window]]], paths: list[str], cfg: SearchConfig,
                          call: Call, on_batch: Callable[[int], object], results: dict[int, list[Translation]],
                          controls: dict[tuple[int, int], SourceControls], first_line: int) -> None:
        """Search every window of the files in `group` ({index: (wave [T], windows)}) in shared
        batches, with controls {(index, window): its controls}; results[index] = the file's n-best list."""
        crop = self.windows.crop
        examples = {(i, k): crop(wave, w) for i, (wave, windows) in group.items() for k, w in enumerate(windows)}
        done = self._search(examples, cfg, call.batch_tokens, lambda key: {"source": str(paths[key[0]])}, on_batch,
                            controls={key: controls[key] for key in examples if key in controls},
                            line=lambda key: first_line + key[0])
        rate = self.sample_rate
        for i, (wave, windows) in group.items():
            nbests = [done[(i, k)] for k in range(len(windows))]
            whole = len(windows) == 1 and windows[0].start == 0 and windows[0].end == _samples(wave)
            hyps = nbests[0] if whole else [self._joined(str(paths[i]), windows, [n[0] for n in nbests])]
            if call.timestamps:
                for h in hyps:
                    texts = [h.text] if whole else [n[0].text for n in nbests]
                    h.segments = [Segment(w.start / rate, w.end / rate, t,
                                          word_times(t, w.speech_start / rate, w.speech_end / rate))
                                  for w, t in zip(windows, texts)]
            results[i] = hyps

    @staticmethod
    def _window_controls(index: int, given: SourceInput, controls: SourceControls, n_windows: int,
                         line: int) -> dict[tuple[int, int], SourceControls]:
        """The controls of file `index`'s windows from its own (`controls`, of its input `given`), by each
        field's rule (`FieldRule.parts`): the first window has them all, a later one those that hold for
        each part; a field that holds for the whole source only is a SteeringError where the recording
        needs more than one window."""
        whole = given.whole_field() if n_windows > 1 else None
        if whole is not None:
            raise SteeringError(f"{whole} hold for a recording decoded in one window, but this one is split "
                                f"into {n_windows}; raise --max-window-seconds (if the model allows)", line=line,
                                field=whole, code=f"{whole}_windowed")
        each = {name: getattr(controls, name) for name in fields_for("each")}
        return {(index, k): controls if k == 0 else dataclasses.replace(SourceControls(), **each)
                for k in range(n_windows)}

    @staticmethod
    def _joined(source: str, windows: list[Window], best: list[Translation]) -> Translation:
        """One hypothesis for a file from its windows' best ones (no windows: an empty text)."""
        return Translation(
            text=join_texts([h.text for h in best], windows),
            score=sum(h.score for h in best), logprob=sum(h.logprob for h in best),
            token_ids=[t for h in best for t in h.token_ids], pieces=[p for h in best for p in h.pieces],
            token_logprobs=[x for h in best for x in h.token_logprobs], source=source)


def _samples(wave: Tensor | tuple[Tensor, ...]) -> int:
    """Samples in a recording's waveform (an ensemble's: its first member's, all read at one rate)."""
    return (wave[0] if isinstance(wave, tuple) else wave).numel()


def engine_class(kind: SourceKind) -> type[Translator]:
    """The class that decodes a model reading `kind` sources: `Translator` (sentences), `Transcriber`
    (recordings, long ones in windows) or `Generator` (other files)."""
    if not kind.reads_files:
        return Translator
    return Transcriber if Transcriber.decodes(kind) else Generator


class ExportLoader(Protocol):
    """Loads a model directory's export on another engine (`CTranslate2Translator.from_model_dir`): the
    export `model_dir` is or holds, or the one in `engine_dir`; seed: for sampling; warn: where a warning
    (an export older than the weights) goes."""

    def __call__(self, model_dir: Path, engine_dir: Path | None, *, device: str, precision: str, seed: int | None,
                 warn: Warn) -> Engine: ...


ModelDirs = str | Path | Sequence[str | Path]
T = TypeVar("T", bound=Translator)


@overload
def load_engine(model_dir: ModelDirs, device: str = "auto", precision: str = "fp32", weights: str | Path | None = None,
                *, decodes: type[T], call: Call | None = None, **ensemble: Unpack[EnsembleKeywords]) -> T: ...


@overload
def load_engine(model_dir: ModelDirs, device: str = "auto", precision: str = "fp32", weights: str | Path | None = None,
                *, decodes: type[Translator] | None = None, export: ExportLoader | None = None,
                engine_dir: str | Path | None = None, call: Call | None = None, warn: Warn = lines.warn,
                **ensemble: Unpack[EnsembleKeywords]) -> Engine: ...


def load_engine(model_dir: ModelDirs, device: str = "auto", precision: str = "fp32", weights: str | Path | None = None,
                *, decodes: type[Translator] | None = None, export: ExportLoader | None = None,
                engine_dir: str | Path | None = None, call: Call | None = None, warn: Warn = lines.warn,
                **ensemble: Unpack[EnsembleKeywords]) -> Engine:
    """The engine that decodes `model_dir`: the one loader of every front-end (the commands, the server,
    the Python API). Every problem is a ValueError (CheckpointError, TokenizerError, SourceError, ExportError,
    a bad device, precision, search option or language) or a RuntimeError from the device.

    decodes: the torch engine class a caller insists on (`Translator`, `Captioner`, `Transcriber`; a model
    of another kind is refused naming the command that decodes it); None: `engine_class` of what the model
    reads. Several directories (or ensemble["last_checkpoints"]) are one ensemble (`Translator.load`'s
    keywords). export: run the model's export on that engine instead (`CTranslate2Translator.from_model_dir`:
    the export MODEL_DIR is or holds, or `engine_dir`); one model directory, its own weights.
    call: the call the engine is loaded for, its search options and languages checked here, once (and
    its seed the export's sampling seed); None: nothing checked."""
    dirs = [model_dir] if isinstance(model_dir, (str, Path)) else list(model_dir)
    engine: Engine
    if export is not None:
        if len(dirs) > 1 or ensemble.get("last_checkpoints") or weights is not None:
            raise ValueError("an exported engine runs one model directory with its own weights (no ensemble, "
                             "no weights): export those weights instead")
        engine = export(Path(dirs[0]), Path(engine_dir) if engine_dir else None, device=device, precision=precision,
                        seed=call.search.get("seed") if call is not None else None, warn=warn)
    else:
        if engine_dir is not None:
            raise ValueError("engine_dir is where an export is: it goes with export=")
        if decodes is None:
            directory = ModelDir(Path(dirs[0]))
            if not directory.config_path.is_file():
                raise CheckpointError(f"{dirs[0]} is not a model directory ({ModelDir.CONFIG} is missing)")
            decodes = engine_class(source_kind(directory.config().model.encoder))
        engine = decodes.load(dirs if len(dirs) > 1 else dirs[0], device=device, precision=precision,
                              weights=weights, **ensemble)
    if call is not None:
        engine.search_config(**call.search)
        engine.processor_for(call.tgt_lang, call.src_lang)
    return engine
