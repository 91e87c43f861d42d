"""A custom encoder in one file: a bidirectional GRU over token embeddings, registered as
`model.encoder.type: bigru`. It reads sentences, so it names no SourceProcessor and gets the
`TextProcessor` (kind TEXT): the text pipeline (tokenizer, cleaning, batching) and `Translator` serve
it unchanged.

The contract an encoder meets (seq2seq/model/encoders/base.py):
  forward(src) -> (memory [B, S, d_model], memory_pad_mask [B, S], True at padding)
  d_model attribute: the memory's width (when it differs from model.d_model, the model projects the
    memory with a learned Linear, `enc_to_dec_proj`)
  batch invariance: a source encoded inside a padded batch equals the source encoded alone.

Registering the name makes `seq2seq train` / `translate` rebuild it from a model directory's
config.yaml; a package does it for the command line with an entry point:

    [project.entry-points."seq2seq.model.encoders"]
    bigru = "my_package.bigru"
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError, EncoderConfig, ModelConfig, register_encoder_config
from seq2seq.model.encoders import Encoder, Modality, register


@register_encoder_config
@dataclass(frozen=True)
class BiGRUConfig(EncoderConfig):
    """`model.encoder: {type: bigru, hidden: 128, layers: 1}`."""

    type: str = "bigru"
    hidden: int = 128  # per direction
    layers: int = 1

    def __post_init__(self) -> None:
        if self.hidden < 1 or self.layers < 1:
            raise ConfigError("model.encoder.hidden and model.encoder.layers must be >= 1")


class BiGRUEncoder(Encoder):
    """src token ids [B, S] (PAD = pad_id) -> (memory [B, S, d_model], pad mask [B, S])."""

    def __init__(self, vocab_size: int, d_model: int, hidden: int = 128, layers: int = 1, pad_id: int = 0) -> None:
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.rnn = nn.GRU(d_model, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.project = nn.Linear(2 * hidden, d_model)

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor]:
        pad_mask = src.eq(self.pad_id)
        lengths = (~pad_mask).sum(dim=1).clamp(min=1).cpu()
        # Packing makes the backward direction start at each sentence's own end: batch invariant.
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(src), lengths, batch_first=True, enforce_sorted=False)
        states, _ = self.rnn(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=src.size(1))
        return self.project(states), pad_mask

    def source_lengths(self, src: Tensor) -> Tensor:
        return src.ne(self.pad_id).sum(dim=1)


def build(cfg: ModelConfig, shared_embedding: nn.Module | None) -> BiGRUEncoder:
    enc = cfg.encoder
    assert isinstance(enc, BiGRUConfig)
    return BiGRUEncoder(cfg.src_vocab_size, cfg.d_model, enc.hidden, enc.layers, cfg.pad_id)


register(Modality("bigru", build_encoder=build))  # reads sentences: the default TextProcessor


def pretrained(vocab_size: int, d_model: int, seed: int = 0) -> BiGRUEncoder:
    """Stands in for a backbone with pretrained weights (here: seeded random ones)."""
    torch.manual_seed(seed)
    return BiGRUEncoder(vocab_size, d_model)
