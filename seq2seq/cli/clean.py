"""`seq2seq clean`: a noisy parallel corpus through the rule filters (seq2seq.data.filters; docs/cleaning.md)."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import click

from seq2seq.cli.common import PROGRESS_OPTION, check_output_paths, log, show_progress, user_errors

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.clean_section import CleanConfig


def load_clean_config(path: str | None, overrides: tuple[str, ...]) -> CleanConfig:
    """The `clean` section of the YAML/JSON file `path` (an experiment config, or a file holding only that
    section), --set clean.KEY=VALUE overrides applied, checked; the defaults without a file."""
    from seq2seq.config.clean_section import CleanConfig
    from seq2seq.config.schema import ConfigError, apply_overrides, from_dict, load_dict

    data = load_dict(path) if path is not None else {"clean": {}}
    if "clean" not in data:
        raise ConfigError(f"config file {path} has no 'clean' section")
    for item in overrides:
        if not item.strip().startswith("clean."):
            raise ConfigError(f"--set {item}: seq2seq clean takes clean.KEY=VALUE overrides")
    section = apply_overrides({"clean": data["clean"] or {}}, list(overrides))["clean"]
    return from_dict(CleanConfig, section, prefix="clean.")


@click.command("clean")
@click.option("--src", "src_path", required=True, type=click.Path(dir_okay=False),
              help="Source side: one sentence a line (.gz read as gzip).")
@click.option("--tgt", "tgt_path", required=True, type=click.Path(dir_okay=False),
              help="Target side, line-aligned with --src.")
@click.option("--src-lang", default=None, metavar="LANG", help="The source's language (e.g. en; default: clean.src_lang).")
@click.option("--tgt-lang", default=None, metavar="LANG", help="The target's language (e.g. de; default: clean.tgt_lang).")
@click.option("--out-src", required=True, type=click.Path(dir_okay=False), help="Where the kept sources go (.gz: gzip).")
@click.option("--out-tgt", required=True, type=click.Path(dir_okay=False), help="Where the kept targets go (.gz: gzip).")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False),
              help="Write the report as JSON: per filter and reason, the pairs removed and examples.")
@click.option("--removed", "removed_path", default=None, type=click.Path(dir_okay=False),
              help="Write every removed pair as a JSON line: its input line, filter, reason, src and tgt.")
@click.option("--config", "config_path", default=None, type=click.Path(dir_okay=False),
              help="A YAML/JSON file with a `clean:` section (filters, order, thresholds; docs/cleaning.md).")
@click.option("--set", "overrides", multiple=True, metavar="clean.KEY=VALUE",
              help="Override a clean setting, e.g. --set clean.ratio.tolerance=2 (repeatable).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes judging pairs [default: the CPU cores, at most 2].")
@PROGRESS_OPTION
@user_errors
def clean(src_path: str, tgt_path: str, src_lang: str | None, tgt_lang: str | None, out_src: str, out_tgt: str,
          report_path: str | None, removed_path: str | None, config_path: str | None, overrides: tuple[str, ...],
          workers: int | None, progress: bool | None) -> None:
    """Remove noisy pairs from a parallel corpus: duplicates, bad lengths and ratios, truncations, HTML and
    boilerplate, differing URLs and numbers, copies, the wrong script or language.

    Reads --src and --tgt (never changing them), writes the kept pairs to --out-src and --out-tgt in input
    order (atomically: a failure leaves neither), and prints what each filter removed.
    """
    from seq2seq.config.schema import to_dict
    from seq2seq.data.filters.corpus import check_input, clean_corpus
    from seq2seq.storage.atomic import write_json_atomic
    from seq2seq.text.lines import count_lines, is_regular_file

    from seq2seq.inference.scoring import register_model_filters

    register_model_filters()
    cfg = load_clean_config(config_path, overrides)
    # (the languages checked again, a code that is not one an error)
    cfg = dataclasses.replace(cfg, src_lang=src_lang or cfg.src_lang, tgt_lang=tgt_lang or cfg.tgt_lang)
    for path in (src_path, tgt_path):
        check_input(path)
    check_output_paths({"--out-src": out_src, "--out-tgt": out_tgt, "--removed": removed_path,
                        "--report": report_path}, [src_path, tgt_path])
    needs_language = [f for f in ("language", "script") if f in cfg.filters]
    for side, key, lang in (("source", "src", cfg.src_lang), ("target", "tgt", cfg.tgt_lang)):
        if lang is None and needs_language:
            log.warning("no %s language (--%s-lang or clean.%s_lang): %s do not judge the %s", side, key, key,
                        " and ".join(needs_language), side)
    workers = workers or min(2, os.cpu_count() or 1)
    bar = show_progress(progress, out_src)
    total = count_lines(src_path) if bar and is_regular_file(src_path) else None
    report = clean_corpus(src_path, tgt_path, out_src, out_tgt, cfg, workers=workers,
                          removed_path=removed_path, progress=bar, total=total)
    if report_path is not None:
        write_json_atomic(report_path, {"src": src_path, "tgt": tgt_path, "out_src": out_src, "out_tgt": out_tgt,
                                        "removed_file": removed_path, "workers": workers, **report.as_json(),
                                        "config": to_dict(cfg)})
    click.echo(report.summary(), err=True)
