"""The `seq2seq` command line: click subcommands wiring the library together."""

from __future__ import annotations

import logging
import sys

import click

from . import __version__


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="seq2seq")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """seq2seq: train, translate with and evaluate encoder-decoder Transformers."""
    _setup_logging(verbose)


def main() -> None:
    cli()
