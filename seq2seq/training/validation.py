"""Validation during training: loss and perplexity, greedy decoding, and corpus metrics.

Whatever the modality, a validation set is batches of (src, target ids) and, per row, the reference
texts: one sentence for translation, several captions for an image, one transcript for audio.

    validate(model, valid, device, precision, pad_id, search_cfg, decode=True)
      -> {"valid_loss", "valid_ppl", and with decode: "valid_bleu", "valid_chrf", "valid_wer", "valid_cer"}

`best_metric` names the entry the trainer keeps the best checkpoint by: bleu and chrf are better
higher; loss, wer and cer lower.

Several validation sets (`data.valid_sets`, e.g. one per direction of a multilingual model): each is
scored on its own, as "valid_bleu/NAME" and "valid_chrf/NAME", and valid_bleu, valid_chrf, valid_wer
and valid_cer are the means over the sets (each direction counts the same, whatever its size), so
best_metric compares means; the loss is that of all the sets' tokens together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import torch

from seq2seq.data.batching import Batch
from seq2seq.accel.device import autocast_context
from seq2seq.training.loss import sequence_loss
from seq2seq.text.metrics import cer, reference_streams, score, wer
from seq2seq.config.search import SearchConfig
from seq2seq.inference.controls import SourceControls
from seq2seq.inference.search import search
from seq2seq.model.transformer import Seq2SeqTransformer

METRIC_KEYS = {"bleu": "valid_bleu", "chrf": "valid_chrf", "wer": "valid_wer", "cer": "valid_cer",
               "loss": "valid_loss"}
LOWER_IS_BETTER = frozenset({"loss", "wer", "cer"})


@dataclass
class ValidData:
    """A fixed validation set: batches in order, the references of each row, a detokenizer.

    references[i] lists the reference texts of row i (Batch.indices index it): one or more.
    detokenize: target id lists -> texts.
    groups: {name: rows} of several validation sets, each scored on its own (None: one set).
    forced: each row's first `forced` target ids are the language tag of a model that puts it on the
        decoder: decoding is forced to start with them, and they are left out of the scored output.
    """

    batches: list[Batch]
    references: list[list[str]]
    detokenize: Callable[[list[list[int]]], list[str]]
    groups: dict[str, Sequence[int]] | None = None
    forced: int = 0


def corpus_metrics(hyps: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """BLEU and chrF against every reference of each row, WER and CER against the first."""
    scores = score(hyps, reference_streams(references), metrics=("bleu", "chrf"))
    return {"valid_bleu": scores["bleu"]["score"], "valid_chrf": scores["chrf"]["score"],
            "valid_wer": wer(hyps, references), "valid_cer": cer(hyps, references)}


@torch.inference_mode()
def validate(model: Seq2SeqTransformer, valid: ValidData, device: torch.device, precision: str, pad_id: int,
             search_cfg: SearchConfig, decode: bool = True) -> dict[str, float]:
    """Validation loss (plain NLL per target token) and perplexity; with `decode`, the metrics of
    `search_cfg` decoding (greedy in training). Leaves the model in eval mode."""
    model.eval()
    nll = torch.zeros((), dtype=torch.float32 if device.type == "mps" else torch.float64, device=device)
    tokens = 0
    hyps: dict[int, list[int]] = {}
    for batch in valid.batches:
        batch = batch.to(device, non_blocking=True)
        with autocast_context(device, precision):
            loss = sequence_loss(model, batch.src, batch.tgt_in, batch.tgt_out, pad_id,
                                 positions=batch.target_positions)
            nll += loss.to(nll.dtype)  # summed on the device, read once (each a float32 sum, added exactly)
            results = search(model, batch.src, search_cfg, controls=_forced(batch, valid.forced)) if decode else []
        tokens += batch.n_tgt_tokens
        for i, nbest in zip(batch.indices, results):
            hyps[i] = nbest[0].tokens[valid.forced:]
    mean_loss = nll.item() / max(tokens, 1)
    metrics = {"valid_loss": mean_loss, "valid_ppl": math.exp(min(mean_loss, 50))}
    if hyps:
        order = sorted(hyps)
        texts = valid.detokenize([hyps[i] for i in order])
        if valid.groups:
            metrics.update(group_metrics(dict(zip(order, texts)), valid.references, valid.groups))
        else:
            metrics.update(corpus_metrics(texts, [valid.references[i] for i in order]))
    return metrics


def _forced(batch: Batch, forced: int) -> list[SourceControls] | None:
    """Each row's controls forcing its first `forced` reference tokens (None: nothing forced)."""
    if not forced:
        return None
    return [SourceControls(prefix=row) for row in batch.tgt_in[:, 1:1 + forced].tolist()]


def group_metrics(hyps: dict[int, str], references: Sequence[Sequence[str]],
                  groups: dict[str, Sequence[int]]) -> dict[str, float]:
    """The metrics of each group of rows (valid_bleu/NAME, valid_chrf/NAME) and their means over the
    groups (valid_bleu, valid_chrf, valid_wer, valid_cer); rows without a hypothesis are left out."""
    per_group = {}
    for name, rows in groups.items():
        rows = [i for i in rows if i in hyps]
        if rows:
            per_group[name] = corpus_metrics([hyps[i] for i in rows], [references[i] for i in rows])
    if not per_group:
        return {}
    metrics = {key: sum(m[key] for m in per_group.values()) / len(per_group)
               for key in ("valid_bleu", "valid_chrf", "valid_wer", "valid_cer")}
    for name, m in per_group.items():
        metrics[f"valid_bleu/{name}"] = m["valid_bleu"]
        metrics[f"valid_chrf/{name}"] = m["valid_chrf"]
    return metrics


def is_better(best_metric: str, value: float | None, best: float | None) -> bool:
    """Is `value` of `best_metric` an improvement on `best`? A first value always is; a missing
    value (the metric was not computed) only when there is no best yet."""
    if value is None or best is None:
        return best is None
    return value < best if best_metric in LOWER_IS_BETTER else value > best
