"""Soft terms (decoding.term_bias, seq2seq.inference.controls.TermBias): a bonus on the next piece of each annotated
term an output has not met yet."""

from __future__ import annotations

import pytest
import torch
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config import SearchConfig
from seq2seq.inference.controls import TermBias
from seq2seq.inference.search import hypothesis_score
from seq2seq.inference.translator import Translator
from seq2seq.text.terminology import TERM

V, EOS = 10, 3
CONTINUES = torch.zeros(V, dtype=torch.bool)
CONTINUES[7] = True  # piece 7 continues a word, every other piece starts one


def bonus_after(bias: TermBias, rows: int) -> torch.Tensor:
    """[rows, V]: what one step of `bias` adds to zero log-probabilities."""
    lprobs = torch.zeros(rows, V)
    bias.mask(lprobs, torch.zeros(rows, 1, dtype=torch.long), 0, None)
    return lprobs


def test_the_bonus_goes_to_each_unmet_terms_next_piece_and_stops_once_the_term_is_met():
    # unit 0: terms [5, 6] and [8]; unit 1: none; two rows per unit
    bias = TermBias([[[5, 6], [8]], []], group=2, bias=2.5, eos_id=EOS, device=torch.device("cpu"),
                    continuation=CONTINUES)
    first = bonus_after(bias, 4)
    assert first[0].tolist() == first[1].tolist() == [0, 0, 0, 0, 0, 2.5, 0, 0, 2.5, 0]
    assert not first[2:].any()  # a unit without terms: untouched
    bias.follow(None, None, torch.tensor([5, 8, 4, 4]))  # row 0 begins the first term, row 1 writes the second
    second = bonus_after(bias, 4)
    assert second[0].tolist() == [0, 0, 0, 0, 0, 0, 2.5, 0, 2.5, 0]  # the term's next piece, and the other term
    assert second[1].tolist() == [0, 0, 0, 0, 0, 2.5, 0, 0, 0, 0]  # [8] complete: no bonus while its word ends
    bias.follow(None, None, torch.tensor([6, 4, 4, 4]))  # row 1's "8" ends as a word: met for good
    third = bonus_after(bias, 4)
    assert third[0].tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 2.5, 0]
    assert third[1].tolist() == [0, 0, 0, 0, 0, 2.5, 0, 0, 0, 0]
    bias.follow(None, None, torch.tensor([7, 4, 4, 4]))  # "5 6 7": the word goes on, the term is not met
    assert bonus_after(bias, 4)[0].tolist() == [0, 0, 0, 0, 0, 2.5, 0, 0, 2.5, 0]  # begun again


def test_each_row_keeps_the_bonus_it_took_and_the_most_it_can_take_a_step():
    bias = TermBias([[[5, 6], [8]], []], group=2, bias=2.0, eos_id=EOS, device=torch.device("cpu"),
                    continuation=CONTINUES)
    everyone = torch.arange(4)
    assert [t.tolist() for t in bias.bonus(everyone)] == [[0, 0, 0, 0], [4.0, 4.0, 0, 0]]  # 2 unmet terms x 2
    bias.follow(None, None, torch.tensor([5, 8, 4, 4]))
    bias.follow(None, torch.tensor([1, 0, 2, 3]), torch.tensor([4, 6, 4, 4]))  # the rows swap parents
    taken, most = bias.bonus(everyone)
    assert taken.tolist() == [2.0, 4.0, 0, 0]  # row 0: "8" (met by the 4 after it); row 1: "5 6"
    # row 0: "5 6" left; row 1: "8" left, and "5 6", whose word may still go on ("5 6 7": begun again)
    assert most.tolist() == [2.0, 4.0, 0, 0]


