"""`seq2seq import-hf` of a Helsinki-NLP opus-mt-shaped directory (seq2seq.deploy.hf_import's re-indexing).

No network: the module builds a tiny opus-mt look-alike: two SentencePiece models with their own ids
(unk 0, <s> 1, </s> 2), a joint vocab.json in opus-mt order (</s> 0, <unk> 1, the union of the pieces,
<pad> last) that lacks one source piece (MarianTokenizer reads it as <unk>) and one target piece, and
has one piece neither model has; a MarianMTModel with pad = decoder start = the last id, eos 0 and
shared embeddings, trained for a few seconds on a toy task (the words in upper case) so that it stops
by itself like a translation model; MarianTokenizer files from `MarianTokenizer.save_pretrained`.
Then MarianTokenizer's ids, the logits, and transformers' greedy and beam `generate` are compared
with the imported model directory, which is also fine-tuned.
"""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from click.testing import CliRunner

transformers = pytest.importorskip("transformers", reason="the export extra: pip install -e '.[export]'")

import sentencepiece as spm  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from seq2seq.cli import cli  # noqa: E402
from seq2seq.data.batching import pad_sequences  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402
from seq2seq.storage.model_dir import load_model_dir  # noqa: E402
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's

WORDS = ("red blue green cat dog tree sun moon big small house river bird fish car road apple water stone light "
         "night garden window winter summer yellow mountain little happy quiet").split()
LEFT_OUT_SOURCE = "▁cat"  # a source.spm piece vocab.json lacks: MarianTokenizer reads "cat" as <unk>
LEFT_OUT_TARGET = "."  # a target.spm piece vocab.json lacks (the targets only use "▁."): dropped
MODEL_ONLY = "▁ξ"  # a vocab.json piece neither SentencePiece model has: decoded, never produced


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))) for _ in range(n)]


def _target(text: str) -> str:
    return text.upper() + " ."


def _train_spm(texts: list[str], size: int) -> bytes:
    """SentencePiece's default ids (unk 0, <s> 1, </s> 2, no pad), as in opus-mt's source.spm/target.spm."""
    writer = io.BytesIO()
    spm.set_random_generator_seed(1)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=writer, vocab_size=size,
                                   num_threads=1, minloglevel=2, character_coverage=1.0)
    return writer.getvalue()


