"""The training step as a GPU runs it, on the CPU: `sync.host_reads_are_free` made to answer False, the
step reads no value on the host (a GPU would wait for each read), skips a non-finite step on the device,
and still trains what the CPU's own step trains."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from seq2seq.model import sync
from seq2seq.training.trainer import TrainingAborted
from test_train import make_trainer, nan_at_call, toy_data

# Ops that need a value on the host: .item(), bool(t), float(t) (_local_scalar_dense), and those whose
# output size depends on the values (nonzero, a boolean-mask gather, masked_select).
READS = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.is_nonzero")


class HostReads(TorchDispatchMode):
    """Counts the ops that read values on the host (and Tensor.tolist, which dispatches nothing on a CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith(READS) or (name.startswith("aten.index.Tensor") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None)):
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    monkeypatch.setattr(sync, "host_reads_are_free", lambda device: False)


def count_reads(monkeypatch, fn) -> list[str]:
    seen = HostReads()
    real = torch.Tensor.tolist

    def tolist(self):
        seen.reads.append("Tensor.tolist")
        return real(self)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    with seen:
        fn()
    monkeypatch.setattr(torch.Tensor, "tolist", real)
    return seen.reads


def test_a_training_step_reads_nothing_on_the_host_and_a_log_line_reads_once(tmp_path, monkeypatch, as_on_a_gpu):
    trainer = make_trainer(tmp_path, toy_data(), max_steps=100, log_every=1000, valid_every=1000, prefetch=0)
    assert trainer.deferred and trainer.optimizer.param_groups[0]["fused"]
    steps = trainer._steps()
    batches = [next(steps).batches for _ in range(7)]
    for step in batches[:2]:  # warm-up: not counted
        trainer._train_step(step)
    reads = count_reads(monkeypatch, lambda: [trainer._train_step(b) for b in batches[2:]])
    assert reads == [], f"host reads in 5 steps: {reads}"
    assert trainer.window.tokens == 0  # nothing read yet
    reads = count_reads(monkeypatch, trainer._settle)
    assert reads == ["Tensor.tolist"]  # the log line's one read of the loss, tokens and skipped steps
    assert trainer.window.tokens == sum(b.n_tgt_tokens for step in batches for b in step)
    assert trainer.window.loss > 0 and trainer.bad_steps == 0


def test_the_cpu_step_still_checks_each_step_at_once(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, toy_data(), max_steps=100, prefetch=0)
    assert not trainer.deferred
    steps = trainer._steps()
    trainer._train_step(next(steps).batches)
    reads = count_reads(monkeypatch, lambda: trainer._train_step(next(steps).batches))
    assert reads  # free there: the loss is read, the step skipped at once when it is not finite


def test_the_deferred_step_trains_what_the_cpu_step_trains(tmp_path, as_on_a_gpu, monkeypatch):
    rows = toy_data()
    deferred = make_trainer(tmp_path / "d", rows, max_steps=12)
    deferred.train()
    monkeypatch.undo()
    immediate = make_trainer(tmp_path / "i", rows, max_steps=12)
    immediate.train()
    assert deferred.deferred and not immediate.deferred
    for (name, a), (_, b) in zip(deferred.model.state_dict().items(), immediate.model.state_dict().items()):
        if name.endswith("in_proj.bias"):  # the key bias's gradient is 0 but for rounding, which Adam scales up
            a, b = torch.cat([a[:32], a[64:]]), torch.cat([b[:32], b[64:]])
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)  # fused and multi-tensor AdamW round apart
    logged = [[r["step"] for r in t.history if "train_loss" in r] for t in (deferred, immediate)]
    assert logged[0] == logged[1] == [2, 4, 6, 8, 10, 12]
    assert [r["train_loss"] for r in deferred.history if "train_loss" in r] == pytest.approx(
        [r["train_loss"] for r in immediate.history if "train_loss" in r], rel=1e-4)


