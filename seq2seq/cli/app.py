"""The `seq2seq` command group: every subcommand, one module each.

Every user-fixable problem (bad config key, bad data, bad model directory) ends as one readable
line on stderr and exit code 1, never a traceback from deep inside torch.
"""

from __future__ import annotations

import click

from seq2seq import __version__
from seq2seq.cli.adapter import merge_adapter
from seq2seq.cli.average import average
from seq2seq.cli.clean import clean
from seq2seq.cli.common import setup_logging
from seq2seq.cli.deploy import export_command, import_hf_command
from seq2seq.cli.evaluate import evaluate, test_command
from seq2seq.cli.lexicon import lexicon_command
from seq2seq.cli.media import caption, transcribe
from seq2seq.cli.score import score
from seq2seq.cli.serve import serve
from seq2seq.cli.synthetic import back_translate, distill
from seq2seq.cli.train import config_command, quickstart, train
from seq2seq.cli.translate import translate
from seq2seq.cli.vocabulary import add_vocab


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="seq2seq")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """seq2seq: train, translate with and evaluate encoder-decoder Transformers."""
    setup_logging(verbose)



for command in (train, config_command, quickstart, translate, evaluate, test_command, average, caption, transcribe,
                serve, export_command, import_hf_command, back_translate, distill, score, clean, merge_adapter,
                add_vocab, lexicon_command):
    cli.add_command(command)


def main() -> None:
    cli()