def _pieces(proto: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def _train_briefly(model: Any, batch: Any, pad: int, steps: int) -> None:
    """A few seconds of Adam on random rows of `batch` (tokenized sources and targets), then eval mode."""
    labels = batch["labels"].masked_fill(batch["labels"] == pad, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, batch["input_ids"].size(0), (32,), generator=generator)
        loss = model(input_ids=batch["input_ids"][rows], attention_mask=batch["attention_mask"][rows],
                     labels=labels[rows]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def _marian_config(src_size: int, tgt_size: int, pad: int, shared: bool) -> "transformers.MarianConfig":
    return transformers.MarianConfig(
        vocab_size=src_size, decoder_vocab_size=tgt_size, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=64, activation_function="relu", scale_embedding=True, dropout=0.0,
        share_encoder_decoder_embeddings=shared, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        bos_token_id=0, forced_eos_token_id=0,
    )


def _save_tokenizer(path: Path, separate: bool = False) -> "transformers.MarianTokenizer":
    from transformers import MarianTokenizer

    kwargs = {"target_vocab_file": str(path / "target_vocab.json"), "separate_vocabs": True} if separate else {}
    MarianTokenizer(str(path / "source.spm"), str(path / "target.spm"), str(path / "vocab.json"),
                    **kwargs).save_pretrained(str(path))
    return MarianTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def opus(tmp_path_factory) -> SimpleNamespace:
    from transformers import MarianMTModel

    path = tmp_path_factory.mktemp("opus") / "opus-mt-toy"
    path.mkdir()
    src_texts = _sentences(400, 1)
    tgt_texts = [_target(t) for t in src_texts]
    src_proto, tgt_proto = _train_spm(src_texts, 52), _train_spm(tgt_texts, 50)
    (path / "source.spm").write_bytes(src_proto)
    (path / "target.spm").write_bytes(tgt_proto)
    src_pieces, tgt_pieces = _pieces(src_proto), _pieces(tgt_proto)
    assert LEFT_OUT_SOURCE in src_pieces and LEFT_OUT_TARGET in tgt_pieces
    union = [p for p in src_pieces if p != LEFT_OUT_SOURCE]
    union += [p for p in tgt_pieces if p not in union and p != LEFT_OUT_TARGET] + [MODEL_ONLY]
    vocab = {p: i for i, p in enumerate(["</s>", "<unk>"] + union + ["<pad>"])}
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tok = _save_tokenizer(path)
    pad = vocab["<pad>"]
    assert (tok.eos_token_id, tok.unk_token_id, tok.pad_token_id) == (0, 1, pad)

    torch.manual_seed(0)
    model = MarianMTModel(_marian_config(len(vocab), len(vocab), pad, shared=True))
    _train_briefly(model, tok(src_texts, text_target=tgt_texts, padding=True, return_tensors="pt"), pad, 160)
    # as in the opus-mt generation configs: the decoder starts with pad, which is never generated
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, bos_token_id=0, forced_eos_token_id=0,
        bad_words_ids=[[pad]], num_beams=4, max_length=64)
    model.save_pretrained(str(path))
    assert (path / "model.safetensors").is_file() and not list(path.glob("*.bin"))
    return SimpleNamespace(path=path, model=model, tok=tok, vocab=vocab, pad=pad)


def run(args: list):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def imported(opus, tmp_path_factory) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("imported") / "model"
    result = run(["import-hf", opus.path, out])
    assert result.exit_code == 0, result.output
    assert f"imported {opus.path} -> {out}" in result.output
    loaded = load_model_dir(out)
    pair = loaded.tokenizers
    # our id -> theirs: the specials as the module docstring says, the rest by piece (<unk> where
    # vocab.json lacks the piece)
    specials = {PAD_ID: opus.pad, UNK_ID: opus.vocab["<unk>"], BOS_ID: opus.pad, EOS_ID: opus.vocab["</s>"]}

    def id_map(tok) -> list[int]:
        return [specials[i] if i in specials else opus.vocab.get(tok.id_to_piece(i), opus.vocab["<unk>"])
                for i in range(tok.vocab_size)]

    return SimpleNamespace(path=out, loaded=loaded, src_map=id_map(pair.src), tgt_map=id_map(pair.tgt))


def test_the_vocabulary_is_reindexed(opus, imported):
    loaded, vocab = imported.loaded, opus.vocab
    m = loaded.config.model
    assert (m.norm, m.positions, m.activation, m.tie_output) == ("post", "sinusoidal", "relu", True)
    assert not loaded.tokenizers.joint and not m.share_embeddings  # two SentencePiece models: two copies
    target_pieces = set(_pieces((opus.path / "target.spm").read_bytes()))
    not_in_target_spm = [p for p in vocab if p not in target_pieces and p not in ("</s>", "<unk>", "<pad>")]
    assert MODEL_ONLY in not_in_target_spm and "▁red" in not_in_target_spm  # and the other source pieces
    meta = json.loads((imported.path / "metadata.json").read_text())["hf_vocabulary"]
    assert meta == {"vocabulary": "re-indexed from vocab.json", "source_pieces_read_as_unk": 1,
                    "target_pieces_not_in_target_spm": len(not_in_target_spm), "target_spm_pieces_dropped": 1}
    # every model id is one target id of ours, the decoder start (pad) twice: as our BOS and our PAD
    assert sorted(imported.tgt_map) == sorted(list(range(len(vocab))) + [opus.pad])
    tgt = loaded.tokenizers.tgt
    pieces = [tgt.id_to_piece(i) for i in range(tgt.vocab_size)]
    assert LEFT_OUT_TARGET not in pieces and MODEL_ONLY in pieces
    src_pieces = [loaded.tokenizers.src.id_to_piece(i) for i in range(loaded.tokenizers.src.vocab_size)]
    assert src_pieces[-1] == LEFT_OUT_SOURCE and imported.src_map[-1] == vocab["<unk>"]


def test_marian_tokenizer_ids_map_onto_ours(opus, imported):
    tok, pair = opus.tok, imported.loaded.tokenizers
    eos, unk = opus.vocab["</s>"], opus.vocab["<unk>"]
    texts = _sentences(30, 7) + ["cat cat dog", "a cat, in the garden!", "zebra ß"]
    ours = [[imported.src_map[i] for i in ids] + [eos] for ids in pair.src.encode(texts)]
    assert ours == tok(texts).input_ids
    assert sum(unk in ids for ids in ours) >= 3
    # The one difference: characters source.spm does not know come out as <unk> with their text as
    # the piece, which MarianTokenizer looks up in the joint vocab.json: "R" is a target piece there
    assert tok(["Red"]).input_ids == [[opus.vocab[p] for p in ("▁", "R", "e", "d", "</s>")]]
    assert [imported.src_map[i] for i in pair.src.encode(["Red"])[0]][1] == unk
    # target side (what fine-tuning encodes): the same ids; "." alone is <unk> for both
    targets = [_target(t) for t in texts[:30]] + ["RED. BLUE"]
    ours = [[imported.tgt_map[i] for i in ids] + [eos] for ids in pair.tgt.encode(targets)]
    assert ours == tok(text_target=targets).input_ids
    # decoding: a model piece that target.spm lacks is written as MarianTokenizer writes it
    theirs = tok(text_target=["RED CAT ."]).input_ids[0][:-1]
    theirs = theirs[:1] + [opus.vocab[MODEL_ONLY]] + theirs[1:]
    ours = [imported.tgt_map.index(i) for i in theirs]
    assert pair.tgt.decode([ours]) == [tok.decode(theirs, skip_special_tokens=True)]
    assert MODEL_ONLY[1:] in pair.tgt.decode([ours])[0]



def _assert_same_logits(opus, hf_model, imported) -> None:
    texts = _sentences(6, 11)
    batch = opus.tok(texts, text_target=[_target(t) for t in texts], padding=True, return_tensors="pt")
    decoder_in = torch.cat([torch.full((len(texts), 1), opus.pad), batch["labels"][:, :-1]], dim=1)
    with torch.no_grad():
        theirs = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=decoder_in).logits
    src = pad_sequences([ids + [EOS_ID] for ids in imported.loaded.tokenizers.src.encode(texts)], PAD_ID)
    tgt_back = {t: i for i, t in enumerate(imported.tgt_map)}
    tgt_back[opus.pad] = BOS_ID  # the decoder starts with their pad: our BOS
    tgt_in = torch.tensor([[tgt_back[t] for t in row] for row in decoder_in.tolist()])
    with torch.no_grad():
        ours = imported.loaded.model(src, tgt_in)
    real = batch["labels"] != opus.pad
    assert torch.allclose(ours[real], theirs[:, :, imported.tgt_map][real], atol=1e-4)


