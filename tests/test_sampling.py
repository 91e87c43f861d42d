"""Subword regularization (data.subword_alpha): sampled segmentations of training pairs."""

import pytest
import torch
import yaml
from click.testing import CliRunner

from seq2seq.storage.atomic import read_json
from seq2seq.cli import cli
from seq2seq.config import ConfigError, DataConfig
from seq2seq.data.sampling import ResegmentedBatches, SubwordSampler
from seq2seq.training.experiment import text_training_data
from seq2seq.config import load_config
from seq2seq.text.tokenizer import EOS_ID, TokenizerPair, train_tokenizer
from seq2seq.config import TokenizerConfig


@pytest.fixture(scope="module")
def texts(multi30k_small):
    en = multi30k_small["train.en"].read_text(encoding="utf-8").splitlines()
    de = multi30k_small["train.de"].read_text(encoding="utf-8").splitlines()
    return en, de


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def pair(request, texts):
    en, de = texts
    tok = train_tokenizer(en + de, 400, TokenizerConfig(model_type=request.param))
    return TokenizerPair(tok, tok, joint=True)


def test_a_sampled_segmentation_spells_the_same_text_and_varies(pair, texts):
    en = texts[0][:50]
    best = pair.src.encode(en)
    samples = [[pair.src.sample(t, alpha=0.3) for t in en] for _ in range(3)]
    for sample in samples:
        assert pair.src.decode(sample) == pair.src.decode(best)  # the same text, other pieces
    changed = sum(s != b for sample in samples for s, b in zip(sample, best))
    assert changed > 0.3 * 3 * len(en), changed
    # alpha near 1 (unigram) or near 0 (bpe) samples less than alpha 0.3
    gentle = 1.0 if pair.src.name.startswith("<trained unigram") else 0.02
    assert sum(pair.src.sample(t, alpha=gentle) != b for t, b in zip(en, best)) < changed / 3


def test_an_epoch_segmentation_is_a_function_of_seed_and_epoch(pair, texts):
    en, de = texts
    best_src = [ids + [EOS_ID] for ids in pair.src.encode(en)]
    best_tgt = pair.tgt.encode(de)
    segmenter = SubwordSampler(pair, en, de, best_src, best_tgt, alpha=0.2, max_len=200, seed=5)
    first = segmenter.epoch(0)
    assert segmenter.epoch(1) != first
    again = SubwordSampler(pair, en, de, best_src, best_tgt, alpha=0.2, max_len=200, seed=5)
    assert again.epoch(1) == segmenter.epoch(1) and again.epoch(0) == first  # (within one process)
    assert SubwordSampler(pair, en, de, best_src, best_tgt, alpha=0.2, max_len=200, seed=6).epoch(0) != first
    src_ids, tgt_ids = first
    assert all(s[-1] == EOS_ID and EOS_ID not in t for s, t in zip(src_ids, tgt_ids))
    assert pair.tgt.decode(tgt_ids) == pair.tgt.decode(best_tgt)
    # a sampled side over max_len falls back to the best segmentation, which cleaning checked
    src_ids, tgt_ids = SubwordSampler(pair, en, de, best_src, best_tgt, alpha=0.2, max_len=3).epoch(0)
    assert all(len(s) <= 4 or s == b for s, b in zip(src_ids, best_src))
    assert all(len(t) <= 3 or t == b for t, b in zip(tgt_ids, best_tgt))
    assert sum(s == b for s, b in zip(src_ids, best_src)) > len(en) / 2  # most sentences have > 3 pieces


def test_batches_are_bucketed_by_the_epoch_sampled_lengths(pair, texts):
    en, de = texts
    best_src = [ids + [EOS_ID] for ids in pair.src.encode(en)]
    segmenter = SubwordSampler(pair, en, de, best_src, pair.tgt.encode(de), alpha=0.2, seed=1)
    sampler = ResegmentedBatches(segmenter, max_tokens=300, seed=1)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == list(range(len(en)))
        src_ids, tgt_ids = segmenter.epoch(epoch)
        for batch in batches:
            src, tgt = sampler.rows(batch)
            assert src == [src_ids[i] for i in batch] and tgt == [tgt_ids[i] for i in batch]
            if len(batch) > 1:  # the budget holds for the sampled lengths (target + EOS)
                assert max(map(len, src)) * len(batch) <= 300 and (max(map(len, tgt)) + 1) * len(batch) <= 300
        assert sampler.padding_ratio() < 0.15


