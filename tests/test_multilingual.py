"""Several corpora, several languages: data.corpora with tags and weights, temperature sampling,
language tags on the source, validation per direction (seq2seq.text.languages, seq2seq.data.mixing)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config import (
    ConfigError, CorpusConfig, DataConfig, ModelConfig, TokenizerConfig, TrainingConfig, from_dict, to_dict,
)
from seq2seq.config.root import Config
from seq2seq.config.search import SearchConfig
from seq2seq.data import prepare
from seq2seq.data.batching import collate_text
from seq2seq.data.mixing import CorpusMix, MixedBatches, corpus_probabilities
from seq2seq.model.encoders.text_processor import TextProcessor
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.text.languages import (
    LanguageError, language_tag, model_languages, reserved_pieces, split_tags, tag_source, tag_language, source_prefix,
)
from seq2seq.text.tokenizer import EOS_ID, TokenizerPair
from seq2seq.training.trainer import Trainer
from seq2seq.training.validation import group_metrics

WORDS = {"en": "one two three four five six seven eight nine".split(),
         "de": "eins zwei drei vier fünf sechs sieben acht neun".split(),
         "fr": "un deux trois quatre cinq six sept huit neuf".split()}


def write_pairs(folder: Path, name: str, src: str, tgt: str, n: int, seed: int) -> tuple[str, str]:
    """n pairs of 1-5 number words, word for word from `src` to `tgt`: NAME.SRC and NAME.TGT."""
    rng = random.Random(seed)
    rows = [[rng.randrange(9) for _ in range(rng.randint(1, 5))] for _ in range(n)]
    paths = []
    for lang in (src, tgt):
        path = folder / f"{name}.{lang}"
        path.write_text("".join(" ".join(WORDS[lang][i] for i in row) + "\n" for row in rows), encoding="utf-8")
        paths.append(str(path))
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, tuple[str, str]]:
    folder = tmp_path_factory.mktemp("corpora")
    return {"train_de": write_pairs(folder, "train_de", "en", "de", 300, 1),
            "train_fr": write_pairs(folder, "train_fr", "en", "fr", 80, 2),
            "valid_de": write_pairs(folder, "valid_de", "en", "de", 20, 3),
            "valid_fr": write_pairs(folder, "valid_fr", "en", "fr", 20, 4)}


def data_section(corpora: dict, **extra) -> dict:
    (de_src, de_tgt), (fr_src, fr_tgt) = corpora["train_de"], corpora["train_fr"]
    (vde_src, vde_tgt), (vfr_src, vfr_tgt) = corpora["valid_de"], corpora["valid_fr"]
    return {"corpora": [{"train_src": de_src, "train_tgt": de_tgt, "src_lang": "en", "tgt_lang": "de"},
                        {"train_src": fr_src, "train_tgt": fr_tgt, "src_lang": "en", "tgt_lang": "fr", "weight": 2.0,
                         "tag": "<BT>"}],
            "sampling_temperature": 2.0,
            "valid_sets": [{"src": vde_src, "tgt": vde_tgt, "src_lang": "en", "tgt_lang": "de"},
                           {"src": vfr_src, "tgt": vfr_tgt, "src_lang": "en", "tgt_lang": "fr"}],
            **extra}


# ---------------------------------------------------------------------------------- the config


def test_corpora_and_valid_sets_parse_into_typed_sections_and_round_trip(corpora):
    cfg = from_dict(Config, {"data": data_section(corpora)})
    assert isinstance(cfg.data.corpora[0], CorpusConfig) and cfg.data.corpora[1].weight == 2.0
    assert cfg.data.corpora[0].weight == 1.0 and cfg.data.corpora[0].tag is None
    assert cfg.data.target_languages == ["de", "fr"] and cfg.data.multilingual
    assert [v.label(i) for i, v in enumerate(cfg.data.valid_sets)] == ["en-de", "en-fr"]
    assert from_dict(Config, to_dict(cfg)) == cfg
    assert from_dict(Config, yaml.safe_load(yaml.safe_dump(to_dict(cfg)))) == cfg
    # a Python caller may give plain dicts too
    assert DataConfig(corpora=[{"train_src": "a", "train_tgt": "b"}]).corpora[0] == CorpusConfig(train_src="a", train_tgt="b")


ONE = {"train_src": "a.en", "train_tgt": "a.de"}


@pytest.mark.parametrize("data, message", [
    ({"corpora": [{**ONE, "wieght": 2}]}, "unknown config key 'data.corpora[0].wieght'. Did you mean 'data.corpora[0].weight'?"),
    ({"corpora": [ONE], "train_src": "x", "train_tgt": "y"}, "set either data.corpora or data.train_src, not both"),
    ({"corpora": [ONE], "train": "x.tsv"}, "set either data.corpora or data.train, not both"),
    ({"corpora": [{"train_src": "a.en"}]}, "data.corpora[0].train_src and data.corpora[0].train_tgt must be set together"),
    ({"corpora": [{"src_lang": "en", "tgt_lang": "de"}]}, "data.corpora[0] needs its files"),
    ({"corpora": [{**ONE, "src_lang": "en"}]}, "data.corpora[0].src_lang and data.corpora[0].tgt_lang must be set together"),
    ({"corpora": [{**ONE, "src_lang": "en", "tgt_lang": "d e"}]}, "data.corpora[0].tgt_lang 'd e' is not a language code"),
    ({"corpora": [{**ONE, "src_lang": "en", "tgt_lang": "de"}, ONE]}, "data.corpora[1] names no languages"),
    ({"corpora": [{**ONE, "weight": 0}]}, "data.corpora[0].weight must be positive"),
    ({"corpora": [{**ONE, "tag": "BT"}]}, "data.corpora[0].tag 'BT' must look like <NAME>"),
    ({"corpora": [{**ONE, "tag": "</s>"}]}, "data.corpora[0].tag '</s>' must look like <NAME>"),
    ({"corpora": [{**ONE, "tag": "<2fr>"}]}, "data.corpora[0].tag '<2fr>' is a language tag"),
    ({"corpora": [ONE], "sampling_temperature": 0}, "data.sampling_temperature must be positive"),
    ({"corpora": "a.en"}, "config key 'data.corpora': expected a list"),
    ({"corpora": [{**ONE, "src_lang": "en", "tgt_lang": "de"}, {**ONE, "src_lang": "en", "tgt_lang": "fr"}],
      "valid_src": "v.en", "valid_tgt": "v.de"}, "validate them per direction with data.valid_sets"),
    ({"corpora": [{**ONE, "src_lang": "en", "tgt_lang": "de"}, {**ONE, "src_lang": "en", "tgt_lang": "fr"}],
      "valid_sets": [{"src": "v.en", "tgt": "v.es", "src_lang": "en", "tgt_lang": "es"}]},
     "data.valid_sets[0] has tgt_lang 'es'; a multilingual model's validation sets need one of its target languages (de, fr)"),
    ({"corpora": [ONE], "valid_sets": [{"src": "v.en"}]}, "data.valid_sets[0] needs both src and tgt"),
    ({"corpora": [ONE], "valid_sets": [{"src": "v.en", "tgt": "v.de"}], "valid": "v.tsv"},
     "set either data.valid_sets or data.valid, not both"),
    ({"corpora": [ONE], "valid_sets": [{"src": "a", "tgt": "b", "name": "x"}, {"src": "c", "tgt": "d", "name": "x"}]},
     "data.valid_sets[1] has the same name as data.valid_sets[0]"),
    ({"corpora": [ONE], "valid_sets": [{"src": "a", "tgt": "b", "nmae": "x"}]}, "unknown config key 'data.valid_sets[0].nmae'"),
    # data.languages: the languages of a model without training data (import-hf)
    ({"languages": ["de", "d e"]}, "data.languages[1] 'd e' is not a language code"),
    ({"languages": ["de", "fr", "de"]}, "data.languages[2] 'de' is listed twice"),
    ({"languages": "de"}, "config key 'data.languages': expected a list"),
    ({"languages": ["de", 3]}, "config key 'data.languages[1]': expected a string"),
    ({"languages": ["de", "fr"], "corpora": [{**ONE, "src_lang": "en", "tgt_lang": "de"}]},
     "data.languages is for a model without training data (an imported one); a training config names its target "
     "languages in data.corpora (tgt_lang), not with data.corpora"),
    ({"languages": ["de", "fr"], "train_src": "a.en", "train_tgt": "a.de"}, "not with data.train_src"),
    ({"languages": ["de", "fr"], "valid_src": "v.en", "valid_tgt": "v.de"},
     "data.languages names the target languages (de, fr): validate them per direction with data.valid_sets"),
])
def test_bad_corpora_are_refused_naming_the_key(data, message):
    with pytest.raises(ConfigError) as error:
        from_dict(Config, {"data": data})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_train_refuses_a_bad_corpus_in_one_line_and_writes_nothing(tmp_path, corpora):
    data = data_section(corpora)
    data["corpora"][1]["tag"] = "BT"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"data": data, "training": {"output_dir": str(tmp_path / "model")}}))
    result = CliRunner().invoke(cli, ["train", str(config)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "data.corpora[1].tag 'BT'" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "model").exists()


# ---------------------------------------------------------------------------------- the languages module


def test_languages_of_multilingual_and_bilingual_configs(corpora):
    cfg = from_dict(Config, {"data": data_section(corpora)})
    assert language_tag("de") == "<2de>" and language_tag("pt_BR") == "<2pt_BR>" and tag_language("<2de>") == "de"
    assert tag_language("<BT>") is None
    assert model_languages(cfg) == model_languages(cfg.data) == ["de", "fr"]
    assert reserved_pieces(cfg) == ["<2de>", "<2fr>", "<BT>"]
    assert source_prefix(cfg, "fr") == ["<2fr>"] and source_prefix(cfg, "de", ["<BT>"]) == ["<2de>", "<BT>"]
    with pytest.raises(LanguageError, match="choose a target language, one of de, fr"):
        source_prefix(cfg, None)
    with pytest.raises(LanguageError, match="unknown target language 'es'; this model's languages: de, fr"):
        source_prefix(cfg, "es")
    with pytest.raises(LanguageError, match="unknown corpus tag '<XX>'"):
        source_prefix(cfg, "de", ["<XX>"])
    with pytest.raises(LanguageError, match="not a language code"):
        language_tag("d e")

    # one target language (many-to-one, or back-translation mixed with real pairs): bilingual, no language tag
    bt = from_dict(Config, {"data": {"corpora": [ONE, {**ONE, "tag": "<BT>"}]}})
    assert model_languages(bt) == [] and reserved_pieces(bt) == ["<BT>"]
    assert model_languages(Config()) == [] and reserved_pieces(Config()) == []
    with pytest.raises(LanguageError, match="translates into one language only"):
        source_prefix(bt, "de")
    assert source_prefix(bt, None) == []


def test_declared_languages_of_a_model_without_corpora():
    """data.languages (what import-hf writes for a multilingual opus-mt model): the same languages, tags
    and refusals as corpora's, and even one declared language is a tag the model needs."""
    cfg = from_dict(Config, {"data": {"languages": ["zho_Hans", "de", "fra"]}})
    assert cfg.data.multilingual and model_languages(cfg) == ["de", "fra", "zho_Hans"]
    assert reserved_pieces(cfg) == ["<2de>", "<2fra>", "<2zho_Hans>"]
    assert source_prefix(cfg, "zho_Hans") == ["<2zho_Hans>"]
    with pytest.raises(LanguageError, match="choose a target language, one of de, fra, zho_Hans"):
        source_prefix(cfg, None)
    with pytest.raises(LanguageError, match="unknown target language 'fr'; this model's languages: de, fra, zho_Hans"):
        source_prefix(cfg, "fr")
    one = from_dict(Config, {"data": {"languages": ["fr"]}})
    assert model_languages(one) == ["fr"] and source_prefix(one, "fr") == ["<2fr>"]
    with pytest.raises(LanguageError, match="choose a target language, one of fr"):
        source_prefix(one, None)

    assert tag_source(" A dog. ", "de", ["<BT>"]) == "<2de> <BT> A dog."
    assert tag_source("A dog.", None) == "A dog."
    assert split_tags("<2de> <BT> A dog.") == (["<2de>", "<BT>"], "A dog.")
    assert split_tags("<b>old</b> news") == ([], "<b>old</b> news")


