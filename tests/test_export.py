"""Deployment (seq2seq.deploy: ctranslate2, hf, hf_import, engine; `seq2seq export` / `import-hf` /
`translate --engine`): CTranslate2 and transformers compute what our model computes, and the
CTranslate2 engine finds what our search finds.

Models: random ones of every architecture (norms and biases perturbed, so that a LayerNorm or bias
mapped to the wrong place shows), and one tiny model trained for a few seconds on a toy task
(copy the words in upper case), which stops by itself like a real translation model.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
import yaml
from click.testing import CliRunner

if os.environ.get("SEQ2SEQ_REQUIRE_DATA"):  # CI: the export extra is installed, these tests must run
    import ctranslate2
    import transformers
else:
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the export extra: pip install -e '.[export]'")
    transformers = pytest.importorskip("transformers", reason="the export extra: pip install -e '.[export]'")

from seq2seq.storage.model_dir import ModelDir, load_model_dir  # noqa: E402
from seq2seq.storage.weights import load_weights, save_weights  # noqa: E402
from seq2seq.data.batching import pad_sequences  # noqa: E402
from seq2seq.cli import cli  # noqa: E402
from seq2seq.config import ModelConfig, save  # noqa: E402
from seq2seq.deploy.engine import CTranslate2Translator  # noqa: E402
from seq2seq.deploy.ctranslate2 import export_ctranslate2  # noqa: E402
from seq2seq.deploy.hf import export_hf  # noqa: E402
from seq2seq.deploy.staging import ExportError  # noqa: E402
from seq2seq.model.transformer import Seq2SeqTransformer  # noqa: E402
from seq2seq.config.root import Config  # noqa: E402
from seq2seq.text.tokenizer import EOS_ID, PAD_ID, TokenizerPair, train_tokenizer  # noqa: E402
from seq2seq.config import TokenizerConfig  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's

WORDS = "red blue green cat dog tree sun moon big small house river".split()


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, TokenizerPair]:
    """A joint tokenizer, and a separate pair of different sizes (lower-case source, upper-case target)."""
    src_texts = _sentences(300, 1)
    tgt_texts = [t.upper() + " ." for t in src_texts]
    joint = train_tokenizer(src_texts + tgt_texts, 60, TokenizerConfig(vocab_size=60), num_threads=1)
    src = train_tokenizer(src_texts, 30, TokenizerConfig(vocab_size=30), num_threads=1)
    tgt = train_tokenizer(tgt_texts, 40, TokenizerConfig(vocab_size=40), num_threads=1)
    assert src.vocab_size != tgt.vocab_size
    return {"joint": TokenizerPair(joint, joint, joint=True), "separate": TokenizerPair(src, tgt, joint=False)}


def make_model_dir(path: Path, pair: TokenizerPair, seed: int = 0, **model) -> Path:
    """A model directory with random weights (LayerNorms and biases perturbed too)."""
    path.mkdir(parents=True)
    sizes = dict(src_vocab_size=pair.src.vocab_size, tgt_vocab_size=pair.tgt.vocab_size, d_model=16, heads=2,
                 ffn_dim=24, layers=2, max_positions=48, dropout=0.0, share_embeddings=pair.joint)
    cfg = Config(model=ModelConfig(**{**sizes, **model}))
    torch.manual_seed(seed)
    net = Seq2SeqTransformer(cfg.model)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "norm" in name or name.endswith("bias") or "positions" in name:
                p.add_(torch.randn_like(p) * 0.3)
    save_weights(net.state_dict(), path / ModelDir.WEIGHTS)
    save(cfg, path / ModelDir.CONFIG)
    pair.save(path)
    return path


ARCHITECTURES = {  # each mapping choice once against the others
    "pre-sinusoidal-relu-joint-tied": dict(norm="pre", positions="sinusoidal", activation="relu", tok="joint",
                                           tie_output=True),
    "post-learned-gelu-separate-untied": dict(norm="post", positions="learned", activation="gelu", tok="separate",
                                              tie_output=False, encoder_layers=1),
    "pre-learned-gelu-joint-unshared-untied": dict(norm="pre", positions="learned", activation="gelu", tok="joint",
                                                   share_embeddings=False, tie_output=False),
    "post-sinusoidal-relu-separate-tied": dict(norm="post", positions="sinusoidal", activation="relu",
                                               tok="separate", tie_output=True, decoder_layers=3),
}


def _random_dir(tmp_path: Path, tokenizers: dict, name: str) -> Path:
    arch = dict(ARCHITECTURES[name])
    return make_model_dir(tmp_path / name, tokenizers[arch.pop("tok")], **arch)


def _batch(loaded, n: int = 4):
    """Padded source ids (+ EOS) and teacher-forced target ids (BOS + ...) of n toy sentences."""
    texts = _sentences(n, 7)
    src = pad_sequences([ids + [EOS_ID] for ids in loaded.tokenizers.src.encode(texts)], PAD_ID)
    tgt = pad_sequences([[2] + ids for ids in loaded.tokenizers.tgt.encode([t.upper() + " ." for t in texts])],
                        PAD_ID)
    return src, tgt


# --------------------------------------------------------------------------------------------
# CTranslate2: the same model
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_ctranslate2_scores_every_token_as_our_model_does(tmp_path, tokenizers, name):
    model_dir = _random_dir(tmp_path, tokenizers, name)
    out = export_ctranslate2(model_dir, tmp_path / "ct2")
    loaded = load_model_dir(model_dir)
    engine = ctranslate2.Translator(str(out), intra_threads=1)
    texts = _sentences(5, 3)
    src_ids = loaded.tokenizers.src.encode(texts)
    tgt_ids = loaded.tokenizers.tgt.encode([t.upper() + " ." for t in _sentences(5, 4)])
    scored = engine.score_batch([[loaded.tokenizers.src.id_to_piece(i) for i in s] for s in src_ids],
                                [[loaded.tokenizers.tgt.id_to_piece(i) for i in t] for t in tgt_ids])
    for s, t, r in zip(src_ids, tgt_ids, scored):
        with torch.no_grad():
            logprobs = torch.log_softmax(loaded.model(torch.tensor([s + [EOS_ID]]), torch.tensor([[2] + t])), -1)[0]
        ours = logprobs[torch.arange(len(t) + 1), torch.tensor(t + [EOS_ID])]
        assert torch.allclose(ours, torch.tensor(r.log_probs), atol=1e-4), (ours, r.log_probs)


# --------------------------------------------------------------------------------------------
# CTranslate2: the same search (a trained toy model)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny model trained for 600 steps to write its source in upper case: long enough
    to do it well (BLEU ~70 on `SOURCES`), so that quantization shows in the scores."""
    root = tmp_path_factory.mktemp("toy")
    for split, n, seed in (("train", 3000, 11), ("valid", 100, 12)):
        src = _sentences(n, seed)
        (root / f"{split}.src").write_text("\n".join(src) + "\n")
        (root / f"{split}.tgt").write_text("\n".join(s.upper() for s in src) + "\n")
    cfg = {
        "data": {"train_src": str(root / "train.src"), "train_tgt": str(root / "train.tgt"),
                 "valid_src": str(root / "valid.src"), "valid_tgt": str(root / "valid.tgt")},
        "tokenizer": {"vocab_size": 60},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "share_embeddings": True,
                  "max_positions": 64, "dropout": 0.0},
        "training": {"output_dir": str(root / "model"), "max_steps": 600, "valid_every": 600, "max_tokens": 600,
                     "lr": 0.005, "warmup_steps": 20, "device": "cpu", "log_every": 50, "valid_bleu": False,
                     "best_metric": "loss", "threads": 1, "label_smoothing": 0.0},
        "decoding": {"beam": 5},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(root / "config.yaml")])
    assert result.exit_code == 0, result.output
    return root / "model"


