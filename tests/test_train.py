"""Training: schedules, non-finite steps, atomic checkpoints, exact resume, the CLI end to end."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from seq2seq.storage.atomic import read_json
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import load_weights
from seq2seq.data.batching import TokenBatchSampler, collate_text
from seq2seq.cli import cli
from seq2seq.config import ConfigError, ModelConfig
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.training.validation import is_better
from seq2seq.config.search import SearchConfig
from seq2seq.config import TrainingConfig
from seq2seq.training.optim import cooldown_factor, lr_lambda
from seq2seq.training.trainer import Trainer, TrainingAborted
from seq2seq.training.validation import ValidData


def toy_data(n=48, seed=0):
    """A copy-with-offset task: target = source ids + 1."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = int(torch.randint(2, 7, (1,), generator=g))
        src = torch.randint(4, 20, (length,), generator=g).tolist()
        rows.append({"src_ids": src + [3], "tgt_ids": [t + 1 for t in src], "index": i})
    return rows


def make_trainer(out_dir, rows, dropout=0.1, valid=None, **overrides):
    torch.manual_seed(0)
    model = Seq2SeqTransformer(
        ModelConfig(src_vocab_size=24, tgt_vocab_size=24, d_model=32, heads=2, ffn_dim=64, layers=1, dropout=dropout)
    )
    cfg = TrainingConfig(**{**dict(max_tokens=64, lr=3e-3, warmup_steps=5, max_steps=12, valid_every=4, valid_bleu=False,
                                 log_every=2, device="cpu", seed=3, best_metric="loss"), **overrides})
    sampler = TokenBatchSampler([len(r["src_ids"]) for r in rows], [len(r["tgt_ids"]) + 1 for r in rows],
                                max_tokens=cfg.max_tokens, shuffle=True, seed=cfg.seed)
    return Trainer(model, cfg, sampler, lambda idx: collate_text([rows[i] for i in idx]), valid, out_dir,
                   SearchConfig(strategy="greedy", max_len_a=0.0, max_len_b=8))


@pytest.mark.parametrize("schedule", ["inverse_sqrt", "linear", "cosine", "constant"])
def test_schedules_warm_up_then_follow_their_shape(schedule):
    f = lr_lambda(TrainingConfig(schedule=schedule, warmup_steps=10, max_steps=110))
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    expected_at_60 = {"inverse_sqrt": math.sqrt(10 / 61), "linear": 1 - 51 / 100, "constant": 1.0,
                      "cosine": 0.5 * (1 + math.cos(math.pi * 51 / 100))}[schedule]
    assert f(60) == pytest.approx(expected_at_60)



def test_cooldown_anneals_the_last_fraction_of_a_step_or_time_budget_to_zero():
    cfg = TrainingConfig(max_steps=1000, cooldown=0.2)
    assert [cooldown_factor(cfg, s, 0.0) for s in (0, 800, 900, 1000)] == pytest.approx([1.0, 1.0, 0.5, 0.0])
    timed = TrainingConfig(max_steps=10**6, max_time_minutes=10, cooldown=0.25)  # time ends first
    assert [cooldown_factor(timed, 5, m * 60) for m in (5, 7.5, 8.75, 10, 11)] == pytest.approx([1, 1, 0.5, 0, 0])
    assert cooldown_factor(TrainingConfig(max_steps=1000), 999, 0.0) == 1.0  # off by default
    with pytest.raises(ConfigError, match="training.cooldown"):
        TrainingConfig(cooldown=1.5)


def test_trainer_lr_follows_schedule_times_cooldown(tmp_path):
    trainer = make_trainer(tmp_path, toy_data(), max_steps=12, cooldown=0.5, warmup_steps=2)
    trainer.train()
    lrs = [row["lr"] for row in trainer.history if "lr" in row]
    schedule = lr_lambda(trainer.cfg)
    expected = [trainer.cfg.lr * schedule(s) * min(1.0, (1 - s / 12) / 0.5)  # lr for the step after s
                for s in range(1, 13) if s % trainer.cfg.log_every == 0]
    assert expected[-1] == 0.0 and expected[0] > 0
    assert lrs == pytest.approx(expected)