# ---------------------------------------------------------------------------------- the tokenizer and the tagged data


def test_tags_are_single_reserved_pieces_of_the_trained_tokenizer(tmp_path):
    texts = [" ".join(WORDS[lang][i % 9] for i in range(k, k + 4)) for lang in WORDS for k in range(30)]
    reserved = ["<2de>", "<2fr>", "<BT>"]
    joint = TokenizerPair.train(TokenizerConfig(vocab_size=60), texts, texts, tmp_path / "joint", reserved=reserved)
    assert joint.src.user_defined_pieces() == reserved
    for piece in reserved:
        token_id = joint.src.piece_id(piece)
        assert token_id is not None and joint.src.id_to_piece(token_id) == piece
    assert joint.src.piece_id("<2es>") is None and joint.src.piece_id("▁zwei") is not None
    assert not set(joint.src.encode(texts)[0]) & {joint.src.piece_id(p) for p in reserved}  # never from text
    separate = TokenizerPair.train(TokenizerConfig(joint=False, vocab_size=60), texts, texts, tmp_path / "sep",
                                   reserved=reserved)
    assert separate.src.user_defined_pieces() == reserved and separate.tgt.user_defined_pieces() == []
    plain = TokenizerPair.train(TokenizerConfig(vocab_size=60), texts, texts, tmp_path / "plain")
    plain_bpe = TokenizerPair.train(TokenizerConfig(model_type="bpe", vocab_size=60), texts, texts, tmp_path / "bpe")
    assert plain.src.user_defined_pieces() == [] == plain_bpe.src.user_defined_pieces()


