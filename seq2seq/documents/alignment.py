"""Word alignment of a translation from its cross-attention: which source word each target word
translates, over the whitespace words of the source the engine saw and of the translation's text.

    word_alignment(translation) -> [(source word, target word), ...]

translation.attention is [target pieces + EOS, source pieces + EOS] (asked with `attention_layer`);
a SentencePiece piece starting with "▁" starts a word. A target word's row is the mean of its pieces'
rows, a source word's column the sum of its pieces' columns (EOS left out: it draws attention that
aligns nothing). Each target word gets its best source word; each source word that got none is added
with its best target word, so every word of both sides is aligned (what `spans.unmask` needs to find a
place for every span).
"""

from __future__ import annotations

from typing import Sequence

from seq2seq.inference.results import Translation


def piece_words(pieces: Sequence[str]) -> list[int]:
    """The word index of each piece ("▁" starts a word; a first piece without it still opens word 0)."""
    out, word = [], -1
    for p in pieces:
        if p.startswith("▁") or word < 0:
            word += 1
        out.append(word)
    return out


def _fit(indices: list[int], words: int) -> list[int]:
    """Piece word indices mapped onto `words` text words where the counts differ (a normalised text)."""
    have = (indices[-1] + 1) if indices else 0
    if have == words or have == 0:
        return indices
    return [min(words - 1, i * words // have) for i in indices]


def word_alignment(translation: Translation, source_text: str | None = None,
                   shift: bool = False) -> list[tuple[int, int]]:
    """(source word, target word) pairs, sorted (see the module docstring); [] without attention.
    source_text: the text the engine translated (default: its words counted from src_pieces).
    shift: align each target piece by the attention of the step that reads it (the next row: "shift-att",
    Chen et al. 2020) instead of the step that predicts it."""
    att = translation.attention
    if att is None or not translation.pieces or len(translation.src_pieces) < 2:
        return []
    if shift:
        att = att[1:]
    tgt = _fit(piece_words(translation.pieces), len(translation.text.split()))
    src_pieces = translation.src_pieces[:-1]
    src = piece_words(src_pieces)
    if source_text is not None:
        src = _fit(src, len(source_text.split()))
    n_t, n_s = tgt[-1] + 1, src[-1] + 1
    scores = [[0.0] * n_s for _ in range(n_t)]
    counts = [0] * n_t
    for row, t in zip(att, tgt):
        counts[t] += 1
        for weight, s in zip(row, src):
            scores[t][s] += weight
    pairs = set()
    for t in range(n_t):
        if counts[t]:
            pairs.add((max(range(n_s), key=lambda s: scores[t][s]), t))
    covered = {s for s, _ in pairs}
    for s in range(n_s):
        if s not in covered:
            pairs.add((s, max(range(n_t), key=lambda t: scores[t][s] / max(counts[t], 1))))
    return sorted(pairs)
