"""Pretrained Hugging Face backbones behind our decoder: `model.encoder.type: hf`.

    model:
      d_model: 256
      encoder: {type: hf, name_or_path: google/vit-base-patch16-224-in21k}   # a hub id or a local directory

The backbone's `config.json` says what it reads (`BACKBONES`, by its `model_type`):

    vit, deit, clip_vision_model (or a whole clip config: its vision tower)   images
    wav2vec2, hubert                                                          waveforms
    whisper (its encoder only)                                                log-mel features

When a run starts with `name_or_path` and no `backbone`, the backbone's config and its image
processor / feature extractor settings are read (from the directory, else the hub) into `backbone` and
`preprocessor` (`hf_backbone.resolve_backbone`; parsing the config reads nothing), which the model
directory's config.yaml keeps: `seq2seq caption/transcribe/serve/export`
need neither `name_or_path` nor the network, and the backbone's weights are in model.safetensors with the
rest of the model. Training starts from the pretrained weights (`Modality.pretrained`); loading a model
directory builds the backbone from `backbone` and loads the saved weights into it. Without `name_or_path`,
`backbone` and `preprocessor` given in the config describe an architecture that a fresh run initialises
randomly and trains from scratch (the recipes' `config_hf.yaml`).

Sources go through the backbone's own preprocessing (`hf_sources`): images resized and cropped by its
image processor, waveforms for wav2vec2 / HuBERT, Whisper's log-mel features. The memory:

* images -> [B, S, D], S = patches + class tokens.
* wav2vec2 / HuBERT -> [B, S, D], S = the convolutional feature encoder's output length
  (`_get_feat_extract_output_lengths`), padding masked. Backbones whose first convolution normalises
  over time (`feat_extract_norm: group`, e.g. wav2vec2-base) would see the padding, so they run one
  utterance at a time; the others run batched with the mask.
* Whisper -> [B, S, D] over its whole window, the positions past the real audio masked: ceil(frames / 2)
  of them are real.

Every row is computed as it would be alone: batch invariant (tests/test_hf_encoder.py).

Freezing (training settings, free to change when fine-tuning): `freeze: true` keeps the backbone's
weights fixed; with it, `unfreeze_top_layers: N` trains its top N layers (and what follows them, its
final norm), `unfreeze_after_steps: K` trains all of it from step K on. `training.encoder_lr` gives the
encoder's parameters their own learning rate.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.model_section import ModelConfig
from seq2seq.model.encoders.audio_features import padding_mask
from seq2seq.model.encoders.base import Encoder, Modality, register
from seq2seq.config.encoder_section import KEY, HFEncoderConfig
from seq2seq.model.encoders.hf_backbone import backbone_config, build_backbone, resolve_backbone, source_kind_of
from seq2seq.model.encoders.hf_sources import hf_preprocessor, hf_processor

if TYPE_CHECKING:  # an optional dependency (the hf extra)
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

__all__ = ["HFEncoder", "HFEncoderConfig", "backbone_config", "hf_preprocessor", "hf_processor"]


class HFEncoder(Encoder):
    """A transformers backbone as an `Encoder` (see the module docstring for the inputs).

    forward(src) -> (memory [B, S, D], pad_mask [B, S], True at padding), D = the backbone's width
    (the model adds `enc_to_dec_proj` when it differs from model.d_model); padded rows are zero.
    """

    def __init__(self, cfg: HFEncoderConfig, backbone: PreTrainedModel | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.spec = cfg.spec
        self.backbone = backbone if backbone is not None else build_backbone(cfg)
        config = self.backbone.config
        self.d_model = config.output_hidden_size if getattr(config, "add_adapter", False) else config.hidden_size
        self.per_utterance = self.spec.inputs == "waveform" and config.feat_extract_norm == "group"
        self.frozen = False
        if cfg.freeze:
            self.freeze(cfg.unfreeze_top_layers)

    # ---- freezing ------------------------------------------------------------------------------

    def layer_stack(self) -> tuple[str, nn.ModuleList]:
        """(name, modules) of the backbone's Transformer layers: the ModuleList with one entry per
        layer (config.num_hidden_layers) holding the most parameters."""
        n = self.backbone.config.num_hidden_layers
        stacks = [(name, m) for name, m in self.backbone.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n]
        if not stacks:
            raise ConfigError(f"{KEY}.unfreeze_top_layers: no stack of {n} layers found in {type(self.backbone).__name__}")
        return max(stacks, key=lambda s: sum(p.numel() for p in s[1].parameters()))

    def freeze(self, top_layers: int = 0) -> None:
        """Fix the backbone's weights, except its top `top_layers` layers and every parameter registered
        after them (the final norm)."""
        names = [name for name, _ in self.backbone.named_parameters()]
        keep: set[str] = set()
        if top_layers:
            stack_name, stack = self.layer_stack()
            if top_layers > len(stack):
                raise ConfigError(f"{KEY}.unfreeze_top_layers ({top_layers}) is more than the backbone's "
                                  f"{len(stack)} layers")
            top = tuple(f"{stack_name}.{i}." for i in range(len(stack) - top_layers, len(stack)))
            last = max(i for i, name in enumerate(names) if name.startswith(f"{stack_name}."))
            keep = {name for i, name in enumerate(names) if name.startswith(top) or i > last}
        for name, p in self.backbone.named_parameters():
            p.requires_grad_(name in keep)
        self.frozen = True

    def unfreeze(self) -> None:
        for p in self.backbone.parameters():
            p.requires_grad_(True)
        self.frozen = False

    def on_train_step(self, step: int) -> None:
        """Called by the trainer before each step (`step` = steps done): unfreezes the backbone at
        model.encoder.unfreeze_after_steps."""
        after = self.cfg.unfreeze_after_steps
        if self.frozen and after is not None and step >= after:
            self.unfreeze()
            log.info("step %d: the backbone's %s parameters train from now on (%s.unfreeze_after_steps)", step,
                     f"{sum(p.numel() for p in self.backbone.parameters()):,}", KEY)

    # ---- forward -------------------------------------------------------------------------------

    def _dtype(self, x: Tensor) -> Tensor:
        """Inputs in the backbone's dtype (a model cast to bf16 takes float32 pixels or samples)."""
        if torch.is_autocast_enabled(x.device.type):
            return x.float()
        return x.to(next(self.backbone.parameters()).dtype)

    def forward(self, src: Any) -> tuple[Tensor, Tensor]:
        inputs = self.spec.inputs
        if inputs == "pixels":
            memory = self.backbone(pixel_values=self._dtype(src)).last_hidden_state  # [B, S, D]
            return memory, torch.zeros(memory.shape[:2], dtype=torch.bool, device=memory.device)
        features, lengths = src
        lengths = lengths.to(features.device)
        if inputs == "log-mel":  # [B, n_mels, 2 S] over the whole window; ceil(frames / 2) positions are real
            memory = self.backbone(self._dtype(features)).last_hidden_state
            out_lengths = ((lengths - 1) // 2 + 1).clamp(min=1, max=memory.size(1))
        else:
            # the waveform backbones (wav2vec2, HuBERT, ...) define it; PreTrainedModel does not declare it
            out_lengths = self.backbone._get_feat_extract_output_lengths(lengths).long()  # type: ignore[operator]
            if self.per_utterance:  # group norm over time: each utterance alone, unpadded
                rows = [self.backbone(self._dtype(features[i: i + 1, : int(n)])).last_hidden_state[0]
                        for i, n in enumerate(lengths.tolist())]
                memory = nn.utils.rnn.pad_sequence(rows, batch_first=True)
            else:
                mask = ~padding_mask(lengths, features.size(1))
                memory = self.backbone(self._dtype(features), attention_mask=mask.long()).last_hidden_state
        pad_mask = padding_mask(out_lengths, memory.size(1))
        return memory.masked_fill(pad_mask[:, :, None], 0.0), pad_mask


def _encoder_config(cfg: ModelConfig) -> HFEncoderConfig:
    return resolve_backbone(cfg.encoder)


register(Modality(
    "hf",
    build_encoder=lambda cfg, shared: HFEncoder(_encoder_config(cfg)),
    processor=hf_processor,
    kind=source_kind_of,
    pretrained=lambda cfg: HFEncoder(_encoder_config(cfg), build_backbone(_encoder_config(cfg), pretrained=True)),
    resolve=resolve_backbone,
))