def test_prepare_tags_each_source_with_its_target_language_and_corpus_tag(tmp_path, corpora):
    cfg = from_dict(DataConfig, data_section(corpora))
    data = prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "out")
    tok = data.tokenizers.src
    ids = {p: tok.piece_id(p) for p in ("<2de>", "<2fr>", "<BT>")}
    assert None not in ids.values()
    de, fr = data.corpora
    assert (de.start, de.size, fr.start, fr.size) == (0, 300, 300, 80) and len(data.train) == 380
    assert de.prefix == ["<2de>"] and fr.prefix == ["<2fr>", "<BT>"] and (de.weight, fr.weight) == (1.0, 2.0)
    for part, prefix in ((de, [ids["<2de>"]]), (fr, [ids["<2fr>"], ids["<BT>"]])):
        for row in part.rows:
            src_ids = data.train[row]["src_ids"]
            own = tok.encode([data.train[row]["src"]])[0]
            assert src_ids[: len(prefix)] == prefix and src_ids[len(prefix):] == own + [EOS_ID]
    vde, vfr = data.valid_sets
    assert (vde.name, vfr.name, vde.rows, vfr.rows) == ("en-de", "en-fr", range(0, 20), range(20, 40))
    assert all(data.valid[i]["src_ids"][0] == ids["<2de>"] for i in vde.rows)
    assert all(data.valid[i]["src_ids"][0] == ids["<2fr>"] for i in vfr.rows)
    assert all(data.valid[i]["src_ids"][1] != ids["<BT>"] for i in vfr.rows)  # corpus tags are for training only

    # the tags count towards neither max_len nor the length ratio: the longest sentences are kept at their own length
    longest = max(len(tok.encode([t])[0]) for t in data.train["src"])
    again = prepare(from_dict(DataConfig, data_section(corpora, max_len=longest, max_ratio=100.0)),
                    TokenizerConfig(vocab_size=60), tmp_path / "out")
    assert len(again.train) == 380 and again.report.too_long == 0

    # what training saw is what a TextProcessor tagged for the same language gives
    processor = TextProcessor()
    processor.bind(tok, max_positions=64)
    sentence = data.train[300]["src"]
    tagged = processor.with_target_language("fr", ["<BT>"])
    assert tagged.prepare([sentence])[0] == data.train[300]["src_ids"]
    assert processor.prepare([sentence])[0] == tok.encode([sentence])[0] + [EOS_ID]  # the original is untouched
    assert tagged.describe(sentence, tagged.prepare([sentence])[0])["src_pieces"][:2] == ["<2fr>", "<BT>"]
    with pytest.raises(ValueError, match=r"no piece '<2es>' \(its reserved pieces: <2de>, <2fr>, <BT>\)"):
        processor.with_target_language("es")
    # truncation cuts the sentence and keeps the tags
    short = TextProcessor()
    short.bind(tok, max_positions=4)
    warnings: list[str] = []
    example = short.with_target_language("de").prepare(["one two three four five six"], warn=warnings.append)[0]
    assert len(example) == 4 and example[0] == ids["<2de>"] and example[-1] == EOS_ID and "truncated" in warnings[0].message
    described = short.with_target_language("de").describe("one two three four five six", example)["src_pieces"]
    assert len(described) == len(example) and described[0] == "<2de>"


