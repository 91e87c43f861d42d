"""`seq2seq export` and `seq2seq import-hf`: a model directory for the engines users deploy with, and
existing Hugging Face weights as a model directory; plus `translate --engine`'s and `serve --engine`'s
choice of engine (`export_loader`: the option as `load_engine`'s `export`).

    seq2seq export runs/mine --to ctranslate2 [OUT] [--quantize int8]   # OUT: runs/mine/ctranslate2
    seq2seq export runs/mine --to hf [OUT]                              # OUT: runs/mine/hf
    seq2seq import-hf HF_DIR OUT_MODEL_DIR
    seq2seq translate runs/mine --engine ctranslate2 [--engine-dir OUT]
    seq2seq serve runs/mine --engine ctranslate2 [--engine-dir OUT]

The work is done by `seq2seq.deploy` (ctranslate2, hf, hf_import, engine); see docs/deployment.md.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import click

from seq2seq.cli.common import user_errors

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.cli.common import Languages
    from seq2seq.config.model_section import ModelConfig
    from seq2seq.inference.generator import ExportLoader
    from seq2seq.inference.translator import EnsembleKeywords

TARGETS = ("ctranslate2", "hf")
DEFAULT_SUBDIR = {"ctranslate2": "ctranslate2", "hf": "hf"}


def export_errors(fn: Callable) -> Callable:
    """ExportError (and the engines' ValueErrors) as `error: ...` and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from seq2seq.deploy.staging import ExportError

        try:
            return fn(*args, **kwargs)
        except ExportError as e:
            raise click.ClickException(str(e)) from None

    return wrapper


def _quiet_transformers() -> None:
    try:
        import transformers
    except ImportError:
        return
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


@click.command("export")
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.argument("out_dir", required=False, type=click.Path(file_okay=False))
@click.option("--to", "target", type=click.Choice(TARGETS), required=True,
              help="ctranslate2: a CTranslate2 model; hf: a Hugging Face transformers model directory.")
@click.option("--quantize", type=click.Choice(["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                                               "float16", "bfloat16"]),
              default=None, help="CTranslate2 weight quantization (default: fp32).")
@click.option("--weights", type=click.Path(dir_okay=False), default=None,
              help="Export these weights instead of MODEL_DIR/model.safetensors (e.g. from `seq2seq average`).")
@click.option("--force", is_flag=True, help="Replace OUT_DIR if it holds an earlier export.")
@user_errors
@export_errors
def export_command(model_dir: str, out_dir: str | None, target: str, quantize: str | None, weights: str | None,
                   force: bool) -> None:
    """Write MODEL_DIR for another engine, with its SentencePiece model(s).

    OUT_DIR defaults to MODEL_DIR/ctranslate2 or MODEL_DIR/hf. `--to ctranslate2` is what
    `seq2seq translate MODEL_DIR --engine ctranslate2` uses; `--to hf` gives a directory that
    transformers' AutoModelForSeq2SeqLM and AutoTokenizer load (MarianMTModel for post-norm models,
    BlenderbotForConditionalGeneration for pre-norm ones), computing the same logits; a model with a
    transformers backbone (model.encoder.type hf) becomes a VisionEncoderDecoderModel or
    SpeechEncoderDecoderModel with its preprocessor_config.json. A model imported from M2M100 /
    NLLB-200 / mBART-50 is written back as that architecture with its tokenizer files (`--to
    ctranslate2`: CTranslate2's converter of it, translated with target_prefix the language code).
    """
    from seq2seq.deploy.ctranslate2 import export_ctranslate2
    from seq2seq.deploy.hf import export_hf

    out = Path(out_dir) if out_dir else Path(model_dir) / DEFAULT_SUBDIR[target]
    if weights and out.resolve() in Path(weights).resolve().parents:  # OUT_DIR is replaced as a whole
        raise click.ClickException(f"{out} holds the weights being converted ({weights}); "
                                   "choose another output directory")
    if target == "ctranslate2" and _is_family_model(model_dir):  # imported M2M100 / NLLB / mBART
        from seq2seq.deploy.fairseq_export import export_family_ctranslate2 as export_ctranslate2
    if target == "ctranslate2":
        path = export_ctranslate2(model_dir, out, quantize=quantize, weights=weights, force=force)
    else:
        if quantize:
            raise click.UsageError("--quantize is for --to ctranslate2")
        _quiet_transformers()
        if _has_backbone(model_dir):  # model.encoder.type hf: a Vision/SpeechEncoderDecoderModel
            from seq2seq.deploy.hf_encoder_decoder import export_encoder_decoder as export_hf
        elif _is_family_model(model_dir):  # imported M2M100 / NLLB / mBART: as that architecture
            from seq2seq.deploy.fairseq_export import export_family_hf as export_hf
        path = export_hf(model_dir, out, weights=weights, force=force)
    click.echo(f"exported {model_dir} -> {path} ({target}{', ' + quantize if quantize else ''})")


def _model_config(model_dir: str) -> ModelConfig | None:
    """MODEL_DIR's model config, None where there is no config.yaml (the exporter says so)."""
    from seq2seq.storage.model_dir import ModelDir

    directory = ModelDir(model_dir)
    return directory.config().model if directory.config_path.is_file() else None


def _has_backbone(model_dir: str) -> bool:
    """Does MODEL_DIR's config name a transformers backbone (`model.encoder.type: hf`)?"""
    m = _model_config(model_dir)
    return m is not None and m.encoder.type == "hf"


def _is_family_model(model_dir: str) -> bool:
    """Has MODEL_DIR the options of an imported M2M100 / NLLB / mBART model (`is_family_model`)?"""
    from seq2seq.deploy.tensors import is_family_model

    m = _model_config(model_dir)
    return m is not None and is_family_model(m)


@click.command("import-hf")
@click.argument("hf_dir", type=click.Path(file_okay=False, exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Replace OUT_DIR if it holds an earlier export or import.")
@user_errors
@export_errors
def import_hf_command(hf_dir: str, out_dir: str, force: bool) -> None:
    """Make a model directory from a Hugging Face MarianMTModel (or BlenderbotForConditionalGeneration)
    directory: the same logits. Needs its MarianTokenizer files (source.spm, target.spm, vocab.json)
    and weights in safetensors. A vocabulary in another order than the SentencePiece models' own
    (Helsinki-NLP opus-mt) is re-indexed onto seq2seq's ids; one written by `seq2seq export --to hf`
    is kept as it is. Fine-tune the result with `seq2seq train CONFIG --init-from OUT_DIR`."""
    import json

    from seq2seq.deploy.hf_import import import_hf

    _quiet_transformers()
    path = import_hf(hf_dir, out_dir, force=force)
    meta = json.loads((Path(path) / "metadata.json").read_text(encoding="utf-8"))
    note = "vocabulary re-indexed; " if "hf_vocabulary" in meta else ""
    click.echo(f"imported {hf_dir} -> {path} ({note}translate with: seq2seq translate {path})")


def engine_options(fn: Callable) -> Callable:
    """--engine and --engine-dir: which engine decodes (`translate`, `serve`)."""
    fn = click.option("--engine-dir", type=click.Path(file_okay=False), default=None,
                      help="The CTranslate2 export to use (default: MODEL_DIR/ctranslate2).")(fn)
    return click.option("--engine", type=click.Choice(["torch", "ctranslate2"]), default="torch", show_default=True,
                        help="ctranslate2: run the model's CTranslate2 export (see `seq2seq export`, "
                             "docs/deployment.md).")(fn)


def check_engine_choice(engine: str, engine_dir: str | None, model_dirs: Sequence[str], ensemble: EnsembleKeywords,
                        language: Languages | None = None, weights: str | None = None) -> None:
    """UsageError for what the chosen engine cannot run: --engine-dir without ctranslate2, and with it an
    ensemble, a target language or --weights."""
    if engine == "torch":
        if engine_dir:
            raise click.UsageError("--engine-dir is for --engine ctranslate2")
        return
    if len(model_dirs) > 1 or ensemble.get("last_checkpoints"):
        raise click.UsageError("--engine ctranslate2 decodes one model; ensembles run with --engine torch")
    if language:
        raise click.UsageError("--tgt-lang runs with --engine torch (the CTranslate2 engine has no language tags)")
    if weights:
        raise click.UsageError("--weights is for the torch engine; export those weights instead "
                               "(seq2seq export MODEL_DIR --to ctranslate2 --weights FILE)")


def export_loader(engine: str) -> ExportLoader | None:
    """`load_engine`'s `export` for --engine: None for torch, the CTranslate2 export's loader for ctranslate2."""
    if engine == "torch":
        return None
    from seq2seq.deploy.engine import CTranslate2Translator

    return CTranslate2Translator.from_model_dir
