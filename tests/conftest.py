"""Shared fixtures: the real data in ../shared/data, read in place (never copied into the repo)."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
MULTI30K = DATA / "multi30k"


@pytest.fixture(autouse=True)
def one_thread():
    """Tests use tiny tensors: one intra-op thread is fastest, and avoids the 100x slowdowns that
    oversubscribed threads suffer on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def session_cache(tmp_path_factory):
    """Prepared data and trained tokenizers go to this session's cache (SEQ2SEQ_CACHE), shared by its
    tests as runs share the user's, never to the user's ~/.cache."""
    root = tmp_path_factory.mktemp("seq2seq-cache")
    before = os.environ.get("SEQ2SEQ_CACHE")
    os.environ["SEQ2SEQ_CACHE"] = str(root)
    yield root
    if before is None:
        os.environ.pop("SEQ2SEQ_CACHE", None)
    else:
        os.environ["SEQ2SEQ_CACHE"] = before


def require_data(path: Path) -> None:
    """Skip when the shared data is absent (a fresh clone elsewhere); CI sets
    SEQ2SEQ_REQUIRE_DATA=1 so that missing data fails instead of silently skipping."""
    if not path.exists():
        if os.environ.get("SEQ2SEQ_REQUIRE_DATA"):
            pytest.fail(f"{path} not found (SEQ2SEQ_REQUIRE_DATA is set)")
        pytest.skip(f"{path} not found: these tests read ../shared/data beside the project")


def run_script(script: Path, *argv, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a benchmark or recipe script (one CPU thread, the repository as working directory); its result,
    asserted to have exited 0 (the message shows the end of its output)."""
    result = subprocess.run([sys.executable, str(script), *map(str, argv)], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def run_benchmark(script: str, *argv, env: dict | None = None) -> subprocess.CompletedProcess:
    """`run_script` of benchmarks/SCRIPT."""
    return run_script(ROOT / "benchmarks" / script, *argv, env=env)


def head_gz(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="session")
def multi30k_small(tmp_path_factory) -> dict[str, Path]:
    """The first 400 train and 60 val pairs of Multi30K en-de as plain files in a temp dir."""
    require_data(MULTI30K)
    out = tmp_path_factory.mktemp("m30k")
    files = {}
    for split, n in (("train", 400), ("val", 60)):
        for lang in ("en", "de"):
            p = out / f"{split}.{lang}"
            p.write_text("\n".join(head_gz(MULTI30K / f"{split}.{lang}.gz", n)) + "\n", encoding="utf-8")
            files[f"{split}.{lang}"] = p
    return files


@pytest.fixture(scope="session")
def tiny_model_dir(multi30k_small, tmp_path_factory) -> Path:
    """One tiny trained model directory per session (d_model 64, 1 layer, 60 steps, ~20 s):
    checkpoints at steps 30 and 60, max_positions 256. Tests must not modify it (copy it first)."""
    import yaml
    from click.testing import CliRunner

    from seq2seq.cli import cli

    root = tmp_path_factory.mktemp("tiny_model")
    files = multi30k_small
    cfg = {
        "data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                 "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"])},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 64, "heads": 2, "ffn_dim": 128, "layers": 1, "share_embeddings": True,
                  "max_positions": 256},
        "training": {"output_dir": str(root / "model"), "max_steps": 60, "valid_every": 30, "max_tokens": 1500,
                     "lr": 0.003, "warmup_steps": 10, "device": "cpu", "log_every": 20, "valid_bleu": False,
                     "best_metric": "loss", "threads": 1},
        "decoding": {"beam": 4, "max_len_b": 10},
    }
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(config)])
    assert result.exit_code == 0, result.output
    return root / "model"


@pytest.fixture(scope="session")
def term_model(multi30k_small, tmp_path_factory):
    """A tiny model trained with half its training sources annotated (data.terminology.share 0.5), its terms'
    pieces weighted 2 in the loss (the trainer takes the batches' weights). Tests must not modify it."""
    import yaml
    from click.testing import CliRunner

    from seq2seq.cli import cli

    root = tmp_path_factory.mktemp("terms")
    files = multi30k_small
    cfg = {
        "data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                 "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"]),
                 "terminology": {"share": 0.5, "loss_weight": 2.0}},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 64, "heads": 2, "ffn_dim": 128, "layers": 1, "share_embeddings": True},
        "training": {"output_dir": str(root / "model"), "max_steps": 30, "valid_every": 30, "max_tokens": 1500,
                     "lr": 0.003, "warmup_steps": 10, "device": "cpu", "valid_bleu": False, "best_metric": "loss",
                     "threads": 1},
        "decoding": {"beam": 4, "max_len_b": 10},
    }
    (root / "c.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(root / "c.yaml")])
    assert result.exit_code == 0, result.output
    return root / "model"


@pytest.fixture(scope="session")
def m30k_tiny(tmp_path_factory) -> Path:
    """Multi30K as the recipes read it ({train,val,test_2016_flickr}.{en,de,fr}.gz), at its smallest:
    the first 200 train pairs, 8 val and 8 test."""
    require_data(MULTI30K)
    out = tmp_path_factory.mktemp("m30k_tiny")
    for split, n in (("train", 200), ("val", 8), ("test_2016_flickr", 8)):
        for lang in ("en", "de", "fr"):
            with gzip.open(out / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(head_gz(MULTI30K / f"{split}.{lang}.gz", n)) + "\n")
    return out


def translated(engine, texts, **options) -> list[str]:
    """The best output of each text as the front-ends give it (`translate`, `test`, the server): the text
    pipeline's (`seq2seq.translate_lines`: sentences split and cased, looped outputs searched again)."""
    from seq2seq.documents.line_translation import translate_lines

    return [nbest[0].text if nbest else "" for nbest in translate_lines(engine, texts, **options)]


class FakeEngine:
    """A test engine written as `translate_nbest(texts, batch_tokens, first_line, warn, **kw)` (kw: the
    per-input steering lists some input gives, the search options and the `Call` fields set), reached
    through `Engine.run(inputs, call)`, as the documents layer calls an engine. `path`: its model
    directory (none by default: no word lexicon)."""

    path = Path("no-model-directory")

    def run(self, inputs, call, first_line=1, warn=None, skipped=None):
        import dataclasses

        from seq2seq.inference.inputs import STEERING_FIELDS, Call

        fields = {f.name: getattr(call, f.name) for f in dataclasses.fields(Call)
                  if f.name not in ("search", "batch_tokens") and getattr(call, f.name) != f.default}
        steering = {name: [getattr(x, name) for x in inputs] for name in STEERING_FIELDS
                    if any(getattr(x, name) is not None for x in inputs)}  # the fields some input gives
        return self.translate_nbest([x.text for x in inputs], batch_tokens=call.batch_tokens, first_line=first_line,
                                    warn=warn, **steering, **call.search, **fields)
