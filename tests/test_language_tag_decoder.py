"""data.language_tag: decoder: a multilingual model whose target-language tag is the decoder's first
token (M2M-100 style) instead of the first source piece (seq2seq.text.languages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config import ConfigError, DataConfig, TokenizerConfig, from_dict
from seq2seq.data import prepare
from seq2seq.data.sampling import SubwordSampler
from seq2seq.text.languages import (
    LanguageError, corpus_prefix, decoder_prefix, reserved_pieces, source_prefix, target_reserved_pieces,
    valid_prefix,
)
from seq2seq.text.tokenizer import EOS_ID
from test_multilingual import SENTENCES, WORDS, corpora, data_section, own_words, train_tiny  # noqa: F401 - the fixture

DECODER = {"language_tag": "decoder"}


def test_the_tag_position_is_checked_and_moves_the_language_tag_to_the_target():
    with pytest.raises(ConfigError, match="data.language_tag: decoder is for multilingual models"):
        from_dict(DataConfig, {"train_src": "a", "train_tgt": "b", "language_tag": "decoder"}, "data.")
    with pytest.raises(ConfigError, match=r"'data.language_tag': 'target' is not one of \['source', 'decoder', 'both'\]"):
        from_dict(DataConfig, {"language_tag": "target"}, "data.")
    cfg = from_dict(DataConfig, data_section({k: ("s", "t") for k in ("train_de", "train_fr", "valid_de", "valid_fr")},
                                             **DECODER))
    assert reserved_pieces(cfg) == ["<BT>"] and target_reserved_pieces(cfg) == ["<2de>", "<2fr>"]
    assert [corpus_prefix(cfg, c) for c in cfg.corpora] == [[], ["<BT>"]]
    assert [valid_prefix(cfg, v) for v in cfg.valid_sets] == [[], []]
    assert decoder_prefix(cfg, "fr") == ["<2fr>"] and source_prefix(cfg, "fr", ["<BT>"]) == ["<BT>"]
    with pytest.raises(LanguageError, match="unknown target language 'es'"):
        source_prefix(cfg, "es")  # the language is checked wherever its tag goes
    source = from_dict(DataConfig, {**data_section({k: ("s", "t") for k in ("train_de", "train_fr", "valid_de",
                                                                              "valid_fr")})})
    assert decoder_prefix(source, "fr") == [] and target_reserved_pieces(source) == []


@pytest.mark.parametrize("joint", [True, False])
def test_prepare_starts_each_target_with_its_language_tag(tmp_path, corpora, joint):  # noqa: F811
    data = prepare(from_dict(DataConfig, data_section(corpora, **DECODER)),
                   TokenizerConfig(vocab_size=60, joint=joint), tmp_path / "out")
    src_tok, tgt_tok = data.tokenizers.src, data.tokenizers.tgt
    tags = {lang: tgt_tok.piece_id(f"<2{lang}>") for lang in ("de", "fr")}
    assert None not in tags.values()
    if not joint:
        assert src_tok.piece_id("<2de>") is None and src_tok.piece_id("<BT>") is not None
    de, fr = data.corpora
    assert (de.tgt_prefix, fr.tgt_prefix, de.prefix, fr.prefix) == (["<2de>"], ["<2fr>"], [], ["<BT>"])
    for part, lang in ((de, "de"), (fr, "fr")):
        for row in list(part.rows)[:50]:
            r = data.train[row]
            assert r["tgt_ids"] == [tags[lang]] + tgt_tok.encode([r["tgt"]])[0]
            assert r["tgt_len"] == len(r["tgt_ids"]) + 1
            assert r["src_ids"] == part.prefix_ids + src_tok.encode([r["src"]])[0] + [EOS_ID]
    vde, vfr = data.valid_sets
    assert all(data.valid[i]["tgt_ids"][0] == tags["de"] for i in vde.rows)
    assert all(data.valid[i]["tgt_ids"][0] == tags["fr"] for i in vfr.rows)
    # the tag counts towards neither max_len nor the length ratio
    longest = max(len(tgt_tok.encode([t])[0]) for t in data.train["tgt"])
    again = prepare(from_dict(DataConfig, data_section(corpora, max_len=longest, max_ratio=100.0, **DECODER)),
                    TokenizerConfig(vocab_size=60, joint=joint), tmp_path / "out")
    assert len(again.train) == 380 and again.report.too_long == 0

    # subword regularization keeps the tag before every sampled segmentation
    rows = list(range(len(data.train)))
    sampler = SubwordSampler(data.tokenizers, data.train["src"], data.train["tgt"], data.train["src_ids"],
                             data.train["tgt_ids"], alpha=0.1,
                             tgt_prefixes=[[tags["de"]] if i < 300 else [tags["fr"]] for i in rows])
    _, tgt_ids = sampler.epoch(1)
    assert all(t[0] == (tags["de"] if i < 300 else tags["fr"]) for i, t in enumerate(tgt_ids))
    assert all(tags["de"] not in t[1:] and tags["fr"] not in t[1:] for t in tgt_ids)


@pytest.fixture(scope="module")
def decoder_model(tmp_path_factory, corpora) -> Path:  # noqa: F811
    """en->de and en->fr, the language tag on the decoder, d_model 32 (160 steps)."""
    return train_tiny(tmp_path_factory.mktemp("decoder_tag"), data_section(corpora, **DECODER))


def test_a_decoder_tagged_model_validates_per_direction_and_translates_into_the_chosen_language(
        decoder_model, corpora, tmp_path):  # noqa: F811
    from seq2seq.inference.translator import Translator

    meta = json.loads((decoder_model / "metadata.json").read_text())
    last = meta["last_validation"]
    translator = Translator.load(decoder_model)  # the last step's weights, which that validation scored
    for lang in ("de", "fr"):  # validation forced each direction's tag and left it out, as translation does
        src, ref = (Path(p).read_text().splitlines() for p in corpora[f"valid_{lang}"])
        hyps = translator.translate(src, tgt_lang=lang, strategy="greedy")
        assert last[f"valid_bleu/en-{lang}"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [ref]).score, abs=0.01)
    assert [c["tgt_prefix"] for c in meta["corpora"]] == [["<2de>"], ["<2fr>"]]
    src = tmp_path / "src.txt"
    src.write_text("\n".join(SENTENCES) + "\n")
    for lang in ("de", "fr"):
        result = CliRunner().invoke(cli, ["translate", str(decoder_model), "-i", str(src), "--tgt-lang", lang])
        assert result.exit_code == 0, result.output
        lines = result.stdout.split("\n")[:-1]
        assert len(lines) == len(SENTENCES) and own_words(lines, lang) > 0.66 and "<2" not in result.stdout
        nbest = translator.translate_nbest(SENTENCES, tgt_lang=lang, beam=3, nbest=2)
        assert [n[0].text for n in nbest] == translator.translate(SENTENCES, tgt_lang=lang, beam=3)
        tag = translator.tokenizers.tgt.piece_id(f"<2{lang}>")
        for t in (h for n in nbest for h in n):
            assert tag not in t.token_ids and len(t.token_logprobs) == len(t.token_ids) + 1  # + EOS, as ever
            assert t.logprob == pytest.approx(sum(t.token_logprobs), abs=1e-4)
    # the forced tag comes before a user's prefix
    word = WORDS["de"][4]
    steered = translator.translate_nbest(SENTENCES[:3], tgt_lang="de", prefix=[word] * 3, beam=2)
    assert all(n[0].text.split()[0] == word for n in steered)
    result = CliRunner().invoke(cli, ["translate", str(decoder_model), "-i", str(src)])
    assert result.exit_code == 1 and "this model is multilingual: choose a target language, one of de, fr" in \
        result.output


def test_an_ensemble_refuses_members_that_put_the_tag_in_different_places(decoder_model, tmp_path):
    import shutil

    source_tagged = tmp_path / "source_tagged"  # the same model, said to take the tag on the source
    shutil.copytree(decoder_model, source_tagged)
    config = yaml.safe_load((source_tagged / "config.yaml").read_text())
    config["data"]["language_tag"] = "source"
    (source_tagged / "config.yaml").write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(cli, ["translate", str(decoder_model), str(source_tagged), "--tgt-lang", "de"],
                                input=SENTENCES[0] + "\n")
    assert result.exit_code == 1
    assert "put the language tag in different places (data.language_tag source and decoder)" in result.output


@pytest.mark.parametrize("to", ["ctranslate2", "hf"])
def test_export_refuses_what_the_engine_could_not_translate(decoder_model, tmp_path, to):
    """Neither engine can force a language tag per call (nor does CTranslate2 take one on the source)."""
    pytest.importorskip("ctranslate2" if to == "ctranslate2" else "transformers")
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", str(decoder_model), "--to", to, str(out)])
    assert result.exit_code == 1 and not out.exists()
    expected = "is multilingual (de, fr): the CTranslate2 engine has no language tags" if to == "ctranslate2" else \
        "starts its translations with a forced language tag (data.language_tag: decoder)"
    assert expected in result.output and "Traceback" not in result.output