@pytest.mark.parametrize("joint, sentences", [(True, 760), (False, 1360)])
def test_the_tokenizer_reads_a_file_that_several_corpora_share_once(tmp_path, corpora, caplog, joint, sentences):
    """en->de, de->en and en->fr: the English and German files of en->de are also de->en's. A joint tokenizer
    trains on each of the four files once (300 + 300 + 80 + 80 lines, not 1,360); separate tokenizers on
    each side's files once (each side has three different files)."""
    (en, de), (fr_en, fr) = corpora["train_de"], corpora["train_fr"]
    data = {"corpora": [{"train_src": en, "train_tgt": de, "src_lang": "en", "tgt_lang": "de"},
                        {"train_src": de, "train_tgt": en, "src_lang": "de", "tgt_lang": "en"},
                        {"train_src": fr_en, "train_tgt": fr, "src_lang": "en", "tgt_lang": "fr"}],
            "valid_sets": [{"src": corpora["valid_de"][0], "tgt": corpora["valid_de"][1],
                            "src_lang": "en", "tgt_lang": "de"}],
            "cache_dir": str(tmp_path / "cache")}
    with caplog.at_level("INFO", logger="seq2seq.data"):
        prepare(from_dict(DataConfig, data), TokenizerConfig(vocab_size=60, joint=joint), tmp_path / "out")
    assert f"training the tokenizer on {sentences:,} sentences" in caplog.text


