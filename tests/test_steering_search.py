"""Decoding controls inside the search (seq2seq.inference.controls, prefix, avoid, constraints): on the
tiny random Transformer of test_search, whose outputs vary in length, and on hand-made states."""

from __future__ import annotations

import random

import pytest
import torch

from seq2seq.inference.controls import ConstraintTracker, ControlError, SourceControls, _stripes
from seq2seq.inference.search import SearchConfig, search
from test_search import EOS, LENGTHS, V, assert_same, scripted, sources, tiny_model


def contains(tokens: list[int], phrase: list[int]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


def random_phrases(rng: random.Random, n: int, longest: int = 3) -> list[list[int]]:
    return [[rng.randrange(4, 40) for _ in range(rng.randint(1, longest))] for _ in range(n)]


def assert_identical(a, b) -> None:
    """Bit for bit: tokens, scores and per-token log-probabilities."""
    assert [[(h.tokens, h.score, h.token_logprobs) for h in x] for x in a] == \
           [[(h.tokens, h.score, h.token_logprobs) for h in x] for x in b]


@pytest.mark.parametrize("cfg", [SearchConfig(strategy="greedy"), SearchConfig(beam=4, nbest=3),
                                 SearchConfig(strategy="sample", nbest=2, seed=5)], ids=["greedy", "beam", "sample"])
def test_empty_controls_are_the_plain_search_bit_for_bit(cfg):
    model, src = tiny_model(), sources()
    plain = search(model, src, cfg)
    assert_identical(search(model, src, cfg, controls=[SourceControls()] * len(LENGTHS)), plain)
    assert_identical(search(model, src, cfg, controls=[None] * len(LENGTHS)), plain)


@pytest.mark.parametrize("cfg", [SearchConfig(strategy="greedy"), SearchConfig(beam=4, nbest=2),
                                 SearchConfig(strategy="sample", nbest=2, seed=5)], ids=["greedy", "beam", "sample"])
def test_outputs_start_with_the_prefix_and_score_it(cfg):
    model, src = tiny_model(), sources()
    rng = random.Random(0)
    prefixes = [[rng.randrange(4, 40) for _ in range(rng.randint(1, 4))] for _ in LENGTHS]
    out = search(model, src, cfg, controls=[SourceControls(prefix=p) for p in prefixes])
    for prefix, nbest in zip(prefixes, out):
        assert nbest
        for h in nbest:
            assert h.tokens[: len(prefix)] == prefix
            assert h.logprob == pytest.approx(sum(h.token_logprobs), abs=1e-4)  # the prefix's tokens are scored
            assert all(lp < 0 for lp in h.token_logprobs[: len(prefix)])


def test_a_prefix_the_model_would_choose_changes_nothing():
    model, src = tiny_model(), sources()
    cfg = SearchConfig(strategy="greedy")
    plain = search(model, src, cfg)
    forced = search(model, src, cfg, controls=[SourceControls(prefix=h[0].tokens[:2]) for h in plain])
    assert_same(forced, plain)


def test_the_prefixs_scores_are_the_models_teacher_forced_log_probabilities():
    model, src = tiny_model(), sources([6])
    prefix = [7, 9, 11]
    out = search(model, src, SearchConfig(strategy="greedy"), controls=[SourceControls(prefix=prefix)])[0][0]
    with torch.no_grad():
        memory, pad = model.encode(src)
        tgt = torch.tensor([[2] + prefix])
        logits, _ = model.decode(tgt, memory, pad)
        expected = torch.log_softmax(logits.float(), dim=-1)[0, torch.arange(3), torch.tensor(prefix)]
    assert out.token_logprobs[:3] == pytest.approx(expected.tolist(), abs=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_every_constraint_appears_in_every_hypothesis(seed):
    rng = random.Random(seed)
    model, src = tiny_model(), sources()
    beam = rng.choice([3, 4, 5])
    cfg = SearchConfig(beam=beam, nbest=2, max_len_b=25, lenpen=rng.choice([0.0, 1.0]),
                       no_repeat_ngram=rng.choice([0, 3]), early_stopping=rng.choice([True, False]))
    wanted = [random_phrases(rng, rng.randint(1, beam - 1)) for _ in LENGTHS]
    out = search(model, src, cfg, controls=[SourceControls(constraints=c) for c in wanted])
    for constraints, nbest in zip(wanted, out):
        assert nbest
        for h in nbest:
            assert h.constraints_met
            for phrase in constraints:
                assert contains(h.tokens, phrase), (constraints, h.tokens)


def test_the_plain_search_misses_the_constraints_the_constrained_one_meets():  # keeps the test above meaningful
    rng = random.Random(1)
    model, src = tiny_model(), sources()
    wanted = [random_phrases(rng, 2) for _ in LENGTHS]
    plain = search(model, src, SearchConfig(beam=4, max_len_b=25))
    assert sum(all(contains(n[0].tokens, p) for p in c) for c, n in zip(wanted, plain)) == 0


def test_constraints_are_batch_invariant_with_mixed_rows():
    rng = random.Random(3)
    model, src = tiny_model(), sources()
    cfg = SearchConfig(beam=4, nbest=2, max_len_b=20)
    controls = [SourceControls(constraints=random_phrases(rng, 2)) if i % 2 else None for i in range(len(LENGTHS))]
    controls[2] = SourceControls(prefix=[5, 6], avoid=[[7]], constraints=[[8, 9]])
    batch = search(model, src, cfg, controls=controls)
    alone = [search(model, src[i : i + 1, :n], cfg, controls=[controls[i]])[0] for i, n in enumerate(LENGTHS)]
    assert_same(batch, alone)
    plain = search(model, src, cfg)
    for i in (0, 4):  # the unconstrained rows of a constrained batch: the plain search's results
        assert_same([batch[i]], [plain[i]])


def test_cached_and_uncached_constrained_search_agree():
    rng = random.Random(4)
    model, src = tiny_model(), sources([6, 2, 4])
    cfg = SearchConfig(beam=3, nbest=2, max_len_b=20, attention_layer=-1)
    controls = [SourceControls(prefix=[4], constraints=random_phrases(rng, 2), avoid=[[5]]) for _ in range(3)]
    assert_same(search(model, src, cfg, controls=controls), search(model, src, cfg, controls=controls, use_cache=False))


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_banned_phrases_never_appear(strategy):
    model, src = tiny_model(), sources()
    cfg = SearchConfig(strategy=strategy, beam=4, nbest=2 if strategy != "greedy" else 1, seed=1, max_len_b=20)
    plain = search(model, src, cfg)
    banned = [[h[0].tokens[:2], h[0].tokens[-1:]] if h[0].tokens else [[4]] for h in plain]  # what it chose
    out = search(model, src, cfg, controls=[SourceControls(avoid=b) for b in banned])
    for phrases, nbest in zip(banned, out):
        for h in nbest:
            assert not any(contains(h.tokens, p) for p in phrases), (phrases, h.tokens)


def test_constraints_that_cannot_fit_end_unmet_at_the_length_limit():
    model, src = tiny_model(), sources([3])
    cfg = SearchConfig(beam=3, nbest=2, max_len_a=0.0, max_len_b=4)
    out = search(model, src, cfg, controls=[SourceControls(constraints=[[5, 6, 7], [8, 9]])])[0]
    assert out and not out[0].constraints_met and len(out[0].tokens) == 4


def test_a_prefix_longer_than_the_length_limit_names_its_source():
    model, src = tiny_model(), sources([3, 3])
    cfg = SearchConfig(beam=2, max_len_a=0.0, max_len_b=3)
    with pytest.raises(ControlError, match="prefix has 4 tokens, more than this sentence's length limit of 3") as e:
        search(model, src, cfg, controls=[None, SourceControls(prefix=[4, 5, 6, 7])])
    assert e.value.index == 1


def test_constraints_need_beam_search():
    model, src = tiny_model(), sources([3])
    with pytest.raises(ValueError, match="constraints need beam search"):
        search(model, src, SearchConfig(strategy="greedy"), controls=[SourceControls(constraints=[[5]])])


# ---- the tracker and the allocation, by hand --------------------------------------------------


def test_a_phrase_is_met_only_by_consecutive_tokens():
    tracker = ConstraintTracker([[[5, 6, 7], [9]]], group=1, eos_id=EOS, device=torch.device("cpu"))
    steps = [(5, [1, 0], 1), (6, [2, 0], 2), (8, [0, 0], 0), (5, [1, 0], 1), (6, [2, 0], 2), (7, [0, 0], 3),
             (9, [0, 0], 4)]
    for token, progress, bank in steps:
        assert tracker.banks(torch.tensor([0]), torch.tensor([token])).tolist() == [bank]
        tracker.follow(None, None, torch.tensor([token]))
        assert tracker.progress.tolist() == [progress]
    assert tracker.met.tolist() == [[True, True]] and tracker.all_met().tolist() == [True]


def test_with_word_pieces_a_phrase_is_met_only_as_whole_words():
    continuation = torch.zeros(12, dtype=torch.bool)
    continuation[10] = True  # piece 10 continues a word ("e" after "▁Hund")
    tracker = ConstraintTracker([[[5]]], group=1, eos_id=EOS, device=torch.device("cpu"), continuation=continuation)
    tracker.follow(None, None, torch.tensor([5]))
    assert tracker.all_met().tolist() == [True] and tracker.met.tolist() == [[False]]  # complete: EOS may end it
    tracker.follow(None, None, torch.tensor([10]))  # "Hund" + "e" = "Hunde": not the word
    assert tracker.all_met().tolist() == [False] and tracker.next_tokens().tolist() == [[5]]
    tracker.follow(None, None, torch.tensor([5]))
    tracker.follow(None, None, torch.tensor([7]))  # a new word follows: met for good
    assert tracker.met.tolist() == [[True]]
    tracker.follow(None, None, torch.tensor([10]))
    assert tracker.all_met().tolist() == [True]


def test_word_pieces_continue_a_word_after_a_letter_digit_hyphen_or_apostrophe():
    from seq2seq.inference.steering import continuation_pieces

    class Pieces:
        pieces = ["<pad>", "<unk>", "<s>", "</s>", "\u2581Hund", "e", "-", "’s", "\u2581-", ".", ",", "7", "\u2581"]
        vocab_size = len(pieces)

        def id_to_piece(self, i):
            return self.pieces[i]

    continues = continuation_pieces(Pieces(), 14)  # (a padded vocabulary: the rest continues nothing)
    assert [Pieces.pieces[i] for i in continues.nonzero().flatten().tolist()] == ["e", "-", "’s", "7"]


def test_eos_is_forbidden_until_every_constraint_is_met():
    tracker = ConstraintTracker([[[5]]], group=2, eos_id=EOS, device=torch.device("cpu"))
    tracker.follow(None, torch.tensor([0, 0]), torch.tensor([5, 6]))  # row 0 met it, row 1 not
    lprobs = torch.zeros(2, 8)
    tracker.mask(lprobs, torch.zeros(2, 2, dtype=torch.long), 1, lprobs.clone())
    assert lprobs[0, EOS] == 0 and lprobs[1, EOS] == float("-inf")


def test_stripes_take_each_bank_in_turn_from_the_highest():
    scores = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, float("-inf")]])
    banks = torch.tensor([[0, 0, 1, 2, 1, 2]])
    # rank 0: bank 2 (-4), bank 1 (-3), bank 0 (-1); rank 1: bank 1 (-5), bank 0 (-2); dead last
    assert _stripes(scores, banks).tolist() == [[3, 2, 0, 4, 1, 5]]