def test_the_bonus_follows_the_beams_rows_and_its_live_units():
    bias = TermBias([[[5, 6]], [[9]]], group=2, bias=1.0, eos_id=EOS, device=torch.device("cpu"))
    bias.follow(None, None, torch.tensor([5, 4, 4, 4]))
    bias.follow(None, torch.tensor([1, 0, 2, 3]), torch.tensor([4, 4, 4, 4]))  # row 1 now continues row 0's "5"...
    assert bonus_after(bias, 4)[1, 6] == 0.0 and bonus_after(bias, 4)[1, 5] == 1.0  # ...then 4: begun again
    bias.follow(None, torch.tensor([0, 0, 2, 3]), torch.tensor([5, 5, 4, 4]))
    assert bonus_after(bias, 4)[:2, 6].tolist() == [1.0, 1.0]
    bias.follow(torch.tensor([1]), torch.tensor([2, 3]), torch.tensor([9, 4]))  # unit 0 ends; unit 1's rows stay
    after = bonus_after(bias, 2)
    assert after[0].tolist() == [0.0] * V and after[1, 9] == 1.0


def test_a_bias_of_zero_decodes_exactly_as_the_annotation_alone(term_model):
    translator = Translator.load(term_model, device="cpu")
    texts = ["A man in a red shirt.", "Two dogs play in the snow."]
    constraints = [["Schnee"], []]
    alone = translator.translate_nbest(texts, constraints=constraints, terms="annotate")
    zero = translator.translate_nbest(texts, constraints=constraints, terms="annotate", term_bias=0.0)
    assert [(h[0].text, h[0].score) for h in alone] == [(h[0].text, h[0].score) for h in zero]
    # the constrained beam guarantees the terms already: the bonus is for annotated terms only
    both = translator.translate_nbest(texts, constraints=constraints, terms="both")
    assert [(h[0].text, h[0].score) for h in both] == [
        (h[0].text, h[0].score) for h in translator.translate_nbest(texts, constraints=constraints, terms="both",
                                                                    term_bias=5.0)]


@pytest.mark.parametrize("search", [{"greedy": True}, {"beam": 4}])
def test_a_large_bias_puts_every_annotated_term_in_and_leaves_sources_without_terms_alone(term_model, search):
    translator = Translator.load(term_model, device="cpu")
    tok = translator.tokenizers.tgt
    texts = ["A man in a red shirt.", "Two dogs play in the snow.", "A woman sings."]
    constraints = [["Schnee", "Hund"], [], ["Gitarre"]]
    pushed = translator.translate_nbest(texts, constraints=constraints, terms="annotate", term_bias=30.0, **search)
    alone = translator.translate_nbest(texts, constraints=constraints, terms="annotate", **search)
    for hyps, terms in zip(pushed, constraints):
        assert TERM in hyps[0].src_pieces or not terms
        pieces = hyps[0].token_ids
        for term in terms:  # each term's pieces, in a row, in the output
            ids = tok.encode([term])[0]
            assert any(pieces[i: i + len(ids)] == ids for i in range(len(pieces))), (term, hyps[0].text)
    # a source without terms in the same batch decodes as it does without any bonus, bit for bit
    assert (pushed[1][0].text, pushed[1][0].score) == (alone[1][0].text, alone[1][0].score)
    assert pushed[0][0].text != alone[0][0].text


def test_the_option_is_checked_and_reaches_the_command_line_and_the_server(term_model, tmp_path):
    from seq2seq.serve.requests import Limits, parse_options

    translator = Translator.load(term_model, device="cpu")
    for bad, message in ((-1.0, "term_bias must be a finite number >= 0, got -1.0"),
                         (float("inf"), "term_bias must be a finite number, got inf")):
        with pytest.raises(ValueError, match=f"^{message}$"):
            translator.translate(["A dog."], constraints=[["Hund"]], terms="annotate", term_bias=bad)
    for bad in (-2, float("nan")):
        with pytest.raises(ValueError, match=f"^decoding.term_bias must be a finite number >= 0, got {bad}$"):
            SearchConfig(term_bias=bad)
    assert parse_options({"terms": "annotate", "term_bias": 2.5}, Limits()) == {"terms": "annotate", "term_bias": 2.5}
    (tmp_path / "in.txt").write_text("A man in a red shirt.\nTwo dogs play.\n")
    (tmp_path / "c.txt").write_text("Schnee\n\n")
    result = CliRunner().invoke(cli, ["translate", str(term_model), "-i", str(tmp_path / "in.txt"), "--json",
                                      "--constraints-file", str(tmp_path / "c.txt"), "--terms", "annotate",
                                      "--greedy", "--term-bias", "30"])
    assert result.exit_code == 0, result.output
    lines = [yaml.safe_load(line) for line in result.output.splitlines()]
    assert len(lines) == 2 and "Schnee" in lines[0]["text"]
    result = CliRunner().invoke(cli, ["translate", str(term_model), "-i", str(tmp_path / "in.txt"),
                                      "--term-bias", "-1"])
    assert result.exit_code != 0 and "term_bias must be a finite number >= 0, got -1" in result.output


