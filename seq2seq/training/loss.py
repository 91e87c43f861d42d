"""The training loss: label-smoothed cross-entropy of the output projection, fused and chunked.

With smoothing eps over a vocabulary of V, the target distribution is q = (1 - eps) onehot(y) + eps / V
(as in torch.nn.functional.cross_entropy(label_smoothing=eps)). For a hidden state h, output
weights W [V, D], logits z = W h:

    loss = -sum_v q_v log softmax(z)_v = logsumexp(z) - (1 - eps) z_y - (eps / V) sum_v z_v
    d loss / d z = softmax(z) - q,   d loss / d h = W^T (softmax(z) - q),   d loss / d W = (softmax(z) - q) h^T

Composed from PyTorch ops, the [N, V] logits, their fp32 copy, the log-probabilities, a zero
gradient, the smoothing term and the casts back are all separate [N, V] buffers, each freshly
allocated (and page-faulted) every step: on a CPU that was a quarter of a small model's training
step. `linear_cross_entropy` instead walks the N positions in chunks of a few MB that stay in cache,
and since the loss is a scalar it computes the gradients of h and W in the same pass (when grad
mode needs them), scaling them by the incoming gradient in backward. Under autocast, fp32 inputs
are multiplied in the autocast dtype (bf16 on CPU); softmax, the loss and the accumulated weight
gradient are fp32 (fp64 for fp64 inputs). With fp16 the gradient matmuls stay fp32, so that small
probabilities do not underflow before GradScaler's scale is applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.accel.onednn import bucket

if TYPE_CHECKING:
    from seq2seq.model.transformer import Seq2SeqTransformer

CHUNK_BYTES = 8 << 20  # the fp32 [rows, V] block of one chunk (262 rows for V = 8000)


def _compute_dtype(t: Tensor) -> torch.dtype:
    if t.dtype == torch.float32 and torch.is_autocast_enabled(t.device.type):
        return torch.get_autocast_dtype(t.device.type)
    return t.dtype


class _LossContext(Protocol):
    """What `_LinearCrossEntropy` uses of the context autograd passes it: the gradients computed in the
    forward pass (saved tensors) and the input dtypes to return them in."""

    dtypes: tuple[torch.dtype, torch.dtype]

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]: ...

    def save_for_backward(self, *tensors: Tensor | None) -> None: ...


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: _LossContext, hidden: Tensor, weight: Tensor, target: Tensor, smoothing: float, chunk: int,
                need_grad: bool, token_weights: Tensor | None) -> Tensor:
        dtype = _compute_dtype(hidden)
        grad_dtype = torch.float32 if dtype == torch.float16 else dtype
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            vocab = w.size(0)
            acc_dtype = torch.promote_types(dtype, torch.float32)
            loss = torch.zeros((), dtype=acc_dtype, device=h.device)
            grad_h = torch.empty(h.shape, dtype=grad_dtype, device=h.device) if need_grad else None
            grad_w = torch.zeros(weight.shape, dtype=acc_dtype, device=h.device) if need_grad else None
            if need_grad:  # the operands of the gradient matmuls, cast once
                h_g, w_g = h.to(grad_dtype), w.to(grad_dtype)
            # bf16 training on CPU: the short last chunk is padded to a bucketed row count (zero rows,
            # whose loss and gradient are dropped), so its matmuls reuse oneDNN kernels. The same rule
            # as onednn.buckets_rows, which cannot be asked here: a Function's forward runs without grad.
            pad_rows = need_grad and h.is_cpu and dtype == torch.bfloat16
            for start in range(0, h.size(0), chunk):
                h_c, t_c = h[start : start + chunk], target[start : start + chunk, None]
                rows = h_c.size(0)
                w_c = None if token_weights is None else token_weights[start : start + chunk].to(acc_dtype)
                padding = bucket(rows) - rows if pad_rows and rows < chunk else 0
                if padding:
                    h_c, t_c = F.pad(h_c, (0, 0, 0, padding)), F.pad(t_c, (0, 0, 0, padding))
                z = h_c @ w.t()  # [c, V] in the compute dtype; read in acc_dtype without a copy
                picked = z.gather(1, t_c).squeeze(1).to(acc_dtype)
                total = z.sum(dim=1, dtype=acc_dtype) if smoothing else None
                m = z.amax(dim=1, keepdim=True).to(acc_dtype)
                p = (z.sub_(m) if z.dtype == acc_dtype else torch.sub(z, m)).exp_()  # [c, V] in acc_dtype
                s = p.sum(dim=1, keepdim=True)
                lse = (s.log() + m).squeeze(1)
                chunk_loss = lse - (1.0 - smoothing) * picked
                if total is not None:
                    chunk_loss = chunk_loss - (smoothing / vocab) * total
                chunk_loss = chunk_loss[:rows] if w_c is None else chunk_loss[:rows] * w_c
                loss += chunk_loss.sum()
                if need_grad:
                    assert grad_h is not None and grad_w is not None  # made above when need_grad
                    g = p.div_(s)  # softmax(z) - q, in place
                    if smoothing:
                        g.sub_(smoothing / vocab)
                    g.scatter_add_(1, t_c, g.new_full(t_c.shape, -(1.0 - smoothing)))
                    if w_c is not None:  # (bf16's zero padding rows add nothing to grad_w and are cut from grad_h)
                        g[:rows].mul_(w_c[:, None])
                    g = g.to(grad_dtype)
                    # Same dtype: reuse the sliced (and padded) chunk. Only bf16 pads, and then h_g is h.
                    h_gc = h_c if h_g is h else h_g[start : start + chunk]
                    grad_h[start : start + chunk] = (g @ w_g)[:rows]
                    grad_w += g.t() @ h_gc  # summed in fp32 (or fp64); zero padded rows add nothing
        ctx.save_for_backward(grad_h, grad_w)
        ctx.dtypes = (hidden.dtype, weight.dtype)
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: _LossContext, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_h, grad_w = ctx.saved_tensors
        if grad_h is None or grad_w is None:  # (saved together: both None without need_grad)
            raise RuntimeError("linear_cross_entropy was computed without gradients (grad mode was off)")
        hidden_dtype, weight_dtype = ctx.dtypes
        return (grad_h * grad).to(hidden_dtype), (grad_w * grad).to(weight_dtype), None, None, None, None, None


def linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor, smoothing: float = 0.0,
                         chunk: int | None = None, token_weights: Tensor | None = None) -> Tensor:
    """Summed label-smoothed cross-entropy of the logits hidden @ weight.T (fp32 softmax and sum).

    hidden [N, D], weight [V, D] (a bias-free output projection), target [N] class ids (no padding)
    -> scalar. smoothing=0 gives the plain summed NLL. `chunk` rows at a time (default: ~8 MB of
    fp32 logits). token_weights [N]: each position's loss (and gradient) multiplied by its weight
    (None: all 1), as terms are weighted (`seq2seq.data.terminology.term_token_weights`).
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.size(1) != weight.size(1) or target.shape != hidden.shape[:1]:
        raise ValueError(f"expected hidden [N, D], weight [V, D], target [N]; got {tuple(hidden.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(target.shape)}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label smoothing must be in [0, 1), got {smoothing}")
    if token_weights is not None and token_weights.shape != target.shape:
        raise ValueError(f"expected token_weights [N] = {tuple(target.shape)}, got {tuple(token_weights.shape)}")
    chunk = chunk or max(1, CHUNK_BYTES // (4 * weight.size(0)))
    need_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(hidden, weight, target, float(smoothing), chunk, need_grad, token_weights)


def ctc_loss(memory: Tensor, memory_pad_mask: Tensor, output_weight: Tensor, tgt_out: Tensor, pad_id: int) -> Tensor:
    """Summed CTC loss (Graves et al. 2006) of the encoder's memory against the target tokens, the
    auxiliary objective of hybrid CTC/attention training (Watanabe et al. 2017, ESPnet's mtlalpha).

    memory [B, S, D] with memory_pad_mask [B, S] (True = padding); output_weight [V, D], the
    decoder's output projection, projects each memory position to the vocabulary, so CTC adds no
    weights (nothing new is saved, decoding is unchanged); the pad id, never a target, is CTC's blank.
    tgt_out [B, T] = [y1, ..., yn, EOS, PAD...]: the targets are y1..yn.

    CTC reads the memory in order, so it suits encoders whose positions follow the text: audio
    frames, one row of image patches (`patch_height` = the image's height), text. It teaches each
    position which token it holds, and so where every token is, which an attention decoder
    otherwise learns slowly (it skips or repeats tokens until it does). A target longer than its
    memory has no alignment and adds 0 (zero_infinity).
    """
    log_probs = F.log_softmax(F.linear(memory, output_weight.to(memory.dtype)).float(), dim=-1)  # [B, S, V]
    input_lengths = (~memory_pad_mask).sum(dim=1)
    target_lengths = tgt_out.ne(pad_id).sum(dim=1) - 1  # without the EOS
    return F.ctc_loss(log_probs.transpose(0, 1), tgt_out, input_lengths, target_lengths, blank=pad_id,
                      reduction="sum", zero_infinity=True)


def sequence_loss(model: Seq2SeqTransformer, src: object, tgt_in: Tensor, tgt_out: Tensor, pad_id: int,
                  smoothing: float = 0.0, ctc_weight: float = 0.0, positions: Tensor | None = None,
                  token_weights: Tensor | None = None) -> Tensor:
    """Summed label-smoothed loss of a teacher-forced batch: tgt_in/tgt_out [B, T] padded with pad_id.

    Only the non-pad positions of tgt_out are projected to the vocabulary and scored: `positions` [K],
    their flat indices in tgt_out.view(-1) (`Batch.target_positions`, found on the host; None: found
    here, which on a GPU waits for it); `token_weights` [K], their loss weights (`Batch.target_weights`;
    None: all 1). With ctc_weight w > 0: (1 - w) * that loss + w * `ctc_loss` of
    the encoder's memory.
    """
    if positions is None:
        positions = tgt_out.reshape(-1).ne(pad_id).nonzero().squeeze(1)
    memory, memory_pad_mask = model.encode(src)
    hidden = model.decoder.features(tgt_in, memory, memory_pad_mask)[0]
    hidden = hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)  # [K, D]
    loss = linear_cross_entropy(hidden, model.decoder.output_weight, tgt_out.reshape(-1).index_select(0, positions),
                                smoothing, token_weights=token_weights)
    if ctc_weight:
        ctc = ctc_loss(memory, memory_pad_mask, model.decoder.output_weight, tgt_out, pad_id)
        loss = (1 - ctc_weight) * loss + ctc_weight * ctc
    return loss
