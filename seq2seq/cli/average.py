"""`seq2seq average`: the mean of a model directory's last checkpoints."""

from __future__ import annotations

from pathlib import Path

import click

from seq2seq.cli.common import user_errors


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
    from seq2seq.storage import files as ckpt

    directory = Path(model_dir)
    ckpt_dir = directory / "checkpoints"

    def step(p: Path) -> int:
        tail = p.stem.removeprefix("step_")
        return int(tail) if tail.isdigit() else -1

    paths = sorted((p for p in ckpt_dir.glob("step_*.safetensors") if step(p) >= 0), key=step)
    if not paths:
        raise ckpt.CheckpointError(f"no checkpoints (step_N.safetensors) in {ckpt_dir}")
    if last is not None:
        if last > len(paths):
            raise ckpt.CheckpointError(f"--last {last}: {ckpt_dir} holds only {len(paths)} checkpoint(s)")
        paths = paths[-last:]
    output = Path(output_path) if output_path else directory / "model.avg.safetensors"
    if output.exists() and not force:
        raise click.ClickException(f"{output} exists; pass --force to replace it, or -o to write elsewhere")
    state = ckpt.average_checkpoints(paths)
    if (directory / ckpt.CONFIG).is_file():  # refuse checkpoints that do not fit the model config
        from seq2seq.config.schema import ConfigError, from_dict, load_dict
        from seq2seq.training.experiment import Config, build_model

        try:
            cfg = from_dict(Config, load_dict(directory / ckpt.CONFIG))
        except ConfigError as e:
            raise ckpt.CheckpointError(f"{directory / ckpt.CONFIG}: {e}") from None
        ckpt.load_into(build_model(cfg), state, paths[-1])
    ckpt.save_weights(state, output)
    click.echo(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {output}")