@pytest.fixture(scope="module")
def engines(trained) -> tuple[Translator, CTranslate2Translator]:
    out = export_ctranslate2(trained, trained / "ctranslate2")
    return Translator.load(trained, device="cpu"), CTranslate2Translator.load(out, threads=1)


SOURCES = _sentences(200, 99)


@pytest.mark.parametrize("options", [dict(beam=5), dict(beam=5, lenpen=0.6), dict(beam=4, lenpen=0.0),
                                     dict(greedy=True), dict(beam=5, nbest=3)])
def test_ctranslate2_engine_finds_our_translations(engines, options):
    ours, theirs = engines
    a, b = ours.translate_nbest(SOURCES, **options), theirs.translate_nbest(SOURCES, **options)
    same = [x[0].text == y[0].text for x, y in zip(a, b)]
    assert sum(same) >= 0.99 * len(SOURCES)
    for x, y, ok in zip(a, b, same):
        if ok:  # our scores: GNMT length penalty over the full-vocabulary log-probabilities
            assert abs(x[0].score - y[0].score) < 1e-4 and abs(x[0].logprob - y[0].logprob) < 1e-4
            assert x[0].token_ids == y[0].token_ids
    if options.get("nbest"):
        lists = sum([h.text for h in x] == [h.text for h in y] for x, y in zip(a, b))
        assert lists >= 0.95 * len(SOURCES)
        assert all(len(y) == 3 for y in b)