def test_a_given_tokenizer_without_the_tags_is_refused(tmp_path, corpora):
    texts = [" ".join(WORDS["en"])] * 20
    TokenizerPair.train(TokenizerConfig(vocab_size=30), texts, texts, tmp_path / "plain")
    with pytest.raises(ConfigError, match="has no piece '<2de>'"):
        prepare(from_dict(DataConfig, data_section(corpora)),
                TokenizerConfig(src_model=str(tmp_path / "plain" / "spm.model")), tmp_path / "out")


# ---------------------------------------------------------------------------------- temperature sampling


def test_probabilities_are_the_temperature_formula():
    rng = random.Random(0)
    for _ in range(200):
        k = rng.randint(1, 6)
        sizes = [rng.randint(1, 100_000) for _ in range(k)]
        weights = [rng.choice([0.1, 0.5, 1.0, 1.0, 2.0, 3.0]) for _ in range(k)]
        temperature = rng.choice([0.5, 1.0, 1.5, 2.0, 5.0, 100.0])
        expected = np.array([(n * w) ** (1 / temperature) for n, w in zip(sizes, weights)])
        got = corpus_probabilities(sizes, weights, temperature)
        np.testing.assert_allclose(got, expected / expected.sum(), rtol=1e-9)
    np.testing.assert_allclose(corpus_probabilities([300, 100], [1, 1], 1.0), [0.75, 0.25])  # T = 1: by size
    # a weight multiplies the size; T -> infinity: uniform
    np.testing.assert_allclose(corpus_probabilities([300, 100], [1, 3], 1.0), [0.5, 0.5])
    np.testing.assert_allclose(corpus_probabilities([10**6, 10], [1, 1], 1e9), [0.5, 0.5], atol=1e-6)
    np.testing.assert_allclose(corpus_probabilities([10**6, 10**4], [1, 1], 5.0),
                               np.array([100 ** 0.2, 1]) / (100 ** 0.2 + 1))  # Arivazhagan et al.'s T = 5
    assert corpus_probabilities([10**9, 1], [1, 1], 0.01)[1] == 0.0  # no overflow for a small T


