"""LoRA adapters (seq2seq/adapters): only the updates train and are saved, merged equals unmerged, an
adapter of another base is refused in one line, and the server routes each request to its adapter.

The base is the session's `tiny_model_dir`; the LoRA run trains on it for 6 steps (a few seconds)."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import re
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from conftest import run_benchmark, translated
from seq2seq.adapters.files import ADAPTER_JSON, ADAPTER_WEIGHTS, AdapterError, read_adapter, write_adapter
from seq2seq.adapters.lora import (LORA_B, LoRAAttention, LoRALinear, add_lora, embedding_keys, is_lora_key, lora_tensors,
                                   merge_lora)
from seq2seq.adapters.serving import attach_adapters, parse_adapter_option, using
from seq2seq.cli import cli
from seq2seq.config import ConfigError, ModelConfig
from seq2seq.config.adapter_section import AdapterConfig
from seq2seq.inference.translator import Translator
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import load_weights, save_weights

SENTENCES = ["A dog runs.", "Two men are talking in a park.", "A woman with a red hat.", "A man."]
LORA = AdapterConfig(type="lora", rank=4, alpha=8.0)


def tiny_model(seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=32, heads=2, ffn_dim=64, layers=2, dropout=0.0,
                      share_embeddings=True)
    return Seq2SeqTransformer(cfg).eval()


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 50, (3, 7), generator=g), torch.randint(4, 50, (3, 5), generator=g)


def randomize_updates(model: torch.nn.Module, seed: int = 1) -> None:
    """Give every B a random value (training starts them at zero, which would hide any mistake)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in lora_tensors(model).items():
            if name.endswith("lora_B"):
                t.copy_(torch.randn(t.shape, generator=g) * 0.3)


def train_steps(model: torch.nn.Module, steps: int = 3) -> None:
    """AdamW steps on what requires grad, towards a loss every weight affects."""
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    src, tgt = batch()
    for _ in range(steps):
        loss = model(src, tgt).logsumexp(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the LoRA layers ------------------------------------------------------------------------------


def test_only_the_updates_require_grad_and_training_leaves_the_base_unchanged():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    names = add_lora(model, LORA)
    assert len(names) == 2 * 4 + 2 * 6  # encoder: self-attn in/out + ffn w1/w2; decoder: + cross-attn in/out
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{n}.{part}" for n in names for part in ("lora_A", "lora_B")}
    assert set(model.state_dict()) == set(before) | trainable  # the base's keys are kept
    train_steps(model)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(after[f"{n}.lora_B"].abs().sum() > 0 for n in names)  # every adapted layer trained, cross-attention too


def test_a_fresh_adapter_changes_nothing_and_merged_equals_unmerged():
    model, reference = tiny_model(), tiny_model()
    src, tgt = batch()
    add_lora(model, LORA)
    with torch.no_grad():
        assert torch.equal(model(src, tgt), reference(src, tgt))  # B = 0: the base exactly
        randomize_updates(model)
        unmerged = model(src, tgt)
        merge_lora(reference, {k: v.detach() for k, v in lora_tensors(model).items()}, LORA.scale)
        merged = reference(src, tgt)
    assert (unmerged - merged).abs().max() < 1e-5
    assert (unmerged - tiny_model()(src, tgt)).abs().max() > 1e-2


def test_cross_attention_projections_get_their_update():
    """The attention slices its fused q/k/v weight (project): an update of cross_attn.in_proj alone must
    change the output (a wrapper that only sees calls of the layer would miss it)."""
    model = tiny_model()
    src, tgt = batch()
    base = model(src, tgt).detach()
    add_lora(model, AdapterConfig(type="lora", rank=2, target_modules=["cross_attn.in_proj"]))
    assert all(type(model.get_submodule(f"decoder.layers.{i}.cross_attn")) is LoRAAttention for i in range(2))
    assert isinstance(model.get_submodule("decoder.layers.0.cross_attn.in_proj"), LoRALinear)
    randomize_updates(model)
    with torch.no_grad():
        assert (model(src, tgt) - base).abs().max() > 1e-3


def test_target_modules_that_name_no_linear_layer_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"training.adapter.target_modules: 'q_proj' names no linear layer.*w1"):
        add_lora(tiny_model(), AdapterConfig(type="lora", target_modules=["q_proj"]))
    with pytest.raises(ConfigError, match="training.adapter.rank must be >= 1"):
        AdapterConfig(type="lora", rank=0)


