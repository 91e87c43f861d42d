"""The `training` section (`TrainingConfig`): optimisation, schedule, precision, validation and
checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seq2seq.config.adapter_section import AdapterConfig
from seq2seq.config.checks import check_ranges, require


@dataclass(frozen=True)
class TrainingConfig:
    """The `training` section: optimisation, schedule, precision, validation and checkpoints."""

    output_dir: str = "runs/model"
    seed: int = 1
    max_tokens: int = 4096  # padded tokens per batch, per side
    accum_steps: int = 1
    # Training batches drawn and collated this many steps ahead, on a background thread (0: on the training
    # thread, between steps). The same batches either way.
    prefetch: int = 2
    # Batch shapes in multiples of N (lengths padded up to a multiple, batches of N rows or more cut to a
    # multiple, as fairseq's required_batch_size_multiple): an epoch then makes a few dozen shapes, for kernels
    # that plan or compile per shape, at the cost of more padding (docs/training.md). 1: exact shapes.
    shape_multiple: int = 1
    lr: float = 7e-4
    encoder_lr: float | None = None  # learning rate of the encoder's parameters (e.g. a pretrained backbone); None: lr
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    adam_eps: float = 1e-8
    weight_decay: float = 0.0001
    schedule: Literal["inverse_sqrt", "linear", "cosine", "constant"] = "inverse_sqrt"
    warmup_steps: int = 800
    min_lr_ratio: float = 0.0  # floor for linear/cosine decay, as a fraction of lr
    # Budget-aware annealing: over the last `cooldown` fraction of the run (of max_steps or of
    # max_time_minutes, whichever ends first) the learning rate falls linearly to 0 on top of the
    # schedule. 0 turns it off.
    cooldown: float = 0.0
    max_steps: int = 20000
    max_epochs: int | None = None
    max_time_minutes: float | None = None  # wall-clock budget for the training loop
    label_smoothing: float = 0.1
    # Hybrid CTC/attention training (Watanabe et al. 2017): loss = (1 - w) * attention loss + w * CTC
    # loss of the encoder's memory (see seq2seq.training.loss.ctc_loss). 0 turns it off.
    ctc_weight: float = 0.0
    clip_norm: float | None = 1.0
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "fp32"  # auto: bf16 where the hardware has it
    # Each encoder and decoder layer recomputes its activations in the backward pass instead of keeping them
    # (torch.utils.checkpoint, non-reentrant): less memory for another forward pass of the layers; the same
    # gradients (Seq2SeqTransformer.checkpoint_layers)
    gradient_checkpointing: bool = False
    device: str = "auto"  # auto: cuda > mps > cpu
    threads: int | None = None  # torch intra-op threads on CPU (default: torch's choice)
    valid_every: int = 500
    valid_bleu: bool = True  # decode the validation set (greedy) and score BLEU, chrF, WER and CER
    best_metric: Literal["bleu", "chrf", "wer", "cer", "loss"] = "bleu"
    keep_last: int = 5  # checkpoints kept in checkpoints/ (for averaging)
    checkpoint_every: int | None = None  # also save (without validating) every N steps
    patience: int | None = None  # validations without improvement before stopping
    # Plateau-triggered cooldown: after this many validations without improvement of best_metric,
    # the cooldown starts now instead of at the end of the budget. The step budget shrinks to
    # step / (1 - cooldown), so the learning rate reaches 0 and the run stops after another
    # cooldown / (1 - cooldown) of the steps done so far. A machine fast enough to train past the
    # best region therefore anneals there rather than overfitting at a high learning rate.
    cooldown_patience: int | None = None
    log_every: int = 50
    tensorboard: bool = False  # also log to <output_dir>/tensorboard (pip install "seq2seq[tensorboard]")
    max_bad_steps: int = 20  # skipped non-finite steps before aborting
    # Under torchrun: how long a collective waits for a peer before the process fails. A worker that
    # dies then stops its group within this bound, so torchrun's elastic agent can restart it
    # (torch's own default, 30 minutes, leaves the survivors blocked for that long).
    collective_timeout_s: float = 90.0
    # LoRA fine-tuning of the model given with --init-from: only low-rank updates of its linear layers train
    # (seq2seq.adapters, docs/fine-tuning.md); type null: full fine-tuning
    adapter: AdapterConfig = field(default_factory=AdapterConfig)

    def __post_init__(self) -> None:
        check_ranges(self, "training", {
            "max_tokens": (1, None), "accum_steps": (1, None), "prefetch": (0, None), "shape_multiple": (1, None),
            "valid_every": (1, None), "max_steps": (0, None),
            "max_epochs": (1, None), "warmup_steps": (0, None), "keep_last": (0, None), "checkpoint_every": (1, None),
            "patience": (1, None), "log_every": (1, None), "max_bad_steps": (1, None), "threads": (1, None),
            "weight_decay": (0.0, None), "min_lr_ratio": (0.0, 1.0), "label_smoothing": (0.0, 0.99),
            "ctc_weight": (0.0, 0.99),
        })
        for name in ("lr", "encoder_lr", "adam_eps", "clip_norm", "max_time_minutes", "collective_timeout_s"):
            value = getattr(self, name)
            require(value is None or value > 0, f"training.{name} must be positive, got {value}")
        require(len(self.betas) == 2, "training.betas must hold two numbers")
        require(not (self.precision == "fp16" and self.device == "cpu"),
                "training.precision fp16 needs CUDA; use bf16 on CPU")
        require(0.0 <= self.cooldown <= 1.0, f"training.cooldown must be a fraction in [0, 1], got {self.cooldown}")
        require(self.cooldown_patience is None or (self.cooldown_patience >= 1 and 0.0 < self.cooldown < 1.0),
                "training.cooldown_patience needs a value >= 1 and a training.cooldown in (0, 1), "
                f"got cooldown_patience {self.cooldown_patience} with cooldown {self.cooldown}")
