"""`seq2seq merge-adapter BASE ADAPTER OUT`: a LoRA adapter merged into its base, as a full model directory."""

from __future__ import annotations

import click

from seq2seq.cli.common import user_errors


@click.command("merge-adapter")
@click.argument("base", type=click.Path(file_okay=False, exists=True))
@click.argument("adapter", type=click.Path(file_okay=False, exists=True))
@click.argument("out", type=click.Path(file_okay=False))
@user_errors
def merge_adapter(base: str, adapter: str, out: str) -> None:
    """Write OUT, a model directory of BASE with the LoRA adapter in ADAPTER (a `training.adapter` run's
    directory) merged into its weights: it translates as BASE with ADAPTER does, as fast as BASE, and
    exports (`seq2seq export`) like any model. ADAPTER trained on other weights than BASE's is refused;
    OUT must not exist (it is written whole, or not at all)."""
    from seq2seq.adapters.merge import write_merged

    path = write_merged(base, adapter, out)
    click.echo(f"wrote {path} ({base} + {adapter})", err=True)
