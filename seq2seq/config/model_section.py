"""The `model` section (`ModelConfig`): sizes and choices of the encoder-decoder Transformer, its
`encoder` an `EncoderConfig` (`seq2seq.config.encoder_section`); `check_fits_in_memory`, the check a
run makes of it when it starts.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass

from seq2seq.config.encoder_section import EncoderConfig
from seq2seq.config.checks import check_ranges, require


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and choices of the encoder-decoder Transformer.

    `layers` sets both stacks; `encoder_layers` / `decoder_layers` override one side.
    `share_embeddings` ties source and target embeddings (needs a shared vocabulary);
    `tie_output` ties the target embedding with the output projection.
    `encoder` picks the source side (text, image, audio; see `EncoderConfig`); everything else in
    this section describes the Transformer and is shared by every modality.

    What fairseq-trained models (M2M100, NLLB-200, mBART; `seq2seq import-hf`) compute differently is
    five options whose defaults are this toolkit's own model (docs/deployment.md):
    `scale_embedding` (token embeddings times sqrt(d_model), or not); `position_offset`, the row of
    the position table the first position reads (fairseq: 2, its padding id + 1); `position_table`,
    the layout of the sinusoidal table ("interleaved": sin/cos in columns 2i/2i+1 with frequencies
    10000^(-2i/D); "fairseq": sines in the first half, cosines in the second, frequencies
    10000^(-i/(D/2-1))); `embedding_norm`, a LayerNorm after embeddings + positions (mBART's
    `layernorm_embedding`); `decoder_start`, the embedding the decoder's first input (our BOS) reads:
    "bos" its own, "eos" the EOS row (fairseq starts the decoder with </s>).
    """

    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    d_model: int = 256
    heads: int = 4
    ffn_dim: int = 1024
    layers: int = 3
    encoder_layers: int | None = None
    decoder_layers: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: typing.Literal["relu", "gelu", "swish"] = "relu"  # swish = SiLU (Marian/opus-mt)
    norm: typing.Literal["pre", "post"] = "pre"
    positions: typing.Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = 1024
    share_embeddings: bool = False
    tie_output: bool = True
    pad_id: int = 0
    scale_embedding: bool = True
    position_offset: int = 0
    position_table: typing.Literal["interleaved", "fairseq"] = "interleaved"
    embedding_norm: bool = False
    decoder_start: typing.Literal["bos", "eos"] = "bos"
    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)

    def __post_init__(self) -> None:
        check_ranges(self, "model", {
            "src_vocab_size": (1, None), "tgt_vocab_size": (1, None), "d_model": (1, None), "heads": (1, None),
            "ffn_dim": (1, None), "layers": (1, None), "encoder_layers": (0, None), "decoder_layers": (1, None),
            "max_positions": (2, None), "pad_id": (0, None), "position_offset": (0, None),
        })
        require(not self.share_embeddings or self.encoder.shares_target_embedding,
                f"model.share_embeddings needs a text encoder (model.encoder.type is {self.encoder.type!r})")
        require(self.d_model % self.heads == 0,
                f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")
        require(not self.share_embeddings or self.src_vocab_size == self.tgt_vocab_size,
                "model.share_embeddings needs src_vocab_size == tgt_vocab_size (a joint vocabulary)")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            require(0.0 <= getattr(self, name) < 1.0, f"model.{name} must be in [0, 1)")

    def approx_parameters(self) -> int:
        """About how many parameters the Transformer has (weight matrices of its layers and embeddings)."""
        d, f = self.d_model, self.ffn_dim
        embeddings = self.tgt_vocab_size * d * (1 if self.tie_output else 2)
        if not self.share_embeddings:
            embeddings += self.src_vocab_size * d
        return embeddings + self.n_encoder_layers * (4 * d * d + 2 * d * f) + self.n_decoder_layers * (8 * d * d + 2 * d * f)

    @property
    def n_encoder_layers(self) -> int:
        return self.layers if self.encoder_layers is None else self.encoder_layers

    @property
    def n_decoder_layers(self) -> int:
        return self.layers if self.decoder_layers is None else self.decoder_layers


def check_fits_in_memory(model: ModelConfig, memory: int | None = None) -> None:
    """When a run starts: ConfigError when the model's float32 weights alone exceed this machine's
    memory (`memory` bytes; default: what the OS says, None where it does not say). Not a check of the
    config itself: one config.yaml is valid on every machine."""
    memory = physical_memory() if memory is None else memory
    if memory:  # (unknown: not checked)
        require(4 * model.approx_parameters() <= memory,
                f"model: d_model {model.d_model}, ffn_dim {model.ffn_dim}, {model.n_encoder_layers}+"
                f"{model.n_decoder_layers} layers and vocabularies of {model.src_vocab_size}/{model.tgt_vocab_size} "
                f"make ~{model.approx_parameters():.3g} parameters, whose weights alone exceed this machine's "
                f"{memory / 2**30:.0f} GiB of memory")


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