# ---- a LoRA training run ------------------------------------------------------------------------


def lora_config(multi30k_small, out: Path, **adapter) -> dict:
    files = multi30k_small
    return {"data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                     "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"])},
            "training": {"output_dir": str(out), "max_steps": 6, "valid_every": 3, "max_tokens": 1500, "lr": 0.02,
                         "warmup_steps": 2, "device": "cpu", "valid_bleu": False, "best_metric": "loss", "threads": 1,
                         "adapter": {"type": "lora", "rank": 4, "alpha": 8, **adapter}}}


def train(config: dict, tmp: Path, *args: str):
    path = tmp / f"config-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(config))
    return CliRunner().invoke(cli, ["train", str(path), *args])


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, multi30k_small, tmp_path_factory) -> Path:
    """A LoRA run of 6 steps on the tiny model, and the base's weights' hash before it."""
    root = tmp_path_factory.mktemp("lora")
    before = sha(ModelDir(tiny_model_dir).weights_path)
    result = train(lora_config(multi30k_small, root / "run"), root, "--init-from", str(tiny_model_dir))
    assert result.exit_code == 0, result.output
    assert sha(ModelDir(tiny_model_dir).weights_path) == before  # the base is never written
    return root / "run"


def test_a_lora_run_saves_only_adapter_tensors_beside_a_reference_to_its_base(lora_run, tiny_model_dir):
    assert not (lora_run / "model.safetensors").exists()
    weights = [lora_run / ADAPTER_WEIGHTS, lora_run / "train_state" / "model.safetensors",
               *sorted((lora_run / "checkpoints").iterdir())]
    assert len(weights) == 4  # checkpoints at steps 3 and 6
    for path in weights:
        tensors = load_weights(path)
        assert tensors and all(is_lora_key(k) for k in tensors), path
    meta = json.loads((lora_run / ADAPTER_JSON).read_text())
    assert meta["base"]["path"] == str(Path(tiny_model_dir).resolve())
    assert meta["adapter"]["rank"] == 4 and meta["base"]["fingerprint"].startswith("sha256:")
    adapter = read_adapter(lora_run)
    assert len(adapter.modules) == 10 and set(adapter.tensors) == {f"{m}.{p}" for m in adapter.modules
                                                                   for p in ("lora_A", "lora_B")}
    assert any(adapter.tensors[f"{m}.lora_B"].abs().sum() > 0 for m in adapter.modules)  # it trained
    assert json.loads((lora_run / "metadata.json").read_text())["init_from"] == str(Path(tiny_model_dir).resolve())


def test_base_with_adapter_the_run_directory_and_the_merged_model_translate_alike(lora_run, tiny_model_dir, tmp_path):
    with_adapter = Translator.load(tiny_model_dir, device="cpu", adapter=lora_run)
    run_dir = Translator.load(lora_run, device="cpu")  # a run's directory names its base
    out = tmp_path / "merged"
    result = CliRunner().invoke(cli, ["merge-adapter", str(tiny_model_dir), str(lora_run), str(out)])
    assert result.exit_code == 0, result.output
    merged = Translator.load(out, device="cpu")
    base = Translator.load(tiny_model_dir, device="cpu")
    want = with_adapter.translate(SENTENCES, beam=2)
    assert run_dir.translate(SENTENCES, beam=2) == want == merged.translate(SENTENCES, beam=2)
    assert want != base.translate(SENTENCES, beam=2)
    assert set(load_weights(out / "model.safetensors")) == set(load_weights(ModelDir(tiny_model_dir).weights_path))
    # the merged weights compute what base + adapter computes, to 1e-5
    adapter = read_adapter(lora_run)
    unmerged = ModelDir(tiny_model_dir).load("cpu").model
    add_lora(unmerged, adapter.config)
    unmerged.load_state_dict({**unmerged.state_dict(), **adapter.tensors})
    src, tgt = torch.randint(4, 300, (2, 9)), torch.randint(4, 300, (2, 6))
    with torch.no_grad():
        diff = (unmerged.eval()(src, tgt) - ModelDir(out).load("cpu").model(src, tgt)).abs().max()
    assert diff < 1e-5


