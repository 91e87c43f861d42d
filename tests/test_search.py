"""Search: exact beam bookkeeping on a scripted decoder, and invariances on a tiny real Transformer."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError, ModelConfig, from_dict, to_dict
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.inference.search import SearchConfig, search, top_p_filter
from seq2seq.inference.search import Hypothesis
from seq2seq.inference.search import block_repeated_ngrams

PAD, UNK, BOS, EOS = 0, 1, 2, 3
V = 8  # scripted vocabulary: specials 0-3, words 4-7


# --------------------------------------------------------------------------------------------
# A scripted decoder: next-token probabilities are a fixed table of (source, generated prefix)
# --------------------------------------------------------------------------------------------


class ScriptedCache:
    """Keeps each row's prefix and source; checks the reorder contract of `DecoderCache`."""

    def __init__(self, group: int) -> None:
        self.group = group
        self.prefix: Tensor | None = None  # [B, L] tokens fed so far
        self.row_source: Tensor | None = None  # [B] source id of each row

    def reorder(self, index: Tensor, sources: Tensor | None | str = "infer") -> None:
        runs = index.view(-1, self.group) // self.group
        assert bool((runs == runs[:, :1]).all()), f"a run of {self.group} rows mixes sources: {index.tolist()}"
        n = self.prefix.size(0) // self.group
        stay = torch.arange(n) if sources is None else runs[:, 0] if isinstance(sources, str) else sources
        assert torch.equal(runs[:, 0], stay), f"sources {sources} but the rows come from {runs[:, 0].tolist()}"
        self.prefix = self.prefix.index_select(0, index)
        self.row_source = self.row_source.index_select(0, index)


class _Lengths(nn.Module):
    def source_lengths(self, src: Tensor) -> Tensor:
        return src.ne(PAD).sum(dim=1)


