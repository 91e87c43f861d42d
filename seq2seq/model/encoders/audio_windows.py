"""Long recordings -> windows a speech model can take: energy-based voice activity segmentation.

    windows = split_windows(wave, rate, max_seconds=20.0)  # wave [T] -> [Window(start, end, ...)], samples

A recording no longer than `max_seconds` is one window, the whole recording (so a short file is
transcribed in one search over all of it, with nothing cut or joined). A longer one is cut at its pauses:

1. Energy: the RMS of 20 ms frames (no overlap), in dB.
2. A threshold relative to the recording: loud = the 95th percentile of the frame energies (its
   speech level), quiet = the 10th percentile (its noise floor, in a recording with pauses), but at
   least loud - 60 dB (digital silence must not drag the threshold into the noise of other pauses);
   frames below quiet + 0.3 (loud - quiet) are silent. A recording whose loud and quiet frames lie
   within 10 dB of each other (continuous sound, or noise only) has no silent frame.
3. A pause is a run of silent frames, its cut point its middle. A stretch longer than `max_seconds`
   is cut at the middle of its longest pause (of equal ones, the nearest to the stretch's middle),
   and each part again while it is longer than `max_seconds`: the longest pauses are used first,
   and a part that fits is not cut again.
4. A stretch longer than `max_seconds` with no pause inside is cut into the fewest evenly spaced
   windows of `max_seconds` that overlap by at least `overlap_seconds` (`Window.overlaps_previous`);
   `join_texts` drops the words repeated across such a seam.
5. Each window is trimmed to its voiced (non-silent) frames plus `pad_seconds` on either side, as
   training utterances have little silence around them (a model hears words in long silences);
   windows with no voiced frame are dropped.

Why by hand, not webrtcvad or silero-vad: both answer "is this frame
speech?", which is not the question here. Cutting needs the quietest places of the recording, and
the longest of them first; a cut inside a pause costs nothing, and a cut too early or late loses at
worst part of a pause. Frame energy relative to the recording answers that at any sample rate with
numpy alone, in a few lines; webrtcvad takes 16-bit PCM at 8/16/32/48 kHz only (a C extension, no
wheels for every platform), silero-vad adds a neural model and its runtime to the install for a
better speech/noise decision in heavy noise, which this cut does not need.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_SECONDS = 0.02  # energy frames
LOUD_PERCENTILE, QUIET_PERCENTILE = 95.0, 10.0
THRESHOLD_FRACTION = 0.3  # threshold = quiet + fraction * (loud - quiet), in dB
MIN_RANGE_DB = 10.0  # below this loud - quiet, nothing is silent
MAX_RANGE_DB = 60.0  # quiet is at least loud - this
DEFAULT_OVERLAP_SECONDS = 1.0  # fixed windows (no pause): at most a quarter of the window
DEFAULT_PAD_SECONDS = 0.1  # silence kept around a window's voiced frames


@dataclass(frozen=True)
class Window:
    """samples [start, end) of the recording (what is decoded); speech_start/speech_end: its first
    and one-past-last voiced samples (to a frame), where word times are spread; overlaps_previous: a
    fixed window that shares its first samples with the one before (no pause to cut at)."""

    start: int
    end: int
    speech_start: int
    speech_end: int
    overlaps_previous: bool = False


def frame_energy(wave: np.ndarray, frame: int) -> np.ndarray:
    """wave [T] -> RMS energy in dB of each `frame`-sample frame [ceil(T / frame)] (the last one
    zero-padded)."""
    n = -(-len(wave) // frame)
    x = np.zeros(n * frame, dtype=np.float64)
    x[: len(wave)] = wave
    return 10.0 * np.log10(np.mean(x.reshape(n, frame) ** 2, axis=1) + 1e-12)


def silent_frames(energy_db: np.ndarray) -> np.ndarray:
    """[N] dB -> [N] bool, True where a frame is below the recording's silence threshold."""
    loud = float(np.percentile(energy_db, LOUD_PERCENTILE))
    quiet = max(float(np.percentile(energy_db, QUIET_PERCENTILE)), loud - MAX_RANGE_DB)
    if loud - quiet < MIN_RANGE_DB:
        return np.zeros(len(energy_db), dtype=bool)
    return energy_db < quiet + THRESHOLD_FRACTION * (loud - quiet)