# ---- the sentence-end rule ----------------------------------------------------------------------


def test_no_last_sentence_end_before_every_constraint_is_met():
    """The failure the rule is for: a model that would write "6 ." and stop, constrained to write 8, ends
    its sentence, may not stop (8 is unmet) and appends 8 after the full stop (7): "6 . 8". With the rule
    a row may not write its source's last full stop before every constraint is met: "6 8 ."."""
    stop, word, term = 7, 5, 6
    script = {(): {word: 0.9, term: 0.1}, (word,): {stop: 0.9, term: 0.1}, (word, stop): {EOS: 0.5, term: 0.5},
              (word, stop, term): {EOS: 0.9, stop: 0.1}, (word, term): {stop: 0.9, EOS: 0.1},
              (term,): {word: 0.8, stop: 0.2}, (term, word): {stop: 0.9, EOS: 0.1}}
    model, src = scripted(script)
    end = torch.zeros(V, dtype=torch.bool)
    end[stop] = True
    cfg = SearchConfig(beam=3, max_len_a=0.0, max_len_b=6, lenpen=0.0)
    assert search(model, src, cfg)[0][0].tokens == [word, stop]
    for ends, expected in ((None, [word, stop, term]), (1, [word, term, stop]), (2, [word, stop, term])):
        controls = [SourceControls(constraints=[[term]], sentence_ends=ends)]
        assert search(model, src, cfg, controls=controls, sentence_end=end)[0][0].tokens == expected, ends