def test_an_adapter_of_another_base_is_refused_in_one_line(lora_run, tiny_model_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    state = load_weights(other / "model.safetensors")
    name = next(k for k in state if k.endswith("ffn.w1.weight"))
    state[name] = state[name] + 0.01
    save_weights(state, other / "model.safetensors")
    with pytest.raises(AdapterError, match="is an adapter for another base") as e:
        Translator.load(other, device="cpu", adapter=lora_run)
    assert "\n" not in str(e.value)
    result = CliRunner().invoke(cli, ["merge-adapter", str(other), str(lora_run), str(tmp_path / "out")])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "is an adapter for another base" in result.output and not (tmp_path / "out").exists()


def test_lora_needs_a_base_and_a_finished_adapter_is_not_replaced_unasked(lora_run, multi30k_small, tmp_path):
    result = train(lora_config(multi30k_small, tmp_path / "scratch"), tmp_path)
    assert result.exit_code == 1 and "training.adapter: LoRA fine-tunes a trained model" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "scratch").exists()
    base = json.loads((lora_run / ADAPTER_JSON).read_text())["base"]["path"]
    finished = tmp_path / "finished"
    shutil.copytree(lora_run, finished, ignore=shutil.ignore_patterns("train_state"))
    result = train(lora_config(multi30k_small, finished), tmp_path, "--init-from", base)
    assert result.exit_code == 1 and "already holds a trained adapter (adapter.safetensors)" in result.output
    assert sha(finished / ADAPTER_WEIGHTS) == sha(lora_run / ADAPTER_WEIGHTS)


def test_a_resumed_lora_run_ends_as_an_uninterrupted_one(tiny_model_dir, multi30k_small, tmp_path):
    """--resume reloads the base from init_from and the updates from the train state: the same adapter."""
    whole = lora_config(multi30k_small, tmp_path / "whole")
    assert train(whole, tmp_path, "--init-from", str(tiny_model_dir)).exit_code == 0
    halves = lora_config(multi30k_small, tmp_path / "halves")
    halves["training"]["max_steps"] = 3
    assert train(halves, tmp_path, "--init-from", str(tiny_model_dir)).exit_code == 0
    halves["training"]["max_steps"] = 6
    result = train(halves, tmp_path, "--resume")
    assert result.exit_code == 0, result.output
    a, b = load_weights(tmp_path / "whole" / ADAPTER_WEIGHTS), load_weights(tmp_path / "halves" / ADAPTER_WEIGHTS)
    assert set(a) == set(b) and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


# ---- serving ----------------------------------------------------------------------------------


def random_adapter(base_dir: Path, out: Path, seed: int) -> Path:
    """An adapter of base_dir with random updates (rank 2, the feed-forward layers only)."""
    model = ModelDir(base_dir).load("cpu").model
    cfg = AdapterConfig(type="lora", rank=2, alpha=4.0, target_modules=["w1", "w2"])
    add_lora(model, cfg)
    randomize_updates(model, seed)
    write_adapter(out, cfg, lora_tensors(model), base_dir)
    return out


@contextlib.contextmanager
def serving(app):
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


