"""A user's own encoder (recipes/custom_encoder/bigru.py): injected instances keep their weights,
a registered type trains and decodes through the config, and model directories load back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes" / "custom_encoder"))

import bigru  # noqa: E402 - registers model.encoder.type "bigru"

from seq2seq.config import ModelConfig  # noqa: E402
from seq2seq.training.experiment import run_training  # noqa: E402
from seq2seq.config import load_config
from seq2seq.model.transformer import Seq2SeqTransformer  # noqa: E402
from seq2seq.storage.model_dir import load_model_dir  # noqa: E402
from seq2seq.config.search import SearchConfig  # noqa: E402
from seq2seq.inference.search import search  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402


def test_an_injected_encoder_keeps_its_weights_and_the_decoder_is_initialised():
    encoder = bigru.pretrained(50, 32, seed=3)
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=50, tgt_vocab_size=60, d_model=32, heads=2, ffn_dim=64,
                                           layers=1), encoder)
    assert all(torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())
    embed = model.decoder.embed.tokens.weight
    assert embed[0].abs().sum() == 0 and abs(embed[1:].std().item() - 32**-0.5) < 0.02  # N(0, D^-1/2), pad row 0


def test_an_encoder_of_another_width_is_followed_by_a_projection_to_the_decoder_width():
    torch.manual_seed(0)
    encoder = bigru.BiGRUEncoder(50, 48)
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    model = Seq2SeqTransformer(ModelConfig(d_model=32, heads=2, src_vocab_size=50, tgt_vocab_size=40), encoder)
    assert model.enc_to_dec_proj.in_features == 48 and model.enc_to_dec_proj.out_features == 32
    for k, v in encoder.state_dict().items():  # the injected encoder keeps its weights
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    raw, raw_mask = encoder(src)
    memory, mask = model.encode(src)
    assert raw.shape[-1] == 48 and memory.shape == (2, 4, 32) and torch.equal(mask, raw_mask)
    torch.testing.assert_close(memory, model.enc_to_dec_proj(raw))
    assert model(src, torch.tensor([[1, 4, 5], [1, 6, 0]])).shape == (2, 3, 40)
    # an encoder of the decoder's width gets no projection: its state dict is what it always was
    same = Seq2SeqTransformer(ModelConfig(d_model=32, heads=2, src_vocab_size=50), bigru.BiGRUEncoder(50, 32))
    assert same.enc_to_dec_proj is None and not any(k.startswith("enc_to_dec_proj") for k in same.state_dict())


def test_the_bigru_encoder_is_batch_invariant():
    enc = bigru.pretrained(30, 16).eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    memory, mask = enc(src)
    alone, _ = enc(src[1:, :2])
    assert mask.tolist() == [[False] * 4, [False, False, True, True]]
    torch.testing.assert_close(memory[1, :2], alone[0], rtol=1e-5, atol=1e-6)


def config(files: dict, out: Path, encoder_type: str):
    return load_config(None, [
        f"data.train_src={files['train.en']}", f"data.train_tgt={files['train.de']}",
        f"data.valid_src={files['val.en']}", f"data.valid_tgt={files['val.de']}",
        "tokenizer.vocab_size=300", f"model.encoder.type={encoder_type}", "model.d_model=32", "model.heads=2",
        "model.ffn_dim=64", "model.layers=1", f"training.output_dir={out}", "training.max_steps=20",
        "training.valid_every=20", "training.max_tokens=1500", "training.device=cpu", "training.valid_bleu=false",
        "training.best_metric=loss", "decoding.max_len_b=5", "decoding.beam=2",
    ])


def test_registered_and_injected_custom_encoders_train_save_and_load(multi30k_small, tmp_path):
    sentences = ["A man rides a bike.", "Two dogs play in the snow."]

    run_training(config(multi30k_small, tmp_path / "registered", "bigru"))
    translator = Translator.load(tmp_path / "registered", device="cpu")
    assert isinstance(translator.loaded.model.encoder, bigru.BiGRUEncoder)
    assert len(translator.translate(sentences)) == 2

    cfg = config(multi30k_small, tmp_path / "injected", "text")
    vocab = 300
    encoder = bigru.pretrained(vocab, 32)
    run_training(cfg, encoder=encoder)
    trained = {k: v.clone() for k, v in encoder.state_dict().items()}  # the same module object was trained
    with pytest.raises(ValueError, match="model.safetensors"):  # a text encoder cannot take these weights
        load_model_dir(tmp_path / "injected")
    loaded = load_model_dir(tmp_path / "injected", encoder=bigru.BiGRUEncoder(vocab, 32))
    assert all(torch.equal(trained[k], v) for k, v in loaded.model.encoder.state_dict().items())
    src = torch.tensor([loaded.tokenizers.src.encode(sentences[:1])[0] + [3]])
    with torch.inference_mode():
        expected = search(loaded.model, src, SearchConfig(strategy="greedy", max_len_b=5))[0][0].tokens
    text = Translator(loaded).translate(sentences[:1], greedy=True, max_len_b=5)[0]
    assert text == loaded.tokenizers.tgt.decode([expected])[0]
