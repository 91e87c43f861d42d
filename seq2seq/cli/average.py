"""`seq2seq average`: the mean of a model directory's last checkpoints."""

from __future__ import annotations

from pathlib import Path

import click

from seq2seq.cli.common import check_output_path, user_errors


@click.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--last", type=click.IntRange(min=1), default=None,
              help="Average the last N checkpoints of MODEL_DIR/checkpoints (default: all there).")
@click.option("-o", "--output", "output_path", default=None,
              help="Output weights (default: MODEL_DIR/model.avg.safetensors).")
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
@user_errors
def average(model_dir: str, last: int | None, output_path: str | None, force: bool) -> None:
    """Average the weights of MODEL_DIR's last checkpoints into one safetensors file.

    Use the result with `seq2seq translate/test MODEL_DIR --weights FILE`.
    """
    from seq2seq.storage import CheckpointError
    from seq2seq.storage.model_dir import ModelDir
    from seq2seq.storage.weights import save_weights

    directory = ModelDir(model_dir)
    if not directory.path.is_dir():
        raise CheckpointError(f"model directory not found: {model_dir}")
    available = len(directory.checkpoints())
    if last is not None and available and last > available:
        raise CheckpointError(f"--last {last}: {directory.checkpoint_dir} holds only {available} checkpoint(s)")
    output = Path(output_path) if output_path else directory.path / "model.avg.safetensors"
    check_output_path(str(output), [*directory.checkpoints(), directory.config_path])  # what it reads
    if available and output.exists() and not force:  # (with none, `average` says so first)
        raise click.ClickException(f"{output} exists; pass --force to replace it, or -o to write elsewhere")
    state, paths = directory.average(last)  # checked against config.yaml when there is one
    save_weights(state, output)
    click.echo(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {output}")

