"""The text encoder: token embedding + positions + a stack of self-attention layers."""

from __future__ import annotations

from torch import Tensor, nn

from seq2seq.config.model_section import ModelConfig
from seq2seq.model import sync
from seq2seq.model.layers import Embedding, EncoderLayer
from seq2seq.model.encoders.base import Encoder, Modality, register
from seq2seq.model.encoders.text_processor import TextProcessor


class TextEncoder(Encoder[Tensor]):
    """src token ids [B, S] (padded with pad_id) -> (memory [B, S, D], pad mask [B, S])."""

    def __init__(self, cfg: ModelConfig, embedding: Embedding | None = None) -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.pad_id = cfg.pad_id
        self.embed = embedding if embedding is not None else Embedding(cfg.src_vocab_size, cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor]:
        pad_mask = src.eq(self.pad_id)
        x = self.embed(src)
        # Fully unpadded batches skip the mask, which lets SDPA take its fastest kernel (where asking costs
        # nothing: on a GPU the question would wait for it, and the mask stays).
        mask = None if sync.host_reads_are_free(src.device) and not bool(pad_mask.any()) else pad_mask
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x), pad_mask

    def source_lengths(self, src: Tensor) -> Tensor:
        return src.ne(self.pad_id).sum(dim=1)


# Text sources are sentences, read by the TextProcessor (tokenized, truncated, EOS appended, padded).
register(Modality("text", build_encoder=lambda cfg, shared: TextEncoder(cfg, embedding=shared),
                  processor=TextProcessor))
