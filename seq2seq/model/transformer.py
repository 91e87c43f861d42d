"""The encoder-decoder Transformer: any `Encoder`, a masked self-attention decoder, cross-attention.

The model offers what search needs and nothing more:

* `encode(src) -> (memory [N, S, D], memory_pad_mask [N, S])`
* `decode(tgt [B, T], memory, memory_pad_mask, cache) -> (logits [B, T, V], attention or None)`:
  without a cache, all T positions in parallel (training); with a `DecoderCache`, `tgt` holds only
  the new tokens and cached keys/values stand in for the prefix (incremental decoding).
* `DecoderCache.reorder(index)`: keep / reorder / repeat decoder rows (beam search).

B = N * group decoder rows may share N encoded sources (beam search uses group = beam size):
cross-attention keys/values are computed once per source and never copied per beam.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.attention import KVCache, MultiHeadAttention
from seq2seq.config.model_section import ModelConfig
from seq2seq.model.encoders import Encoder, get_modality
from seq2seq.model.layers import DecoderLayer, Embedding, EncoderLayer
from seq2seq.text.tokenizer import BOS_ID, EOS_ID


class DecoderCache:
    """Per-layer key/value caches for incremental decoding of B = N * group rows."""

    def __init__(self, n_layers: int, group: int = 1) -> None:
        self.layers = [KVCache() for _ in range(n_layers)]
        self.group = group
        self.memory_pad_mask: Tensor | None = None  # [N, S], stored on the first step

    @property
    def length(self) -> int:
        """Number of target positions decoded so far."""
        k = self.layers[0].self_k
        return 0 if k is None else k.size(2)

    def reorder(self, index: Tensor, sources: Tensor | None | str = "infer") -> None:
        """Keep decoder rows `index` [B'] in this order (repeats allowed).

        Each run of `group` consecutive new rows must come from a single source (beam search keeps
        a beam with its sentence). Cross-attention entries are reselected only when sources leave:
        `sources` [N'], the sources kept, in order, or None when all stay, as the caller knows them
        (the search does, on the host); "infer" finds out from `index` (which reads it on the host).
        """
        mask = self.memory_pad_mask
        if mask is None:
            sources = None
        elif isinstance(sources, str):
            sources = index.view(-1, self.group)[:, 0] // self.group
            n = mask.size(0)
            if sources.numel() == n and bool((sources == torch.arange(n, device=index.device)).all()):
                sources = None
        if sources is not None and mask is not None:
            self.memory_pad_mask = mask.index_select(0, sources)
        for layer in self.layers:
            layer.reorder(index, sources)


class Decoder(nn.Module):
    """Target embedding, N decoder layers, final norm and the output projection to V logits."""

    def __init__(self, cfg: ModelConfig, embedding: Embedding | None = None) -> None:
        super().__init__()
        self.embed = embedding if embedding is not None else Embedding(cfg.tgt_vocab_size, cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.output = None if cfg.tie_output else nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        # model.decoder_start "eos": the first input (BOS, the only place it occurs) reads the EOS row,
        # as fairseq-trained decoders start with </s>; BOS keeps its own row as an output
        self.start_from_eos = cfg.decoder_start == "eos"

    @property
    def output_weight(self) -> Tensor:
        """W [V, D] of the bias-free output projection (the target embedding when tied)."""
        return self.embed.tokens.weight if self.output is None else self.output.weight

    def features(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        memory_pad_mask: Tensor | None,
        cache: DecoderCache | None = None,
        attention_layer: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """tgt [B, T] -> (final hidden states [B, T, D], cross-attention of `attention_layer`
        averaged over heads [B, T, S] or None)."""
        offset = 0
        if cache is not None:
            offset = cache.length
            if cache.memory_pad_mask is None:
                cache.memory_pad_mask = memory_pad_mask
            memory_pad_mask = cache.memory_pad_mask
        if self.start_from_eos and offset == 0:
            tgt = tgt.masked_fill(tgt == BOS_ID, EOS_ID)
        x = self.embed(tgt, offset)
        attention = None
        if attention_layer is not None and attention_layer < 0:
            attention_layer += len(self.layers)
        for i, layer in enumerate(self.layers):
            x, weights = layer(
                x, memory, memory_pad_mask, None if cache is None else cache.layers[i], i == attention_layer
            )
            if weights is not None:
                attention = weights.mean(dim=1)
        return self.final_norm(x), attention

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        memory_pad_mask: Tensor | None,
        cache: DecoderCache | None = None,
        attention_layer: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """As `features`, projected to the vocabulary: (logits [B, T, V], attention or None)."""
        x, attention = self.features(tgt, memory, memory_pad_mask, cache, attention_layer)
        return self.project(x), attention

    def project(self, x: Tensor) -> Tensor:
        """The output projection: states [..., D] -> logits [..., V] (also of encoder memory, for CTC)."""
        return F.linear(x, self.embed.tokens.weight) if self.output is None else self.output(x)


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer.

    The encoder is the one `cfg.encoder.type` names (text, image, audio; see `seq2seq.model.encoders`),
    or any `Encoder` passed in: an injected encoder (e.g. a pretrained backbone) keeps its weights,
    only the modules built here are initialised.

    An encoder whose width (`encoder.d_model`) differs from the decoder's cfg.d_model is followed by a
    learned projection, `enc_to_dec_proj` (Linear encoder width -> d_model, with bias), applied to the
    memory in `encode`. It exists only then: a model whose encoder has the decoder's width has no such
    module, and its state dict is what it always was.
    """

    def __init__(self, cfg: ModelConfig, encoder: Encoder | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        tgt_embedding = Embedding(cfg.tgt_vocab_size, cfg)
        injected = encoder is not None
        if encoder is None:
            encoder = get_modality(cfg.encoder.type).build_encoder(cfg, tgt_embedding if cfg.share_embeddings else None)
        self.encoder = encoder
        self.decoder = Decoder(cfg, tgt_embedding)
        self.enc_to_dec_proj = nn.Linear(encoder.d_model, cfg.d_model) if encoder.d_model != cfg.d_model else None
        if injected:
            self.reset_parameters(self.decoder)
            if self.enc_to_dec_proj is not None:
                self.reset_parameters(self.enc_to_dec_proj)
        else:
            self.reset_parameters(self)

    def reset_parameters(self, root: nn.Module | None = None) -> None:
        """Initialise `root`'s modules (default: the whole model): Xavier-uniform projections (q, k, v
        initialised as separate matrices), zero biases, N(0, D^-1/2) embeddings with a zero padding
        row. Other modules (convolutions, norms) keep torch's defaults."""
        root = self if root is None else root
        attention_linears = {
            id(lin) for m in root.modules() if isinstance(m, MultiHeadAttention) for lin in (m.in_proj, m.out_proj)
        }
        for module in root.modules():
            if isinstance(module, MultiHeadAttention):
                for w in module.in_proj.weight.chunk(3, dim=0):
                    nn.init.xavier_uniform_(w)
                nn.init.xavier_uniform_(module.out_proj.weight)
                for lin in (module.in_proj, module.out_proj):
                    if lin.bias is not None:
                        nn.init.zeros_(lin.bias)
            elif isinstance(module, nn.Linear) and id(module) not in attention_linears:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=self.cfg.d_model**-0.5)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()

    # ---- the interface search uses -------------------------------------------------------

    def encode(self, src: object) -> tuple[Tensor, Tensor]:
        """src (what the encoder takes) -> (memory [N, S, D], memory_pad_mask [N, S]); D = cfg.d_model,
        through `enc_to_dec_proj` when the encoder is of another width."""
        memory, memory_pad_mask = self.encoder(src)
        if self.enc_to_dec_proj is not None:
            memory = self.enc_to_dec_proj(memory)
        return memory, memory_pad_mask

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        memory_pad_mask: Tensor | None,
        cache: DecoderCache | None = None,
        attention_layer: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """tgt [B, T] -> (logits [B, T, V], head-averaged cross-attention [B, T, S] or None).

        With a cache, `tgt` holds only new positions; `memory` is read on the first step only.
        """
        return self.decoder(tgt, memory, memory_pad_mask, cache, attention_layer)

    def new_cache(self, group: int = 1) -> DecoderCache:
        """An empty cache for decoder rows grouped `group` per source."""
        return DecoderCache(len(self.decoder.layers), group)

    def features(self, src: object, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src batch, tgt_in [B, T] (BOS + target) -> final decoder states [B, T, D],
        before the output projection (`decoder.output_weight`); the training loss starts here."""
        memory, memory_pad_mask = self.encode(src)
        return self.decoder.features(tgt_in, memory, memory_pad_mask)[0]

    def forward(self, src: object, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src batch, tgt_in [B, T] (BOS + target) -> logits [B, T, V]."""
        memory, memory_pad_mask = self.encode(src)
        return self.decode(tgt_in, memory, memory_pad_mask)[0]

    def checkpoint_layers(self, on: bool = True) -> None:
        """Gradient checkpointing (`training.gradient_checkpointing`): each encoder and decoder layer of ours
        keeps only its input while training and recomputes its activations in the backward pass
        (`seq2seq.model.layers.recomputed`); an injected encoder (e.g. a transformers backbone) is not
        changed. Evaluation and decoding are unaffected."""
        for module in self.modules():
            if isinstance(module, (EncoderLayer, DecoderLayer)):
                module.checkpointed = on

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