@pytest.mark.parametrize("key, value, message", [
    ("subword_alpha", 0.0, "data.subword_alpha must be in (0, 1]"),
    ("subword_alpha", 1.5, "data.subword_alpha must be in (0, 1]"),
    ("subword_nbest", 1, "data.subword_nbest must be -1"),
])
def test_bad_sampling_settings_are_refused_naming_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("]", r"\]")):
        DataConfig(train_src="a", train_tgt="b", **{key: value})


def write_config(tmp_path, files, out, **training):
    cfg = {
        "data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                 "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"]), "subword_alpha": 0.3},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "share_embeddings": True},
        "training": {"output_dir": str(out), "max_steps": 12, "valid_every": 6, "checkpoint_every": 6,
                     "max_tokens": 800, "lr": 2e-3, "warmup_steps": 4, "device": "cpu", "valid_bleu": False,
                     **training},
    }
    path = tmp_path / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_training_batches_are_sampled_and_validation_is_not(tmp_path, multi30k_small):
    cfg = load_config(write_config(tmp_path, multi30k_small, tmp_path / "m"))
    data = text_training_data(cfg, tmp_path / "m")
    plain = text_training_data(load_config(write_config(tmp_path, multi30k_small, tmp_path / "m"),
                                           ["data.subword_alpha=null"]), tmp_path / "m")
    indices = list(range(20))
    epoch0 = data.collate(indices)
    data.sampler.set_epoch(1)
    epoch1 = data.collate(indices)
    best = plain.collate(indices)
    assert epoch0.indices == epoch1.indices == indices
    for a, b in ((epoch0, epoch1), (epoch0, best), (epoch1, best)):
        assert a.src.shape != b.src.shape or not torch.equal(a.src, b.src)
    # validation batches are the best segmentation, the same every time
    for va, vb in zip(data.valid.batches, plain.valid.batches):
        assert torch.equal(va.src, vb.src) and torch.equal(va.tgt_out, vb.tgt_out)


