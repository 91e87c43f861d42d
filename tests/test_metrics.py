"""Metrics: golden BLEU, sacreBLEU agreement, signatures, multiple references, WER/CER, input checks."""

import math
import random

import pytest
import sacrebleu

from seq2seq.text.metrics import cer, edit_distance, format_scores, reference_streams, score, wer

HYPS = ["the cat sat on the mat", "a dog runs in the park ."]
REFS = ["the cat sat on a mat", "the dog is running in the park ."]


def test_golden_bleu_by_hand():
    # 1- to 4-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths so BP = 1.
    result = score(["the cat sat on the mat"], [["the cat sat on a mat"]], metrics=("bleu",))
    assert set(result) == {"bleu"}
    assert result["bleu"]["score"] == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-6)


def test_agrees_with_sacrebleu_and_signature_names_the_settings():
    result = score(HYPS, [REFS])
    assert result["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert result["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    sig = result["bleu"]["signature"]
    assert "nrefs:1" in sig and "tok:13a" in sig and "case:mixed" in sig
    assert "nrefs:1" in result["chrf"]["signature"] and "case:mixed" in result["ter"]["signature"]
    assert 0 < result["ter"]["score"] < 100


def test_cased():
    lower = score(["the cat sat on the mat"], [["The cat sat on the mat"]])
    assert lower["bleu"]["score"] < 100 and lower["chrf"]["score"] < 100 and lower["ter"]["score"] > 0
    same = score(["The cat sat on the mat"], [["The cat sat on the mat"]])
    assert same["bleu"]["score"] == pytest.approx(100) and same["ter"]["score"] == 0


def test_multiple_references():
    exact = ["the cat sat on the mat", "a dog runs in the park ."]
    result = score(HYPS, [REFS, exact])
    assert result["bleu"]["score"] == pytest.approx(100)
    assert "nrefs:2" in result["bleu"]["signature"]
    assert result["ter"]["score"] == 0
    assert result["bleu"]["score"] > score(HYPS, [REFS])["bleu"]["score"]


def test_mismatched_counts_raise():
    with pytest.raises(ValueError, match="2 hypotheses"):
        score(HYPS, [REFS[:1]])
    with pytest.raises(ValueError, match="reference set 2"):
        score(HYPS, [REFS, REFS + ["extra"]])
    with pytest.raises(ValueError, match="unknown metric"):
        score(HYPS, [REFS], metrics=("meteor",))


def test_format_scores():
    text = format_scores(score(["the cat sat on the mat"], [["the cat sat on a mat"]]))
    lines = text.splitlines()
    assert lines[0].startswith("BLEU = 53.73 83.3/60.0/50.0/33.3")
    assert "signature: nrefs:1|case:mixed|eff:no|tok:13a" in lines[1]
    assert lines[2].startswith("chrF2 = ") and lines[4].startswith("TER = ")


def test_reference_streams_pad_short_rows_with_none():
    assert reference_streams([["a1", "a2"], ["b1"], "c1"]) == [["a1", "b1", "c1"], ["a2", None, None]]
    assert reference_streams([["a"], ["b"]]) == [["a", "b"]]
    with pytest.raises(ValueError, match="at least one reference"):
        reference_streams([["a"], []])


def test_multi_reference_bleu_with_a_varying_number_of_references_golden_by_hand():
    """Row 1 has two references, row 2 one. sacreBLEU drops a None reference for its segment, so
    the padded row scores as if its one reference were given twice; an empty string instead would
    be a real, empty reference (closest to the short hypothesis: a wrong brevity penalty)."""
    hyps = ["the cat sat on the mat", "a dog"]
    rows = [["the cat sat on a mat", "the cat sat on the mat"], ["the dog is running in the park ."]]
    result = score(hyps, reference_streams(rows), metrics=("bleu", "chrf"))
    # Clipped n-gram matches, max over each row's references: 1-grams 6+1 of 6+2, 2-grams 5+0 of 5+1,
    # 3-grams 4/4, 4-grams 3/3. Lengths: hypotheses 8; closest references 6 and 8, so 14.
    expected = 100 * math.exp(1 - 14 / 8) * (7 / 8 * 5 / 6 * 1 * 1) ** 0.25
    assert result["bleu"]["score"] == pytest.approx(expected, abs=1e-6)
    assert "nrefs:var" in result["bleu"]["signature"]
    repeated = [[rows[0][0], rows[1][0]], [rows[0][1], rows[1][0]]]
    assert result["chrf"]["score"] == pytest.approx(score(hyps, repeated, metrics=("chrf",))["chrf"]["score"])
    empty_padded = [[rows[0][0], rows[1][0]], [rows[0][1], ""]]
    assert score(hyps, empty_padded, metrics=("bleu",))["bleu"]["score"] > expected + 40


def test_edit_distance_golden_and_against_the_textbook_table():
    assert edit_distance("kitten", "sitting") == 3 and edit_distance("flaw", "lawn") == 2
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3 and edit_distance("", "") == 0
    assert edit_distance("the dog is running".split(), "a dog runs".split()) == 3

    def table(a, b):
        prev = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            cur = [i]
            for j, y in enumerate(b, 1):
                cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
            prev = cur
        return prev[-1]

    rng = random.Random(0)
    for n in range(600):  # short and long (over 64 symbols: several machine words of bits)
        a = [rng.choice("abcd") for _ in range(rng.randint(0, 12 if n < 500 else 150))]
        b = [rng.choice("abcde") for _ in range(rng.randint(0, 12 if n < 500 else 150))]
        assert edit_distance(a, b) == table(a, b), (a, b)


def test_wer_golden_by_hand():
    # row 1: one substitution (a -> the) in 6 reference words; row 2: the -> a, is -> runs, running
    # deleted: 3 errors in 4 words. Corpus WER = (1 + 3) / (6 + 4).
    hyps = ["the cat sat on the mat", "a dog runs"]
    assert wer(hyps, ["the cat sat on a mat", "the dog is running"]) == pytest.approx(40.0)
    assert wer(hyps, [["the cat sat on a mat", "the cat sat on the mat"], ["the dog is running"]]) == pytest.approx(40.0)
    assert wer(["", "a b c d"], ["x y", "a"]) == pytest.approx(100 * (2 + 3) / (2 + 1))  # deletions, insertions
    assert wer(["The cat ."], ["the cat"]) == pytest.approx(100.0)  # cased; punctuation is a word
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        wer(hyps, ["the cat sat on a mat"])


def test_cer_golden_by_hand():
    # kitten -> sitting: 3 edits in 6 characters; "a  b" is "a b" (whitespace runs count as one
    # space): 0 edits in 3. Corpus CER = 3 / 9.
    assert cer(["sitting", "a  b"], ["kitten", " a b "]) == pytest.approx(100 / 3)
    assert cer(["sitting"], [["kitten", "sitting"]]) == pytest.approx(50.0)  # the first reference
    assert cer(["ab"], ["ab"]) == 0.0 and cer(["x"], [""]) == pytest.approx(100.0)