def test_ctranslate2_engine_on_multi30k_with_the_session_model(tiny_model_dir, multi30k_small, tmp_path):
    """The shared tiny Multi30K model (60 steps: every translation runs to the length limit, the
    engine's least exact case) on the 60 validation sentences, beam 4 (its config) and beam 5."""
    out = export_ctranslate2(tiny_model_dir, tmp_path / "ct2")
    ours, theirs = Translator.load(tiny_model_dir, device="cpu"), CTranslate2Translator.load(out, threads=1)
    sources = multi30k_small["val.en"].read_text().splitlines()
    for options in ({}, {"beam": 5, "lenpen": 0.6}):
        a, b = ours.translate(sources, **options), theirs.translate(sources, **options)
        assert sum(x == y for x, y in zip(a, b)) >= 0.98 * len(sources), options


def test_ctranslate2_engine_keeps_our_length_limit(engines):
    """max_len = a * source length + b: every search here reaches it; ours then forces EOS (and scores
    it), the engine re-runs such sentences with CTranslate2 stopping at the limit and scores that EOS."""
    ours, theirs = engines
    options = dict(beam=5, max_len_a=0.0, max_len_b=2)  # every source has 2 words or more
    a, b = ours.translate_nbest(SOURCES, **options), theirs.translate_nbest(SOURCES, **options)
    assert all(len(y[0].token_ids) <= 2 for y in b)
    assert sum(len(x[0].token_ids) == 2 for x in a) > 0.9 * len(SOURCES)  # the limit is what stops them
    same = [x[0].token_ids == y[0].token_ids for x, y in zip(a, b)]
    assert sum(same) >= 0.95 * len(SOURCES)
    assert all(abs(x[0].score - y[0].score) < 1e-4 for x, y, ok in zip(a, b, same) if ok)


def test_ctranslate2_engine_handles_empty_and_overlong_lines(engines):
    ours, theirs = engines
    long_line = " ".join(["red"] * 200)
    texts = ["", "red cat", "   ", long_line]
    warnings: list[str] = []
    results = theirs.translate_nbest(texts, warn=warnings.append, first_line=10)
    assert [bool(r) for r in results] == [False, True, False, True]
    assert len(warnings) == 1 and str(warnings[0]).startswith("line 13: ") and "truncated" in warnings[0].message
    assert (warnings[0].line, warnings[0].code) == (13, "source_truncated")
    assert results[1][0].text == ours.translate(["red cat"])[0]
    with pytest.raises(ValueError, match="not available with the ctranslate2 engine"):
        theirs.translate_nbest(["red cat"], attention_layer=-1)
    with pytest.raises(ValueError, match="term_bias is not available with the ctranslate2 engine"):
        theirs.translate_nbest(["red cat"], term_bias=2.0)
    with pytest.raises(ValueError, match="nbest"):
        theirs.translate_nbest(["red cat"], beam=2, nbest=3)


def test_ctranslate2_sampling_is_seeded_and_scored_by_our_model(engines, trained):
    ours, theirs = engines
    options = dict(sample=True, nbest=3, topk=8, temperature=1.5)

    def sample() -> list:  # CTranslate2 seeds its generators when it loads the model
        return CTranslate2Translator.load(trained / "ctranslate2", threads=1, seed=7).translate_nbest(SOURCES[:20],
                                                                                                     **options)

    runs = [sample(), sample()]
    assert [[h.text for h in r] for r in runs[0]] == [[h.text for h in r] for r in runs[1]]
    assert all(1 <= len(r) <= 3 for r in runs[0])
    model, tok = ours.loaded.model, ours.tokenizers
    for text, nbest in zip(SOURCES[:5], runs[0]):
        src = torch.tensor([tok.src.encode([text])[0] + [EOS_ID]])
        for h in nbest:  # the log-probability at temperature 1, as ours reports it
            with torch.no_grad():
                lp = torch.log_softmax(model(src, torch.tensor([[2] + h.token_ids])), -1)[0]
            assert abs(float(lp[torch.arange(len(h.token_ids) + 1), h.token_ids + [EOS_ID]].sum()) - h.logprob) < 1e-4


# steering (docs/decoding-controls.md): a target prefix is CTranslate2's target_prefix, banned phrases its
# suppress_sequences; lexical constraints are refused.