def test_sampled_epochs_draw_each_corpus_in_its_proportion_and_every_row_evenly():
    rng = random.Random(1)
    for case in range(30):
        k = rng.randint(2, 4)
        sizes = [rng.randint(1, 400) for _ in range(k)]
        weights = [rng.choice([0.5, 1.0, 2.0]) for _ in range(k)]
        temperature = rng.choice([1.0, 2.0, 5.0])
        mix = CorpusMix(sizes, weights, temperature, seed=case)
        total = sum(sizes)
        epochs = 40
        drawn = np.concatenate([mix.epoch_rows(e) for e in range(epochs)])
        corpus_of = np.searchsorted(mix.starts, drawn, side="right") - 1
        counts = np.bincount(corpus_of, minlength=k)
        # over many draws, each corpus's share is p_i, up to rounding of the last epoch
        np.testing.assert_allclose(counts / (epochs * total), mix.probabilities, atol=1 / (epochs * total))
        assert all(abs(len(mix.epoch_rows(e)) - total) <= k for e in range(epochs))
        # within a corpus every row is read once before any is read twice: per-row counts differ by at most 1
        per_row = np.bincount(drawn, minlength=total)
        for i in range(k):
            rows = per_row[mix.starts[i]: mix.starts[i] + sizes[i]]
            assert rows.max() - rows.min() <= 1, (case, i)
    # the same (seed, epoch) draws the same rows in another process (a resumed run)
    a, b = CorpusMix([50, 7], [1, 1], 3.0, seed=4), CorpusMix([50, 7], [1, 1], 3.0, seed=4)
    assert np.array_equal(a.epoch_rows(5), b.epoch_rows(5))
    assert not np.array_equal(a.epoch_rows(5), CorpusMix([50, 7], [1, 1], 3.0, seed=5).epoch_rows(5))


def test_mixed_batches_yield_the_epochs_draws_within_max_tokens_and_resume_exactly():
    sizes = [120, 15]
    gen = np.random.default_rng(0)
    src_lengths = gen.integers(2, 12, sum(sizes)).tolist()
    tgt_lengths = gen.integers(2, 12, sum(sizes)).tolist()
    mix = CorpusMix(sizes, [1.0, 1.0], 5.0, seed=7)
    sampler = MixedBatches(mix, src_lengths, tgt_lengths, max_tokens=40, seed=7)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == sorted(mix.epoch_rows(epoch).tolist())
        for b in batches:
            assert len(b) == 1 or max(src_lengths[i] for i in b) * len(b) <= 40
            assert len(b) == 1 or max(tgt_lengths[i] for i in b) * len(b) <= 40
    assert 0.0 <= sampler.padding_ratio() < 1.0
    # a resumed sampler (a new process) continues with exactly the batches left
    sampler.set_epoch(3)
    it = iter(sampler)
    [next(it) for _ in range(3)]
    state = sampler.state_dict()
    rest = list(it)
    resumed = MixedBatches(CorpusMix(sizes, [1.0, 1.0], 5.0, seed=7), src_lengths, tgt_lengths, max_tokens=40, seed=7)
    resumed.load_state_dict(state)
    assert list(resumed) == rest


def toy_rows(n: int, offset: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        src = torch.randint(4, 20, (int(torch.randint(2, 7, (1,), generator=g)),), generator=g).tolist()
        rows.append({"src_ids": src + [EOS_ID], "tgt_ids": [min(t + offset, 23) for t in src]})
    return rows


def mixed_trainer(out_dir: Path, rows: list[dict], **overrides) -> Trainer:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=24, tgt_vocab_size=24, d_model=32, heads=2, ffn_dim=64,
                                           layers=1, dropout=0.1))
    settings = dict(max_tokens=64, lr=3e-3, warmup_steps=5, max_steps=12, valid_every=4, valid_bleu=False, log_every=2,
                    device="cpu", seed=3, best_metric="loss")
    cfg = TrainingConfig(**{**settings, **overrides})
    mix = CorpusMix([40, 8], [1.0, 2.0], 2.0, seed=cfg.seed)
    sampler = MixedBatches(mix, [len(r["src_ids"]) for r in rows], [len(r["tgt_ids"]) + 1 for r in rows],
                           max_tokens=cfg.max_tokens, seed=cfg.seed)
    return Trainer(model, cfg, sampler, lambda idx: collate_text([{**rows[i], "index": i} for i in idx]), None,
                   out_dir, SearchConfig(strategy="greedy", max_len_a=0.0, max_len_b=8))


