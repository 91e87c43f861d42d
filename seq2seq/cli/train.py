"""`seq2seq train`, `seq2seq config` and `seq2seq quickstart`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from seq2seq.cli.common import user_errors

if TYPE_CHECKING:
    from seq2seq.storage.model_dir import ModelDir


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a config value, e.g. --set training.lr=3e-4 (repeatable).")
@click.option("--resume", is_flag=True, help="Continue the run in training.output_dir exactly where it stopped.")
@click.option("--output-dir", "-o", default=None, help="Shortcut for --set training.output_dir=DIR.")
@click.option("--init-from", "init_from", default=None, type=click.Path(file_okay=False), metavar="MODEL_DIR",
              help="Fine-tune: start from MODEL_DIR's weights and tokenizer (fresh optimizer and schedule).")
@click.option("--overwrite", is_flag=True,
              help="Train into an output directory that already holds a finished model, replacing it.")
@user_errors
def train(config: str, overrides: tuple[str, ...], resume: bool, output_dir: str | None,
          init_from: str | None, overwrite: bool) -> None:
    """Train a model from a YAML CONFIG (see configs/example.yaml) into the model directory
    training.output_dir, the directory `translate`, `test` and `average` take."""
    from seq2seq.training.experiment import run_training
    from seq2seq.config import load_config

    given = list(overrides) + ([f"training.output_dir={output_dir}"] if output_dir else [])
    cfg = load_config(config, given)
    result = run_training(cfg, resume=resume, config_source=config, init_from=init_from, overwrite=overwrite)
    click.echo(f"model directory: {result['out_dir']} (best {cfg.training.best_metric} "
               f"{result['best'] if result['best'] is not None else float('nan'):.2f} at step {result['best_step']})")


@click.command("config")
@click.argument("config", required=False, type=click.Path())
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a config value, as for `seq2seq train` (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@user_errors
def config_command(config: str | None, overrides: tuple[str, ...], as_json: bool) -> None:
    """Print the full resolved config: every key of every section, defaults filled in.

    CONFIG (optional: without it, the defaults) is read and checked as `seq2seq train` reads it,
    --set overrides applied; `model.encoder.type` decides which encoder keys appear. The output is
    itself a valid config file. CONFIG may be a model directory: its config.yaml, whose `decoding`
    section is the default decoding of translate, test, caption, transcribe and serve, with a
    comment above it saying where those values came from (a recipe's choice on validation data,
    recorded in metadata.json, or training's config).
    """
    from seq2seq.config import to_dict
    from seq2seq.config.root import config_yaml, load_config
    from seq2seq.storage import CheckpointError
    from seq2seq.storage.model_dir import ModelDir

    model_dir = ModelDir(config) if config is not None and Path(config).is_dir() else None
    if model_dir is not None and model_dir.missing(weights=False):
        raise CheckpointError(f"{model_dir.path} is not a model directory: {model_dir.CONFIG} is missing")
    cfg = load_config(model_dir.config_path if model_dir else config, list(overrides))
    if as_json:
        click.echo(json.dumps(to_dict(cfg), indent=2))
        return
    source = model_dir.config_path if model_dir else config or "the defaults"
    click.echo(f"# {source}{' + ' + ' '.join(overrides) if overrides else ''}: every key, defaults filled in")
    text = config_yaml(cfg)
    if model_dir is not None:
        text = text.replace("\ndecoding:\n", f"\n{decoding_provenance(model_dir)}\ndecoding:\n", 1)
    click.echo(text, nl=False)


def decoding_provenance(model_dir: ModelDir) -> str:
    """Comment lines for above a model directory's `decoding` section: who chose which of its values
    on what data (`ModelDir.set_decoding`), and any that config.yaml no longer holds."""
    choice = model_dir.decoding_choice()
    if choice is None:
        return "# decoding: the defaults of decoding commands, as training's config set them"
    values = ", ".join(f"{key} {json.dumps(value)}" for key, value in choice["values"].items())
    lines = [f"# decoding: the defaults of decoding commands; {values} set by {choice['chosen_by']} "
             f"from its choice on {choice['chosen_on']}"]
    if choice.get("weights"):
        lines.append(f"# with the weights {choice['weights']}")
    decoding = model_dir.config().decoding
    changed = [key for key, value in choice["values"].items() if getattr(decoding, key, None) != value]
    if changed:
        lines.append(f"# (config.yaml has changed since: {', '.join(changed)})")
    return "\n".join(lines)


@click.command()
@click.option("--output-dir", "-o", default="runs/quickstart", show_default=True, help="Where data and model go.")
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Training budget in wall-clock minutes [default: 3.5, or on a slow machine as long as the "
                   "quickstart's quality needs, at most 7.25; said at the start].")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, mps.")
@click.option("--seed", default=1, show_default=True, help="Seed for the corpus and the training run.")
@click.option("--overwrite", is_flag=True, help="Replace an existing OUTPUT_DIR/model.")
@user_errors
def quickstart(output_dir: str, minutes: float | None, device: str, seed: int, overwrite: bool) -> None:
    """Generate a small English->German corpus, train on it, report held-out BLEU and chrF.

    No download needed: the corpus comes from a seeded grammar with agreement, verb-final
    subordinate clauses and numbers written as words. Leaves the corpus in OUTPUT_DIR/data and
    a model directory, OUTPUT_DIR/model, that `seq2seq translate` loads.
    """
    from seq2seq.training.quickstart import run_quickstart

    run_quickstart(output_dir, minutes=minutes, device=device, seed=seed, overwrite=overwrite)