def _prefixes(n: int, seed: int, max_tokens: int, tgt) -> list[str]:
    """Seeded target prefixes for n sources: none, or one or two upper-case words of at most
    max_tokens tokens."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = " ".join(w.upper() for w in rng.sample(WORDS, rng.randint(0, 2)))
        out.append(words if len(tgt.encode([words])[0]) <= max_tokens else "")
    return out


def _holds(tokens: list[str], phrase: list[str]) -> bool:
    return any(tokens[i: i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


@pytest.mark.parametrize("options", [dict(beam=5), dict(beam=5, lenpen=0.6), dict(beam=4, lenpen=0.0, nbest=2),
                                     dict(greedy=True), dict(beam=5, max_len_a=0.0, max_len_b=4)])
def test_ctranslate2_engine_continues_a_target_prefix_as_ours(engines, options):
    """Outputs start with the prefix and are scored with it, as ours. Ours may end a hypothesis right after
    the prefix; CTranslate2 never does (it keeps an EOS there only as the best candidate, its mitigation of
    short outputs), so where ours did, ours spent a finished hypothesis on it and the two may differ.
    Everywhere else they agree."""
    ours, theirs = engines
    tgt = ours.tokenizers.tgt
    prefixes = _prefixes(len(SOURCES), 1, 3, tgt)
    assert sum(bool(p) for p in prefixes) > 0.6 * len(SOURCES)
    beam = options.get("beam", 1)
    a = ours.translate_nbest(SOURCES, prefix=prefixes, **{**options, "nbest": beam})
    b = theirs.translate_nbest(SOURCES, prefix=prefixes, **options)
    for p, nbest in zip(prefixes, b):
        pieces = [tgt.id_to_piece(i) for i in tgt.encode([p])[0]] if p else []
        assert all(h.pieces[: len(pieces)] == pieces and h.text.startswith(p) for h in nbest), (p, nbest)
    same = [x[0].token_ids == y[0].token_ids for x, y in zip(a, b)]
    n_prefix = [len(tgt.encode([p])[0]) if p else -1 for p in prefixes]
    ended_at_prefix = [any(len(h.token_ids) == n for h in x) for x, n in zip(a, n_prefix)]
    clean = [ok for ok, ended in zip(same, ended_at_prefix) if not ended]
    assert sum(clean) >= 0.99 * len(clean) and len(clean) > 0.6 * len(SOURCES)
    assert sum(same) >= 0.85 * len(SOURCES)
    for x, y, ok in zip(a, b, same):
        if ok:  # the prefix's tokens are in the score, as in ours
            assert abs(x[0].score - y[0].score) < 1e-4 and abs(x[0].logprob - y[0].logprob) < 1e-4
    # an empty prefix is the plain search
    plain = theirs.translate_nbest(SOURCES[:40], **options)
    assert theirs.translate_nbest(SOURCES[:40], prefix=[""] * 40, **options) == plain


def test_ctranslate2_engine_never_writes_a_banned_phrase_and_scores_as_ours(engines):
    """Banned phrases are CTranslate2's suppress_sequences. It renormalizes the other tokens' probabilities
    where it suppresses one (ours does not), so its search can choose otherwise where a banned token held
    much of the probability; the engine scores its hypotheses again, so their scores are ours."""
    ours, theirs = engines
    tgt = ours.tokenizers.tgt
    plain = theirs.translate_nbest(SOURCES, beam=5)
    words = [nbest[0].text.split() for nbest in plain]
    strong = [w[:1] for w in words]  # the first word of each output: banned where the model wants it most
    mild = [[f"{w[-1]} {w[0]}"] if len(w) > 1 else [] for w in words]  # a phrase the model may write
    for avoid, agree in ((strong, 0.7), (mild, 0.95)):
        a = ours.translate_nbest(SOURCES, avoid=avoid, beam=5, nbest=2)
        b = theirs.translate_nbest(SOURCES, avoid=avoid, beam=5, nbest=2)
        for phrases, nbest in zip(avoid, b):
            for phrase in phrases:
                banned = [tgt.id_to_piece(i) for i in tgt.encode([phrase])[0]]
                assert not any(_holds(h.pieces, banned) for h in nbest), (phrase, nbest)
        same = [x[0].token_ids == y[0].token_ids for x, y in zip(a, b)]
        assert sum(same) >= agree * len(SOURCES), sum(same)
        for x, y, ok in zip(a, b, same):
            if ok:
                assert abs(x[0].score - y[0].score) < 1e-4 and abs(x[0].logprob - y[0].logprob) < 1e-4
    assert sum(x[0].text != y[0].text for x, y in zip(plain, b)) < 0.2 * len(SOURCES)
    b = theirs.translate_nbest(SOURCES[:10], avoid=strong[:10], beam=5, nbest=2)
    assert all(x[0].text != y[0].text for x, y in zip(plain, b))  # the strong bans change every output
    model, tok = ours.loaded.model, ours.tokenizers
    for text, nbest in zip(SOURCES[:10], b):
        src = torch.tensor([tok.src.encode([text])[0] + [EOS_ID]])
        for h in nbest:  # the model's log-probability of the tokens and EOS, nothing renormalized
            with torch.no_grad():
                lp = torch.log_softmax(model(src, torch.tensor([[2] + h.token_ids])), -1)[0]
            assert abs(float(lp[torch.arange(len(h.token_ids) + 1), h.token_ids + [EOS_ID]].sum()) - h.logprob) < 1e-4
    # one list for every source, with a prefix (the prefix wins over a ban, in both engines)
    run_wide = theirs.translate_nbest(SOURCES[:30], avoid=["CAT", "DOG"], prefix=["CAT"] * 30, beam=5)
    assert run_wide == theirs.translate_nbest(SOURCES[:30], avoid=[["CAT", "DOG"]] * 30, prefix=["CAT"] * 30, beam=5)
    for nbest in run_wide:
        pieces = nbest[0].pieces
        assert pieces[0] == "▁CAT" and "▁CAT" not in pieces[1:] and "▁DOG" not in pieces


def test_ctranslate2_engine_refuses_constraints_and_bad_steering_in_one_line(engines):
    from seq2seq.inference.glossary import Glossary
    from seq2seq.inference.steering import SteeringError

    ours, theirs = engines
    refusal = "the ctranslate2 engine cannot honour lexical constraints; use --engine torch"
    with pytest.raises(SteeringError) as e:
        theirs.translate_nbest(["red cat", "blue dog"], constraints=[[], ["DOG"]], beam=5)
    assert str(e.value) == refusal
    with pytest.raises(SteeringError) as e:
        theirs.translate_nbest(["red cat"], glossary=Glossary([("cat", "CAT")]), beam=5)
    assert str(e.value).startswith(refusal.split(";")[0]) and "use --engine torch" in str(e.value)
    # no constraint at all is the plain search
    assert theirs.translate_nbest(["red cat"], constraints=[[]]) == theirs.translate_nbest(["red cat"])
    # what both engines refuse, with the same line
    for texts, steering in [(["red cat", "big dog"], {"avoid": [[], [" "]]}),
                            (["red cat", "big dog"], {"prefix": ["", "日本"]}),
                            (["red cat", "big dog"], {"prefix": ["", "RED CAT BIG"], "max_len_a": 0, "max_len_b": 2})]:
        with pytest.raises(SteeringError) as mine:
            ours.translate_nbest(texts, first_line=5, **steering)
        with pytest.raises(SteeringError) as theirs_error:
            theirs.translate_nbest(texts, first_line=5, **steering)
        assert str(theirs_error.value) == str(mine.value) and str(mine.value).startswith("line 6: "), steering


def bleu(hypotheses: list[str], sources: list[str]) -> float:
    return sacrebleu.corpus_bleu(hypotheses, [[s.upper() for s in sources]]).score


@pytest.mark.isa
def test_int8_export_is_smaller_and_keeps_the_quality_of_fp32(engines, trained, tmp_path):
    """On every CPU (run a second time with the ISA forced to AVX2 by .ci/run): 8-bit weights lost 13
    BLEU here on an AVX2 CPU without VNNI (16-bit saturation); the 7-bit export keeps fp32's quality."""
    ours, fp32 = engines
    out = export_ctranslate2(trained, tmp_path / "int8", quantize="int8")
    assert (out / "model.bin").stat().st_size < 0.6 * (trained / "ctranslate2" / "model.bin").stat().st_size
    info = json.loads((out / "seq2seq.json").read_text())
    assert info["quantization"] == "int8" and info["weight_bits"] == 7
    int8 = CTranslate2Translator.load(out, threads=1)
    reference = bleu(ours.translate(SOURCES, beam=5), SOURCES)
    assert reference > 50, "the toy model must be trained well enough for quantization to show"
    assert bleu(fp32.translate(SOURCES, beam=5), SOURCES) == pytest.approx(reference, abs=0.5)
    assert bleu(int8.translate(SOURCES, beam=5), SOURCES) >= reference - 2.0