def pauses(silent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of True in `silent` [N] -> (first frame [R], length in frames [R]) of each run."""
    edges = np.diff(np.concatenate([[0], silent.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return starts, ends - starts


def split_windows(wave: np.ndarray, rate: int, max_seconds: float,
                  overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
                  pad_seconds: float = DEFAULT_PAD_SECONDS) -> list[Window]:
    """wave [T] at `rate` Hz -> its windows in order, none longer than max_seconds (see the module
    docstring); one window [0, T), untrimmed, when T <= max_seconds * rate."""
    if max_seconds <= 0:
        raise ValueError(f"the maximum window must be positive, got {max_seconds} s")
    total = len(wave)
    if total <= max_seconds * rate:
        return [Window(0, total, 0, total)]
    most = max(int(max_seconds * rate), 1)
    frame = max(round(FRAME_SECONDS * rate), 1)
    silent = silent_frames(frame_energy(np.asarray(wave), frame))
    run_start, run_len = pauses(silent)
    cuts = (2 * run_start + run_len) * frame // 2  # the middle of each pause, in samples

    spans: list[tuple[int, int, bool]] = []  # (start, end, overlaps the previous one)
    todo = [(0, total)]
    while todo:  # depth first, right part pushed first: spans come out in order
        a, b = todo.pop()
        if b - a <= most:
            spans.append((a, b, False))
            continue
        inside = np.flatnonzero((cuts > a) & (cuts < b))
        if len(inside) == 0:
            spans += fixed_windows(a, b, most, overlap_seconds, rate)
            continue
        longest = inside[run_len[inside] == run_len[inside].max()]
        cut = int(cuts[longest[np.argmin(np.abs(cuts[longest] - (a + b) // 2))]])
        todo += [(cut, b), (a, cut)]

    windows, pad = [], int(pad_seconds * rate)
    for a, b, overlap in spans:
        voiced = np.flatnonzero(~silent[a // frame: -(-b // frame)])
        if len(voiced):
            speech = max(a, int(a // frame + voiced[0]) * frame), min(b, int(a // frame + voiced[-1] + 1) * frame)
            windows.append(Window(max(a, speech[0] - pad), min(b, speech[1] + pad), *speech, overlap))
    return windows


def fixed_windows(a: int, b: int, most: int, overlap_seconds: float, rate: int) -> list[tuple[int, int, bool]]:
    """[a, b) (longer than `most` samples) -> the fewest windows of `most` samples, evenly spaced from
    a to b, that overlap by at least overlap_seconds (at most most // 4)."""
    overlap = min(int(overlap_seconds * rate), most // 4)
    n = 1 + -(-(b - a - most) // (most - overlap))
    return [(s, s + most, k > 0) for k, s in enumerate(a + (b - most - a) * k // (n - 1) for k in range(n))]


def join_texts(texts: list[str], windows: list[Window]) -> str:
    """The windows' texts joined by spaces, in order; across a seam of overlapping fixed windows the
    longest run of words that ends one text and starts the next is kept once."""
    words: list[str] = []
    for text, window in zip(texts, windows):
        new = text.split()
        if window.overlaps_previous:
            k = next((k for k in range(min(len(words), len(new)), 0, -1) if words[-k:] == new[:k]), 0)
            new = new[k:]
        words += new
    return " ".join(words)


def word_times(text: str, start: float, end: float) -> list[tuple[str, float, float]]:
    """Approximate word times: the span [start, end) seconds (a window's voiced part) shared among
    the words in proportion to their length in characters. Not an alignment: good for finding a
    word in a long recording, not for cutting it out."""
    words = text.split()
    if not words:
        return []
    edges = np.concatenate([[0], np.cumsum([len(w) for w in words])]) / sum(len(w) for w in words)
    times = start + edges * (end - start)
    return [(w, float(times[k]), float(times[k + 1])) for k, w in enumerate(words)]
