"""Tests for seq2seq.text.tokenizer: special ids, round trips, save/load, joint vs separate models."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import sentencepiece as spm

from seq2seq.text.tokenizer import (
    BOS_ID, EOS_ID, JOINT_MODEL, PAD_ID, SRC_MODEL, TGT_MODEL, UNK_ID,
    Tokenizer, TokenizerConfig, TokenizerError, TokenizerPair, train_tokenizer,
)

from conftest import MULTI30K, head_gz, require_data


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    require_data(MULTI30K)
    return head_gz(MULTI30K / "train.en.gz", 300), head_gz(MULTI30K / "train.de.gz", 300)


@pytest.fixture(scope="module")
def joint_pair(corpus, tmp_path_factory) -> TokenizerPair:
    cfg = TokenizerConfig(vocab_size=200)
    return TokenizerPair.train(cfg, *corpus, tmp_path_factory.mktemp("joint"))


def test_special_ids_are_fixed(joint_pair: TokenizerPair, tmp_path: Path) -> None:
    tok = joint_pair.src
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    joint_pair.save(tmp_path)
    raw = spm.SentencePieceProcessor(model_file=str(tmp_path / JOINT_MODEL))
    assert (raw.pad_id(), raw.unk_id(), raw.bos_id(), raw.eos_id()) == (0, 1, 2, 3)
    assert [raw.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.vocab_size == 200


def test_encode_adds_no_specials_and_round_trips(joint_pair: TokenizerPair, corpus) -> None:
    en, de = corpus
    for tok, texts in ((joint_pair.src, en), (joint_pair.tgt, de)):
        ids = tok.encode(texts)
        assert len(ids) == len(texts)
        assert all(ids) and not any({PAD_ID, BOS_ID, EOS_ID} & set(seq) for seq in ids)
        # SentencePiece's normalizer collapses runs of spaces; nothing else may change
        assert tok.decode(ids) == [" ".join(t.split()) for t in texts]
    # decode skips pad/bos/eos wherever they are
    ids = joint_pair.src.encode([en[0]])[0]
    assert joint_pair.src.decode([[BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]]) == [en[0]]
    assert "".join(joint_pair.src.pieces(en[0])).replace("\u2581", " ").strip() == en[0]


def test_save_load_gives_identical_ids(joint_pair: TokenizerPair, corpus, tmp_path: Path) -> None:
    joint_pair.save(tmp_path)
    loaded = TokenizerPair.load(tmp_path)
    assert loaded.joint and loaded.src is loaded.tgt
    assert loaded.src.encode(corpus[0]) == joint_pair.src.encode(corpus[0])
    # save after load writes the very same bytes
    loaded.src.save(tmp_path / "copy.model")
    assert (tmp_path / "copy.model").read_bytes() == (tmp_path / JOINT_MODEL).read_bytes()
    assert Tokenizer.load(tmp_path / "copy.model").encode(corpus[1]) == joint_pair.tgt.encode(corpus[1])


def test_training_is_deterministic(corpus) -> None:
    cfg = TokenizerConfig(vocab_size=150)
    a = train_tokenizer(corpus[0], 150, cfg)
    b = train_tokenizer(corpus[0], 150, cfg)
    assert a.model_proto == b.model_proto


def test_joint_and_separate_model_files(corpus, tmp_path: Path) -> None:
    sep_cfg = TokenizerConfig(joint=False, vocab_size=200, src_vocab_size=150, model_type="bpe")
    sep = TokenizerPair.train(sep_cfg, *corpus, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [SRC_MODEL, TGT_MODEL]
    assert (sep.src.vocab_size, sep.tgt.vocab_size) == (150, 200)
    assert sep.src.model_proto != sep.tgt.model_proto
    loaded = TokenizerPair.load(tmp_path)
    assert not loaded.joint and loaded.tgt.encode(corpus[1][:5]) == sep.tgt.encode(corpus[1][:5])

    joint = TokenizerPair.train(TokenizerConfig(vocab_size=200), *corpus, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOINT_MODEL]  # stale separate files removed
    assert joint.src is joint.tgt and TokenizerPair.load(tmp_path).joint


def test_existing_models_are_loaded_not_trained(joint_pair: TokenizerPair, tmp_path: Path) -> None:
    joint_pair.src.save(tmp_path / "given.model")
    cfg = TokenizerConfig(vocab_size=999, src_model=str(tmp_path / "given.model"))
    pair = TokenizerPair.train(cfg, [], [], tmp_path / "out")
    assert pair.src.model_proto == joint_pair.src.model_proto
    assert (tmp_path / "out" / JOINT_MODEL).read_bytes() == joint_pair.src.model_proto


def test_bad_model_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"this is not a sentencepiece model")
    with pytest.raises(TokenizerError, match="bad.model") as info:
        Tokenizer.load(bad)
    assert isinstance(info.value, ValueError)
    with pytest.raises(TokenizerError, match="not found"):
        Tokenizer.load(tmp_path / "missing.model")


def test_model_with_other_special_ids_is_rejected(tmp_path: Path) -> None:
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["a b c d e f g h"] * 20), model_writer=writer,
                                   vocab_size=20, hard_vocab_limit=False, minloglevel=2)  # unk=0, bos=1, eos=2
    path = tmp_path / "default_ids.model"
    path.write_bytes(writer.getvalue())
    with pytest.raises(TokenizerError, match=r"default_ids\.model.*special ids"):
        Tokenizer.load(path)


def pieces(tok: Tokenizer) -> list[tuple[str, float]]:
    """What a model segments with (its proto also records the options it was trained with)."""
    sp = spm.SentencePieceProcessor(model_proto=tok.model_proto)
    return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]


def hard_limit_training(texts: list[str], size: int, model_type: str) -> bytes:
    """SentencePiece's own training with a hard vocabulary limit, our other options as train_tokenizer's."""
    from seq2seq.text.tokenizer import SPECIAL_IDS, TRAIN_SEED

    spm.set_random_generator_seed(TRAIN_SEED)
    writer = io.BytesIO()
    cfg = TokenizerConfig(model_type=model_type)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=writer, vocab_size=size, model_type=model_type,
        character_coverage=cfg.character_coverage, input_sentence_size=cfg.input_sentence_size,
        add_dummy_prefix=cfg.add_dummy_prefix, shuffle_input_sentence=True, num_threads=1, minloglevel=2,
        **SPECIAL_IDS)
    return writer.getvalue()


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_too_large_vocab_is_lowered_with_warning_in_one_training(caplog, monkeypatch, model_type) -> None:
    texts = ["the cat sat on the mat", "a dog ran in the park", "two cats and a dog in the park"] * 10
    trainings = []
    real_train = spm.SentencePieceTrainer.train
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", lambda **kw: trainings.append(kw) or real_train(**kw))
    with caplog.at_level(logging.WARNING, logger="seq2seq.text.tokenizer"):
        tok = train_tokenizer(texts, 5000, TokenizerConfig(model_type=model_type), num_threads=1)
    assert len(trainings) == 1  # not a failed training at 5000, then another one
    assert 4 < tok.vocab_size < 5000
    assert f"vocab_size 5000 is too large for this corpus: it holds {tok.vocab_size} pieces" in caplog.text
    assert tok.decode(tok.encode(texts[:3])) == texts[:3]
    # the largest size SentencePiece's hard limit allows is this size, and gives these very pieces
    with pytest.raises(RuntimeError, match=rf"Please set it to a value <= {tok.vocab_size}\."):
        hard_limit_training(texts, 5000, model_type)
    assert pieces(Tokenizer(hard_limit_training(texts, tok.vocab_size, model_type))) == pieces(tok)


def test_a_vocab_the_corpus_holds_trains_as_with_a_hard_limit(corpus) -> None:
    tok = train_tokenizer(corpus[0], 150, TokenizerConfig(), num_threads=1)
    assert tok.vocab_size == 150
    assert pieces(Tokenizer(hard_limit_training(corpus[0], 150, "unigram"))) == pieces(tok)


def test_too_small_vocab_is_raised_to_the_characters_with_warning(caplog) -> None:
    texts = ["a + b = c", "x - y = z", "1 2 3 4 5 6 7 8 9 0"] * 10  # 19 characters and the word-start mark
    with caplog.at_level(logging.WARNING, logger="seq2seq.text.tokenizer"):
        tok = train_tokenizer(texts, 14, TokenizerConfig(model_type="bpe"))
    assert tok.vocab_size == 4 + 20
    assert "too small for the 20 characters" in caplog.text
    assert tok.decode(tok.encode(texts[:3])) == texts[:3]


def test_config_rejects_bad_values() -> None:
    from seq2seq.config import ConfigError, from_dict
    with pytest.raises(ConfigError, match="vocab_size"):
        from_dict(TokenizerConfig, {"vocab_size": 3})
    with pytest.raises(ConfigError, match="model_type"):
        from_dict(TokenizerConfig, {"model_type": "word"})
    assert from_dict(TokenizerConfig, {"joint": False, "tgt_vocab_size": 300}).tgt_vocab_size == 300


def test_without_dummy_prefix_one_word_texts_are_their_characters() -> None:
    digits = [str(n) for n in (7494, 77188, 1, 10, 111, 19807919, 4457, 3498, 12, 21)] * 20
    with_mark = train_tokenizer(digits, 16, TokenizerConfig(model_type="bpe"))
    assert with_mark.pieces("104")[0] == "\u25811"  # the mark merges with a leading 1 ...
    assert with_mark.pieces("401")[0] == "\u2581"  # ... and stands alone before any other digit
    plain = train_tokenizer(digits, 14, TokenizerConfig(model_type="bpe", add_dummy_prefix=False))
    assert plain.vocab_size == 14  # the 4 special ids and the 10 digits: no mark, no merge
    for text in ("104", "401", "7", "19807919"):
        assert plain.pieces(text) == list(text)
        assert plain.decode(plain.encode([text])) == [text]
    # texts with spaces keep them: the mark stands for each space, not for the start
    spaced = train_tokenizer(["ab cd", "cd ab"] * 10, 12, TokenizerConfig(model_type="bpe", add_dummy_prefix=False))
    pieces = spaced.pieces("ab cd")
    assert spaced.decode(spaced.encode(["ab cd"])) == ["ab cd"]
    assert not pieces[0].startswith("\u2581") and "".join(pieces) == "ab\u2581cd"