def scripted_validation(trainer, losses):
    """Make the trainer's validations return these losses, one per validation (then the last forever)."""
    seen = []

    def validate():
        seen.append(trainer.step)
        loss = losses[min(len(seen), len(losses)) - 1]
        if isinstance(loss, BaseException):
            raise loss
        return {"valid_loss": loss}

    trainer.validate = validate
    return seen


def test_a_validation_plateau_starts_the_cooldown_and_shortens_the_run(tmp_path):
    trainer = make_trainer(tmp_path, toy_data(), max_steps=100, cooldown=0.5, cooldown_patience=1, warmup_steps=2)
    validated_at = scripted_validation(trainer, [3.0, 2.0, 2.5, 1.0])  # no gain at the 3rd validation (step 12)
    result = trainer.train()
    assert trainer.plateau_step == 12 and trainer.max_steps == 24  # 12 / (1 - 0.5)
    assert result["stop_reason"] == "plateau_cooldown" and result["step"] == 24
    assert validated_at == [4, 8, 12, 16, 20, 24]
    schedule = lr_lambda(trainer.cfg)
    lrs = {row["step"]: row["lr"] for row in trainer.history if "lr" in row}
    # before the plateau the 100-step budget's cooldown had not begun; after it, lr falls to 0 at step 24
    expected = {s: trainer.cfg.lr * schedule(s) * min(1.0, (1 - s / (100 if s <= 12 else 24)) / 0.5) for s in lrs}
    assert lrs == pytest.approx(expected) and lrs[24] == 0.0 and lrs[12] > lrs[14] > lrs[22] > 0


def test_plateau_cooldown_never_lengthens_a_run_and_resumes_exactly(tmp_path):
    short = make_trainer(tmp_path / "short", toy_data(), max_steps=16, cooldown=0.5, cooldown_patience=1)
    scripted_validation(short, [3.0, 2.0, 2.5])
    assert short.train()["step"] == 16  # the plateau at 12 would end at 24: the budget of 16 stays
    rows = toy_data()
    full = make_trainer(tmp_path / "full", rows, max_steps=100, cooldown=0.5, cooldown_patience=1)
    scripted_validation(full, [3.0, 2.0, 2.5])
    full.train()
    part = make_trainer(tmp_path / "part", rows, max_steps=100, cooldown=0.5, cooldown_patience=1)
    scripted_validation(part, [3.0, 2.0, 2.5, KeyboardInterrupt()])  # killed at step 16, saved at 12
    with pytest.raises(KeyboardInterrupt):
        part.train()
    resumed = make_trainer(tmp_path / "part", rows, max_steps=100, cooldown=0.5, cooldown_patience=1)
    torch.manual_seed(12345)
    assert resumed.resume() and resumed.step == 12 and resumed.plateau_step == 12 and resumed.max_steps == 24
    scripted_validation(resumed, [2.5])
    assert resumed.train()["step"] == 24
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("settings", [dict(cooldown_patience=1), dict(cooldown_patience=0, cooldown=0.2),
                                      dict(cooldown_patience=2, cooldown=1.0)])
def test_cooldown_patience_needs_a_cooldown_fraction(settings):
    with pytest.raises(ConfigError, match="training.cooldown_patience"):
        TrainingConfig(**settings)


def test_exact_resume_matches_uninterrupted_run(tmp_path):
    rows = toy_data()
    full = make_trainer(tmp_path / "full", rows)
    full.train()
    # interrupted: the process dies after step 8 (its last checkpoint); a new process resumes
    part = make_trainer(tmp_path / "part", rows, max_steps=8)
    part.train()
    resumed = make_trainer(tmp_path / "part", rows)
    torch.manual_seed(12345)  # a fresh process has another RNG state: resume must restore it
    assert resumed.resume()
    assert resumed.step == 8
    resumed.train()
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
    assert [r["step"] for r in full.history] == [r["step"] for r in resumed.history]