def test_a_run_with_sampling_trains_resumes_and_translates(tmp_path, multi30k_small):
    def train(config, *extra):
        result = CliRunner().invoke(cli, ["train", str(config), *extra])
        assert result.exit_code == 0, result.output
        return read_json(config.parent / config.stem / "metadata.json")

    part = write_config(tmp_path, multi30k_small, tmp_path / "part", max_steps=6)
    assert train(part)["step"] == 6
    state = read_json(tmp_path / "part" / "train_state" / "state.json")
    assert train(part, "--resume", "--set", "training.max_steps=12")["step"] == 12
    log = (tmp_path / "part" / "log.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in log[1:] if row.split(",")[0] in ("6", "12")] == ["6", "12"]
    assert state["sampler"]["position"] == 6  # resumed mid-epoch (more than 6 batches an epoch)
    # inference never samples: the same input translates the same way twice
    from seq2seq.inference.translator import Translator

    translator = Translator.load(tmp_path / "part", device="cpu")
    lines = multi30k_small["val.en"].read_text(encoding="utf-8").splitlines()[:5]
    assert translator.translate(lines, beam=1) == translator.translate(lines, beam=1)


def test_image_and_audio_sources_refuse_subword_sampling(tmp_path):
    from seq2seq.training.experiment import run_training

    cfg = load_config(None, ["model.encoder.type=audio", "data.train=x.tsv", "data.subword_alpha=0.3",
                             f"training.output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="subword_alpha .* is for text sources"):
        run_training(cfg)


def test_a_pair_annotated_with_terms_keeps_its_best_segmentation(pair, texts):
    from seq2seq.text.terminology import annotate, words

    en, de = texts[0][:60], texts[1][:60]
    annotated = [annotate(s, words(t)[-1:]) if i % 2 == 0 else s for i, (s, t) in enumerate(zip(en, de))]
    best_src = [ids + [EOS_ID] for ids in pair.src.encode(annotated)]
    best_tgt = pair.tgt.encode(de)
    segmenter = SubwordSampler(pair, annotated, de, best_src, best_tgt, alpha=0.2, max_len=200, seed=5)
    for epoch in range(3):
        src_ids, tgt_ids = segmenter.epoch(epoch)
        for i in range(0, len(en), 2):  # annotated: the term is copied piece for piece, as at inference
            assert src_ids[i] == best_src[i] and tgt_ids[i] == best_tgt[i]
        plain = range(1, len(en), 2)
        assert sum(src_ids[i] != best_src[i] or tgt_ids[i] != best_tgt[i] for i in plain) > len(plain) / 3


@pytest.fixture(scope="module")
def term_pair(texts):
    from seq2seq.text.terminology import TERM

    en, de = texts
    tok = train_tokenizer(en + de, 400, TokenizerConfig(), user_symbols=[TERM])
    return TokenizerPair(tok, tok, joint=True)


def test_terms_drawn_anew_each_epoch_are_encoded_at_their_best_segmentation(term_pair, texts):
    from seq2seq.config.terminology import TerminologyConfig
    from seq2seq.data.terminology import TermSampler
    from seq2seq.text.terminology import TERM, word_counts, words

    en, de = texts[0][:200], texts[1][:200]
    term_id = term_pair.src.piece_id(TERM)
    best_src = [ids + [EOS_ID] for ids in term_pair.src.encode(en)]
    best_tgt = term_pair.tgt.encode(de)
    terms = TermSampler(TerminologyConfig(share=0.5, skip_frequent=5, resample=True), word_counts(de))

    def segmenter(seed, alpha=None):
        return SubwordSampler(term_pair, en, de, best_src, best_tgt, alpha=alpha, max_len=200, seed=seed, terms=terms)

    epochs = [segmenter(5).epoch(e) for e in range(3)]
    annotated = []
    for src_ids, tgt_ids in epochs:
        rows = {i for i, ids in enumerate(src_ids) if term_id in ids}
        assert 0.35 < len(rows) / len(en) < 0.65
        for i, (src, tgt) in enumerate(zip(src_ids, tgt_ids)):
            assert src[-1] == EOS_ID and tgt == best_tgt[i]  # no substitutes: the target as it was
            if i not in rows:  # alpha None: a plain pair at its best segmentation
                assert src == best_src[i]
                continue
            text = term_pair.src.decode([src[:-1]])[0]
            source, *appended = [part.strip() for part in text.split(TERM)]
            assert source == en[i].strip() and 1 <= len(appended) <= 2
            assert all(term in words(de[i]) for term in appended)  # words of the pair's own target
            assert src[:-1] == term_pair.src.encode([text])[0]  # encoded at the best segmentation
        annotated.append(rows)
    assert annotated[0] != annotated[1] != annotated[2]  # another draw in every epoch...
    assert segmenter(5).epoch(1) == epochs[1]  # ...a function of (seed, epoch)
    assert segmenter(6).epoch(0) != epochs[0]
    # with subword regularization, the plain pairs are sampled and the annotated ones are not
    src_ids, tgt_ids = segmenter(5, alpha=0.2).epoch(0)
    assert {i for i, ids in enumerate(src_ids) if term_id in ids} == annotated[0]
    plain = [i for i in range(len(en)) if i not in annotated[0]]
    assert sum(src_ids[i] != best_src[i] for i in plain) > len(plain) / 3


def test_a_run_with_resampled_terms_prepares_plain_pairs_and_annotates_its_batches(tmp_path, multi30k_small):
    from seq2seq.data import prepare
    from seq2seq.text.terminology import TERM

    cfg = load_config(write_config(tmp_path, multi30k_small, tmp_path / "m"),
                      ["data.subword_alpha=null", "data.terminology.share=0.5", "data.terminology.resample=true",
                       "data.terminology.loss_weight=3"])
    data = text_training_data(cfg, tmp_path / "m")
    assert not any(TERM in s for s in prepare(cfg.data, cfg.tokenizer, tmp_path / "m").train["src"])
    term_id = data.tokenizers.src.piece_id(TERM)
    rows = list(range(len(data.sampler.segmenter.best_src_ids)))
    epochs = []
    for epoch in range(2):
        data.sampler.set_epoch(epoch)
        batch = data.collate(rows)
        epochs.append({i for i, row in zip(batch.indices, batch.src) if term_id in row.tolist()})
        # the loss weighs 3 the target pieces of each row's terms (found by `term_token_weights`), and the
        # annotation's words are the target's: every annotated row has some
        weights = batch.target_weights.view(-1)
        per_row = torch.zeros(batch.tgt_out.shape).view(-1).index_put_((batch.target_positions,), weights - 1)
        weighted_rows = {i for i, w in zip(batch.indices, per_row.view(batch.tgt_out.shape)) if w.sum() > 0}
        assert set(weights.tolist()) == {1.0, 3.0} and weighted_rows == epochs[-1]
    assert all(0.35 < len(e) / len(rows) < 0.65 for e in epochs) and epochs[0] != epochs[1]
