"""Metrics: golden BLEU, sacreBLEU agreement, signatures, multiple references, input checks."""

import pytest
import sacrebleu

from seq2seq.metrics import format_scores, score

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