def test_a_kill_between_the_resume_state_and_the_best_weights_is_repaired_by_resume(tmp_path, monkeypatch):
    """A save writes train_state/ before model.safetensors: a process killed between the two leaves a
    resumable directory (never a model.safetensors without train_state/, which a restart would take for
    a finished model), and resume writes the best weights the killed save did not."""
    rows = toy_data()
    trainer = make_trainer(tmp_path, rows, max_steps=4)
    trainer.train()
    old_best = load_weights(tmp_path / "model.safetensors")

    def killed(self, state):
        raise KeyboardInterrupt("SIGKILL")  # the process dies before the best weights are written

    monkeypatch.setattr(ModelDir, "save_weights", killed)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.01)  # weights unlike the saved best ones
    trainer.step += 1
    trainer.best_step = trainer.step  # this save is the best so far
    with pytest.raises(KeyboardInterrupt):
        trainer.save(best=True)
    monkeypatch.undo()
    state = ModelDir(tmp_path).train_state()
    assert state is not None and read_json(state / "state.json")["step"] == trainer.step
    new_best = load_weights(state / "model.safetensors")
    assert all(torch.equal(t, old_best[k]) for k, t in load_weights(tmp_path / "model.safetensors").items())
    assert not all(torch.equal(t, old_best[k]) for k, t in new_best.items())

    resumed = make_trainer(tmp_path, rows, max_steps=4)
    assert resumed.resume() and resumed.step == trainer.step
    for name, t in load_weights(tmp_path / "model.safetensors").items():
        assert torch.equal(t, new_best[name]), name
    assert read_json(tmp_path / "metadata.json")["step"] == trainer.step


def test_a_crash_during_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    rows = toy_data()
    trainer = make_trainer(tmp_path, rows, max_steps=4)
    trainer.train()
    good_weights = load_weights(tmp_path / "model.safetensors")
    good_state = json.loads((tmp_path / "train_state" / "state.json").read_text())

    import seq2seq.storage.weights as module

    def broken_save_file(tensors, path, metadata=None):
        Path(path).write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(module, "save_file", broken_save_file)
    trainer.step += 1
    with pytest.raises(OSError, match="disk full"):
        trainer.save(best=True)
    monkeypatch.undo()
    # the best weights and the resume state are the old ones, intact and loadable
    for name, t in load_weights(tmp_path / "model.safetensors").items():
        assert torch.equal(t, good_weights[name])
    assert ModelDir(tmp_path).train_state() is not None
    assert json.loads((ModelDir(tmp_path).train_state() / "state.json").read_text())["step"] == good_state["step"]
    assert not list(tmp_path.glob(".*.tmp")) and not list((tmp_path / "checkpoints").glob(".*.tmp"))


def test_the_resume_state_is_safetensors_and_json_and_an_older_pickled_one_still_resumes(tmp_path):
    rows = toy_data()
    trainer = make_trainer(tmp_path / "new", rows, max_steps=4)
    trainer.train()
    state = ModelDir(tmp_path / "new").train_state()
    assert sorted(p.name for p in state.iterdir()) == ["COMPLETE", "model.safetensors", "objects.json",
                                                       "objects.safetensors", "state.json"]
    # a state written before (optimizer.pt, torch.save) resumes as it did, and the run goes on the same
    from seq2seq.storage.weights import join_tensors

    objects = join_tensors(load_weights(state / "objects.safetensors"), read_json(state / "objects.json"))
    old = tmp_path / "old"
    import shutil

    shutil.copytree(tmp_path / "new", old)
    old_state = old / "train_state"
    torch.save(objects, old_state / "optimizer.pt")
    (old_state / "objects.json").unlink()
    (old_state / "objects.safetensors").unlink()
    a, b = make_trainer(tmp_path / "new", rows, max_steps=8), None
    assert a.resume()
    a.train()
    b = make_trainer(old, rows, max_steps=8)
    assert b.resume() and b.step == 4
    b.train()
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(x, y), name


