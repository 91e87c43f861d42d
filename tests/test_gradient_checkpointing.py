"""`training.gradient_checkpointing` (Seq2SeqTransformer.checkpoint_layers, seq2seq.model.layers.recomputed):
the same losses and gradients as without it, fewer activations kept for the backward pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seq2seq.adapters.lora import add_lora
from seq2seq.config import Config, DataConfig, ModelConfig, TokenizerConfig, TrainingConfig
from seq2seq.config.adapter_section import AdapterConfig
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.storage.model_dir import ModelDir

CFG = ModelConfig(src_vocab_size=300, tgt_vocab_size=300, d_model=64, heads=4, ffn_dim=128, layers=2, dropout=0.2,
                  attention_dropout=0.1, share_embeddings=True, tie_output=True)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 300, (6, 11), generator=g)
    src[:3, 8:] = 0  # padding: the encoder's mask passes through the checkpointed layer
    tgt = torch.randint(4, 300, (6, 9), generator=g)
    return src, tgt[:, :-1], tgt[:, 1:]


def _loss_and_grads(checkpointed: bool, lora: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Loss, gradients and the bytes autograd saved for the backward pass (outside checkpointed layers)."""
    torch.manual_seed(0)
    model = Seq2SeqTransformer(CFG)
    if lora:
        add_lora(model, AdapterConfig(type="lora", rank=4, alpha=8.0, dropout=0.1))
        for name, p in model.named_parameters():  # B starts at zero: give the updates something to compute
            if name.endswith("lora_B"):
                torch.nn.init.normal_(p, std=0.02)
    model.checkpoint_layers(checkpointed)
    model.train()
    src, tgt_in, tgt_out = _batch()
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    torch.manual_seed(5)  # the dropout masks: checkpointing must replay them in its recomputation
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=0)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, saved


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_checkpointed_layers_give_the_same_loss_and_gradients_and_keep_less(lora):
    loss, grads, saved = _loss_and_grads(False, lora)
    loss_ckpt, grads_ckpt, saved_ckpt = _loss_and_grads(True, lora)
    torch.testing.assert_close(loss_ckpt, loss, rtol=0, atol=1e-6)
    assert grads_ckpt.keys() == grads.keys()
    # LoRA: A and B of 4 adapted linears in each of 2 encoder layers and 6 in each of 2 decoder layers
    assert len(grads) == (2 * (2 * 4 + 2 * 6) if lora else len(list(Seq2SeqTransformer(CFG).parameters())))
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], rtol=1e-5, atol=1e-6, msg=name)
    # the layers' activations are not kept: only the layers' inputs, the embeddings' and the output's
    assert saved_ckpt < 0.4 * saved, (saved_ckpt, saved)


def test_checkpointing_changes_nothing_outside_training():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(CFG).eval()
    src, tgt_in, _ = _batch()
    with torch.no_grad():
        plain = model(src, tgt_in)
        model.checkpoint_layers(True)
        assert torch.equal(model(src, tgt_in), plain)
    assert all(layer.checkpointed for layer in [*model.encoder.layers, *model.decoder.layers])
    model.checkpoint_layers(False)
    assert not any(layer.checkpointed for layer in [*model.encoder.layers, *model.decoder.layers])


def test_a_run_with_gradient_checkpointing_trains_as_one_without(multi30k_small, tmp_path):
    from seq2seq.training.experiment import run_training

    files = multi30k_small
    weights = {}
    for on in (False, True):
        cfg = Config(
            data=DataConfig(train_src=str(files["train.en"]), train_tgt=str(files["train.de"]),
                            valid_src=str(files["val.en"]), valid_tgt=str(files["val.de"])),
            tokenizer=TokenizerConfig(vocab_size=300),
            model=ModelConfig(d_model=32, heads=2, ffn_dim=64, layers=1, dropout=0.1, share_embeddings=True),
            training=TrainingConfig(output_dir=str(tmp_path / str(on)), max_steps=6, valid_every=6, max_tokens=600,
                                    lr=3e-3, warmup_steps=2, device="cpu", threads=1, valid_bleu=False,
                                    best_metric="loss", gradient_checkpointing=on))
        run_training(cfg)
        weights[on] = ModelDir(tmp_path / str(on)).weights()
    for name, value in weights[False].items():
        torch.testing.assert_close(weights[True][name], value, rtol=1e-4, atol=1e-5, msg=name)
