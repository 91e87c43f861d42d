"""Word alignment of a translation: which source word each target word translates, over the whitespace
words of the source the engine saw and of the translation's text, from the engine's cross-attention and,
where the model directory has one, the word lexicon of its training pairs (`seq2seq.text.lexicon`).

    word_alignment(translation, source_text, lexicon) -> [(source word, target word), ...]

translation.attention is [target pieces + EOS, source pieces + EOS] (asked with `attention_layer`);
a SentencePiece piece starting with "▁" starts a word. A target word's row is the mean of its pieces'
rows, a source word's column the sum of its pieces' columns (EOS left out: it draws attention that
aligns nothing), each row then scaled to sum 1. With a lexicon, a word pair's score is
ATTENTION_SHARE of its attention plus the rest of its lexicon score (Dice), and the attention is read
either by the step that predicts each piece or by the step that reads it (the next row: "shift-att",
Chen et al. 2020), whichever agrees better with the lexicon: models differ in which of the two looks
at the word being translated. Each target word gets its best source word; each source word that got
none is added with its best target word, so every word of both sides is aligned (what `spans.unmask`
needs to find a place for every span). docs/documents.md ("Where a tag goes") has the measurements.
"""

from __future__ import annotations

from typing import Sequence

from seq2seq.inference.results import Translation
from seq2seq.text.lexicon import Lexicon

# A word pair's score with a lexicon: this share from the attention, the rest from the lexicon's Dice
# (chosen on Multi30K val: docs/documents.md, "Where a tag goes").
ATTENTION_SHARE = 0.3


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


def word_alignment(translation: Translation, source_text: str | None = None, lexicon: Lexicon | None = None,
                   shift: bool | None = None) -> list[tuple[int, int]]:
    """(source word, target word) pairs, sorted (see the module docstring); [] without attention.
    source_text: the text the engine translated (default: its words counted from src_pieces; the lexicon
    needs it). shift: read each piece's attention by the step that reads it (True) or predicts it (False);
    None: the reading that agrees better with the lexicon, the predicting step without one."""
    att = translation.attention
    if att is None or not translation.pieces or len(translation.src_pieces) < 2:
        return []
    tgt = _fit(piece_words(translation.pieces), len(translation.text.split()))
    src = piece_words(translation.src_pieces[:-1])
    if source_text is not None:
        src = _fit(src, len(source_text.split()))
    n_t, n_s = tgt[-1] + 1, src[-1] + 1
    lex = None
    if lexicon is not None and source_text is not None:
        lex = lexicon.matrix(source_text.split()[:n_s], translation.text.split()[:n_t])
    if shift is None:
        readings = [att] if lex is None else [att, att[1:]]
    else:
        readings = [att[1:] if shift else att]
    scores = max((_word_scores(rows, tgt, src, n_t, n_s) for rows in readings),
                 key=lambda scored: 0.0 if lex is None else _agreement(scored, lex))
    if lex is not None:
        scores = [[ATTENTION_SHARE * a + (1.0 - ATTENTION_SHARE) * d for a, d in zip(row, lex_row)]
                  for row, lex_row in zip(scores, lex)]
    pairs = {(_best(row), t) for t, row in enumerate(scores) if any(row)}
    covered = {s for s, _ in pairs}
    for s in range(n_s):
        if s not in covered:
            pairs.add((s, max(range(n_t), key=lambda t: scores[t][s])))
    return sorted(pairs)


def _best(row: Sequence[float]) -> int:
    """The index of the highest score of `row` (the first of equals)."""
    return max(range(len(row)), key=row.__getitem__)


def _word_scores(rows: Sequence[Sequence[float]], tgt: list[int], src: list[int], n_t: int,
                 n_s: int) -> list[list[float]]:
    """[n_t][n_s]: each target word's attention summed over its pieces' rows and each source word's
    pieces, scaled to sum 1 (a word without a row stays all zero)."""
    scores = [[0.0] * n_s for _ in range(n_t)]
    for row, t in zip(rows, tgt):
        for weight, s in zip(row, src):
            scores[t][s] += weight
    for row in scores:
        total = sum(row)
        if total > 0:
            row[:] = [w / total for w in row]
    return scores


def _agreement(scores: list[list[float]], lex: list[list[float]]) -> float:
    """How far an attention reading agrees with the lexicon: the lexicon score of each target word's best
    source word by the attention, summed."""
    return sum(lex_row[_best(row)] for row, lex_row in zip(scores, lex) if any(row))