def test_a_resumed_multi_corpus_run_ends_as_an_uninterrupted_one(tmp_path):
    rows = toy_rows(40, 1, 0) + toy_rows(8, 2, 1)
    full = mixed_trainer(tmp_path / "full", rows)
    full.train()
    mixed_trainer(tmp_path / "part", rows, max_steps=8).train()
    resumed = mixed_trainer(tmp_path / "part", rows)
    torch.manual_seed(12345)
    assert resumed.resume() and resumed.step == 8
    resumed.train()
    assert resumed.sampler.epoch > 0  # the run crossed epochs, each drawn anew
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


# ---------------------------------------------------------------------------------- validation per direction


def test_group_metrics_score_each_direction_and_average_them():
    hyps = {0: "eins zwei drei vier", 1: "fünf sechs sieben acht", 2: "un deux trois quatre", 3: "cinq six"}
    references = [["eins zwei drei vier"], ["fünf sechs sieben acht"], ["un deux trois quatre"], ["sept huit neuf"]]
    metrics = group_metrics(hyps, references, {"en-de": range(0, 2), "en-fr": range(2, 4)})
    assert metrics["valid_bleu/en-de"] == pytest.approx(100.0) and metrics["valid_bleu/en-fr"] < 100.0
    assert metrics["valid_bleu"] == pytest.approx((metrics["valid_bleu/en-de"] + metrics["valid_bleu/en-fr"]) / 2)
    assert metrics["valid_chrf"] == pytest.approx((metrics["valid_chrf/en-de"] + metrics["valid_chrf/en-fr"]) / 2)
    assert {"valid_wer", "valid_cer"} <= set(metrics)


@pytest.fixture(scope="module")
def multilingual_model(tmp_path_factory, corpora) -> Path:
    """en->de and en->fr in one model of d_model 32 (160 steps)."""
    return train_tiny(tmp_path_factory.mktemp("multilingual"), data_section(corpora))


def train_tiny(tmp_path: Path, data: dict) -> Path:
    """`seq2seq train` of a d_model 32 model on `data` for 160 steps: TMP_PATH/model."""
    out = tmp_path / "model"
    config = {"data": data,
              "tokenizer": {"vocab_size": 60},
              "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "share_embeddings": True,
                        "max_positions": 64},
              "training": {"output_dir": str(out), "max_steps": 160, "valid_every": 80, "max_tokens": 400, "lr": 0.01,
                           "warmup_steps": 20, "device": "cpu", "log_every": 40, "threads": 1}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(cli, ["train", str(path)])
    assert result.exit_code == 0, result.output
    return out


def test_a_tiny_multilingual_model_trains_and_records_bleu_per_direction(multilingual_model):
    """The run ends, logs BLEU per direction and their mean (the best-checkpoint metric), saves its
    languages, and the language tag chooses the output language."""
    out = multilingual_model
    meta = json.loads((out / "metadata.json").read_text())
    last = meta["last_validation"]
    assert {"valid_bleu/en-de", "valid_bleu/en-fr", "valid_chrf/en-de", "valid_chrf/en-fr"} <= set(last)
    assert last["valid_bleu"] == pytest.approx((last["valid_bleu/en-de"] + last["valid_bleu/en-fr"]) / 2)
    assert meta["best_metric"] == "bleu" and meta["best_score"] == pytest.approx(
        max(r["valid_bleu"] for r in _log_rows(out) if r.get("valid_bleu") is not None))
    assert "valid_bleu/en-fr" in (out / "log.csv").read_text().splitlines()[0]
    assert meta["languages"] == ["de", "fr"] and meta["reserved_pieces"] == ["<2de>", "<2fr>", "<BT>"]
    de, fr = meta["corpora"]
    assert (de["pairs"], fr["pairs"], fr["weight"], fr["tag"]) == (300, 80, 2.0, "<BT>")
    assert fr["probability"] == pytest.approx(math.sqrt(160) / (math.sqrt(300) + math.sqrt(160)), abs=1e-6)

    from seq2seq.inference.search import search
    from seq2seq.model.encoders.base import source_processor
    from seq2seq.storage.model_dir import load_model_dir

    loaded = load_model_dir(out)
    assert model_languages(loaded.config) == ["de", "fr"]
    assert loaded.tokenizers.src.user_defined_pieces() == ["<2de>", "<2fr>", "<BT>"]
    processor = source_processor(loaded.config.model, loaded.tokenizers.src)
    sentences = [" ".join(WORDS["en"][i] for i in (k, (k + 3) % 9)) for k in range(9)]
    outputs = {}
    for lang in ("de", "fr"):
        tagged = processor.with_target_language(lang)
        examples = tagged.prepare(sentences)
        results = search(loaded.model, tagged.collate([examples[i] for i in range(len(sentences))]),
                         SearchConfig(strategy="greedy", max_len_a=0.0, max_len_b=12))
        outputs[lang] = loaded.tokenizers.tgt.decode([r[0].tokens for r in results])
    for lang, other in (("de", "fr"), ("fr", "de")):
        words = " ".join(outputs[lang]).split()
        own = sum(w in WORDS[lang] and w not in WORDS[other] for w in words)
        foreign = sum(w in WORDS[other] and w not in WORDS[lang] for w in words)
        assert own > 2 * foreign, (lang, outputs)