def test_logits_are_transformers_logits(opus, imported):
    _assert_same_logits(opus, opus.model, imported)


def test_a_swish_model_is_imported_with_swish(opus, tmp_path):
    """Helsinki-NLP's classic opus-mt models use swish (SiLU): the same weights run with swish give
    transformers' logits, and relu would not."""
    from transformers import MarianMTModel

    path = tmp_path / "swish"
    shutil.copytree(opus.path, path)
    config = json.loads((path / "config.json").read_text())
    config["activation_function"] = "swish"
    (path / "config.json").write_text(json.dumps(config))
    result = run(["import-hf", path, tmp_path / "model"])
    assert result.exit_code == 0, result.output
    loaded = load_model_dir(tmp_path / "model")
    assert loaded.config.model.activation == "swish"
    imported = SimpleNamespace(loaded=loaded, tgt_map=None)
    pair = loaded.tokenizers
    specials = {PAD_ID: opus.pad, UNK_ID: opus.vocab["<unk>"], BOS_ID: opus.pad, EOS_ID: opus.vocab["</s>"]}
    imported.tgt_map = [specials[i] if i in specials else opus.vocab.get(pair.tgt.id_to_piece(i), opus.vocab["<unk>"])
                        for i in range(pair.tgt.vocab_size)]
    swish_model = MarianMTModel.from_pretrained(str(path)).eval()
    _assert_same_logits(opus, swish_model, imported)
    with pytest.raises(AssertionError):
        _assert_same_logits(opus, opus.model, imported)  # the relu model's logits differ


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_translations_are_transformers_translations(opus, imported, search):
    """Greedy, and beam 4 without length penalty stopping when 4 hypotheses have ended: the same search
    in both (transformers' length_penalty 0 and ours, lenpen 0, both rank by the log-probability)."""
    texts = _sentences(40, 13) + ["cat dog", "river"]
    limit = 40
    if search == "greedy":
        ours_opts, their_opts = {"greedy": True}, {"num_beams": 1}
    else:
        ours_opts = {"beam": 4, "lenpen": 0.0, "early_stopping": True}
        their_opts = {"num_beams": 4, "length_penalty": 0.0, "early_stopping": True}
    translator = Translator.load(imported.path, device="cpu")
    ours = translator.translate_nbest(texts, min_len=1, max_len_a=0, max_len_b=limit, **ours_opts)
    generated = opus.model.generate(**opus.tok(texts, return_tensors="pt", padding=True), min_new_tokens=1,
                                    max_new_tokens=limit + 1, output_scores=True, return_dict_in_generate=True,
                                    **their_opts)
    decoded = opus.tok.batch_decode(generated.sequences, skip_special_tokens=True)
    eos = opus.vocab["</s>"]
    for i, (nbest, row, text) in enumerate(zip(ours, generated.sequences.tolist(), decoded)):
        theirs = [t for t in row[1:] if t != opus.pad]
        assert theirs[-1] == eos and len(theirs) <= limit, "ended by the length limit: not the same search"
        assert [imported.tgt_map[t] for t in nbest[0].token_ids] + [eos] == theirs, texts[i]
        if opus.vocab["<unk>"] not in theirs:  # MarianTokenizer drops <unk>, ours writes it as " ⁇ "
            # the same tokens, so the same text; MarianTokenizer also strips the space a final "▁" piece
            # decodes to (which the toy model sometimes ends with), ours keeps it
            assert nbest[0].text.rstrip() == text
        if search == "beam":
            # the same tokens, each normalised over another vocabulary: transformers' over its own (the pad
            # is suppressed after the log-softmax), ours with their pad row twice (our PAD and BOS copy it)
            lower = float(generated.sequences_scores[i]) - nbest[0].logprob
            expected = _normaliser_difference(opus, imported, texts[i], theirs)
            assert abs(lower - expected) < 1e-4 * len(theirs), (lower, expected, texts[i])