def test_a_source_of_two_sentences_may_end_one_before_its_constraints():
    end = torch.zeros(8, dtype=torch.bool)
    end[6] = True
    tracker = ConstraintTracker([[[5]], [[5]]], group=1, eos_id=EOS, device=torch.device("cpu"), sentence_end=end,
                                sentence_ends=[2, 1])
    lprobs = torch.zeros(2, 8)
    tracker.mask(lprobs, torch.zeros(2, 1, dtype=torch.long), 0, None)
    assert lprobs[0, 6] == 0 and lprobs[1, 6] == float("-inf")  # unit 0 may end its first sentence
    tracker.follow(None, None, torch.tensor([6, 4]))
    lprobs = torch.zeros(2, 8)
    tracker.mask(lprobs, torch.zeros(2, 2, dtype=torch.long), 1, None)
    assert lprobs[0, 6] == float("-inf")  # not its last one
    tracker.follow(None, None, torch.tensor([5, 5]))  # both met: every sentence may end
    lprobs = torch.zeros(2, 8)
    tracker.mask(lprobs, torch.zeros(2, 3, dtype=torch.long), 2, None)
    assert (lprobs[:, 6] == 0).all()


def test_a_constraint_of_several_forms_is_met_by_the_one_the_model_prefers():
    """Forms (a lemma and its inflections): the constraint is met by any one of them, so the model writes the
    form it finds likely (6, "schlanker") where the lemma as written (7, "schlank") is forced otherwise; it
    is one constraint, done when one form is met (the beam's capacity counts it once)."""
    lemma, inflected, word = 7, 6, 5
    script = {(): {word: 0.6, inflected: 0.3, lemma: 0.1}, (word,): {inflected: 0.7, lemma: 0.1, EOS: 0.2},
              (inflected,): {word: 0.9, EOS: 0.1}, (lemma,): {word: 0.5, EOS: 0.5}}
    model, src = scripted(script)
    cfg = SearchConfig(beam=3, max_len_a=0.0, max_len_b=4, lenpen=0.0)
    exact = search(model, src, cfg, controls=[SourceControls(constraints=[[lemma]])])[0][0]
    assert lemma in exact.tokens
    any_form = search(model, src, cfg, controls=[SourceControls(constraints=[[lemma], [inflected]], forms=[0, 0])])
    assert any_form[0][0].tokens == [word, inflected] and any_form[0][0].constraints_met
    tracker = ConstraintTracker([[[lemma], [inflected], [4]]], group=1, eos_id=EOS, device=torch.device("cpu"),
                                forms=[[0, 0, 1]])
    tracker.follow(None, None, torch.tensor([inflected]))
    assert tracker.next_tokens().tolist() == [[-1, -1, 4]]  # the lemma is no longer wanted: its constraint is met
    assert tracker.all_met().tolist() == [False]
    tracker.follow(None, None, torch.tensor([4]))
    assert tracker.all_met().tolist() == [True]
