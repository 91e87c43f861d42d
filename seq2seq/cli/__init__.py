"""The `seq2seq` command line (click): the group in `app`, one module per command, shared options in
`common`."""

from seq2seq.cli.app import cli, main

__all__ = ["cli", "main"]