def _log_rows(model_dir: Path) -> list[dict]:
    import csv

    with open(model_dir / "log.csv", newline="") as f:
        return [{k: float(v) if v else None for k, v in row.items()} for row in csv.DictReader(f)]


def own_words(texts: list[str], lang: str) -> float:
    """The share of the words of `texts` that only language `lang` has (WORDS)."""
    other = "fr" if lang == "de" else "de"
    words = " ".join(texts).split()
    own = sum(w in WORDS[lang] and w not in WORDS[other] for w in words)
    foreign = sum(w in WORDS[other] and w not in WORDS[lang] for w in words)
    return own / max(own + foreign, 1)


SENTENCES = [" ".join(WORDS["en"][i] for i in (k, (k + 3) % 9)) for k in range(9)]


def test_translate_tgt_lang_chooses_the_language_and_is_required(multilingual_model, tmp_path):
    from seq2seq.inference.translator import Translator

    src = tmp_path / "src.txt"
    src.write_text("\n".join(SENTENCES) + "\n")
    outputs = {}
    for lang in ("de", "fr"):
        result = CliRunner().invoke(cli, ["translate", str(multilingual_model), "-i", str(src), "--tgt-lang", lang])
        assert result.exit_code == 0, result.output
        outputs[lang] = result.stdout.split("\n")[:-1]
        assert len(outputs[lang]) == len(SENTENCES) and own_words(outputs[lang], lang) > 0.66
        assert Translator.load(multilingual_model).translate(SENTENCES, tgt_lang=lang) == outputs[lang]
    result = CliRunner().invoke(cli, ["translate", str(multilingual_model), "-i", str(src), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "this model is multilingual: choose a target language, one of de, fr" in result.output
    result = CliRunner().invoke(cli, ["translate", str(multilingual_model), "-i", str(src), "--tgt-lang", "es"])
    assert result.exit_code == 1 and "unknown target language 'es'; this model's languages: de, fr" in result.output
    assert not (tmp_path / "o").exists()


def test_a_bilingual_model_refuses_tgt_lang(tiny_model_dir):
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--tgt-lang", "de"], input="A dog.\n")
    assert result.exit_code == 1 and "this model translates into one language only" in result.output


def test_the_server_takes_tgt_lang(multilingual_model):
    pytest.importorskip("fastapi", reason="the serve extra")
    from seq2seq.inference.translator import Translator
    from seq2seq.inference.generator import load_engine
    from seq2seq.serve.app import create_app
    from test_serve import call, serving

    with serving(create_app(load_engine(multilingual_model, device="cpu"))) as (port, _):
        status, body = call(port, "POST", "/translate", {"texts": SENTENCES[:3], "tgt_lang": "fr", "beam": 2})
        assert status == 200
        assert [t["text"] for t in body["translations"]] == Translator.load(multilingual_model).translate(
            SENTENCES[:3], tgt_lang="fr", beam=2)
        status, body = call(port, "POST", "/translate", {"text": SENTENCES[0]})
        assert status == 422 and "choose a target language, one of de, fr" in body["error"]
        status, body = call(port, "POST", "/translate", {"text": SENTENCES[0], "tgt_lang": 3})
        assert status == 422 and "tgt_lang must be a string" in body["error"]