def test_a_background_save_writes_the_weights_of_its_step_while_training_changes_them(tmp_path, monkeypatch):
    import threading

    rows = toy_data()
    trainer = make_trainer(tmp_path, rows, max_steps=4)
    trainer.train()
    release = threading.Event()
    real = ModelDir.save_checkpoint

    def slow_checkpoint(self, state, step, keep_last):
        release.wait(10)  # the write starts only after training changed the weights below
        real(self, state, step, keep_last)

    monkeypatch.setattr(ModelDir, "save_checkpoint", slow_checkpoint)
    saved = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.step += 1
    trainer.save(best=False, background=True)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(1.0)  # training goes on meanwhile
    release.set()
    trainer.wait_for_saves()
    for name, t in load_weights(tmp_path / "checkpoints" / f"step_{trainer.step}.safetensors").items():
        assert torch.equal(t, saved[name]), name

    def broken(self, state, step, keep_last):
        raise OSError("disk full")

    monkeypatch.setattr(ModelDir, "save_checkpoint", broken)
    trainer.step += 1
    trainer.save(best=False, background=True)  # returns at once; the error comes with the next wait
    with pytest.raises(OSError, match="disk full"):
        trainer.wait_for_saves()


def test_tied_weights_are_stored_once_and_loaded_under_every_name(tmp_path):
    from seq2seq.storage.weights import save_weights

    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=500, tgt_vocab_size=500, d_model=32, heads=2, ffn_dim=64,
                                           layers=1, share_embeddings=True, tie_output=True))
    state = model.state_dict()
    tied = [n for n in state if n.endswith("embed.tokens.weight")]
    assert len(tied) == 2 and state[tied[0]].data_ptr() == state[tied[1]].data_ptr()
    save_weights(state, tmp_path / "tied.safetensors")
    untied = {k: v.clone() for k, v in state.items()}
    save_weights(untied, tmp_path / "untied.safetensors")
    size = (tmp_path / "untied.safetensors").stat().st_size - (tmp_path / "tied.safetensors").stat().st_size
    assert size >= 500 * 32 * 4  # one embedding fewer
    from safetensors.torch import load_file

    assert len(load_file(str(tmp_path / "tied.safetensors"))) == len(state) - 1
    loaded = load_weights(tmp_path / "tied.safetensors")
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    fresh = Seq2SeqTransformer(model.cfg)
    fresh.load_state_dict(loaded)
    assert torch.equal(fresh.decoder.output_weight, model.decoder.output_weight)


def test_interrupted_state_swap_falls_back_to_old(tmp_path):
    ModelDir(tmp_path).save_train_state({"state.json": {"step": 1}})
    ModelDir(tmp_path).save_train_state({"state.json": {"step": 2}})
    # simulate a kill between the two renames of the swap: train_state moved to .old, new not yet in place
    (tmp_path / "train_state").rename(tmp_path / "train_state.old")
    assert read_json(ModelDir(tmp_path).train_state() / "state.json")["step"] == 2


def nan_at_call(monkeypatch, n):
    """Make the trainer's `n`th loss (counting from 1) NaN; returns the real loss function."""
    import seq2seq.training.trainer as train_module

    real, calls = train_module.sequence_loss, [0]

    def nan_once(*args):
        calls[0] += 1
        loss = real(*args)
        return loss * float("nan") if calls[0] == n else loss

    monkeypatch.setattr(train_module, "sequence_loss", nan_once)
    return real


def test_non_finite_loss_skips_the_step_then_aborts(tmp_path, monkeypatch):
    rows = toy_data()
    trainer = make_trainer(tmp_path, rows, max_steps=6, max_bad_steps=2)
    import seq2seq.training.trainer as train_module

    real = nan_at_call(monkeypatch, 2)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    assert trainer.bad_steps == 1 and trainer.step == 6
    assert all(torch.isfinite(v).all() for v in trainer.model.state_dict().values())
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())

    monkeypatch.setattr(train_module, "sequence_loss", lambda *a: real(*a) * float("inf"))
    trainer2 = make_trainer(tmp_path / "b", rows, max_steps=6, max_bad_steps=2)
    start = {k: v.clone() for k, v in trainer2.model.state_dict().items()}
    with pytest.raises(TrainingAborted, match="non-finite"):
        trainer2.train()
    assert trainer2.step == 0
    assert all(torch.equal(start[k], v) for k, v in trainer2.model.state_dict().items())


