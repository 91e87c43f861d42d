"""Forced decoding (`seq2seq score`, seq2seq.inference.scoring) and dual conditional cross-entropy
(seq2seq.data.dcce), on the session's tiny model (the `tiny_model_dir` fixture)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import run_benchmark
from test_multilingual import corpora  # noqa: F401 - the fixture
from seq2seq.cli import cli
from seq2seq.data.dcce import DcceError, DcceScore, DualCrossEntropyFilter, dcce, threshold_for_share
from seq2seq.inference.scoring import DualScorer, PairScore, ScoringError, dual_scores, score_ids, score_pairs
from seq2seq.inference.translator import Translator


@pytest.fixture(scope="module")
def translator(tiny_model_dir) -> Translator:
    return Translator.load(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def pairs(multi30k_small) -> tuple[list[str], list[str]]:
    """The first 24 validation pairs (en, de)."""
    src = multi30k_small["val.en"].read_text(encoding="utf-8").splitlines()[:24]
    tgt = multi30k_small["val.de"].read_text(encoding="utf-8").splitlines()[:24]
    return src, tgt


def run(args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


# --------------------------------------------------------------------------------------------
# forced decoding agrees with the search
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{"greedy": True}, {"beam": 3, "nbest": 3}])
def test_the_forced_score_of_the_models_own_output_is_the_logprob_the_search_reported(translator, pairs, options):
    src, _ = pairs
    nbest = translator.translate_nbest(src, **options)
    hyps = [(s, h) for s, n in zip(src, nbest) for h in n]
    assert len(hyps) >= len(src)
    scores = score_ids(translator, [s for s, _ in hyps], [h.token_ids for _, h in hyps])
    for (_, h), s in zip(hyps, scores):
        assert s.n_tokens == len(h.token_ids) + 1 == len(h.token_logprobs)
        assert s.logprob == pytest.approx(h.logprob, abs=1e-4)
        assert s.token_logprobs == pytest.approx(h.token_logprobs, abs=1e-4)
        assert list(s.pieces) == h.pieces
    # as text: the target tokenizer's segmentation of it (the tiny model's outputs are seldom its own)
    texts = [h.text for _, h in hyps]
    by_text = score_pairs(translator, [s for s, _ in hyps], texts)
    again = score_ids(translator, [s for s, _ in hyps], translator.tokenizers.tgt.encode(texts))
    assert [s.logprob for s in by_text] == [s.logprob for s in again]
    for (_, h), s in zip(hyps, by_text):
        if translator.tokenizers.tgt.encode([h.text])[0] == h.token_ids:
            assert s.logprob == pytest.approx(h.logprob, abs=1e-4)


def test_translate_json_reports_the_logprob_that_scoring_its_tokens_gives(tiny_model_dir, pairs, tmp_path, translator):
    src, _ = pairs
    (tmp_path / "src.txt").write_text("\n".join(src[:6]) + "\n", encoding="utf-8")
    translated = run(["translate", tiny_model_dir, "--greedy", "--json", "-i", tmp_path / "src.txt"])
    assert translated.exit_code == 0, translated.output
    objects = [json.loads(line) for line in translated.stdout.splitlines()]
    tgt = translator.tokenizers.tgt
    scores = score_ids(translator, src[:6], [[tgt.piece_id(p) for p in o["tokens"]] for o in objects])
    for o, s in zip(objects, scores):
        assert s.logprob == pytest.approx(o["logprob"], abs=2e-4)  # (printed to 4 decimals)


def test_an_ensemble_scores_its_mixed_distribution_as_its_search_takes_it(tiny_model_dir, pairs):
    src, _ = pairs
    ensemble = Translator.load([tiny_model_dir, tiny_model_dir], device="cpu", ensemble_weights=[0.3, 0.7])
    hyps = [n[0] for n in ensemble.translate_nbest(src[:6], greedy=True)]
    for h, s in zip(hyps, score_ids(ensemble, src[:6], [h.token_ids for h in hyps])):
        assert s.logprob == pytest.approx(h.logprob, abs=1e-4)


@pytest.mark.parametrize("batch_tokens", [1, 60])
def test_scores_do_not_depend_on_the_batching(translator, pairs, batch_tokens):
    src, tgt = pairs
    whole = score_pairs(translator, src, tgt, batch_tokens=100_000)
    split = score_pairs(translator, src, tgt, batch_tokens=batch_tokens)
    for a, b in zip(whole, split):
        assert a.n_tokens == b.n_tokens and a.pieces == b.pieces
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)


def test_sum_mean_and_cross_entropy(translator, pairs):
    src, tgt = pairs
    s = score_pairs(translator, src[:1], tgt[:1])[0]
    assert s.logprob == pytest.approx(sum(s.token_logprobs), abs=1e-9)
    assert s.n_tokens == len(s.pieces) + 1
    assert s.normalized == pytest.approx(s.logprob / s.n_tokens)
    assert s.cross_entropy == -s.normalized > 0
    assert all(x <= 0 for x in s.token_logprobs)


# --------------------------------------------------------------------------------------------
# edge cases: empty sides, overlong targets, mismatched inputs
# --------------------------------------------------------------------------------------------


def test_an_empty_target_scores_eos_alone_and_an_empty_source_is_not_scored(translator):
    notes = []
    empty_tgt, empty_src, both = score_pairs(translator, ["A dog runs.", "  ", ""], ["", "Ein Hund.", ""],
                                             first_line=7, warn=notes.append)
    assert empty_tgt.n_tokens == 1 and empty_tgt.pieces == () and empty_tgt.skipped is None
    assert empty_tgt.logprob == empty_tgt.token_logprobs[0] < 0
    assert empty_tgt.logprob == pytest.approx(score_ids(translator, ["A dog runs."], [[]])[0].logprob)
    for s in (empty_src, both):
        assert s.skipped == "empty source" and s.n_tokens == 0 and s.logprob == -math.inf
        assert s.normalized == -math.inf and s.to_json()["logprob"] is None
    assert [(d.line, d.code) for d in notes] == [(8, "empty_source"), (9, "empty_source")]


def test_an_overlong_target_is_cut_to_the_decoders_positions_with_a_warning(translator):
    notes = []
    (s,) = score_pairs(translator, ["a dog"], ["ein Hund " * 300], first_line=3, warn=notes.append)
    room = translator.config.model.max_positions - 1
    assert s.truncated and s.n_tokens == room + 1 and len(s.pieces) == room
    assert [(d.line, d.field, d.code) for d in notes] == [(3, "target", "target_truncated")]
    assert s.to_json()["truncated"] is True


def test_sources_and_targets_of_different_counts_and_unknown_ids_are_refused(translator):
    with pytest.raises(ScoringError, match="2 sources but 1 targets"):
        score_pairs(translator, ["a", "b"], ["x"])
    with pytest.raises(ScoringError, match="2 sources but 1 targets"):
        score_ids(translator, ["a", "b"], [[5]])
    with pytest.raises(ScoringError, match=r"^line 4: target token id 300 is not in the model's 300-piece target"):
        score_ids(translator, ["a", "b"], [[5], [7, 300]], first_line=3)


def test_the_command_refuses_files_of_different_lengths_naming_both(tiny_model_dir, tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("eins\nzwei\n", encoding="utf-8")
    result = run(["score", tiny_model_dir, "--src", tmp_path / "a.en", "--tgt", tmp_path / "a.de"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert re.search(r"a\.en has 3 lines but .*a\.de has 2: sources and targets must be line-parallel", lines[0])


def test_a_tsv_line_that_is_not_two_fields_is_refused_naming_its_line(tiny_model_dir):
    result = run(["score", tiny_model_dir, "--chunk-lines", "1"], input="a dog\tein Hund\nno tab here\n")
    assert result.exit_code == 1
    assert "stdin line 2: 1 tab-separated fields; give source<TAB>target" in result.stderr
    assert result.stdout.count("\n") == 1  # the first chunk's line was written before


def test_the_command_reads_tsv_from_stdin_and_prints_json_and_normalized_scores(tiny_model_dir, translator, pairs):
    src, tgt = pairs
    tsv = "".join(f"{s}\t{t}\n" for s, t in zip(src[:3], tgt[:3])) + "\tein Hund\n"
    expected = score_pairs(translator, src[:3] + [""], tgt[:3] + ["ein Hund"])
    plain = run(["score", tiny_model_dir], input=tsv)
    assert plain.exit_code == 0, plain.output
    assert plain.stdout.splitlines() == [f"{s.logprob:.4f}" for s in expected[:3]] + ["-inf"]
    assert "line 4: an empty source: the pair is not scored" in plain.stderr
    normalized = run(["score", tiny_model_dir, "--normalize", "--chunk-lines", "2"], input=tsv)
    assert normalized.stdout.splitlines()[:3] == [f"{s.normalized:.4f}" for s in expected[:3]]
    as_json = run(["score", tiny_model_dir, "--json"], input=tsv)
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert objects[0]["logprob"] == round(expected[0].logprob, 4)
    assert objects[0]["n_tokens"] == len(objects[0]["token_logprobs"]) == len(objects[0]["tokens"]) + 1
    assert objects[3]["logprob"] is None and objects[3]["skipped"] == "empty source"
    assert objects[3]["diagnostics"][0]["code"] == "empty_source"


def test_the_output_file_holds_what_stdout_would_and_never_replaces_an_input(tiny_model_dir, pairs, tmp_path):
    src, tgt = pairs
    (tmp_path / "s").write_text("\n".join(src[:3]) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(tgt[:3]) + "\n", encoding="utf-8")
    to_stdout = run(["score", tiny_model_dir, "--src", tmp_path / "s", "--tgt", tmp_path / "t"])
    to_file = run(["score", tiny_model_dir, "--src", tmp_path / "s", "--tgt", tmp_path / "t", "-o", tmp_path / "o"])
    assert to_file.exit_code == 0 and to_file.stdout == ""
    assert (tmp_path / "o").read_text(encoding="utf-8") == to_stdout.stdout
    onto_input = run(["score", tiny_model_dir, "--src", tmp_path / "s", "--tgt", tmp_path / "t", "-o", tmp_path / "t"])
    assert onto_input.exit_code == 1 and (tmp_path / "t").read_text(encoding="utf-8").startswith(tgt[0])


def test_bad_option_combinations_are_usage_errors(tiny_model_dir, tmp_path):
    (tmp_path / "a").write_text("x\n", encoding="utf-8")
    for args, message in ((["--src", tmp_path / "a"], "give both --src and --tgt"),
                          (["--src", tmp_path / "a", "--tgt", tmp_path / "a", "-i", tmp_path / "a"], "not both"),
                          (["--dcce", tiny_model_dir, "--normalize"], "drop --normalize"),
                          (["--src-lang", "de"], "goes with --dcce")):
        result = run(["score", tiny_model_dir, *args])
        assert result.exit_code == 2 and message in result.output, result.output


# --------------------------------------------------------------------------------------------
# dual conditional cross-entropy
# --------------------------------------------------------------------------------------------


def test_dcce_formula_on_made_up_numbers():
    assert dcce(2.0, 3.0) == pytest.approx(1.0 + 2.5)
    assert dcce(3.0, 2.0) == dcce(2.0, 3.0)
    assert dcce(1.5, 1.5) == pytest.approx(1.5)  # equal directions: their cross-entropy alone
    assert dcce(0.0, 0.0) == 0.0 and DcceScore(0.0, 0.0).adequacy == 1.0
    s = DcceScore(0.5, 1.25)
    assert s.score == pytest.approx(0.75 + 0.875)
    assert s.adequacy == pytest.approx(math.exp(-1.625))
    assert dcce(math.inf, 1.0) == math.inf and DcceScore(math.inf, 1.0).adequacy == 0.0
    forward = PairScore(-6.0, 3, (-1.0, -2.0, -3.0))  # H_f = 2
    backward = PairScore(-12.0, 4, (-3.0,) * 4)  # H_b = 3
    assert DcceScore.of(forward, backward) == DcceScore(2.0, 3.0)
    assert DcceScore.of(forward, PairScore(-math.inf, 0, (), skipped="empty source")).adequacy == 0.0
    assert DcceScore(2.0, 3.0).to_json() == {"adequacy": float(f"{math.exp(-3.5):.6g}"), "dcce": 3.5,
                                             "h_forward": 2.0, "h_backward": 3.0}


def scores_of(adequacies):
    """DcceScores with these adequacies (h_f = h_b = -log a)."""
    return [DcceScore(-math.log(a), -math.log(a)) if a > 0 else DcceScore(math.inf, math.inf) for a in adequacies]


def test_the_filter_keeps_pairs_at_or_above_a_threshold():
    scores = scores_of([0.9, 0.2, 0.5, 0.0, 0.5000001])
    assert DualCrossEntropyFilter(threshold=0.5).decide(scores) == [True, False, True, False, True]
    assert DualCrossEntropyFilter(threshold=1.0).decide(scores) == [False] * 5


def test_the_filter_keeps_the_best_share_ties_in_input_order():
    scores = scores_of([0.3, 0.9, 0.3, 0.1, 0.6, 0.0])
    assert DualCrossEntropyFilter(keep_share=0.5).decide(scores) == [True, True, False, False, True, False]
    assert DualCrossEntropyFilter(keep_share=1 / 6).decide(scores) == [False, True, False, False, False, False]
    assert DualCrossEntropyFilter(keep_share=1.0).decide(scores) == [True] * 5 + [False]  # never the unscored
    assert DualCrossEntropyFilter(keep_share=0.5).decide([]) == []
    adequacy = [s.adequacy for s in scores]
    assert threshold_for_share(adequacy, 0.5) == pytest.approx(0.3)
    assert threshold_for_share(adequacy, 0.01) == 1.0


@pytest.mark.parametrize("settings, message", [({}, "a threshold or a keep_share"),
                                               ({"threshold": 0.5, "keep_share": 0.5}, "one of them"),
                                               ({"threshold": 0.0}, r"in \(0, 1\]"),
                                               ({"threshold": 1.5}, r"in \(0, 1\]"),
                                               ({"keep_share": 0.0}, r"keep_share must be in \(0, 1\]")])
def test_a_filter_set_up_wrongly_is_refused(settings, message):
    with pytest.raises(DcceError, match=message):
        DualCrossEntropyFilter(**settings)
    with pytest.raises(DcceError, match="no models to score with"):
        DualCrossEntropyFilter(threshold=0.5).select(["a"], ["b"])


def test_the_filter_scores_with_both_models_each_in_its_direction(translator, pairs):
    src, tgt = pairs
    src, tgt = src[:6], tgt[:6]
    f, b = score_pairs(translator, src, tgt), score_pairs(translator, tgt, src)
    dual = dual_scores(translator, translator, src, tgt)
    for d, x, y in zip(dual, f, b):
        assert d.h_forward == pytest.approx(-x.logprob / x.n_tokens)
        assert d.h_backward == pytest.approx(-y.logprob / y.n_tokens)
    keep = DualCrossEntropyFilter(DualScorer(translator, translator), keep_share=0.5)
    assert keep.select(src, tgt) == keep.decide(dual) and sum(keep.decide(dual)) == 3
    # as a cleaning pipeline's filter: the share of a sample becomes the threshold of the pairs after it
    best_half = keep.decide(dual)
    assert keep.prepare(list(zip(src, tgt))) == {"threshold": threshold_for_share([d.adequacy for d in dual], 0.5),
                                                 "sample_pairs": 6}
    reasons = keep.keep_batch([*zip(src, tgt), ("", "ein Hund"), ("a dog", "")])
    assert reasons == [None if k else "low_adequacy" for k in best_half] + ["not_scored", "not_scored"]
    assert keep.keep(src[0], tgt[0]) == reasons[0] and keep.keep_batch([]) == []


def test_the_dcce_option_prints_each_pairs_adequacy(tiny_model_dir, pairs, translator):
    src, tgt = pairs
    tsv = "".join(f"{s}\t{t}\n" for s, t in zip(src[:4], tgt[:4]))
    result = run(["score", tiny_model_dir, "--dcce", tiny_model_dir], input=tsv)
    assert result.exit_code == 0, result.output
    expected = dual_scores(translator, translator, src[:4], tgt[:4])
    assert result.stdout.splitlines() == [f"{d.adequacy:.6g}" for d in expected]
    as_json = run(["score", tiny_model_dir, "--dcce", tiny_model_dir, "--json"], input=tsv + "\tx\nx\t\n")
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert objects[0]["dcce"] == round(expected[0].score, 4)
    assert all(o["adequacy"] == 0.0 and o["dcce"] is None for o in objects[4:])
    assert objects[4]["warnings"] == ["an empty source: the pair is not scored"]
    assert objects[5]["warnings"] == ["backward model (target -> source): an empty source: the pair is not scored"]


# --------------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------------


def test_the_score_benchmark_runs_at_its_smallest(tiny_model_dir, multi30k_small):
    out = run_benchmark("score.py", "--model-dir", tiny_model_dir, "--src", multi30k_small["val.en"],
                        "--tgt", multi30k_small["val.de"], "--limit", 8, "--repeats", 1).stdout
    assert "translate --greedy (search)" in out and "score (the references, val.de)" in out
    gap = float(re.search(r"search logprob\| over the greedy outputs: (\S+)", out).group(1))
    assert gap < 1e-4


def test_the_dcce_noise_benchmark_runs_at_its_smallest(tiny_model_dir, multi30k_small):
    out = run_benchmark("dcce_noise.py", "--forward", tiny_model_dir, "--backward", tiny_model_dir,
                        "--src", multi30k_small["val.en"], "--tgt", multi30k_small["val.de"], "--limit", 40,
                        "--rate", 0.05).stdout
    assert "40 pairs, 5% noised per kind (25% in all); the best 75% kept" in out
    assert re.search(r"dcce \(forward \+ backward\)( +\d+%){5} +\d+\.\d%", out)


# --------------------------------------------------------------------------------------------
# a multilingual model whose language tag is forced on the decoder
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def decoder_tagged(tmp_path_factory, corpora) -> Translator:  # noqa: F811
    """en->de and en->fr, the language tag the decoder's first token (d_model 32, 160 steps)."""
    from test_multilingual import data_section, train_tiny

    model = train_tiny(tmp_path_factory.mktemp("decoder_tag"), data_section(corpora, language_tag="decoder"))
    return Translator.load(model, device="cpu")


def test_a_forced_language_tag_is_given_not_scored(decoder_tagged, corpora):  # noqa: F811
    src = Path(corpora["valid_de"][0]).read_text(encoding="utf-8").splitlines()[:8]
    for lang in ("de", "fr"):
        hyps = [n[0] for n in decoder_tagged.translate_nbest(src, greedy=True, tgt_lang=lang)]
        scores = score_ids(decoder_tagged, src, [h.token_ids for h in hyps], tgt_lang=lang)
        for h, s in zip(hyps, scores):
            assert s.n_tokens == len(h.token_ids) + 1 and list(s.pieces) == h.pieces
            assert s.logprob == pytest.approx(h.logprob, abs=1e-4)
    with pytest.raises(ValueError, match="this model is multilingual: choose a target language"):
        score_pairs(decoder_tagged, src[:1], ["x"])
