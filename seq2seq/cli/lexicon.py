"""`seq2seq lexicon`: the word lexicon of a model directory, from parallel text (for a model trained or
imported without one: training writes it itself)."""

from __future__ import annotations

import click

from seq2seq.cli.common import user_errors


@click.command("lexicon")
@click.argument("model_dir", type=click.Path(file_okay=False, exists=True))
@click.argument("src_file")
@click.argument("tgt_file")
@user_errors
def lexicon_command(model_dir: str, src_file: str, tgt_file: str) -> None:
    """Write MODEL_DIR/lexicon.tsv from the parallel files SRC_FILE and TGT_FILE (one sentence a line,
    .gz read as gzip): the Dice score of each (source word, target word), which places inline tags and
    non-translatables with the cross-attention (docs/documents.md, "Where a tag goes")."""
    from seq2seq.data.cache import LEXICON_PAIRS
    from seq2seq.data.shards import sample_sentences
    from seq2seq.storage.model_dir import ModelDir
    from seq2seq.text.lexicon import Lexicon
    from seq2seq.text.lines import InputError, read_input_lines

    directory = ModelDir(model_dir)
    if not directory.config_path.is_file():
        raise click.ClickException(f"{model_dir} is not a model directory (it has no {directory.CONFIG})")
    src, tgt = read_input_lines(src_file), read_input_lines(tgt_file)
    if len(src) != len(tgt):
        raise InputError(f"{src_file} has {len(src):,} lines and {tgt_file} {len(tgt):,}; parallel files "
                         "have one sentence a line, the same number of lines")
    if not any(a.strip() and b.strip() for a, b in zip(src, tgt)):
        raise InputError(f"{src_file} and {tgt_file} hold no sentence pair; {directory.lexicon_path} left as it is")
    lexicon = Lexicon.build(sample_sentences([list(zip(src, tgt))], LEXICON_PAIRS))
    directory.write_lexicon(lexicon)
    click.echo(f"{len(lexicon.scores):,} word pairs from {min(len(src), LEXICON_PAIRS):,} sentence pairs -> "
               f"{directory.lexicon_path}")