def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    rows = toy_data(8)
    a = make_trainer(tmp_path / "a", rows, dropout=0.0, max_tokens=1000, max_steps=1, accum_steps=1, clip_norm=None)
    b = make_trainer(tmp_path / "b", rows, dropout=0.0, max_tokens=1000, max_steps=1, accum_steps=2, clip_norm=None)
    batch = collate_text(rows)
    halves = [collate_text(rows[:4]), collate_text(rows[4:])]
    a._train_step([batch])
    b._train_step(halves)
    # Compare gradients, not Adam updates: Adam normalises the (theoretically zero) key-bias
    # gradient, so float noise there would become a full-size step.
    for (name, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)
    assert a.step == b.step == 1


def write_config(tmp_path, files, **extra):
    import yaml

    cfg = {
        "data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                 "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"])},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 64, "heads": 2, "ffn_dim": 128, "layers": 1, "share_embeddings": True},
        "training": {"output_dir": str(tmp_path / "model"), "max_steps": 30, "valid_every": 15, "max_tokens": 1500,
                     "lr": 2e-3, "warmup_steps": 10, "device": "cpu", "log_every": 5},
        "decoding": {"beam": 2, "max_len_b": 10},
    }
    for dotted, value in extra.items():
        section, key = dotted.split("__")
        cfg[section][key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_cli_train_end_to_end_writes_a_loadable_model_dir(tmp_path, multi30k_small):
    config = write_config(tmp_path, multi30k_small)
    result = CliRunner().invoke(cli, ["train", str(config), "--set", "training.max_steps=30"])
    assert result.exit_code == 0, result.output
    model_dir = tmp_path / "model"
    for name in ("model.safetensors", "config.yaml", "spm.model", "metadata.json", "log.csv", "curves.png"):
        assert (model_dir / name).is_file(), name
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert meta["step"] == 30 and meta["train_pairs"] > 350 and len(meta["data_fingerprint"]) >= 16
    assert {"valid_bleu", "valid_chrf", "valid_wer", "valid_cer"} <= set(meta["last_validation"])
    from seq2seq.storage.model_dir import load_model_dir

    loaded = load_model_dir(model_dir)
    assert loaded.model.cfg.src_vocab_size == loaded.tokenizers.src.vocab_size
    # a second run into the same directory is refused instead of overwriting it
    again = CliRunner().invoke(cli, ["train", str(config)])
    assert again.exit_code != 0 and "--resume" in again.output
    # resume continues to a larger step budget
    more = CliRunner().invoke(cli, ["train", str(config), "--resume", "--set", "training.max_steps=35"])
    assert more.exit_code == 0, more.output
    assert json.loads((model_dir / "metadata.json").read_text())["step"] == 35


@pytest.mark.parametrize(
    "setup, message",
    [
        ("mismatch", "line"),
        ("bad_utf8", "line 2"),
        ("missing", "not found"),
        ("unknown_key", "Did you mean 'training.max_steps'"),
        ("bad_type", "training.lr"),
    ],
)
def test_cli_train_refuses_bad_input_with_one_clear_message(tmp_path, multi30k_small, setup, message):
    files = dict(multi30k_small)
    overrides = []
    if setup == "mismatch":
        p = tmp_path / "short.de"
        p.write_text("eins\nzwei\n", encoding="utf-8")
        files["train.de"] = p
    elif setup == "bad_utf8":
        p = tmp_path / "bad.en"
        p.write_bytes(b"fine line\nbroken \xff\xfe line\n")
        q = tmp_path / "ok.de"
        q.write_text("gut\nauch gut\n", encoding="utf-8")
        files["train.en"], files["train.de"] = p, q
    elif setup == "missing":
        files["train.en"] = tmp_path / "nope.en"
    elif setup == "unknown_key":
        overrides = ["--set", "training.max_stesp=3"]
    elif setup == "bad_type":
        overrides = ["--set", "training.lr=fast"]
    config = write_config(tmp_path, files)
    result = CliRunner().invoke(cli, ["train", str(config), *overrides])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert message in result.output, result.output
    if setup in ("mismatch", "bad_utf8", "missing"):
        assert "Error:" in result.output and str(files["train.en" if setup != "mismatch" else "train.de"].name) in result.output
    assert not (tmp_path / "model" / "model.safetensors").exists()


def words(ids):
    """The toy task's detokenizer: ids -> "w5 w6 ..." (EOS and padding never reach it)."""
    return [" ".join(f"w{t}" for t in seq) for seq in ids]


def toy_valid(rows, extra_references=True):
    """Validation data of the toy task: each row's target text, and for every other row a second,
    wrong reference (a caption set with several captions per image)."""
    references = [[words([r["tgt_ids"]])[0]] for r in rows]
    if extra_references:
        for i in range(0, len(rows), 2):
            references[i].append("w1 w2 w3")
    return ValidData(batches=[collate_text(rows[:5]), collate_text(rows[5:])], references=references,
                     detokenize=words)


def test_validation_scores_bleu_chrf_wer_cer_of_greedy_decoding_against_every_reference(tmp_path, monkeypatch):
    import seq2seq.training.validation as evaluation
    from seq2seq.text.metrics import cer, reference_streams, score, wer

    rows = toy_data(12, seed=5)
    valid = toy_valid(rows)
    trainer = make_trainer(tmp_path, toy_data(), valid=valid, valid_bleu=True, max_steps=4)
    decoded = {}
    real_search = evaluation.search

    def recording_search(model, src, cfg, **controls):
        assert controls == {"controls": None}  # nothing is forced in a bilingual model's validation
        results = real_search(model, src, cfg, **controls)
        decoded[len(decoded)] = [nbest[0].tokens for nbest in results]
        return results

    monkeypatch.setattr(evaluation, "search", recording_search)
    metrics = trainer.validate()
    assert set(metrics) == {"valid_loss", "valid_ppl", "valid_bleu", "valid_chrf", "valid_wer", "valid_cer"}
    hyps = words(decoded[0] + decoded[1])  # the batches hold rows 0-4 and 5-11, in order
    refs = valid.references
    assert metrics["valid_bleu"] == pytest.approx(score(hyps, reference_streams(refs), ["bleu"])["bleu"]["score"])
    assert metrics["valid_wer"] == pytest.approx(wer(hyps, [r[0] for r in refs]))
    assert metrics["valid_cer"] == pytest.approx(cer(hyps, [r[0] for r in refs]))
    # without decoding: the loss only
    trainer.cfg = dataclasses.replace(trainer.cfg, valid_bleu=False)
    assert set(trainer.validate()) == {"valid_loss", "valid_ppl"}


@pytest.mark.parametrize("metric", ["wer", "cer"])
def test_best_metric_wer_and_cer_keep_the_lowest(tmp_path, metric):
    rows = toy_data()
    trainer = make_trainer(tmp_path, rows, valid=toy_valid(toy_data(12, seed=5)), valid_bleu=True, best_metric=metric,
                           max_steps=8, valid_every=2, lr=1e-2)
    trainer.train()
    values = [(row["step"], row[f"valid_{metric}"]) for row in trainer.history if f"valid_{metric}" in row]
    assert len(values) == 4 and len({v for _, v in values}) > 1  # it changed while training
    best_step, best = min(values, key=lambda sv: (sv[1], sv[0]))
    assert trainer.best == best and trainer.best_step == best_step
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["best_metric"] == metric and meta["best_score"] == best


def test_is_better_by_direction():
    assert is_better("bleu", 30.0, 20.0) and not is_better("bleu", 20.0, 30.0)
    assert is_better("loss", 2.0, 3.0) and not is_better("loss", 3.0, 2.0)
    assert is_better("wer", 10.0, 12.5) and is_better("cer", 4.0, 5.0) and not is_better("wer", 12.5, 10.0)
    assert not is_better("wer", 10.0, 10.0)  # ties keep the earlier best
    assert is_better("wer", None, None) and not is_better("wer", None, 10.0) and is_better("wer", 50.0, None)
