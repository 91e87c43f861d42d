"""Terms on the source (data.terminology, seq2seq.text.terminology, seq2seq.data.terminology) and how a
translation's terms reach the model (--terms annotate, constrain, both)."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config import ConfigError, load_config
from seq2seq.config.terminology import TerminologyConfig
from seq2seq.data.batching import make_target
from seq2seq.data.terminology import TermSampler, term_token_weights
from seq2seq.inference.steering import SteeringError, sentence_ends
from seq2seq.inference.translator import Translator
from seq2seq.text.terminology import TERM, annotate, base_forms, forms_of, stem, word_counts, words


def test_a_term_is_appended_after_its_marker():
    assert annotate("A man slices noodles. ", ["Nudeln", " schlanker"]) == \
        "A man slices noodles. <term> Nudeln <term> schlanker"
    assert annotate("A man.", []) == "A man."
    assert words("Ein Kinder-Fahrrad, 2 Männer's Hut.") == ["Ein", "Kinder-Fahrrad", "2", "Männer's", "Hut"]


def test_base_forms_join_a_words_inflections():
    counts = Counter({"Hund": 5, "Hunde": 9, "Hunden": 2, "schlanke": 4, "schlanker": 3, "schlank": 1,
                      "Rosen": 3, "Rose": 1, "Männer": 2, "Bier": 4})
    bases = base_forms(counts)
    assert bases["Hunde"] == bases["Hunden"] == bases["Hund"] == "Hund"  # the stem is a word of the corpus
    assert bases["schlanker"] == bases["schlanke"] == "schlank"
    assert bases["Rosen"] == bases["Rose"] == "Rosen"  # no word "Ros": the family's most frequent
    assert bases["Männer"] == "Männer" and bases["Bier"] == "Bier"  # no umlauts; "Bi" is too short a stem
    assert stem("schlanken") == "schlank" and "schlanken" in forms_of("schlank") and forms_of("Hund")[0] == "Hund"


def test_the_sampler_annotates_a_share_of_pairs_with_their_own_rarer_target_words():
    targets = [f"Ein Mann mit einem {w} und {v} ." for w, v in zip(["Hund", "Hut", "Ball", "Baum"] * 250,
                                                                  ["Katzen", "Rosen", "Frauen", "Bieren"] * 250)]
    counts = word_counts(targets)
    sampler = TermSampler(TerminologyConfig(share=0.3, max_terms=2, skip_frequent=5), counts)
    assert sampler.frequent == {"ein", "mann", "mit", "einem", "und"}
    rng = np.random.default_rng(0)
    chosen = [sampler.terms(t, rng) for t in targets]
    annotated = [c for c in chosen if c]
    assert 0.25 < len(annotated) / len(targets) < 0.35
    assert all(1 <= len(c) <= 2 and all(w in t.split()[4::2] for w in c) for c, t in zip(chosen, targets) if c)
    assert {len(c) for c in annotated} == {1, 2}
    chunks = list(sampler.annotated([(["s"] * 500, targets[:500]), (["s"] * 500, targets[500:])], seed=1))
    again = list(sampler.annotated([(["s"] * 500, targets[:500]), (["s"] * 500, targets[500:])], seed=1))
    assert chunks == again and any(TERM in s for s in chunks[0][0]) and chunks[0][1] == targets[:500]
    lemmas = TermSampler(TerminologyConfig(share=1.0, base_forms=True, skip_frequent=0),
                         Counter({"Hund": 3, "Hunde": 1}))
    assert lemmas.pair("s", "Hunde", rng) == (f"s {TERM} Hund", "Hunde")  # a base form, which the model inflects


def test_substituted_terms_replace_the_word_in_the_annotation_and_the_target_alike():
    counts = Counter({"Hund": 50, "Hut": 5, "Rosen": 1, "Ball": 20, "grüne": 7, "ein": 500, "mit": 400})
    sampler = TermSampler(TerminologyConfig(share=1.0, max_terms=1, skip_frequent=2, substitute=1.0), counts)
    assert sampler.pool == {False: ["grüne"], True: ["Ball", "Hund", "Hut", "Rosen"]}
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(20):
        source, target = sampler.pair("a dog", "ein Hund mit Hund.", rng)
        term = source.split(f" {TERM} ")[1]
        assert term in {"Ball", "Hut", "Rosen"} and target == f"ein {term} mit {term}."  # every occurrence
        seen.add(term)
    assert len(seen) > 1
    # whole words only ("Hund-Hut" is one word); a word the target has already is not drawn into it
    assert sampler.substituted("ein Hund mit Hund-Hut", ["Hund"], np.random.default_rng(3))[0] in \
        {f"ein {w} mit Hund-Hut" for w in ("Ball", "Hut", "Rosen")}
    assert sampler.substituted("Hund Ball Hut Rosen", ["Hund"], rng) == ("Hund Ball Hut Rosen", ["Hund"])
    # a lowercase term takes a lowercase word; none other: kept as it was
    assert sampler.pair("s", "ein grüne mit", rng) == (f"s {TERM} grüne", "ein grüne mit")
    never = TermSampler(TerminologyConfig(share=1.0, max_terms=1, skip_frequent=2), counts)
    assert never.pair("s", "ein Hund", np.random.default_rng(0)) == (f"s {TERM} Hund", "ein Hund")


def test_compound_substitutes_are_words_no_training_target_holds():
    counts = Counter({"Hund": 50, "Hut": 5, "Rosen": 1, "Blumenwiese": 2, "grüne": 7, "blaue": 3, "ein": 500,
                      "mit": 400})
    sampler = TermSampler(TerminologyConfig(share=1.0, max_terms=1, skip_frequent=2, substitute=1.0,
                                            substitute_with="compounds"), counts)
    assert sampler.heads == ["Hund", "Hut", "Rosen"]  # the short nouns ("Blumenwiese" is too long)
    rng = np.random.default_rng(0)
    seen = set()
    for target in ["ein Hund mit Hund.", "ein grüne mit"] * 10:
        source, substituted = sampler.pair("s", target, rng)
        term = source.split(f" {TERM} ")[1]
        first, second = re.fullmatch(r"(\w+?)(hund|hut|rosen)", term).groups()  # a candidate, then a head
        assert first in sampler.pool[target[4:5].isupper()] and term not in counts
        assert substituted == target.replace(target.split()[1], term)  # in the target alike
        seen.add(term)
    assert len(seen) > 5
    with pytest.raises(ConfigError, match="data.terminology.substitute_with must be one of words, compounds, "
                                          "got 'pairs'"):
        TerminologyConfig(substitute_with="pairs")


def test_the_rare_pick_annotates_the_rarest_candidate_words_first():
    counts = Counter({"Hund": 50, "Hut": 5, "Rosen": 1, "Ball": 20, "ein": 500, "mit": 400, "und": 300})
    sampler = TermSampler(TerminologyConfig(share=1.0, max_terms=2, skip_frequent=3, pick="rare"), counts)
    rng = np.random.default_rng(0)
    chosen = [sampler.terms("ein Hund mit Hut , Ball und Rosen", rng) for _ in range(50)]
    assert {tuple(c) for c in chosen} == {("Rosen",), ("Rosen", "Hut")}  # 1 or 2 terms, the rarest first
    with pytest.raises(ConfigError, match="data.terminology.pick must be one of random, rare, got 'often'"):
        TerminologyConfig(pick="often")


def test_a_terms_pieces_weigh_the_loss_weight_where_its_row_holds_them_in_order():
    tgt_in, tgt_out = make_target([[20, 21, 22, 23, 21], [21, 22]])  # tgt_out: ids + EOS (3), padded with 0
    positions = tgt_out.view(-1).ne(0).nonzero().squeeze(1)
    src_ids = [[30, 31, 9, 21, 22, 9, 20, 3], [30, 22, 3]]  # row 0's terms: pieces 21 22, and 20 (9: <term>)
    weights = term_token_weights(src_ids, tgt_out, positions, term_id=9, weight=4.0)
    # row 0: 20, then 21 22 in order; the last 21 alone is not the term; EOS and the plain row 1 weigh 1
    assert weights.tolist() == [4.0, 4.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    separate = term_token_weights(src_ids, tgt_out, positions, term_id=9, weight=4.0,
                                  to_target={21: 23, 22: 21, 20: None}.get)  # other vocabularies: 21 22 -> 23 21
    assert separate.tolist() == [1.0, 1.0, 1.0, 4.0, 4.0, 1.0, 1.0, 1.0, 1.0]


def test_the_section_is_checked():
    with pytest.raises(ConfigError, match="data.terminology.share"):
        TerminologyConfig(share=1.5)
    with pytest.raises(ConfigError, match="data.terminology.loss_weight must be >= 1, got 0.5"):
        TerminologyConfig(loss_weight=0.5)
    with pytest.raises(ConfigError, match="data.terminology.max_terms"):
        TerminologyConfig(max_terms=0)
    with pytest.raises(ConfigError, match="unknown config key 'data.terminology.shar'"):
        load_config(None, ["data.terminology.shar=0.3"])


def test_sentence_ends_counts_the_sentences_a_source_ends():
    assert [sentence_ends(t) for t in ("A dog.", "A dog", "Hi. A dog runs!", "Stop?! Go.")] == [1, 0, 2, 2]


def test_training_annotates_a_share_of_the_sources_and_keeps_the_marker_whole(term_model, multi30k_small):
    from seq2seq.data import prepare

    translator = Translator.load(term_model, device="cpu")
    assert translator.annotates_terms
    tok = translator.tokenizers.src
    assert tok.piece_id(TERM) is not None and tok.pieces(f"red {TERM} Hund") .count(TERM) == 1
    cfg = translator.loaded.config
    prepared = prepare(cfg.data, cfg.tokenizer, term_model / "again")
    sources = list(prepared.train["src"])
    share = sum(TERM in s for s in sources) / len(sources)
    assert 0.4 < share < 0.6
    for src in sources[:50]:
        if TERM in src:  # the appended words are words of the pair's own target
            i = sources.index(src)
            assert all(term in prepared.train["tgt"][i] for term in src.split(f" {TERM} ")[1:])
    assert not any(TERM in s for s in prepared.valid["src"])  # validation is plain


def test_terms_are_annotated_constrained_or_both(term_model):
    translator = Translator.load(term_model, device="cpu")
    texts = ["A man in a red shirt.", "Two dogs play."]
    constraints = [["Hund"], []]
    for mode in ("annotate", "both", None):
        out = translator.translate_nbest(texts, constraints=constraints, terms=mode)
        assert TERM in out[0][0].src_pieces and TERM not in out[1][0].src_pieces
        assert "Hund" in "".join(out[0][0].src_pieces[out[0][0].src_pieces.index(TERM):]).replace("\u2581", "")
    both = translator.translate_nbest(texts, constraints=constraints, terms="both")
    assert "Hund" in words(both[0][0].text)  # the beam guarantees it
    constrained = translator.translate_nbest(texts, constraints=constraints, terms="constrain")
    assert TERM not in constrained[0][0].src_pieces and "Hund" in words(constrained[0][0].text)
    plain = translator.translate_nbest(texts)
    assert TERM not in plain[0][0].src_pieces
    # annotation alone asks nothing of the search: greedy decoding takes it
    assert translator.translate(texts, constraints=constraints, terms="annotate", greedy=True)
    with pytest.raises(SteeringError, match="constraints need beam search"):
        translator.translate(texts, constraints=constraints, terms="both", greedy=True)
    with pytest.raises(SteeringError, match="terms must be one of annotate, constrain, both"):
        translator.translate(texts, constraints=constraints, terms="soft")


def test_a_model_trained_without_terms_refuses_annotations_with_one_line(tiny_model_dir, tmp_path):
    translator = Translator.load(tiny_model_dir, device="cpu")
    assert not translator.annotates_terms
    with pytest.raises(SteeringError, match=r"was not trained with terms on its sources \(data.terminology\); it "
                                            r"takes terms as constraints only \(terms constrain\)"):
        translator.translate(["A dog."], constraints=[["Hund"]], terms="annotate")
    (tmp_path / "in.txt").write_text("A dog.\n")
    (tmp_path / "c.txt").write_text("Hund\n")
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(tmp_path / "in.txt"),
                                      "--constraints-file", str(tmp_path / "c.txt"), "--terms", "both"])
    assert result.exit_code == 1 and "was not trained with terms" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_command_line_and_the_server_take_the_terms_mode(term_model, tmp_path):
    from seq2seq.serve.requests import Limits, RequestError, parse_options

    (tmp_path / "in.txt").write_text("A man in a red shirt.\nTwo dogs play.\n")
    (tmp_path / "c.txt").write_text("Hund\n\n")
    result = CliRunner().invoke(cli, ["translate", str(term_model), "-i", str(tmp_path / "in.txt"), "--json",
                                      "--constraints-file", str(tmp_path / "c.txt"), "--terms", "annotate",
                                      "--alignment"])
    assert result.exit_code == 0, result.output
    lines = [yaml.safe_load(line) for line in result.output.splitlines()]
    assert len(lines) == 2 and TERM in lines[0]["src_tokens"] and TERM not in lines[1]["src_tokens"]
    assert parse_options({"terms": "annotate", "beam": 4}, Limits()) == {"terms": "annotate", "beam": 4}
    with pytest.raises(RequestError, match="terms must be a string"):
        parse_options({"terms": 3}, Limits())
    from seq2seq.serve.demo import model_info  # the demo page offers the terms mode for such a model only

    assert model_info(Translator.load(term_model, device="cpu"), Limits())["annotates_terms"] is True


def test_a_lemma_term_is_met_by_any_of_its_forms_where_asked(term_model):
    from seq2seq.inference.inputs import SourceInput
    from seq2seq.inference.steering import encode_steering

    translator = Translator.load(term_model, device="cpu")
    tok = translator.tokenizers.tgt
    exact = encode_steering(SourceInput("A dog.", constraints=["roter Hund"]), tok, 1)
    assert exact.forms is None and exact.constraints == [tok.encode(["roter Hund"])[0]]
    inflected = encode_steering(SourceInput("A dog.", constraints=["roter Hund", "Ball"]), tok, 1, "both", "A dog.",
                                "inflected")
    assert tok.encode(["roter Hunde"])[0] in inflected.constraints and tok.encode(["Bälle"])[0] not in \
        inflected.constraints  # the last word's endings; no umlauts
    assert inflected.forms[0] == 0 and set(inflected.forms) == {0, 1} and inflected.sentence_ends == 1
    assert len(inflected.forms) == len(inflected.constraints) == len(set(map(tuple, inflected.constraints)))
    with pytest.raises(SteeringError, match="term_forms must be one of exact, inflected"):
        encode_steering(SourceInput("A dog.", constraints=["Hund"]), tok, 1, forms="any")
    out = translator.translate(["A man with a dog."], constraints=[["Hund"]], terms="constrain", term_forms="inflected")
    assert any(f in words(out[0]) for f in ("Hund", "Hunde", "Hunden", "Hundes"))


def test_the_benchmark_runs_at_its_smallest(term_model, tiny_model_dir, tmp_path):
    import json

    from conftest import MULTI30K, run_benchmark

    out = tmp_path / "rows.json"
    result = run_benchmark("terminology.py", "--model-dir", term_model, "--plain-dir", tiny_model_dir,
                           "--data-dir", MULTI30K, "--split", "val", "--limit", 12, "--threads", 1, "--json", out,
                           "--base-forms", "--term-bias", 30, "--rounds", 2)
    rows = json.loads(out.read_text())["rows"]
    assert [r["system"] for r in rows] == ["plain model", "plain model, constrained beam",
                                           "plain model, constrained beam, lemma as written", "terms model, no terms",
                                           "terms model, annotated", "terms model, annotated, term bias 30",
                                           "terms model, constrained beam", "terms model, both"]
    assert rows[0]["time"] == "1.00x" and all(re.fullmatch(r"\d+\.\d\dx", r["time"]) for r in rows)
    pushed = next(r for r in rows if r["system"] == "terms model, annotated, term bias 30")
    assert float(pushed["any form"].rstrip("%")) > float(rows[4]["any form"].rstrip("%"))  # the bonus adds terms
    forms = json.loads(out.read_text())["forms"]
    assert [r["system"] for r in forms] == [r["system"] for r in rows[1:] if r["system"] != "terms model, no terms"]
    assert all(re.fullmatch(r"\d+\.\d% of \d+", r[k]) for r in forms for k in ("lemma != form", "nouns", "other words"))
    constrained = next(r for r in rows if r["system"] == "terms model, both")
    assert float(constrained["any form"].rstrip("%")) == 100.0  # the beam guarantees every lemma as given
    assert "| system | terms | any form | window | BLEU |" in result.stdout
    assert "| system | lemma != form | nouns | other words |" in result.stdout