def test_a_non_finite_step_is_skipped_on_the_device_and_counted_at_the_next_log(tmp_path, monkeypatch, as_on_a_gpu,
                                                                                caplog):
    import seq2seq.training.trainer as train_module

    trainer = make_trainer(tmp_path, toy_data(), max_steps=6, max_bad_steps=2, log_every=3, valid_every=6,
                           prefetch=0)
    real = nan_at_call(monkeypatch, 3)
    steps = trainer._steps()
    trainer._train_step(next(steps).batches)
    trainer._train_step(next(steps).batches)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer._train_step(next(steps).batches)  # the NaN step: its update is not applied
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert trainer.step == 3 and trainer.bad_steps == 0  # (not read yet)
    with caplog.at_level(logging.WARNING, logger="seq2seq.training.trainer"):
        trainer._settle()
    assert trainer.bad_steps == 1 and "non-finite" in caplog.text
    trainer._train_step(next(steps).batches)  # and the next step trains again
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert all(torch.isfinite(v).all() for v in trainer.model.state_dict().values())

    monkeypatch.setattr(train_module, "sequence_loss", lambda *a: real(*a) * float("inf"))
    doomed = make_trainer(tmp_path / "b", toy_data(), max_steps=6, max_bad_steps=2, log_every=1)
    start = {k: v.clone() for k, v in doomed.model.state_dict().items()}
    with pytest.raises(TrainingAborted, match="non-finite"):
        doomed.train()
    assert all(torch.equal(start[k], v) for k, v in doomed.model.state_dict().items())


def test_running_out_of_memory_says_what_to_lower(tmp_path, monkeypatch):
    import seq2seq.training.trainer as train_module

    def out_of_memory(*args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(train_module, "sequence_loss", out_of_memory)
    trainer = make_trainer(tmp_path, toy_data(), max_steps=4)
    with pytest.raises(TrainingAborted) as raised:
        trainer.train()
    message = str(raised.value)
    assert "ran out of memory at step 1" in message and "training.max_tokens=64" in message
    assert "training.accum_steps" in message and "x" in message.split("batch of ")[1]


@pytest.mark.parametrize("strategy, controls, members", [
    ("greedy", None, 1), ("beam", None, 1), ("beam", {"avoid": [[5, 6], [7]]}, 1),
    ("beam", {"constraints": [[7, 8], [9]]}, 1), ("beam", {"prefix": [7, 8]}, 1), ("sample", None, 1),
    ("beam", {"constraints": [[7, 8]]}, 2)])
def test_the_search_reads_the_host_once_a_step(monkeypatch, as_on_a_gpu, strategy, controls, members):
    """Greedy, beam (with banned phrases, constraints, a prefix), sampling and an ensemble: one host read
    a step (which units are done, which candidates ended, and the values of those the step before ended),
    one at the start (the length limits) and one at the end; the same hypotheses as with the reads a CPU
    makes."""
    from seq2seq.config import ModelConfig
    from seq2seq.config.search import SearchConfig
    from seq2seq.inference import search as search_module
    from seq2seq.inference.controls import SourceControls
    from seq2seq.inference.ensemble import EnsembleModel
    from seq2seq.model.transformer import Seq2SeqTransformer

    torch.manual_seed(0)
    models = [Seq2SeqTransformer(ModelConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, heads=2, ffn_dim=64,
                                             layers=1)).eval() for _ in range(members)]
    model = models[0] if members == 1 else EnsembleModel(models).eval()
    src = torch.randint(4, 40, (5, 7))
    src[:, -1], src[1, -3:] = 3, torch.tensor([3, 0, 0])  # (one padded source)
    if members > 1:
        src = (src, src)  # (an ensemble reads one batch per member)
    cfg = SearchConfig(strategy=strategy, beam=3, max_len_a=0, max_len_b=12, seed=4,
                       nbest=1 if strategy == "greedy" else 2)
    per_source = None if controls is None else [SourceControls(**controls)] * 5
    steps = []
    real_step = search_module._Search._next_log_probs

    def counting(self, step):
        steps.append(step)
        return real_step(self, step)

    monkeypatch.setattr(search_module._Search, "_next_log_probs", counting)
    found = []
    reads = count_reads(monkeypatch, lambda: found.append(search_module.search(model, src, cfg, controls=per_source)))
    assert reads.count("Tensor.tolist") == len(reads) == len(steps) + 2, reads
    monkeypatch.setattr(sync, "host_reads_are_free", lambda device: True)
    expected = search_module.search(model, src, cfg, controls=per_source)
    assert [[(h.tokens, h.score, h.token_logprobs, h.constraints_met) for h in n] for n in found[0]] == \
        [[(h.tokens, h.score, h.token_logprobs, h.constraints_met) for h in n] for n in expected]
