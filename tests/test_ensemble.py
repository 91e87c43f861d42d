"""Ensembles (seq2seq.inference.ensemble): the mixture by hand, the search on it, and the command line."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.inference.controls import SourceControls
from seq2seq.inference.ensemble import EnsembleModel, check_members
from seq2seq.inference.search import SearchConfig, search
from seq2seq.inference.translator import Translator
from conftest import translated
from test_search import assert_same, sources, tiny_model


def two_members():
    """Two different random models whose sources are tokenized differently (other vocabularies and
    lengths), and a batch for each."""
    a = tiny_model()
    b = tiny_model(eos_bias=1.0, src_vocab_size=60, layers=1)
    with torch.no_grad():  # make b differ from a beyond its seed
        for p in b.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return a, b, (sources([9, 3, 5, 7]), sources([4, 6, 2, 8], seed=2))


@pytest.mark.parametrize("combine", ["prob", "logprob"])
def test_each_step_is_the_weighted_mixture_of_the_members(combine):
    a, b, src = two_members()
    ensemble = EnsembleModel([a, b], weights=[3.0, 1.0], combine=combine).eval()
    tgt = torch.tensor([[2, 5, 9, 11]] * 4)
    with torch.no_grad():
        memory, pad = ensemble.encode(src)
        mixed, _ = ensemble.decode(tgt, memory, pad)
        la = F.log_softmax(a.decode(tgt, *a.encode(src[0]))[0], dim=-1)
        lb = F.log_softmax(b.decode(tgt, *b.encode(src[1]))[0], dim=-1)
    if combine == "prob":
        expected = torch.log(0.75 * la.exp() + 0.25 * lb.exp())
    else:
        expected = F.log_softmax(0.75 * la + 0.25 * lb, dim=-1)
    torch.testing.assert_close(mixed, expected, atol=1e-5, rtol=0)
    assert pad.tolist() == a.encode(src[0])[1].tolist()  # the first member's positions


@pytest.mark.parametrize("cfg", [SearchConfig(strategy="greedy"), SearchConfig(beam=3, nbest=2, attention_layer=-1),
                                 SearchConfig(strategy="sample", nbest=2, seed=3)], ids=["greedy", "beam", "sample"])
def test_cached_and_uncached_ensemble_search_agree(cfg):
    a, b, src = two_members()
    ensemble = EnsembleModel([a, b])
    assert_same(search(ensemble, src, cfg), search(ensemble, src, cfg, use_cache=False))


def test_an_ensembles_batch_result_equals_each_sentence_alone():
    a, b, src = two_members()
    ensemble, cfg = EnsembleModel([a, b]), SearchConfig(beam=3, nbest=2)
    batch = search(ensemble, src, cfg)
    alone = [search(ensemble, (src[0][i : i + 1], src[1][i : i + 1]), cfg)[0] for i in range(4)]
    assert_same(batch, alone)


def test_a_member_with_weight_one_is_that_member():
    a, b, src = two_members()
    cfg = SearchConfig(beam=3, nbest=2)
    assert_same(search(EnsembleModel([a, b], weights=[1.0, 0.0]), src, cfg), search(a, src[0], cfg))


def test_constraints_and_prefixes_steer_an_ensemble():
    a, b, src = two_members()
    controls = [SourceControls(prefix=[7], constraints=[[9, 10], [12]])] * 4
    for nbest in search(EnsembleModel([a, b]), src, SearchConfig(beam=4, nbest=2, max_len_b=25), controls=controls):
        for h in nbest:
            assert h.tokens[0] == 7 and 12 in h.tokens
            assert any(h.tokens[i : i + 2] == [9, 10] for i in range(len(h.tokens)))


@pytest.mark.parametrize("weights, message", [
    ([1.0], "1 ensemble weights for 2 models"), ([1.0, -1.0], "must be >= 0"), ([0.0, 0.0], "not all 0"),
    ([1.0, math.nan], "must be >= 0"),
])
def test_bad_weights_are_refused(weights, message):
    a, b, _ = two_members()
    with pytest.raises(ValueError, match=message):
        EnsembleModel([a, b], weights=weights)


def fake_member(path: str, proto: bytes = b"spm", vocab: int = 300, eos: int = 3, encoder: str = "text"):
    from seq2seq.config.encoder_section import EncoderConfig

    return SimpleNamespace(path=path, tokenizers=SimpleNamespace(tgt=SimpleNamespace(model_proto=proto)),
                           config=SimpleNamespace(model=SimpleNamespace(tgt_vocab_size=vocab, encoder=EncoderConfig()),
                                                  decoding=SimpleNamespace(bos_id=2, eos_id=eos, pad_id=0)))


@pytest.mark.parametrize("other, message", [
    (fake_member("b", proto=b"other"), "b and a have different target tokenizers"),
    (fake_member("b", vocab=301), r"b and a have different target vocabularies \(301 and 300 pieces\)"),
    (fake_member("b", eos=1), r"different decoding.eos_id \(1 and 3\)"),
])
def test_members_must_share_the_target_side(other, message):
    with pytest.raises(ValueError, match=message):
        check_members([fake_member("a"), other])


# ---- with trained model directories ------------------------------------------------------------

TEXTS = ["A man rides a bike.", "", "Two dogs play in the snow."]


def test_a_model_twice_is_the_model(tiny_model_dir):
    one = Translator.load(tiny_model_dir, device="cpu").translate_nbest(TEXTS, beam=3, nbest=2)
    two = Translator.load([tiny_model_dir, tiny_model_dir], device="cpu").translate_nbest(TEXTS, beam=3, nbest=2)
    assert [[h.text for h in n] for n in two] == [[h.text for h in n] for n in one]
    assert [h.score for n in two for h in n] == pytest.approx([h.score for n in one for h in n], abs=1e-4)


def test_the_last_checkpoints_of_a_run_decode_as_an_ensemble(tiny_model_dir, tmp_path):
    runner = CliRunner()
    src = tmp_path / "src.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    result = runner.invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), "--last-checkpoints", "2"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.split("\n")) == len(TEXTS) + 1
    ckpts = sorted((tiny_model_dir / "checkpoints").glob("step_*.safetensors"))
    from seq2seq.storage.model_dir import load_model_dir

    expected = Translator([load_model_dir(tiny_model_dir, weights=p) for p in ckpts[-2:]])
    assert result.stdout.split("\n")[:-1] == translated(expected, TEXTS)


@pytest.mark.parametrize("args, message", [
    (["--ensemble-weights", "1"], "1 ensemble weights for 2 models"),
    (["--ensemble-weights", "a,b"], "--ensemble-weights 'a,b': give numbers separated by commas"),
    (["--engine", "ctranslate2"], "--engine ctranslate2 decodes one model"),
])
def test_bad_ensemble_options_are_one_line(tiny_model_dir, args, message):
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), str(tiny_model_dir), *args], input="A dog.\n")
    assert result.exit_code in (1, 2) and message in result.output and "Traceback" not in result.output


def test_translate_and_test_take_several_model_directories(tiny_model_dir, tmp_path):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("A dog runs.\nA man.\n")
    ref.write_text("Ein Hund rennt.\nEin Mann.\n")
    result = CliRunner().invoke(cli, ["test", str(tiny_model_dir), str(tiny_model_dir), "--src", str(src), "--ref",
                                      str(ref), "-o", str(tmp_path / "hyp.txt"), "--ensemble-weights", "2,1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "hyp.txt").read_text().split("\n")[:-1] == translated(Translator.load(tiny_model_dir),
                                                                              ["A dog runs.", "A man."])


def test_the_server_serves_an_ensemble(tiny_model_dir):
    pytest.importorskip("fastapi", reason="the serve extra")
    from seq2seq.inference.generator import load_engine
    from seq2seq.serve.app import create_app
    from test_serve import call, serving

    model = load_engine([tiny_model_dir, tiny_model_dir], device="cpu", ensemble_weights=[1.0, 3.0])
    assert isinstance(model.model, EnsembleModel) and model.model.weights == [0.25, 0.75]
    with serving(create_app(model)) as (port, _):
        status, body = call(port, "POST", "/translate", {"texts": TEXTS[:1], "beam": 3})
    assert status == 200
    assert body["translations"][0]["text"] == translated(Translator.load(tiny_model_dir), TEXTS[:1], beam=3)[0]


def test_more_checkpoints_than_the_run_kept_are_refused_naming_the_directory(tiny_model_dir):
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--last-checkpoints", "5"], input="A dog.\n")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{tiny_model_dir / 'checkpoints'} holds only 2 checkpoint(s), not 5" in result.output
    with pytest.raises(ValueError, match="an ensemble needs 2 or more models"):
        Translator.load(tiny_model_dir, last_checkpoints=1)


def test_an_ensemble_keeps_each_members_memory_and_moves_it_with_the_search():
    a, b, src = two_members()
    ensemble = EnsembleModel([a, b])
    with torch.no_grad():
        memory, pad = ensemble.encode(src)
    assert [m.shape[1] for m, _ in memory] == [src[0].shape[1], src[1].shape[1]]  # each its own length, unpadded
    index = torch.tensor([2, 2, 0])
    moved = ensemble.reorder_memory(memory, index)
    for (m, mask), (n, nmask) in zip(memory, moved):
        assert torch.equal(n, m[index]) and torch.equal(nmask, mask[index])


def ctc_pair():
    from test_ctc import tiny_model as ctc_model

    return ctc_model(3), ctc_model(4), torch.tensor([[5, 6, 7, 8, 9, 10, 3], [5, 9, 11, 3, 0, 0, 0]])


@pytest.mark.parametrize("combine", ["prob", "logprob"])
def test_an_ensemble_rescores_with_its_members_ctc_heads_mixed(combine):
    from seq2seq.inference.ctc import CTCScorer

    a, b, src = ctc_pair()
    ensemble = EnsembleModel([a, b], weights=[3.0, 1.0], combine=combine).eval()
    cfg = SearchConfig(beam=3, nbest=3, max_len_a=0.0, max_len_b=5, early_stopping=False, ctc_weight=0.5)
    with torch.no_grad():
        nbest = search(ensemble, (src, src), cfg)
        scorers = [CTCScorer(m, *m.encode(src), blank=0) for m in (a, b)]
    checked = 0
    for s, hyps in enumerate(nbest):
        for h in hyps:
            pa, pb = (scorer.log_likelihood([s], [h.tokens])[0] for scorer in scorers)
            if combine == "prob":
                expected = math.log(0.75 * math.exp(pa) + 0.25 * math.exp(pb)) if max(pa, pb) > -math.inf else -math.inf
            else:
                expected = 0.75 * pa + 0.25 * pb
            assert h.ctc_logprob == pytest.approx(expected, abs=1e-4)
            checked += 1
    assert checked >= 4


def test_an_ensemble_of_one_model_twice_rescores_as_the_model():
    a, _, src = ctc_pair()
    cfg = SearchConfig(beam=3, nbest=2, max_len_a=0.0, max_len_b=5, early_stopping=False, ctc_weight=0.4)
    with torch.no_grad():
        ensemble, alone = search(EnsembleModel([a, a]), (src, src), cfg), search(a, src, cfg)
    assert [[h.tokens for h in hyps] for hyps in ensemble] == [[h.tokens for h in hyps] for hyps in alone]
    for hyps, ref in zip(ensemble, alone):
        assert [h.score for h in hyps] == pytest.approx([h.score for h in ref], abs=1e-5)


def test_a_source_a_later_member_cannot_read_is_refused_naming_it():
    from seq2seq.inference.ensemble import EnsembleProcessor
    from seq2seq.model.encoders.sources import SourceError

    class Reads:  # prepares the sources that do not hold `blind`
        def __init__(self, blind: str) -> None:
            self.blind = blind

        def prepare(self, sources, first_line=1, warn=None, skipped=None):
            return {i: [1] for i, s in enumerate(sources) if s and self.blind not in s}

    processor = EnsembleProcessor.__new__(EnsembleProcessor)
    processor.processors, processor.names = [Reads("#"), Reads("x")], ["runs/a", "runs/b"]
    assert processor.prepare(["a", "", "b"]) == {0: ([1], [1]), 2: ([1], [1])}  # an empty line: no example
    with pytest.raises(SourceError, match=r"^line 12: the ensemble's runs/b cannot read this source, which "
                                          r"runs/a reads"):
        processor.prepare(["a", "", "x"], first_line=10)


def test_an_ensemble_needs_a_ctc_head_in_every_member_for_ctc_weight(tiny_model_dir):
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), str(tiny_model_dir), "--ctc-weight", "0.5"],
                                input="A man.\n")
    assert result.exit_code != 0 and f"{tiny_model_dir} was trained without CTC" in result.output
    assert "Traceback" not in result.output
