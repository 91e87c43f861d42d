"""Batches prepared ahead on a background thread (seq2seq.data.prefetch): the same steps, in the same
order, as made on the training thread, from any resumed position; errors surface where they belong."""

from __future__ import annotations

import itertools

import pytest
import sentencepiece as spm
import torch

from seq2seq.data.batching import TokenBatchSampler, collate_text
from seq2seq.data.prefetch import Prefetcher, Step, training_steps
from seq2seq.data.sampling import ResegmentedBatches, SubwordSampler
from seq2seq.text.tokenizer import EOS_ID, Tokenizer, TokenizerPair
from test_train import make_trainer, toy_data


def plain_sampler(rows, seed=5):
    return TokenBatchSampler([len(r["src_ids"]) for r in rows], [len(r["tgt_ids"]) + 1 for r in rows],
                             max_tokens=40, shuffle=True, seed=seed)


def same_steps(a: list[Step], b: list[Step]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.sampler_state == y.sampler_state
        assert [bx.indices for bx in x.batches] == [by.indices for by in y.batches]
        for bx, by in zip(x.batches, y.batches):
            assert torch.equal(bx.src, by.src) and torch.equal(bx.tgt_in, by.tgt_in)
            assert torch.equal(bx.tgt_out, by.tgt_out) and torch.equal(bx.target_positions, by.target_positions)


@pytest.mark.parametrize("accum, max_epochs", [(1, 2), (3, 3)])
def test_prefetched_steps_are_the_serial_steps_in_the_same_order(accum, max_epochs):
    rows = toy_data(60)

    def collate(idx):
        return collate_text([rows[i] for i in idx])

    serial = list(training_steps(plain_sampler(rows), collate, accum, max_epochs))
    with Prefetcher(training_steps(plain_sampler(rows), collate, accum, max_epochs), depth=2) as ahead:
        prefetched = list(ahead)
    same_steps(serial, prefetched)
    per_epoch = len(plain_sampler(rows))
    assert sum(len(s.batches) for s in serial) == per_epoch * max_epochs  # every batch of every epoch, once
    assert serial[-1].sampler_state == {"epoch": max_epochs - 1, "position": per_epoch}


def test_a_resumed_position_gives_the_rest_of_the_uninterrupted_steps():
    rows = toy_data(60)

    def collate(idx):
        return collate_text([rows[i] for i in idx])

    full = list(training_steps(plain_sampler(rows), collate, 2, max_epochs=3))
    for k in (1, 5, len(full) // 2, len(full) - 1):
        resumed_sampler = plain_sampler(rows)
        resumed_sampler.load_state_dict(full[k - 1].sampler_state)  # as a checkpoint after step k saved it
        with Prefetcher(training_steps(resumed_sampler, collate, 2, max_epochs=3)) as ahead:
            same_steps(full[k:], list(ahead))


def test_subword_samples_are_collated_with_their_own_epochs_segmentation(tmp_path):
    """With subword regularization the thread also segments each new epoch; a batch is collated with the
    segmentation of the epoch it was drawn from, also when one step's batches span two epochs."""
    words = ["red", "green", "blue", "yellow", "house", "garden", "river", "mountain", "runs", "sleeps"]
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 4)) for i in range(80)]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(tmp_path / "spm"), vocab_size=60,
                                   model_type="unigram", pad_id=0, unk_id=1, bos_id=2, eos_id=3, hard_vocab_limit=False)
    tok = Tokenizer.load(tmp_path / "spm.model")
    best = tok.encode(texts)

    def sampler():
        segmenter = SubwordSampler(TokenizerPair(tok, tok), texts, texts, [b + [EOS_ID] for b in best], best,
                                   alpha=0.5, seed=3)
        return ResegmentedBatches(segmenter, max_tokens=60, seed=3)

    def steps(s):
        def collate(idx):
            src, tgt = s.rows(idx)
            return collate_text([{"src_ids": a, "tgt_ids": b, "index": i} for a, b, i in zip(src, tgt, idx)])
        return training_steps(s, collate, accum_steps=4, max_epochs=3)

    serial = list(steps(sampler()))
    with Prefetcher(steps(sampler()), depth=3) as ahead:
        same_steps(serial, list(ahead))
    check = sampler()
    drawn = [(epoch, rows) for epoch in range(3) for rows in check.batches(epoch)]
    batches = [batch for step in serial for batch in step.batches]
    assert [b.indices for b in batches] == [rows for _, rows in drawn]
    ends = [len(check.batches(0)), len(check.batches(0)) + len(check.batches(1))]
    assert any(end % 4 for end in ends), "no step of 4 batches spans two epochs here"
    for (epoch, _), batch in zip(drawn, batches):
        targets = check.segmenter.epoch(epoch)[1]
        for j, i in enumerate(batch.indices):
            assert batch.tgt_out[j, :len(targets[i]) + 1].tolist() == targets[i] + [EOS_ID], (epoch, i)
    assert any(check.segmenter.epoch(0)[1][i] != check.segmenter.epoch(1)[1][i] for i in range(len(texts)))


def test_an_error_while_preparing_is_raised_where_its_step_is_taken():
    def items():
        yield 1
        yield 2
        raise ValueError("row 7 of train.de is not UTF-8")

    ahead = Prefetcher(items(), depth=2)
    assert next(ahead) == 1 and next(ahead) == 2
    with pytest.raises(ValueError, match="row 7"):
        next(ahead)
    ahead.close()


def test_closing_stops_the_thread_before_it_drains_an_endless_source():
    drawn = []

    def endless():
        for i in itertools.count():
            drawn.append(i)
            yield i

    ahead = Prefetcher(endless(), depth=2, prepare=lambda i: i * 10)
    assert [next(ahead) for _ in range(3)] == [0, 10, 20]
    ahead.close()
    assert not ahead.thread.is_alive()
    assert len(drawn) <= 3 + 2 + 2  # what was taken, the queue, one in hand


def test_training_with_prefetching_equals_training_without(tmp_path):
    rows = toy_data()
    ahead = make_trainer(tmp_path / "ahead", rows, prefetch=3, max_steps=10)
    ahead.train()  # (each trainer seeds torch's generator when made, which dropout draws from)
    serial = make_trainer(tmp_path / "serial", rows, prefetch=0, max_steps=10)
    serial.train()
    for (name, a), (_, b) in zip(ahead.model.state_dict().items(), serial.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert ahead.sampler.state_dict() == serial.sampler.state_dict()  # handed back at the last step trained
    assert [r.get("train_loss") for r in ahead.history] == [r.get("train_loss") for r in serial.history]