def post(port: int, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/translate", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_the_server_routes_each_request_to_its_adapter(lora_run, tiny_model_dir, tmp_path):
    pytest.importorskip("fastapi")
    from seq2seq.serve.app import create_app

    second = random_adapter(tiny_model_dir, tmp_path / "second", seed=3)
    dirs = {"first": lora_run, "second": second}
    engine = Translator.load(tiny_model_dir, device="cpu")
    before = translated(engine, SENTENCES, beam=2)  # (what the server answers: the text pipeline's output)
    attach_adapters(engine, {name: str(d) for name, d in dirs.items()})
    assert translated(engine, SENTENCES, beam=2) == before  # no adapter: the base exactly
    want = {name: translated(Translator.load(tiny_model_dir, device="cpu", adapter=d), SENTENCES, beam=2)
            for name, d in dirs.items()}
    assert want["first"] != want["second"] != before
    with serving(create_app(engine)) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/health")
        assert json.loads(conn.getresponse().read())["adapters"] == ["first", "second"]
        for name in ("first", "second", None, "second"):
            body = {"texts": SENTENCES, "beam": 2, **({"adapter": name} if name else {})}
            status, answer = post(port, body)
            assert status == 200, answer
            assert [t["text"] for t in answer["translations"]] == (want[name] if name else before), name
        status, answer = post(port, {"text": "A dog.", "adapter": "third"})
        assert status == 422 and answer["error"] == "unknown adapter 'third'; this server's adapters are first, second"
        status, answer = post(port, {"text": "A dog.", "adapter": 3})
        assert status == 422 and "adapter must be a string" in answer["error"]
    with using(engine, "second"):  # the adapters' updates held once, over one copy of the base weights
        assert translated(engine, SENTENCES, beam=2) == want["second"]
    base_weights = {p.data_ptr() for p in Translator.load(tiny_model_dir, device="cpu").model.parameters()}
    assert base_weights  # (a separate copy, only to count)
    served = {p.data_ptr() for p in engine.model.parameters()}
    assert len(served) == len(base_weights)  # the adapters added no parameters: their tensors are plain


def test_serve_adapter_option_and_a_wrong_base(lora_run, tiny_model_dir, tmp_path):
    assert parse_adapter_option("de-med=runs/x") == ("de-med", "runs/x")
    with pytest.raises(ValueError, match="give NAME=DIR"):
        parse_adapter_option("runs/x")
    other = random_adapter(tiny_model_dir, tmp_path / "a", seed=1)
    meta = json.loads((other / ADAPTER_JSON).read_text())
    meta["base"]["fingerprint"] = "sha256:" + "0" * 64
    (other / ADAPTER_JSON).write_text(json.dumps(meta))
    engine = Translator.load(tiny_model_dir, device="cpu")
    with pytest.raises(AdapterError, match="is an adapter for another base"):
        attach_adapters(engine, {"a": str(other)})


def test_seq2seq_serve_attaches_its_adapters_and_refuses_a_bad_one_in_one_line(lora_run, tiny_model_dir, tmp_path,
                                                                               monkeypatch):
    pytest.importorskip("fastapi")
    import seq2seq.serve.app as app_module

    served = []
    monkeypatch.setattr(app_module, "create_app", lambda model, *args, **kwargs: served.append(model))
    monkeypatch.setattr(app_module, "run_server", lambda *args, **kwargs: None)
    second = random_adapter(tiny_model_dir, tmp_path / "second", seed=2)
    result = CliRunner().invoke(cli, ["serve", str(tiny_model_dir), "--adapter", f"med={lora_run}",
                                      "--adapter", f"legal={second}"])
    assert result.exit_code == 0, result.output
    assert served[0].adapters.names() == ["med", "legal"]
    for bad, message in ((f"{lora_run}", "give NAME=DIR"), (f"x={tmp_path}", "is not an adapter directory")):
        result = CliRunner().invoke(cli, ["serve", str(tiny_model_dir), "--adapter", bad])
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert result.exit_code == 1 and len(errors) == 1 and message in errors[0], result.output
    assert len(served) == 1


def test_the_lora_benchmark_runs_at_its_smallest():
    out = run_benchmark("lora.py", "--preset", "tiny", "--steps", 1, "--batch", 2, "--length", 4, "--modes", "ours",
                        "--threads", 1).stdout
    assert "ours" in out and "10/10" in out and "NLLB-200-600M-sized model: 615,073,792 parameters" in out


def test_the_lora_benchmark_serves_adapters_with_their_own_tables_at_its_smallest():
    out = run_benchmark("lora.py", "--preset", "tiny", "--modes", "serve", "--serve-tables", "--threads", 1).stdout
    assert "serving 3 rank-16 adapters with their own embedding tables" in out, out
    assert "outputs equal to the merged models': yes" in out, out


def test_the_lora_domain_benchmark_runs_at_its_smallest(tmp_path):
    argv = ["--work", tmp_path, "--base-steps", 2, "--steps", 2, "--limit", 8, "--tokens", 300, "--vocab", 200]
    out = run_benchmark("lora_domain.py", *argv, "--lora", "4:1e-3", "2:1e-3:w1+w2", "--test").stdout
    table = out.split("recovered\n", 1)[1].split("\n\n")[0].splitlines()
    rows = [re.match(r"(\S+)( \(chosen on val\))?\s+([\d.]+) ", line) for line in table]
    assert [m.group(1) for m in rows] == ["base", "full", "lora-r4-lr1e-3", "lora-r2-lr1e-3-w1-w2"]
    assert all(0.0 <= float(m.group(3)) <= 100.0 for m in rows)
    chosen = [m.group(1) for m in rows if m.group(2)]
    assert len(chosen) == 1 and chosen[0].startswith("lora-")
    assert chosen[0] in out.split("test_2016_flickr (scored once")[1]
    assert (tmp_path / "lora-r2-lr1e-3-w1-w2" / "adapter.json").is_file()
    # a second call reuses every finished run: nothing trained again
    again = run_benchmark("lora_domain.py", *argv, "--lora", "4:1e-3", "2:1e-3:w1+w2").stdout
    assert again.split("recovered\n", 1)[1].strip() == "\n".join(table)


# ---- train_embeddings: the embedding tables train with the updates ----------------------------------


def test_train_embeddings_trains_the_tables_and_the_updates_only():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    names = add_lora(model, AdapterConfig(type="lora", rank=4, alpha=8.0, train_embeddings=True))
    tables = embedding_keys(model)
    assert tables and all(model.get_parameter(k).dim() == 2 and model.get_parameter(k).size(0) == 50 for k in tables)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(tables) | {f"{n}.{part}" for n in names for part in ("lora_A", "lora_B")}
    train_steps(model)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    tied = {k for k in before if any(after[k].data_ptr() == model.get_parameter(t).data_ptr() for t in tables)}
    assert changed == tied and set(tables) <= tied  # the tables (and a tied output) moved; all else bit-identical


def test_a_train_embeddings_run_saves_loads_merges_and_is_served(tiny_model_dir, multi30k_small, tmp_path):
    run = tmp_path / "run"
    result = train(lora_config(multi30k_small, run, train_embeddings=True), tmp_path, "--init-from",
                   str(tiny_model_dir))
    assert result.exit_code == 0, result.output
    adapter = read_adapter(run)
    base_state = load_weights(ModelDir(tiny_model_dir).weights_path)
    tables = json.loads((run / ADAPTER_JSON).read_text())["embeddings"]
    assert tables and set(adapter.tensors) == set(tables) | {f"{m}.{p}" for m in adapter.modules
                                                             for p in ("lora_A", "lora_B")}
    assert all(not torch.equal(adapter.tensors[k], base_state[k]) for k in tables)  # the tables trained
    with_adapter = Translator.load(tiny_model_dir, device="cpu", adapter=run)
    out = tmp_path / "merged"
    result = CliRunner().invoke(cli, ["merge-adapter", str(tiny_model_dir), str(run), str(out)])
    assert result.exit_code == 0, result.output
    merged_state = load_weights(out / "model.safetensors")
    assert all(torch.equal(merged_state[k], adapter.tensors[k]) for k in tables)
    want = with_adapter.translate(SENTENCES, beam=2)
    assert Translator.load(run, device="cpu").translate(SENTENCES, beam=2) == want
    assert Translator.load(out, device="cpu").translate(SENTENCES, beam=2) == want
    # base + LoRA layers + the adapter's tables, unmerged, computes what the merged model computes
    unmerged = ModelDir(tiny_model_dir).load("cpu").model
    add_lora(unmerged, adapter.config)
    unmerged.load_state_dict({**unmerged.state_dict(), **adapter.tensors})
    src, tgt = torch.randint(4, 300, (2, 9)), torch.randint(4, 300, (2, 6))
    with torch.no_grad():
        assert (unmerged.eval()(src, tgt) - ModelDir(out).load("cpu").model(src, tgt)).abs().max() < 1e-5
    # served over the base beside a plain adapter (fp32, packed on CPU): each request gets the merged model's output
    pytest.importorskip("fastapi")
    from seq2seq.serve.app import create_app

    plain = random_adapter(tiny_model_dir, tmp_path / "plain", seed=3)
    dirs = {"emb": run, "plain": plain}
    engine = Translator.load(tiny_model_dir, device="cpu")
    before = translated(engine, SENTENCES, beam=2)
    attach_adapters(engine, {name: str(d) for name, d in dirs.items()})
    assert engine.model.decoder.output is not None  # (the tied output projection's packed copy: set aside for emb)
    want = {"emb": translated(Translator.load(out, device="cpu"), SENTENCES, beam=2),
            "plain": translated(Translator.load(tiny_model_dir, device="cpu", adapter=plain), SENTENCES, beam=2)}
    assert want["emb"] != before and want["plain"] != before
    with serving(create_app(engine)) as port:
        for name in ("emb", None, "plain", "emb", None):
            status, answer = post(port, {"texts": SENTENCES, "beam": 2, **({"adapter": name} if name else {})})
            assert status == 200, answer
            assert [t["text"] for t in answer["translations"]] == (want[name] if name else before), name
    base_weights = {p.data_ptr() for p in Translator.load(tiny_model_dir, device="cpu").model.parameters()}
    assert len({p.data_ptr() for p in engine.model.parameters()}) == len(base_weights)  # the base's tables are back
    # every precision's tied output projection switches with the tables: with the updates zero (the tables
    # alone), the served model computes the merged model's numbers (exactly where it makes the same copy of
    # the tied projection: bf16, int8; to float rounding at fp32, where the packed copy is not made again)
    tables = tmp_path / "tables"
    write_adapter(tables, adapter.config, {k: torch.zeros_like(v) if k.endswith(LORA_B) else v
                                           for k, v in adapter.tensors.items()}, tiny_model_dir)
    for precision in ("fp32", "bf16", "int8"):
        engine = Translator.load(tiny_model_dir, device="cpu", precision=precision)
        base = engine.translate_nbest(SENTENCES, beam=2)
        attach_adapters(engine, {"tables": str(tables), "plain": str(plain)})
        merged = Translator.load(tiny_model_dir, device="cpu", precision=precision, adapter=tables)
        want_tables = merged.translate_nbest(SENTENCES, beam=2)
        assert want_tables != base, precision
        for name in ("tables", None, "plain", "tables"):
            with using(engine, name):
                got = engine.translate_nbest(SENTENCES, beam=2)
            if name == "tables" and precision == "fp32":
                assert [[t.text for t in n] for n in got] == [[t.text for t in n] for n in want_tables]
                assert [t.score for n in got for t in n] == pytest.approx([t.score for n in want_tables for t in n],
                                                                          abs=1e-4)
            elif name != "plain":
                assert got == (want_tables if name else base), (precision, name)
        assert engine.translate_nbest(SENTENCES, beam=2) == base, precision


def test_a_bad_train_embeddings_value_is_refused_in_one_line(tiny_model_dir, multi30k_small, tmp_path):
    with pytest.raises(ConfigError, match="training.adapter.train_embeddings must be true or false"):
        AdapterConfig(type="lora", train_embeddings="yes")  # type: ignore[arg-type]
    result = train(lora_config(multi30k_small, tmp_path / "run", train_embeddings="yes"), tmp_path, "--init-from",
                   str(tiny_model_dir))
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert "train_embeddings" in result.output and not (tmp_path / "run").exists()