def test_a_pushed_hypothesis_is_scored_with_its_bonus_after_the_length_penalty(term_model):
    translator = Translator.load(term_model, device="cpu")
    tok, lenpen = translator.tokenizers.tgt, translator.search_config().lenpen
    texts, constraints = ["A man in a red shirt.", "Two dogs play in the snow."], [["Schnee"], ["Frau", "Ball"]]
    for search in ({"greedy": True}, {"beam": 4}):
        for hyps, terms in zip(translator.translate_nbest(texts, constraints=constraints, terms="annotate",
                                                          term_bias=4.0, **search), constraints):
            hyp = hyps[0]
            replay = TermBias([[tok.encode([t])[0] for t in terms]], 1, 4.0, EOS, torch.device("cpu"),
                              translator._continuation())
            for token in hyp.token_ids:  # the bonus the hypothesis took, token by token
                replay.follow(None, None, torch.tensor([token]))
            taken = float(replay.bonus(torch.arange(1))[0])
            length = len(hyp.token_ids) + 1
            expected = hypothesis_score(hyp.logprob - taken, length, lenpen) + taken
            assert taken > 0 and hyp.score == pytest.approx(expected, abs=1e-4)
            assert hyp.score != pytest.approx(hypothesis_score(hyp.logprob, length, lenpen), abs=1e-3)


def test_the_exact_beam_with_a_bonus_finds_at_least_the_early_stopping_beams_best(term_model):
    translator = Translator.load(term_model, device="cpu")
    texts = ["A man in a red shirt.", "Two dogs play in the snow.", "A woman sings."]
    constraints = [["Schnee"], [], ["Gitarre", "Hund"]]
    for bias in (0.0, 1.5):
        early, exact = (translator.translate_nbest(texts, constraints=constraints, terms="annotate", term_bias=bias,
                                                   beam=4, early_stopping=stop) for stop in (True, False))
        assert all(b[0].score >= a[0].score - 1e-5 for a, b in zip(early, exact))
    plain = translator.translate_nbest(texts[1:2], beam=4, early_stopping=False)
    # no terms: no bonus (the score to float rounding: a batch of one sums in another order than a batch of three)
    assert exact[1][0].text == plain[0][0].text and exact[1][0].score == pytest.approx(plain[0][0].score, abs=1e-5)


def test_the_ctranslate2_engine_refuses_an_asked_bonus_and_warns_where_the_models_own_goes_unused(term_model, tmp_path):
    pytest.importorskip("ctranslate2", reason="the export extra: pip install -e '.[export]'")
    import shutil

    from seq2seq.deploy.ctranslate2 import export_ctranslate2
    from seq2seq.deploy.engine import CTranslate2Translator

    model = tmp_path / "model"
    shutil.copytree(term_model, model)
    config = yaml.safe_load((model / "config.yaml").read_text())
    config["decoding"]["term_bias"] = 2.0  # the model's own default, as the Multi30K config sets one
    (model / "config.yaml").write_text(yaml.safe_dump(config))
    engine = CTranslate2Translator.load(export_ctranslate2(model, tmp_path / "ct2"), threads=1)
    warnings: list = []
    engine.translate(["A dog runs."], warn=warnings.append)  # no terms: nothing to say
    assert warnings == []
    out = engine.translate(["A dog runs.", "A man."], constraints=[["Hund"], []], warn=warnings.append)
    assert len(out) == 2 and [w.message for w in warnings] == [
        "decoding.term_bias (2) is not available in CTranslate2: the annotated terms get no bonus (translate with "
        "--engine torch for it)"]
    with pytest.raises(ValueError, match="term_bias is not available with the ctranslate2 engine"):
        engine.translate(["A dog runs."], constraints=[["Hund"]], term_bias=2.0)