def test_int8_weights_have_7_bits_and_one_scale_per_row(trained):
    from ctranslate2.specs import model_spec

    from seq2seq.deploy.ctranslate2 import ctranslate2_spec, quantize_spec_int8

    spec = ctranslate2_spec(load_model_dir(trained, device="cpu"))
    spec.validate()
    floats = {}
    model_spec.visit_spec(spec, lambda layer, name, v: floats.__setitem__(name, v.numpy().copy())
                          if isinstance(v, model_spec.Variable) and not v.is_scalar() else None)
    quantize_spec_int8(spec, "int8_float16")
    seen = 0

    def check(layer, name, value):
        nonlocal seen
        if isinstance(value, model_spec.Variable):
            value = value.numpy()
        if not isinstance(value, np.ndarray) or value.ndim == 0 or name.endswith("_scale"):
            return
        key = name.split("/")[-1]
        if hasattr(layer, f"{key}_scale"):
            q, scale = value, np.asarray(getattr(layer, f"{key}_scale"))
            assert q.dtype == np.int8 and scale.shape == (q.shape[0],)
            assert q.min() >= -63 and q.max() <= 63 and (abs(q).max(axis=1) == 63).all()
            assert abs(q / scale[:, None] - floats[name]).max() <= 0.5 / scale.min() + 1e-6
            seen += 1
        else:
            assert value.dtype == np.float16, name

    model_spec.visit_spec(spec, check)
    assert seen >= 6  # embeddings, attention and feed-forward projections


