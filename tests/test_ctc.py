"""Hybrid CTC/attention decoding (seq2seq.inference.ctc, decoding.ctc_weight)."""

import math

import pytest
import torch

from seq2seq.config import ModelConfig
from seq2seq.config.search import SearchConfig
from seq2seq.inference.ctc import attention_log_probs, ctc_best_path, ctc_log_likelihood, ctc_log_probs
from seq2seq.inference.search import length_penalty, search
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.training.loss import ctc_loss

PAD, BOS, EOS = 0, 2, 3


def tiny_model(seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, heads=2, ffn_dim=32, layers=1, dropout=0.0)
    return Seq2SeqTransformer(cfg).eval()


SRC = torch.tensor([[5, 6, 7, 8, 9, 10, EOS], [5, 9, 11, EOS, PAD, PAD, PAD]])


def test_best_path_merges_repeats_drops_blanks_and_stops_at_padding():
    lp = torch.full((2, 6, 5), -10.0)
    for row, path in enumerate(([4, 4, 0, 4, 1, 1], [2, 0, 2, 2, 3, 3])):
        for t, k in enumerate(path):
            lp[row, t, k] = 0.0
    mask = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    assert ctc_best_path(lp, mask, blank=0) == [[4, 4, 1], [2, 2]]


def test_ctc_log_likelihood_is_the_training_loss_per_hypothesis():
    """Summed over a batch, -log P_CTC of the targets is the training CTC loss of the same memory."""
    model = tiny_model()
    memory, mask = model.encode(SRC)
    tgt_out = torch.tensor([[6, 7, 7, EOS], [9, EOS, PAD, PAD]])
    expected = ctc_loss(memory, mask, model.decoder.output_weight, tgt_out, PAD).item()
    got = ctc_log_likelihood(ctc_log_probs(model, memory), mask, [0, 1], [[6, 7, 7], [9]], blank=PAD)
    assert -sum(got) == pytest.approx(expected, rel=1e-5)
    too_long = ctc_log_likelihood(ctc_log_probs(model, memory), mask, [1], [[4, 5, 6, 7, 8]], blank=PAD)
    assert too_long == [-math.inf]  # 5 labels, 4 real positions: no alignment


def test_teacher_forced_log_probs_equal_the_searchs_own():
    """Scoring a finished hypothesis again by teacher forcing gives the log-probabilities the
    incremental (cached) beam search recorded for it, token by token."""
    model = tiny_model(1)
    cfg = SearchConfig(beam=3, nbest=3, max_len_a=0.0, max_len_b=5, early_stopping=False, attention_layer=-1)
    nbest = search(model, SRC, cfg)
    memory, mask = model.encode(SRC)
    sources = [s for s, hyps in enumerate(nbest) for _ in hyps]
    hyps = [h for hyps in nbest for h in hyps]
    scored = attention_log_probs(model, memory, mask, sources, [h.tokens for h in hyps], BOS, EOS, PAD, -1)
    for s, h, (lps, attention) in zip(sources, hyps, scored):
        assert lps == pytest.approx(h.token_logprobs, abs=1e-4)
        real = int((~mask[s]).sum())
        torch.testing.assert_close(attention[:, :real], h.attention, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("strategy", ["beam", "greedy"])
def test_rescored_scores_mix_attention_and_ctc_and_the_best_path_competes(strategy):
    model = tiny_model(2)
    base = dict(strategy=strategy, beam=4 if strategy == "beam" else 1, max_len_a=0.0, max_len_b=5,
                early_stopping=False, lenpen=0.6)
    memory, mask = model.encode(SRC)
    log_probs = ctc_log_probs(model, memory)
    paths = ctc_best_path(log_probs, mask, PAD)
    for w in (0.3, 1.0):
        mixed = search(model, SRC, SearchConfig(**base, nbest=base["beam"], ctc_weight=w))
        for s, hyps in enumerate(mixed):
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            for h in hyps:
                ctc = ctc_log_likelihood(log_probs, mask, [s], [h.tokens], PAD)[0]
                assert h.ctc_logprob == pytest.approx(ctc, abs=1e-4)
                expected = ((1 - w) * h.logprob + w * h.ctc_logprob) / length_penalty(len(h.tokens) + 1, 0.6)
                assert h.score == pytest.approx(expected, abs=1e-4)
            forced = attention_log_probs(model, memory, mask, [s] * len(hyps), [h.tokens for h in hyps], BOS, EOS,
                                         PAD)
            for h, (lps, _) in zip(hyps, forced):  # search's own hypotheses and the added best path alike
                assert h.logprob == pytest.approx(sum(lps), abs=1e-4)
            if w == 1.0 and paths[s]:  # the CTC best path was a candidate: nothing chosen scores below it
                best_path = ctc_log_likelihood(log_probs, mask, [s], [paths[s]], PAD)[0]
                assert hyps[0].score >= best_path / length_penalty(len(paths[s]) + 1, 0.6) - 1e-5


def test_ctc_weight_is_checked():
    with pytest.raises(ValueError, match="decoding.ctc_weight must be in"):
        SearchConfig(ctc_weight=1.5)
    with pytest.raises(ValueError, match="ctc_weight needs beam or greedy search"):
        SearchConfig(strategy="sample", beam=1, ctc_weight=0.3)


def test_a_model_trained_without_ctc_refuses_ctc_weight(tiny_model_dir):
    from click.testing import CliRunner

    from seq2seq.cli import cli

    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--ctc-weight", "0.5"], input="A man.\n")
    assert result.exit_code != 0 and "trained without CTC" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