def _normaliser_difference(opus, imported, text: str, tokens: list[int]) -> float:
    """sum over the steps of `tokens` of log Z_ours - log Z_theirs, Z the softmax normaliser of the
    model's logits at that step: over our vocabulary (their rows by `tgt_map`, the pad row twice)
    and over theirs. A property of the model, not a bound measured on one CPU."""
    batch = opus.tok([text], return_tensors="pt")
    with torch.no_grad():
        logits = opus.model(**batch, decoder_input_ids=torch.tensor([[opus.pad] + tokens[:-1]])).logits[0]
    logits = logits.double()
    ours = torch.logsumexp(logits[:, imported.tgt_map], dim=-1)
    theirs = torch.logsumexp(logits, dim=-1)
    return float((ours - theirs).sum())


def test_finetuning_from_the_import(opus, imported, tmp_path):
    texts = _sentences(40, 17)
    files = {}
    for name, lines in (("train.en", texts), ("train.de", [_target(t) for t in texts]),
                        ("val.en", texts[:8]), ("val.de", [_target(t) for t in texts[:8]])):
        files[name] = tmp_path / name
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = {"data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                       "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"])},
              "training": {"max_tokens": 400, "lr": 0.0005, "warmup_steps": 2, "device": "cpu", "threads": 1,
                           "valid_bleu": False, "best_metric": "loss", "log_every": 1, "seed": 5,
                           "output_dir": str(tmp_path / "ft"), "max_steps": 3, "valid_every": 3}}
    (tmp_path / "ft.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run(["train", tmp_path / "ft.yaml", "--init-from", imported.path])
    assert result.exit_code == 0, result.output
    out = tmp_path / "ft"
    for name in ("spm.src.model", "spm.tgt.model"):  # the re-indexed tokenizers go on
        assert (out / name).read_bytes() == (imported.path / name).read_bytes()
    translated = CliRunner().invoke(cli, ["translate", str(out), "--greedy", "--device", "cpu"], input="red cat\n")
    assert translated.exit_code == 0 and len(translated.output.splitlines()) == 1, translated.output


def _broken_copy(opus, tmp_path: Path, case: str) -> tuple[Path, str]:
    path = tmp_path / case
    shutil.copytree(opus.path, path)
    if case == "bias":
        state = load_file(str(path / "model.safetensors"))
        state["final_logits_bias"][0, 5] = 0.5
        save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
        return path, f"{path / 'model.safetensors'}: final_logits_bias is not zero"
    if case == "no_target_spm":
        (path / "target.spm").unlink()
        return path, f"{path / 'target.spm'} is missing"
    if case == "language token":  # a multilingual model's >>xx<< tokens import (below), if language codes
        vocab = dict(opus.vocab)
        vocab[">>d<<"] = vocab.pop(MODEL_ONLY)
        (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        return path, "target-language tokens whose code is not a language code (>>d<<"
    config = json.loads((path / "config.json").read_text())
    if case == "activation":
        config["activation_function"] = "tanh"
        message = "activation 'tanh' (seq2seq has relu, gelu and swish)"
    else:
        assert case == "start"
        config["decoder_start_token_id"] = 0
        (path / "generation_config.json").unlink()
        message = "the decoder starts with id 0, not with pad"
    (path / "config.json").write_text(json.dumps(config))
    return path, message


@pytest.mark.parametrize("case", ["bias", "no_target_spm", "language token", "start", "activation"])
def test_what_cannot_be_imported_exactly_is_refused_in_one_line(opus, tmp_path, case):
    path, message = _broken_copy(opus, tmp_path, case)
    result = run(["import-hf", path, tmp_path / "model"])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.output
    assert not (tmp_path / "model").exists()


def test_separate_vocabularies(opus, tmp_path):
    """share_encoder_decoder_embeddings false, vocab.json + target_vocab.json (separate_vocabs): a random
    model; MarianTokenizer's ids, the logits and greedy search (which runs to the length limit, where
    both force </s>) as transformers'."""
    from transformers import MarianMTModel

    path = tmp_path / "separate"
    path.mkdir()
    for name in ("source.spm", "target.spm"):
        shutil.copy(opus.path / name, path / name)
    src_vocab, tgt_vocab = ({p: i for i, p in enumerate(["</s>", "<unk>"] + _pieces(f.read_bytes()) + ["<pad>"])}
                            for f in (path / "source.spm", path / "target.spm"))
    (path / "vocab.json").write_text(json.dumps(src_vocab, ensure_ascii=False), encoding="utf-8")
    (path / "target_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False), encoding="utf-8")
    tok = _save_tokenizer(path, separate=True)
    pad = tgt_vocab["<pad>"]
    torch.manual_seed(1)
    model = MarianMTModel(_marian_config(len(src_vocab), len(tgt_vocab), pad, shared=False)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(str(path))
    result = run(["import-hf", path, tmp_path / "model"])
    assert result.exit_code == 0, result.output
    loaded = load_model_dir(tmp_path / "model")
    pair = loaded.tokenizers
    assert not pair.joint and not loaded.config.model.share_embeddings
    assert (loaded.config.model.src_vocab_size, loaded.config.model.tgt_vocab_size) == (len(src_vocab) + 1,
                                                                                         len(tgt_vocab) + 1)
    src_map = [src_vocab.get(pair.src.id_to_piece(i), 1) for i in range(pair.src.vocab_size)]
    tgt_map = [pad, 1, pad, 0] + [tgt_vocab[pair.tgt.id_to_piece(i)] for i in range(4, pair.tgt.vocab_size)]
    texts = _sentences(8, 19)
    assert [[src_map[i] for i in ids] + [0] for ids in pair.src.encode(texts)] == tok(texts).input_ids
    targets = [_target(t) for t in texts]
    assert [[tgt_map[i] for i in ids] + [0] for ids in pair.tgt.encode(targets)] == \
        tok(text_target=targets).input_ids

    batch = tok(texts, return_tensors="pt", padding=True)
    src = pad_sequences([ids + [EOS_ID] for ids in pair.src.encode(texts)], PAD_ID)
    generated = model.generate(**batch, num_beams=1, max_new_tokens=9, bad_words_ids=[[pad]])
    ours = Translator.load(tmp_path / "model", device="cpu").translate_nbest(texts, greedy=True, max_len_a=0,
                                                                            max_len_b=8, min_len=0)
    for nbest, row in zip(ours, generated.tolist()):
        assert [tgt_map[t] for t in nbest[0].token_ids] + [0] == [t for t in row[1:] if t != pad]
    tgt_back = {t: i for i, t in enumerate(tgt_map)}
    tgt_back[pad] = BOS_ID
    with torch.no_grad():
        theirs = model(**batch, decoder_input_ids=generated[:, :-1]).logits
        mine = loaded.model(src, torch.tensor([[tgt_back[t] for t in row] for row in generated[:, :-1].tolist()]))
    assert torch.allclose(mine, theirs[:, :, tgt_map], atol=1e-4)


# ---- corrupt import directories (the bad-input matrix for import-hf) -----------------------------------

def _safetensors_header(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


# case -> (the file to write, its bytes, the file the message must name); None: the file is removed
CORRUPT = {
    "truncated weights": ("model.safetensors", lambda good: good[: len(good) // 2], "model.safetensors"),
    "random bytes": ("model.safetensors", lambda good: random.Random(0).randbytes(4096), "model.safetensors"),
    "a JSON header that does not describe the data": (
        "model.safetensors",
        lambda good: _safetensors_header({"model.shared.weight": {"dtype": "F32", "shape": [1000, 32],
                                                                  "data_offsets": [0, 128000]}}, bytes(64)),
        "model.safetensors"),
    "a JSON header that is a list": ("model.safetensors", lambda good: _safetensors_header([1, 2], b""),
                                     "model.safetensors"),
    "empty weights": ("model.safetensors", lambda good: b"", "model.safetensors"),
    "a pytorch_model.bin that is not a zip": ("pytorch_model.bin", lambda good: b"not a zip file\n" * 8,
                                              "pytorch_model.bin"),
    "config.json not JSON": ("config.json", lambda good: b"{not json", "config.json"),
    "config.json not an object": ("config.json", lambda good: b"[1, 2]", "config.json"),
    "config.json not UTF-8": ("config.json", lambda good: b"\xff\xfe{\x00", "config.json"),
    "config.json of another architecture": ("config.json", lambda good: b'{"model_type": "no-such-model"}',
                                            "config.json"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_a_corrupt_import_directory_gets_one_line_naming_the_file(opus, tmp_path, case):
    name, corrupt, named = CORRUPT[case]
    path = tmp_path / "hf"
    shutil.copytree(opus.path, path)
    good = (path / name).read_bytes() if (path / name).is_file() else b""
    if name == "pytorch_model.bin":
        (path / "model.safetensors").unlink()
    (path / name).write_bytes(corrupt(good))
    result = run(["import-hf", path, tmp_path / "model"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.exception, result.output)
    lines = result.output.strip().splitlines()
    assert "Traceback" not in result.output and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and str(path / named) in lines[0], lines[0]
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("case", ["no embeddings", "a tensor of another shape"])
def test_safetensors_weights_that_do_not_fit_the_model_are_refused_in_one_line(opus, tmp_path, case):
    path = tmp_path / "hf"
    shutil.copytree(opus.path, path)
    if case == "no embeddings":
        save_file({"model.encoder.layers.0.fc1.weight": torch.zeros(64, 32)}, str(path / "model.safetensors"))
        message = f"Error: {path}: the safetensors weights have no model.encoder.embed_tokens.weight"
    else:
        state = load_file(str(path / "model.safetensors"))
        state["model.encoder.layers.0.fc1.weight"] = torch.zeros(64, 31)
        save_file(state, str(path / "model.safetensors"))
        message = (f"Error: {path}: tensor model.encoder.layers.0.fc1.weight has shape (64, 31), which does not fit "
                   "config.json's d_model 32")
    result = run(["import-hf", path, tmp_path / "model"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.exception, result.output)
    assert result.output.strip().splitlines() == [message], result.output


def test_a_truncated_download_is_one_line_from_the_real_command(opus, tmp_path):
    """As a user runs it (no CliRunner catching anything): one line on stderr, exit code 1."""
    import subprocess
    import sys

    path = tmp_path / "hf"
    shutil.copytree(opus.path, path)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    done = subprocess.run([sys.executable, "-m", "seq2seq", "import-hf", str(path), str(tmp_path / "model")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {weights} is not a readable safetensors file"), lines


# ---- multilingual opus-mt models: >>xx<< target-language tokens -------------------------------------

LANGUAGE_TOKENS = (">>de<<", ">>fra<<", ">>zho_Hans<<")  # two-letter, three-letter and scripted codes


def _multilingual_target(text: str, token: str) -> str:
    """The toy task into each language: the words in upper case, reversed (>>fra<<), or only the first two
    (>>zho_Hans<<)."""
    words = text.split()
    words = words[::-1] if token == ">>fra<<" else words[:2] if token == ">>zho_Hans<<" else words
    return _target(" ".join(words))


@pytest.fixture(scope="module")
def multilingual(opus, tmp_path_factory) -> SimpleNamespace:
    """A MarianMTModel (opus-mt-shaped, joint vocab.json) whose vocabulary has target-language tokens,
    which MarianTokenizer takes from the start of a source, trained for a few seconds on a toy task per
    language; imported by `seq2seq import-hf`."""
    from transformers import MarianMTModel

    path = tmp_path_factory.mktemp("multi") / "opus-mt-en-mul"
    path.mkdir()
    for name in ("source.spm", "target.spm"):
        shutil.copy(opus.path / name, path / name)
    union = [p for p in opus.vocab if p not in ("</s>", "<unk>", "<pad>")]
    # the language tokens among the pieces (not first), as Marian's vocabulary builder may put them
    pieces = union[:5] + list(LANGUAGE_TOKENS) + union[5:]
    vocab = {p: i for i, p in enumerate(["</s>", "<unk>"] + pieces + ["<pad>"])}
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tok = _save_tokenizer(path)
    assert sorted(tok.supported_language_codes) == sorted(LANGUAGE_TOKENS)
    pad = vocab["<pad>"]
    torch.manual_seed(2)
    model = MarianMTModel(_marian_config(len(vocab), len(vocab), pad, shared=True))
    # a few seconds of a toy task per language, so that the tag steers the model and it stops by itself
    texts = _sentences(300, 3)
    sources = [f"{token} {t}" for t in texts for token in LANGUAGE_TOKENS]
    targets = [_multilingual_target(t, token) for t in texts for token in LANGUAGE_TOKENS]
    _train_briefly(model, tok(sources, text_target=targets, padding=True, return_tensors="pt"), pad, 200)
    model.save_pretrained(str(path))
    out = tmp_path_factory.mktemp("multi-imported") / "model"
    result = run(["import-hf", path, out])
    assert result.exit_code == 0, result.output
    loaded = load_model_dir(out)
    src = loaded.tokenizers.src
    specials = {PAD_ID: pad, UNK_ID: 1, BOS_ID: pad, EOS_ID: 0}
    tags = {f"<2{t[2:-2]}>": t for t in LANGUAGE_TOKENS}
    src_map = [specials.get(i, vocab.get(tags.get(src.id_to_piece(i), src.id_to_piece(i)), 1))
               for i in range(src.vocab_size)]
    tgt = loaded.tokenizers.tgt
    tgt_map = [specials[i] if i in specials else vocab[tgt.id_to_piece(i)] for i in range(tgt.vocab_size)]
    return SimpleNamespace(hf=path, path=out, loaded=loaded, tok=tok, model=model, vocab=vocab, pad=pad,
                           src_map=src_map, tgt_map=tgt_map)


def test_language_tokens_become_language_tags(multilingual):
    from seq2seq.text.languages import model_languages

    loaded, vocab = multilingual.loaded, multilingual.vocab
    assert loaded.config.data.languages == ["de", "fra", "zho_Hans"] and loaded.config.data.corpora == []
    assert model_languages(loaded.config) == ["de", "fra", "zho_Hans"]
    assert Translator.load(multilingual.path, device="cpu").languages == ["de", "fra", "zho_Hans"]
    src = loaded.tokenizers.src
    pieces = [src.id_to_piece(i) for i in range(src.vocab_size)]
    assert not any(p.startswith(">>") for p in pieces)
    assert src.user_defined_pieces() == ["<2de>", "<2fra>", "<2zho_Hans>"]
    for token in LANGUAGE_TOKENS:  # each tag reads the row of its token
        assert multilingual.src_map[src.piece_id(f"<2{token[2:-2]}>")] == vocab[token]
    assert src.piece_id("<2de>") in src.encode(["<2de> red"])[0]  # one piece, never split
    meta = json.loads((multilingual.path / "metadata.json").read_text())["hf_vocabulary"]
    assert meta["language_tags"] == {">>de<<": "<2de>", ">>fra<<": "<2fra>", ">>zho_Hans<<": "<2zho_Hans>"}
    config = yaml.safe_load((multilingual.path / "config.yaml").read_text())
    assert config["data"]["languages"] == ["de", "fra", "zho_Hans"]


def test_tagged_sources_are_marian_tokenizer_ids(multilingual):
    translator = Translator.load(multilingual.path, device="cpu")
    texts = _sentences(12, 23) + ["cat cat dog"]
    for token in LANGUAGE_TOKENS:
        examples = translator.processor_for(token[2:-2]).prepare(texts)
        ours = [[multilingual.src_map[i] for i in examples[k]] for k in range(len(texts))]
        assert ours == multilingual.tok([f"{token} {t}" for t in texts]).input_ids


def test_translations_into_each_language_are_transformers_translations(multilingual):
    """Greedy search gives the tokens and text of transformers' `generate` on ">>xx<< " + text, for
    each language (and the languages give different translations: the tag steers the model)."""
    texts = _sentences(30, 29) + ["river", "cat dog"]
    translator = Translator.load(multilingual.path, device="cpu")
    limit, eos, pad = 40, 0, multilingual.pad
    outputs = {}
    for token in LANGUAGE_TOKENS:
        lang = token[2:-2]
        ours = translator.translate_nbest(texts, tgt_lang=lang, greedy=True, min_len=1, max_len_a=0,
                                          max_len_b=limit)
        batch = multilingual.tok([f"{token} {t}" for t in texts], return_tensors="pt", padding=True)
        generated = multilingual.model.generate(**batch, num_beams=1, min_new_tokens=1, max_new_tokens=limit + 1,
                                                bad_words_ids=[[pad]])
        decoded = multilingual.tok.batch_decode(generated, skip_special_tokens=True)
        stopped = 0
        for text, nbest, row, theirs_text in zip(texts, ours, generated.tolist(), decoded):
            theirs = [t for t in row[1:] if t != pad]
            mine = [multilingual.tgt_map[t] for t in nbest[0].token_ids]
            if theirs[-1] != eos:  # generate ran into its limit (the briefly trained model loops on some CPUs'
                # numerics): ours ends there with a forced EOS after the same first `limit` tokens
                assert len(theirs) == limit + 1 and mine == theirs[:limit], (lang, text)
                continue
            stopped += 1
            assert mine + [eos] == theirs, (lang, text)
            if 1 not in theirs:  # MarianTokenizer drops <unk>; both keep or strip a final "▁" differently
                assert nbest[0].text.rstrip() == theirs_text, (lang, text)
        assert stopped >= 0.9 * len(texts), f"{lang}: generate stopped by itself on only {stopped} of {len(texts)}"
        outputs[lang] = [n[0].text for n in ours]
    assert len({str(v) for v in outputs.values()}) == len(LANGUAGE_TOKENS)  # the tag steers the model
    # and as the toy task says: into zho_Hans, two words (and the full stop) where de has them all
    words = {lang: sum(len(o.split()) for o in out) / len(out) for lang, out in outputs.items()}
    # (by a margin, not a fixed count: how well the briefly trained model learnt its toy task varies with the
    # CPU's kernels)
    assert words["zho_Hans"] + 0.5 < min(words["de"], words["fra"]), words


def test_translate_cli_takes_the_language_of_an_imported_model(multilingual):
    translator = Translator.load(multilingual.path, device="cpu")
    texts = ["red cat", "big river"]
    options = ["--greedy", "--device", "cpu"]
    result = CliRunner().invoke(cli, ["translate", str(multilingual.path), "--tgt-lang", "fra", *options],
                                input="\n".join(texts) + "\n")
    assert result.exit_code == 0, result.output
    expected = translator.translate(texts, tgt_lang="fra", greedy=True)
    assert result.output.splitlines() == expected
    for args, message in (([], "choose a target language, one of de, fra, zho_Hans"),
                          (["--tgt-lang", "fr"], "unknown target language 'fr'; this model's languages: de, fra, "
                                                 "zho_Hans")):
        result = CliRunner().invoke(cli, ["translate", str(multilingual.path), *args, *options], input="red cat\n")
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], result.output