# --------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------


def run(args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def test_cli_export_then_translate_with_the_engine(trained, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(trained, model, ignore=shutil.ignore_patterns("ctranslate2", "train_state", "checkpoints"))
    result = run(["export", model, "--to", "ctranslate2"])
    assert result.exit_code == 0, result.output
    assert (model / "ctranslate2" / "model.bin").is_file() and (model / "ctranslate2" / "spm.model").is_file()
    text = "\n".join(SOURCES[:10] + ["", "blue sun"] + SOURCES[10:30]) + "\n"
    # Without the loop guard: a looped output is searched again with no_repeat_ngram, which CTranslate2 blocks by
    # a rule of its own (ours is fairseq's and transformers'), so a line that loops on one engine's kernels can come
    # back otherwise (docs/deployment.md); every other line is the same search on both engines.
    torch_out = run(["translate", model, "--beam", "5", "--device", "cpu", "--no-loop-guard"], input=text)
    ct2_out = run(["translate", model, "--beam", "5", "--engine", "ctranslate2", "--no-loop-guard"], input=text)
    assert torch_out.exit_code == 0 and ct2_out.exit_code == 0, ct2_out.output
    assert ct2_out.stdout == torch_out.stdout and len(ct2_out.stdout.splitlines()) == 32
    nbest = run(["translate", model, "--engine", "ctranslate2", "--nbest", "2", "--nbest-format", "fairseq"],
                input="red cat\n\nblue\n")
    assert nbest.exit_code == 0 and [line.split("\t")[0] for line in nbest.stdout.splitlines()] == \
        ["H-0", "H-0", "H-1", "H-2", "H-2"]

    # the export is found by --engine-dir too, and refuses what it cannot do in one line
    other = run(["translate", tmp_path / "nowhere", "--engine", "ctranslate2", "--engine-dir", model / "ctranslate2"],
                input="red cat\n")
    assert other.exit_code == 0, other.output
    assert other.stdout == run(["translate", model, "--engine", "ctranslate2"], input="red cat\n").stdout
    for args, message in ((["--json", "--alignment"], "not available with the ctranslate2 engine"),
                          (["--weights", model / "model.safetensors"], "--weights is for the torch engine")):
        bad = run(["translate", model, "--engine", "ctranslate2", *args], input="red cat\n")
        assert bad.exit_code != 0 and message in bad.output
    missing = run(["translate", tmp_path, "--engine", "ctranslate2"], input="red cat\n")
    assert missing.exit_code == 1 and "seq2seq export" in missing.output and "Traceback" not in missing.output

    # weights changed after the export: a warning naming the fix
    torch.manual_seed(5)
    state = load_weights(model / "model.safetensors")
    save_weights({k: v + 0.01 * torch.randn_like(v) for k, v in state.items()}, model / "model.safetensors")
    stale = run(["translate", model, "--engine", "ctranslate2"], input="red cat\n")
    assert stale.exit_code == 0 and "re-export" in stale.stderr and len(stale.stdout.splitlines()) == 1


def test_cli_export_refuses_to_overwrite_what_it_did_not_write(trained, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("keep me")
    for out, message in ((trained, "holds the model being converted"), (trained.parent, "holds the model"),
                         (tmp_path / "notes", "not empty")):
        result = run(["export", trained, "--to", "ctranslate2", out])
        assert result.exit_code == 1 and message in result.output, result.output
    forced = run(["export", trained, "--to", "ctranslate2", tmp_path / "notes", "--force"])
    assert forced.exit_code == 1 and "does not look like an earlier export" in forced.output
    assert (tmp_path / "notes" / "a.txt").read_text() == "keep me"
    assert run(["export", trained, "--to", "ctranslate2", tmp_path / "ct2"]).exit_code == 0
    again = run(["export", trained, "--to", "ctranslate2", tmp_path / "ct2", "--force", "--quantize", "int8"])
    assert again.exit_code == 0
    assert json.loads((tmp_path / "ct2" / "seq2seq.json").read_text())["quantization"] == "int8"


def test_a_missing_extra_is_one_line_naming_it(trained, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    with pytest.raises(ExportError, match=r"seq2seq\[export\]"):
        export_ctranslate2(trained, tmp_path / "x")
    result = run(["export", trained, "--to", "ctranslate2", tmp_path / "x"])
    assert result.exit_code == 1 and "pip install \"seq2seq[export]\"" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    monkeypatch.setitem(sys.modules, "transformers", None)
    result = run(["export", trained, "--to", "hf", tmp_path / "y"])
    assert result.exit_code == 1 and "'transformers'" in result.output and "seq2seq[export]" in result.output


# --------------------------------------------------------------------------------------------
# Hugging Face transformers
# --------------------------------------------------------------------------------------------


def _logits_equal(loaded, hf_model) -> None:
    src, tgt = _batch(loaded)
    with torch.no_grad():
        ours = loaded.model(src, tgt)
        theirs = hf_model(input_ids=src, attention_mask=src.ne(PAD_ID), decoder_input_ids=tgt).logits
    assert ours.shape == theirs.shape
    assert torch.allclose(ours, theirs, atol=1e-4), float((ours - theirs).abs().max())


@pytest.mark.parametrize("name, architecture", [
    ("post-sinusoidal-relu-separate-tied", "MarianMTModel"),
    ("pre-sinusoidal-relu-joint-tied", "BlenderbotForConditionalGeneration"),
    ("pre-learned-gelu-joint-unshared-untied", "BlenderbotForConditionalGeneration"),
])
def test_hf_export_computes_our_logits_and_imports_back(tmp_path, tokenizers, name, architecture):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model_dir = _random_dir(tmp_path, tokenizers, name)
    result = run(["export", model_dir, "--to", "hf", tmp_path / "hf"])
    assert result.exit_code == 0, result.output
    hf = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(hf).__name__ == architecture
    loaded = load_model_dir(model_dir)
    _logits_equal(loaded, hf)
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    texts = _sentences(3, 5)
    assert tok(texts).input_ids == [ids + [EOS_ID] for ids in loaded.tokenizers.src.encode(texts)]

    back = run(["import-hf", tmp_path / "hf", tmp_path / "back"])
    assert back.exit_code == 0, back.output
    imported = load_model_dir(tmp_path / "back")
    assert imported.config == loaded.config  # the whole config comes back (seq2seq_config.yaml)
    _logits_equal(imported, hf)


def test_hf_export_refuses_what_transformers_cannot_express(tmp_path, tokenizers):
    post_learned = make_model_dir(tmp_path / "a", tokenizers["joint"], norm="post", positions="learned")
    with pytest.raises(ExportError, match="post-norm model with learned positions"):
        export_hf(post_learned, tmp_path / "a_hf")
    pre_separate = make_model_dir(tmp_path / "b", tokenizers["separate"], norm="pre")
    result = run(["export", pre_separate, "--to", "hf", tmp_path / "b_hf"])
    assert result.exit_code == 1 and "one vocabulary size" in result.output and not (tmp_path / "b_hf").exists()


def _marian_dir(path: Path, pair: TokenizerPair, vocab: dict[str, int] | None = None) -> "transformers.MarianMTModel":
    """A randomly initialised transformers MarianMTModel with our special ids, saved with MarianTokenizer files."""
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(3)
    config = MarianConfig(
        vocab_size=pair.src.vocab_size, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=48,
        activation_function="gelu", scale_embedding=True, share_encoder_decoder_embeddings=True,
        pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
    )
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(str(path))
    pair.src.save(path / "source.spm")
    pair.tgt.save(path / "target.spm")
    vocab = vocab or {pair.src.id_to_piece(i): i for i in range(pair.src.vocab_size)}
    (path / "vocab.json").write_text(json.dumps(vocab))
    return model


def test_import_a_random_marian_model_exactly(tmp_path, tokenizers):
    hf = _marian_dir(tmp_path / "marian", tokenizers["joint"])
    result = run(["import-hf", tmp_path / "marian", tmp_path / "model"])
    assert result.exit_code == 0, result.output
    loaded = load_model_dir(tmp_path / "model")
    m = loaded.config.model
    assert (m.norm, m.positions, m.activation, m.share_embeddings, m.tie_output, m.n_decoder_layers) == \
        ("post", "sinusoidal", "gelu", True, True, 1)
    _logits_equal(loaded, hf)
    translated = run(["translate", tmp_path / "model", "--device", "cpu", "--max-len-b", "3"], input="red cat\n")
    assert translated.exit_code == 0 and len(translated.stdout.splitlines()) == 1


def test_import_refuses_a_vocabulary_in_another_order(tmp_path, tokenizers):
    pair = tokenizers["joint"]
    pieces = [pair.src.id_to_piece(i) for i in range(pair.src.vocab_size)]
    opus_like = {p: i for i, p in enumerate([pieces[EOS_ID], pieces[1]] + pieces[4:] + [pieces[0], pieces[2]])}
    _marian_dir(tmp_path / "marian", pair, vocab=opus_like)
    result = run(["import-hf", tmp_path / "marian", tmp_path / "model"])
    assert result.exit_code == 1 and "vocab.json" in result.output and "own id" in result.output
    assert not (tmp_path / "model").exists()


# --------------------------------------------------------------------------------------------
# The deployment benchmarks at their smallest (benchmarks/deploy.py, benchmarks/ctranslate2_agreement.py)
# --------------------------------------------------------------------------------------------

def test_the_deploy_benchmark_runs_at_its_smallest(tiny_model_dir, multi30k_small, tmp_path):
    """8 sentences, beam 4 in batches of 4, one repeat: a row for every system, seq2seq's CTranslate2
    engine giving (nearly) seq2seq's output, as test_ctranslate2_engine_on_multi30k_with_the_session_model."""
    from conftest import run_benchmark

    result = run_benchmark("deploy.py", "--model-dir", tiny_model_dir, "--src", multi30k_small["val.en"],
                            "--limit", 8, "--beam", 4, "--batch-size", 4, "--threads", 1, "--repeats", 1,
                            "--work-dir", tmp_path / "work")
    table = result.stdout.split("\nsystem")[1].split("\nexports in")[0].strip().splitlines()[1:]
    rows = {line[:22].strip(): line[22:].split() for line in table}
    assert list(rows) == ["seq2seq", "ctranslate2 fp32", "ctranslate2 int8", "ctranslate2 raw fp32",
                          "ctranslate2 raw int8", "transformers"]
    same = {name: float(row[4].rstrip("%")) for name, row in rows.items()}  # sent/s tok/s s speed-up same
    assert rows["seq2seq"][3] == "1.00x" and same["seq2seq"] == 100.0
    assert same["ctranslate2 fp32"] >= 75.0 and all(0.0 <= s <= 100.0 for s in same.values())
    assert all(float(row[0]) > 0 for row in rows.values())
    assert (tmp_path / "work" / "ct2").is_dir() and (tmp_path / "work" / "hf").is_dir()


def test_the_ctranslate2_agreement_benchmark_runs_at_its_smallest(tiny_model_dir, multi30k_small, tmp_path):
    """8 sentences, beam 4: the model directory has no export, so the benchmark makes one (in TMPDIR)."""
    from conftest import run_benchmark

    result = run_benchmark("ctranslate2_agreement.py", "--model-dir", tiny_model_dir,
                            "--src", multi30k_small["val.en"], "--limit", 8, "--beam", 4, "--threads", 1,
                            "--min-agreement", 0.75, env={"TMPDIR": str(tmp_path)})
    out = result.stdout
    assert f"exported {tiny_model_dir} -> {tmp_path}" in out
    same = re.search(r"identical output: (\d+)/8 lines = ([\d.]+)%", out)
    assert same and int(same[1]) >= 6 and float(same[2]) == pytest.approx(int(same[1]) / 8 * 100, abs=0.01)
    at_limit = int(re.search(r"reached the length limit: (\d+)", out)[1])
    assert 4 <= at_limit <= 8  # the 60-step model's translations run to their limit (a wrong limit: 0)
    assert float(re.search(r"largest score difference on identical lines: (\S+)", out)[1]) < 1e-3
