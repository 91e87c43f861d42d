"""`seq2seq add-vocab BASE OUT --new-lang CODE[=RELATED] --new-piece PIECE`: new language codes and pieces
for a pretrained model directory, before fine-tuning it (seq2seq.training.new_vocabulary)."""

from __future__ import annotations

import click

from seq2seq.cli.common import user_errors


@click.command("add-vocab")
@click.argument("base", type=click.Path(file_okay=False, exists=True))
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--new-lang", "languages", multiple=True, metavar="CODE[=RELATED]",
              help="A language code to add (repeatable), e.g. xho_Latn=zul_Latn: its tag's rows start as a copy of "
                   "RELATED's (one of BASE's languages); without =RELATED, as the mean of BASE's language-code rows.")
@click.option("--new-piece", "pieces", multiple=True, metavar="PIECE",
              help="A piece to add (repeatable), kept whole wherever its text occurs; ▁ marks a word start "
                   "(▁umuntu). Its rows start as the mean of the rows of the pieces BASE's tokenizer writes it with.")
@user_errors
def add_vocab(base: str, out: str, languages: tuple[str, ...], pieces: tuple[str, ...]) -> None:
    """Write OUT, a model directory of BASE with new language codes and pieces: new ids after BASE's (whose
    rows stay bit-identical), in the tokenizer(s), the config (data.languages, the vocabulary sizes) and every
    vocabulary-indexed weight. Then fine-tune it: `seq2seq train CONFIG --init-from OUT`. OUT's
    metadata.json records what was added (added_vocabulary). OUT must not exist."""
    from seq2seq.training.new_vocabulary import NewLanguage, extend_model_dir

    record = extend_model_dir(base, out, [NewLanguage.parse(text) for text in languages], list(pieces))
    click.echo(f"wrote {out} ({base} + {len(record['languages'])} language codes, {len(record['pieces'])} pieces)",
               err=True)