class ScriptedModel(nn.Module):
    """scripts[source id][prefix] = {token: probability}; unlisted tokens have probability 0 and an
    unlisted prefix ends (EOS with probability 1). A source is identified by its first token."""

    def __init__(self, scripts: dict[int, dict[tuple[int, ...], dict[int, float]]]) -> None:
        super().__init__()
        self.scripts = scripts
        self.encoder = _Lengths()
        self.cfg = ModelConfig()  # the search reads cfg.max_positions (a `SearchableModel`)
        self.rows_per_call: list[int] = []

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return src[:, :, None].float(), src.eq(PAD)

    def new_cache(self, group: int = 1) -> ScriptedCache:
        return ScriptedCache(group)

    def decode(self, tgt, memory, memory_pad_mask, cache=None, attention_layer=None):
        if cache is None:  # the whole prefix, one memory row per decoder row
            prefix, row_source = tgt, memory[:, 0, 0].long()
        else:
            if cache.prefix is None:  # first step: rows grouped per source
                cache.prefix = tgt[:, :0]
                cache.row_source = memory[:, 0, 0].long().repeat_interleave(tgt.size(0) // memory.size(0))
            cache.prefix = torch.cat([cache.prefix, tgt], dim=1)
            prefix, row_source = cache.prefix, cache.row_source
        self.rows_per_call.append(tgt.size(0))
        b, t = tgt.shape
        logits = torch.full((b, t, V), float("-inf"))
        for i in range(b):
            script = self.scripts[int(row_source[i])]
            for j in range(t):
                end = prefix.size(1) - t + j + 1
                for token, p in script.get(tuple(prefix[i, 1:end].tolist()), {EOS: 1.0}).items():
                    logits[i, j, token] = math.log(p)
        return logits, None


def scripted(script: dict, source: int = 10) -> tuple[ScriptedModel, Tensor]:
    return ScriptedModel({source: script}), torch.tensor([[source, 4, 5]])


def script_logprob(script: dict, tokens: list[int]) -> float:
    """Hand computation: sum of log p over the tokens and the final EOS."""
    steps = tokens + [EOS]
    return sum(math.log(script.get(tuple(tokens[:i]), {EOS: 1.0})[tok]) for i, tok in enumerate(steps))


def lp(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


# Greedy takes 4 (0.6) but every continuation of 4 is weak; 5 (0.4) then EOS (0.9) is better.
GREEDY_TRAP = {
    (): {4: 0.6, 5: 0.4},
    (4,): {EOS: 0.3, 6: 0.36, 7: 0.34},
    (5,): {EOS: 0.9, 6: 0.1},
    (4, 6): {EOS: 1.0},
    (4, 7): {EOS: 0.6, 6: 0.4},
}


def test_beam_finds_the_sequence_greedy_misses_with_exact_scores():
    model, src = scripted(GREEDY_TRAP)
    (greedy,) = search(model, src, SearchConfig(strategy="greedy", lenpen=1.0))
    assert greedy[0].tokens == [4, 6]
    assert greedy[0].logprob == pytest.approx(math.log(0.6 * 0.36))
    assert greedy[0].score == pytest.approx(math.log(0.6 * 0.36) / lp(3, 1.0))

    (beam,) = search(model, src, SearchConfig(strategy="beam", beam=2, nbest=2, lenpen=1.0))
    # Hand-run beam 2: step 1 ranks 5.EOS .36 > 4.6 .216 > 4.7 .204 > 4.EOS .18, so [5] ends and
    # 4.6, 4.7 continue; step 2 ends both (.216, .1224). Three finished >= beam: done.
    assert [h.tokens for h in beam] == [[5], [4, 6]]
    assert beam[0].token_logprobs == pytest.approx([math.log(0.4), math.log(0.9)])
    assert beam[0].logprob == pytest.approx(math.log(0.36))
    assert beam[0].score == pytest.approx(math.log(0.36) / lp(2, 1.0))
    assert beam[1].score == pytest.approx(math.log(0.216) / lp(3, 1.0))


def test_length_penalty_decides_between_short_and_long():
    script = {
        (): {4: 0.55, 5: 0.45},
        (4,): {EOS: 0.7, 6: 0.3},
        (5,): {EOS: 0.2, 7: 0.8},
        (5, 7): {EOS: 0.95, 6: 0.05},
        (4, 6): {EOS: 0.9, 6: 0.1},
    }
    model, src = scripted(script)
    (raw,) = search(model, src, SearchConfig(beam=2, nbest=2, lenpen=0.0))
    assert [h.tokens for h in raw] == [[4], [5, 7]]  # -0.954 > -1.073
    assert raw[0].score == pytest.approx(math.log(0.385))
    (pen,) = search(model, src, SearchConfig(beam=2, nbest=2, lenpen=1.0))
    assert [h.tokens for h in pen] == [[5, 7], [4]]  # -1.073 / (8/6) > -0.954 / (7/6)
    assert pen[0].score == pytest.approx(math.log(0.342) / lp(3, 1.0))
    assert pen[1].score == pytest.approx(math.log(0.385) / lp(2, 1.0))


def test_early_stopping_false_keeps_searching_for_a_better_long_hypothesis():
    # [4] ends with p .54 at step 1; the live [4, 6] (p .36) only improves by getting longer:
    # [4, 6, 7, 7, 7, 7] scores log(.36) / 2 = -0.511 > log(.54) / (7/6) = -0.528.
    script = {(): {4: 0.9, 5: 0.1}, (4,): {EOS: 0.6, 6: 0.4}, (4, 6): {7: 1.0}, (4, 6, 7): {7: 1.0},
              (4, 6, 7, 7): {7: 1.0}, (4, 6, 7, 7, 7): {7: 1.0}, (4, 6, 7, 7, 7, 7): {EOS: 1.0}}
    model, src = scripted(script)
    base = dict(beam=1, lenpen=1.0, max_len_a=0.0, max_len_b=10)
    (early,) = search(model, src, SearchConfig(**base, early_stopping=True))
    assert early[0].tokens == [4] and early[0].score == pytest.approx(math.log(0.54) / lp(2, 1.0))
    (exact,) = search(model, src, SearchConfig(**base, early_stopping=False))
    assert exact[0].tokens == [4, 6, 7, 7, 7, 7]
    assert exact[0].score == pytest.approx(math.log(0.36) / lp(7, 1.0))
    # Without a length penalty nothing can beat [4] once it ended: the exact search stops too.
    model.rows_per_call.clear()
    (flat,) = search(model, src, SearchConfig(**{**base, "lenpen": 0.0}, early_stopping=False))
    assert flat[0].tokens == [4] and len(model.rows_per_call) == 2


@pytest.mark.parametrize("beam", [2, 3, 5])
def test_nbest_sorted_distinct_and_scores_are_the_scripted_sums(beam):
    model, src = scripted(GREEDY_TRAP)
    (hyps,) = search(model, src, SearchConfig(beam=beam, nbest=beam, lenpen=0.6, early_stopping=False))
    assert 2 <= len(hyps) <= beam
    assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for h in hyps:
        expected = script_logprob(GREEDY_TRAP, h.tokens)
        assert h.logprob == pytest.approx(expected, abs=1e-5)
        assert sum(h.token_logprobs) == pytest.approx(expected, abs=1e-5)
        assert len(h.token_logprobs) == len(h.tokens) + 1
        assert h.score == pytest.approx(expected / lp(len(h.tokens) + 1, 0.6), abs=1e-5)
    if beam >= 3:  # every finite sequence of the script is found: 5 of them
        assert {tuple(h.tokens) for h in hyps} >= {(5,), (4, 6), (4, 7)}


def test_finished_sentences_leave_the_batch_and_beams_stay_with_their_source():
    scripts = {
        10: {(): {4: 0.9, EOS: 0.1}, (4,): {EOS: 1.0}},  # ends after one word
        11: {(): {4: 1.0}, (4,): {5: 1.0}, (4, 5): {6: 1.0}, (4, 5, 6): {EOS: 1.0}},
    }
    model = ScriptedModel(scripts)
    src = torch.tensor([[10, 4, 4, 4], [11, 4, PAD, PAD]])
    out = search(model, src, SearchConfig(strategy="greedy"))
    assert [hyps[0].tokens for hyps in out] == [[4], [4, 5, 6]]
    assert model.rows_per_call == [2, 2, 1, 1]
    model.rows_per_call.clear()
    out = search(model, src, SearchConfig(beam=2))
    assert [hyps[0].tokens for hyps in out] == [[4], [4, 5, 6]]
    assert model.rows_per_call == [4, 4, 2, 2]  # source 10's beam leaves after step 1
    for i in range(2):  # and each sentence alone gives the same
        assert search(model, src[i : i + 1], SearchConfig(beam=2))[0][0].tokens == out[i][0].tokens


def test_min_len_forbids_eos_and_max_len_forces_it_on_the_script():
    model, src = scripted({(): {4: 0.4, EOS: 0.6}, (4,): {EOS: 0.9, 4: 0.1}, (4, 4): {EOS: 0.9, 4: 0.1},
                           (4, 4, 4): {4: 0.99, EOS: 0.01}})
    (h,) = search(model, src, SearchConfig(strategy="greedy", min_len=0))[0]
    assert h.tokens == [] and h.logprob == pytest.approx(math.log(0.6))
    (h,) = search(model, src, SearchConfig(strategy="greedy", min_len=2))[0]
    assert h.tokens == [4, 4] and h.logprob == pytest.approx(math.log(0.4 * 0.1 * 0.9))
    # After (4, 4, 4) the model prefers 4; max_len forces EOS, scored with its real probability.
    (h,) = search(model, src, SearchConfig(strategy="greedy", min_len=3, max_len_a=0.0, max_len_b=3))[0]
    assert h.tokens == [4, 4, 4] and h.logprob == pytest.approx(math.log(0.4 * 0.1 * 0.1 * 0.01))
    assert h.token_logprobs[-1] == pytest.approx(math.log(0.01))


# --------------------------------------------------------------------------------------------
# A tiny random Transformer
# --------------------------------------------------------------------------------------------


def tiny_model(eos_bias: float = 2.0, **kw) -> Seq2SeqTransformer:
    """A random model; `eos_bias` > 0 makes EOS likely enough that outputs have varied lengths."""
    base = dict(src_vocab_size=40, tgt_vocab_size=40, d_model=32, heads=4, ffn_dim=64, layers=2, dropout=0.0)
    base.update(kw)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(**base)).eval()
    with torch.no_grad():  # final-norm bias aligned with the (tied) EOS embedding raises EOS logits
        direction = torch.randn(base["d_model"])
        direction /= direction.norm()
        model.decoder.final_norm.bias.copy_(direction)
        model.decoder.embed.tokens.weight[EOS] = direction * eos_bias
    return model


LENGTHS = [9, 3, 5, 7, 2, 8]


def sources(lengths=LENGTHS, seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(4, 40, (n,), generator=g)
    return src


def assert_same(a: list[list[Hypothesis]], b: list[list[Hypothesis]], atol: float = 1e-4) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert [h.tokens for h in x] == [h.tokens for h in y]
        for h, k in zip(x, y):
            assert h.score == pytest.approx(k.score, abs=atol)
            assert h.token_logprobs == pytest.approx(k.token_logprobs, abs=atol)
            if h.attention is not None:
                torch.testing.assert_close(h.attention, k.attention, atol=atol, rtol=0)


def test_tiny_model_outputs_have_varied_lengths():  # keeps the invariance tests meaningful
    out = search(tiny_model(), sources(), SearchConfig(strategy="greedy"))
    assert len({len(h[0].tokens) for h in out}) >= 3


def test_beam_of_one_equals_greedy():
    src = sources()
    for bias in (0.0, 2.0):
        model = tiny_model(eos_bias=bias)
        assert_same(search(model, src, SearchConfig(strategy="beam", beam=1)),
                    search(model, src, SearchConfig(strategy="greedy")))


@pytest.mark.parametrize("cfg", [SearchConfig(strategy="greedy"), SearchConfig(beam=3, nbest=3),
                                 SearchConfig(beam=2, no_repeat_ngram=2, early_stopping=False)],
                         ids=["greedy", "beam3", "beam2-ngram-exact"])
def test_batch_result_equals_decoding_each_sentence_alone(cfg):
    model, src = tiny_model(), sources()
    batch = search(model, src, cfg)
    alone = [search(model, src[i : i + 1, :n], cfg)[0] for i, n in enumerate(LENGTHS)]
    assert_same(batch, alone)
    # and the batch order does not matter either
    order = [3, 0, 5, 1, 4, 2]
    assert_same([batch[i] for i in order], search(model, src[order], cfg))


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_cached_and_uncached_decoding_agree(strategy):
    model, src = tiny_model(), sources([6, 2, 4])
    cfg = SearchConfig(strategy=strategy, beam=3, nbest=2 if strategy != "greedy" else 1, seed=3, attention_layer=-1)
    assert_same(search(model, src, cfg), search(model, src, cfg, use_cache=False))


def test_length_limits():
    src = sources()
    runs_to_the_end = tiny_model(eos_bias=0.0)  # never chooses EOS before max_len
    out = search(runs_to_the_end, src, SearchConfig(beam=2, max_len_a=1.0, max_len_b=1))
    assert [len(h[0].tokens) for h in out] == [n + 1 for n in LENGTHS]  # a * src_len + b per sentence
    out = search(runs_to_the_end, src, SearchConfig(strategy="greedy", max_len_a=1.0, max_len_b=1, max_len=4))
    assert [len(h[0].tokens) for h in out] == [min(n + 1, 4) for n in LENGTHS]
    short = tiny_model(eos_bias=0.0, max_positions=6)  # BOS + 5 tokens fit in the positions
    assert [len(h[0].tokens) for h in search(short, sources([4, 2]), SearchConfig(strategy="greedy"))] == [5, 5]

    eager = tiny_model(eos_bias=4.0)  # would mostly stop after one token
    assert min(len(h[0].tokens) for h in search(eager, src, SearchConfig(beam=2, min_len=1))) == 1
    for cfg in (SearchConfig(beam=2, nbest=2, min_len=4), SearchConfig(strategy="sample", nbest=2, min_len=4, seed=0)):
        assert all(len(h.tokens) >= 4 for hyps in search(eager, src, cfg) for h in hyps)
    both = search(eager, src, SearchConfig(beam=2, min_len=6, max_len_a=0.0, max_len_b=6))
    assert all(len(h[0].tokens) == 6 for h in both)


def repeats(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram(strategy, n):
    model, src = tiny_model(eos_bias=0.0), sources([9, 3, 5])
    cfg = dict(strategy=strategy, beam=3, nbest=3 if strategy == "beam" else 1, min_len=15, max_len_a=0.0, max_len_b=15)
    free = search(model, src, SearchConfig(**cfg))
    assert any(repeats(h.tokens, n) for hyps in free for h in hyps)  # the model does repeat
    blocked = search(model, src, SearchConfig(**cfg, no_repeat_ngram=n))
    assert not any(repeats(h.tokens, n) for hyps in blocked for h in hyps)
    assert all(len(h.tokens) == 15 for hyps in blocked for h in hyps)


def test_block_repeated_ngrams_unit():
    lprobs = torch.zeros(2, 8)
    block_repeated_ngrams(lprobs, torch.tensor([[4, 5, 6, 4], [4, 5, 6, 7]]), 2)
    assert torch.isinf(lprobs[0]).nonzero().flatten().tolist() == [5]  # "4 5" seen, row ends in 4
    assert not torch.isinf(lprobs[1]).any()


def test_sampling_is_seeded_and_filters_work():
    model, src = tiny_model(eos_bias=1.0), sources()
    cfg = dict(strategy="sample", nbest=3, temperature=1.5)
    a = search(model, src, SearchConfig(**cfg, seed=1))
    assert_same(a, search(model, src, SearchConfig(**cfg, seed=1)), atol=0)
    b = search(model, src, SearchConfig(**cfg, seed=2))
    assert [[h.tokens for h in x] for x in a] != [[h.tokens for h in x] for x in b]
    for hyps in a:  # nbest samples (two may coincide), sorted, logprob is the model's (temperature 1) sum
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert all(h.logprob == pytest.approx(sum(h.token_logprobs), abs=1e-4) for h in hyps)
    greedy = search(model, src, SearchConfig(strategy="greedy"))
    assert_same(search(model, src, SearchConfig(strategy="sample", topk=1, seed=5, temperature=3.0)), greedy)
    assert_same(search(model, src, SearchConfig(strategy="sample", topp=1e-4, seed=5)), greedy)


def test_top_p_filter_keeps_the_smallest_nucleus():
    logits = torch.tensor([[0.2, 0.5, 0.3]]).log()
    kept = lambda p: torch.isfinite(top_p_filter(logits, p)).nonzero()[:, 1].tolist()  # noqa: E731
    assert kept(0.5) == [1] and kept(0.6) == [1, 2] and kept(0.85) == [0, 1, 2] and kept(1.0) == [0, 1, 2]


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_attention_over_real_source_positions(strategy):
    model, src = tiny_model(), sources([7, 3, 5])
    out = search(model, src, SearchConfig(strategy=strategy, beam=2, nbest=2 if strategy == "beam" else 1,
                                          attention_layer=1))
    for hyps, n in zip(out, [7, 3, 5]):
        for h in hyps:
            assert h.attention.shape == (len(h.tokens) + 1, n)
            torch.testing.assert_close(h.attention.sum(-1), torch.ones(len(h.tokens) + 1))
    assert search(model, src, SearchConfig(strategy=strategy))[0][0].attention is None


def test_config_validation_and_yaml_round_trip():
    with pytest.raises(ValueError, match="nbest"):
        SearchConfig(beam=2, nbest=3)
    with pytest.raises(ValueError, match="greedy"):
        SearchConfig(strategy="greedy", nbest=2)
    with pytest.raises(ConfigError, match="topp"):
        from_dict(SearchConfig, {"strategy": "sample", "topp": 0.0})
    cfg = SearchConfig(strategy="sample", topk=5, seed=3, attention_layer=-1, max_len=50)
    assert from_dict(SearchConfig, to_dict(cfg)) == cfg


# --------------------------------------------------------------------------------------------
# The search's rules, each in one place (SearchConfig): golden values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, max_len, positions, src_lens, expected", [
    (1.2, 10, None, None, [0, 1, 5, 7, 100], [10, 11, 16, 18, 130]),
    (1.2, 10, 20, None, [0, 5, 7, 100], [10, 16, 18, 20]),  # max_len caps
    (1.2, 10, None, 17, [5, 7, 100], [16, 16, 16]),  # BOS + 16 tokens fill 17 positions
    (2.0, 5, 50, 30, [3, 40], [11, 29]),
    (0.29, 0, None, None, [100], [29]),  # 0.29 * 100 = 28.999999999999996: the 1e-6 keeps it 29
    (0.7, 0, None, None, [10], [7]),
    (1.1, 0, None, None, [10], [11]),
    (0.5, -3, None, None, [4, 10], [0, 2]),  # never below 0 (a = 0 with b <= 0 is refused: every output empty)
])
def test_max_length_is_the_limit_search_and_the_ctranslate2_engine_used(a, b, max_len, positions, src_lens, expected):
    cfg = SearchConfig(max_len_a=a, max_len_b=b, max_len=max_len)
    assert [cfg.max_length(n, positions) for n in src_lens] == expected
    if positions is None:  # the CTranslate2 engine's (its max_len is already capped at the positions)
        from seq2seq.deploy.engine import CTranslate2Translator

        assert [CTranslate2Translator._max_len(n, cfg) for n in src_lens] == expected


def test_length_penalty_and_score_are_gnmts_with_the_earlier_golden_values():
    from seq2seq.inference.search import hypothesis_score, length_penalty

    golden = {  # lenpen -> penalty at L = 1, 4, 11, and the score of logprob -7.25 there
        0.0: ([1.0, 1.0, 1.0], [-7.25, -7.25, -7.25]),
        0.6: ([1.0, 1.2754245006257907, 1.8012800513608178], [-7.25, -5.68438194220259, -4.024915500797793]),
        1.0: ([1.0, 1.5, 2.6666666666666665], [-7.25, -4.833333333333333, -2.71875]),
        1.3: ([1.0, 1.6940204031852832, 3.578980663185358], [-7.25, -4.279759550928521, -2.0257164489811377]),
    }
    for alpha, (penalties, scores) in golden.items():
        assert [length_penalty(n, alpha) for n in (1, 4, 11)] == penalties  # exactly: bit-identical scores
        assert [hypothesis_score(-7.25, n, alpha) for n in (1, 4, 11)] == scores
        assert [(5 + n) / 6 for n in (1, 4, 11)] == [1.0, 1.5, 16 / 6]  # L counts the EOS
    totals = torch.tensor([-1.5, -3.0])
    assert torch.equal(hypothesis_score(totals, 4, 0.6), totals / length_penalty(4, 0.6))


def test_rows_per_source():
    for cfg, rows in [(SearchConfig(beam=4, nbest=2), 4), (SearchConfig(strategy="sample", nbest=3), 3),
                      (SearchConfig(strategy="greedy", beam=5), 1)]:
        assert cfg.rows_per_source == rows


@pytest.mark.parametrize("fields, options, message", [
    ({"beam": 2, "nbest": 3}, {"beam": 2, "nbest": 3}, "nbest (3) must be <= beam (2); pass a larger beam"),
    ({"strategy": "greedy", "nbest": 2}, {"greedy": True, "nbest": 2},
     "nbest=2: greedy search gives one hypothesis; use beam search (beam >= 2) or sampling"),
    ({"beam": 0}, {"beam": 0}, "beam must be >= 1, got 0"),
    ({"strategy": "sample", "topp": 1.5}, {"sample": True, "topp": 1.5}, "topp must be in (0, 1], got 1.5"),
    ({"strategy": "sample", "temperature": 0.0}, {"sample": True, "temperature": 0.0},
     "temperature must be > 0, got 0.0"),
    ({"strategy": "sample", "ctc_weight": 0.3}, {"sample": True, "ctc_weight": 0.3},
     "ctc_weight needs beam or greedy search, not sample"),
    ({"strategy": "bogus"}, {"strategy": "bogus"}, "strategy must be one of ('greedy', 'beam', 'sample'), not 'bogus'"),
])
def test_a_config_file_and_a_calls_options_are_refused_with_the_same_message(fields, options, message):
    """One validator (`check_search`) for both: the config file's message names the section."""
    from seq2seq.config.search import check_search
    from seq2seq.config.search import resolve_search

    with pytest.raises(ValueError) as config_file:
        SearchConfig(**fields)
    with pytest.raises(ValueError) as call:
        resolve_search(SearchConfig(), options)
    assert str(config_file.value) == f"decoding.{message}" and str(call.value) == message
    with pytest.raises(ValueError, match=re.escape(message)):
        check_search({**vars(SearchConfig()), **fields})


def test_ctc_weight_needs_a_ctc_head():
    cfg = SearchConfig(ctc_weight=0.5)
    cfg.check_ctc_head(training_ctc_weight=0.3)
    SearchConfig().check_ctc_head(training_ctc_weight=0.0)
    with pytest.raises(ConfigError, match=re.escape("decoding.ctc_weight (0.5) needs a CTC head: set training")):
        cfg.check_ctc_head(training_ctc_weight=0.0)
    with pytest.raises(ConfigError, match="ctc_weight 0.5: runs/x was trained without CTC"):
        cfg.check_ctc_head(training_ctc_weight=0.0, model="runs/x")


def test_the_transformer_is_a_searchable_model():
    from seq2seq.inference.protocol import CTCModel, SearchableModel

    model = tiny_model()
    assert isinstance(model, SearchableModel) and isinstance(model, CTCModel)
    assert not isinstance(object(), SearchableModel)


def test_samples_of_an_encoder_without_source_lengths_use_the_memorys_positions():
    """An encoder whose source_lengths is None (images, audio): the limits come from the padding mask,
    one per source also when each source has several samples."""
    model, src = tiny_model(eos_bias=0.0), sources([6, 2, 4])
    cfg = SearchConfig(strategy="sample", nbest=3, seed=2, max_len_a=1.0, max_len_b=1)
    expected = search(model, src, cfg)
    model.encoder.source_lengths = lambda src: None
    got = search(model, src, cfg)
    assert_same(got, expected)
    assert [max(len(h.tokens) for h in hyps) for hyps in got] == [7, 3, 5]


@pytest.mark.parametrize("vocab", [50, 8003], ids=["small-vocab", "blocked-top-k"])
@pytest.mark.parametrize("beam", [1, 3, 5])
def test_beam_select_is_the_top_of_every_row_sum_of_the_beam(beam, vocab):
    """Beam.select takes each row's best tokens first; the candidates must be exactly the best 2 x beam
    of the sentence's beam x V sums (rows, tokens, log-probabilities, scores), also with -inf rows and
    masked tokens (a vocabulary of 8,003: the block-wise top-k of a row, with a short last block)."""
    from seq2seq.inference.strategies import Beam

    torch.manual_seed(beam)
    units = 4
    lprobs = torch.randn(units * beam, vocab).log_softmax(-1)
    lprobs[0, 5:] = float("-inf")  # a row with fewer allowed tokens than candidates
    scores = torch.randn(units * beam)
    scores[1::beam] = float("-inf")  # dead rows (as at the first step)
    cand = Beam(beam).select(lprobs, scores)
    flat = (lprobs + scores[:, None]).view(units, beam * vocab)
    top, index = flat.topk(2 * beam, dim=1)
    finite = top > float("-inf")
    assert torch.equal(cand.scores, top)
    assert torch.equal((cand.rows * vocab + cand.tokens)[finite], index[finite])
    assert torch.equal(cand.logprob[finite], lprobs.view(units, -1).gather(1, index)[finite])


def test_row_topk_equals_torch_topk_with_ties_masks_and_a_short_last_block():
    """The block-wise top-k: the same values as torch.topk, best first, and columns that hold them
    (distinct), on rows whose best values crowd into one block, tie, or are all -inf but one."""
    from seq2seq.inference.strategies import BLOCK, row_topk

    torch.manual_seed(0)
    x = torch.randn(6, 40 * BLOCK + 17)
    x[0, 3 * BLOCK: 3 * BLOCK + 20] += 10.0  # the 10 best in one block
    x[1, ::BLOCK] = 5.0  # ties: a 5.0 at the start of every block
    x[2] = float("-inf")
    x[2, 7] = 0.0  # one allowed token
    x[3, -5:] += 10.0  # the best ones in the short last block
    x[4, :] = 1.0  # all equal
    for k in (1, 10):
        values, columns = row_topk(x, k)
        expected = x.topk(k, dim=1).values
        assert torch.equal(values, expected)
        assert torch.equal(x.gather(1, columns), values)
        assert all(len(set(row)) == k for row in columns.tolist())
    assert row_topk(x, 10)[1][2, 0] == 7 and set(row_topk(x, 5)[1][3].tolist()) <= set(range(x.size(1) - 5, x.size(1)))
