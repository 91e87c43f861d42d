"""`seq2seq back-translate` and `seq2seq distill`: a text file translated into a parallel corpus that
training reads as a `data.corpora` entry (seq2seq.corpora.translation; docs/back-translation.md)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click

from seq2seq.cli.common import (
    PROGRESS_OPTION, TGT_LANG_OPTION, Options, check_output_path, ensemble_options, ensemble_settings,
    loading_errors, model_files, model_options, pop_option, pop_required, search_options, search_overrides,
    show_progress, user_errors,
)
from seq2seq.corpora.translation import (
    CorpusEntry,
    CORPUS_FILE, METHODS, PARTIAL, SRC_FILE, STATE_FILE, SUMMARY_FILE, TGT_FILE,
)
from seq2seq.text.lines import check_input_file, count_lines, is_regular_file

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.root import Config
    from seq2seq.corpora.noise import WordNoise
    from seq2seq.inference.translator import Translator
    from seq2seq.config.tokenizer_section import TokenizerConfig

SAMPLING = ("topk", "topp", "temperature")
OUTPUT_FILES = (SRC_FILE, TGT_FILE, SRC_FILE + PARTIAL, TGT_FILE + PARTIAL, STATE_FILE, SUMMARY_FILE, CORPUS_FILE)


def corpus_options(fn: Callable) -> Callable:
    """The options both commands share: input, output directory, filters, and how the model is loaded
    and searched (the shared decorators of seq2seq.cli.common)."""
    decorators: list[Callable[[Callable], Callable]] = [
        click.option("-i", "--input", "input_path", required=True, type=click.Path(dir_okay=False),
                     help="The text file to translate, one sentence a line (.gz read as gzip)."),
        click.option("-o", "--output-dir", "output_dir", required=True, type=click.Path(file_okay=False),
                     help=f"Where the corpus goes: {SRC_FILE}, {TGT_FILE}, {CORPUS_FILE}, summary.json. Run the same "
                          "command again to continue a run that was stopped."),
        click.option("--max-len", type=click.IntRange(min=1), default=None,
                     help="Skip input lines with more source tokens than this (default: the model's limit)."),
        click.option("--max-ratio", type=click.FloatRange(min=1.0), default=3.0, show_default=True,
                     help="Drop pairs whose longer side has more than this many times the subword tokens of the "
                          "shorter (sides of at most 5 tokens are exempt), as training's data.max_ratio."),
        search_options(nbest=None),
        TGT_LANG_OPTION,
        ensemble_options,
        PROGRESS_OPTION,
        model_options,
    ]
    for option in reversed(decorators):
        fn = option(fn)
    return fn


def _run(kind: str, model_dir: tuple[str, ...], input_path: str, output_dir: str, method: str,
         corpus_of: Callable[[Translator], CorpusEntry], kw: Options, noise: WordNoise | None = None,
         inputs: tuple[str, ...] = ()) -> tuple[Translator, dict[str, object]]:
    """Load the model(s), check the options, translate; returns (translator, summary).
    corpus_of(translator): what corpus.yaml says besides the files; it may refuse (LanguageError).
    inputs: the command's other input files, which no file written into output_dir may be."""
    from seq2seq.config.data_section import CorpusConfig
    from seq2seq.corpora.noise import WordNoise
    from seq2seq.corpora.translation import CorpusJob, translate_corpus
    from seq2seq.corpora.fingerprint import model_fingerprint
    from seq2seq.text.languages import LanguageError
    from seq2seq.text.lines import warn

    ensemble = ensemble_settings(kw)
    tgt_lang = pop_option(kw, "tgt_lang", str)
    device, precision = pop_required(kw, "device", str), pop_required(kw, "precision", str)
    weights = pop_option(kw, "weights", str)
    batch_tokens, chunk_lines = pop_required(kw, "batch_tokens", int), pop_required(kw, "chunk_lines", int)
    progress = pop_option(kw, "progress", bool)
    max_len, max_ratio = pop_option(kw, "max_len", int), pop_required(kw, "max_ratio", float)
    search = search_overrides(kw)
    seed = search.pop("seed", None)
    seed = 1 if seed is None else seed
    if search.pop("sample", False):
        raise click.UsageError("--sample: choose sampling with --method sample" if kind == "back" else
                               "--sample: distillation translates with beam search (or --greedy)")
    given = [f"--{k}" for k in SAMPLING if k in search]
    if given and method != "sample":
        raise click.UsageError(f"{', '.join(given)}: only with --method sample")
    check_input_file(input_path)
    if Path(output_dir).is_dir():  # (a new one holds no input)
        read = [input_path, *inputs, *model_files(model_dir, weights)]
        for name in OUTPUT_FILES:
            check_output_path(Path(output_dir) / name, read, "-o")
    from seq2seq.inference.generator import load_engine
    from seq2seq.inference.inputs import Call
    from seq2seq.inference.translator import Translator

    with loading_errors(model_dir, device):
        translator = load_engine(model_dir, device, precision, weights, decodes=Translator,
                                 call=Call(tgt_lang=tgt_lang), **ensemble)
    try:
        corpus = corpus_of(translator)
        CorpusConfig(train_src=SRC_FILE, train_tgt=TGT_FILE, **corpus).check("the corpus entry")
        job = CorpusJob(input=input_path, output_dir=output_dir, direction=kind, method=method, search=dict(search),
                        seed=seed, chunk_lines=chunk_lines, batch_tokens=batch_tokens, max_len=max_len,
                        max_ratio=max_ratio, tgt_lang=tgt_lang, corpus=corpus,
                        noise=noise if noise is not None else WordNoise())
        translator.search_config(**job.search_options())
    except (LanguageError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    models = model_fingerprint(model_dir, weights, ensemble.get("last_checkpoints"))
    show_bar = show_progress(progress, output_dir)
    total = count_lines(input_path) if show_bar and is_regular_file(input_path) else None
    summary = translate_corpus(translator, job, models, progress=show_bar, total=total, warn=warn)
    counts = summary["counts"]
    click.echo(f"{counts['pairs']:,} pairs of {counts['input_lines']:,} lines in {output_dir} "
               f"(its data.corpora entry: {Path(output_dir) / CORPUS_FILE})", err=True)
    return translator, summary


def _check_languages(translator: Translator, lang: str | None, flag: str) -> None:
    """LanguageError when a member that names its source languages does not translate from `lang`."""
    from seq2seq.text.languages import check_source_language

    if lang is None:
        return
    for member in translator.members:
        check_source_language(member.config, lang, str(member.path), flag)


def _synthetic_language(translator: Translator, tgt_lang: str | None) -> str | None:
    """The language the reverse model writes: --tgt-lang, else its one target language if it names one."""
    if tgt_lang:
        return tgt_lang
    named = {c.tgt_lang for c in translator.config.data.corpora if c.tgt_lang}
    return named.pop() if len(named) == 1 else None


@click.command("back-translate")
@click.argument("model_dir", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--method", type=click.Choice(METHODS), default="beam", show_default=True,
              help="beam: beam search (--beam, default 5); sample: sampling (--topk, --topp, --temperature; "
                   "unrestricted by default); noised-beam: beam output with words deleted (p 0.1), replaced by "
                   "--filler (p 0.1) and swapped at most 3 positions (Edunov et al. 2018).")
@click.option("--tag", is_flag=False, flag_value="<BT>", default=None, metavar="[TAG]",
              help="Mark the corpus's sources with a reserved piece in its data.corpora entry (--tag alone: <BT>; "
                   "Caswell et al. 2019).")
@click.option("--mono-lang", default=None, metavar="LANG",
              help="The language of the monolingual file; refused when the reverse model does not translate from it.")
@click.option("--weight", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="The corpus's sampling weight in its data.corpora entry.")
@click.option("--noise", "noise_rates", default="0.1,0.1,3", show_default=True, metavar="DELETE,BLANK,SHIFT",
              help="noised-beam: word deletion and filler probabilities, and the largest swap distance.")
@click.option("--filler", default="<BLANK>", show_default=True,
              help="noised-beam: the word that replaces a blanked word (train the forward model with "
                   "data.reserved: [\"<BLANK>\"] to keep it one piece).")
@corpus_options
@user_errors
def back_translate(model_dir: tuple[str, ...], input_path: str, output_dir: str, method: str, tag: str | None,
                   mono_lang: str | None, weight: float, noise_rates: str, filler: str, **kw: object) -> None:
    """Back-translate a monolingual file with REVERSE MODEL_DIR (several: an ensemble) into a parallel
    corpus: synthetic source = the model's translation, target = the monolingual line.

    Streams the input CHUNK_LINES lines at a time and saves each chunk before the next: a stopped run
    (Ctrl+C, a kill, a crash) continues where it stopped when the same command is run again, and
    sampling and noise are seeded per chunk from --seed, so the result is the same. Empty, copied and
    badly length-ratioed translations, and empty or overlong input lines, are dropped from both sides
    and counted. OUTPUT_DIR/corpus.yaml is the data.corpora entry to train the forward model with.
    """
    from seq2seq.corpora.noise import WordNoise

    try:
        delete, blank, shift = noise_rates.split(",")
        noise = WordNoise(float(delete), float(blank), int(shift), filler)
    except ValueError as e:
        raise click.UsageError(f"--noise {noise_rates} --filler {filler}: {e} (give DELETE,BLANK,SHIFT, e.g. "
                               "0.1,0.1,3, and a one-word filler)") from None
    given = kw.get("tgt_lang")
    tgt_lang = given if isinstance(given, str) else None  # (--tgt-lang: a string or unset)

    def corpus_of(translator: Translator) -> CorpusEntry:
        _check_languages(translator, mono_lang, "--mono-lang")
        synthetic = _synthetic_language(translator, tgt_lang)
        entry: CorpusEntry = {"src_lang": synthetic, "tgt_lang": mono_lang} if synthetic and mono_lang else {}
        entry.update({"weight": weight, "tag": tag})
        return entry

    _run("back", model_dir, input_path, output_dir, method, corpus_of, kw, noise)


@click.command("distill")
@click.argument("model_dir", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--src-lang", default=None, metavar="LANG",
              help="The language of the input file; refused when the teacher does not translate from it.")
@click.option("--student-config", type=click.Path(dir_okay=False), default=None, metavar="STUDENT.yaml",
              help="The student's training config (e.g. configs/student_fast.yaml): refused when it names another "
                   "tokenizer than the teacher's; the command that trains it is printed at the end.")
@click.option("--references", type=click.Path(dir_okay=False), default=None, metavar="TGT",
              help="With --student-config: the real translations of the input, line by line; the printed command "
                   "trains the student on the teacher's translations and these real pairs together (Gordon & Duh "
                   "2019; recipes/distillation/README.md).")
@corpus_options
@user_errors
def distill(model_dir: tuple[str, ...], input_path: str, output_dir: str, src_lang: str | None,
            student_config: str | None, references: str | None, **kw: object) -> None:
    """Sequence-level knowledge distillation (Kim & Rush 2016): translate the training sources with
    TEACHER MODEL_DIR (several: an ensemble) by beam search (--beam, default 5), into a corpus of
    (source line, teacher translation) pairs to train a smaller, faster student on.

    Streams, resumes, filters and reports as `seq2seq back-translate` does. With --student-config the
    student's config is checked first (it must use the teacher's tokenizer) and the `seq2seq train`
    command that trains it on OUTPUT_DIR (and, with --references, on the real pairs too) is printed
    at the end.
    """
    from seq2seq.config import load_config

    student = None
    if student_config:
        student = load_config(student_config)
        check_student_tokenizer(student.tokenizer, student_config, model_dir[0], output_dir)
    if references is not None:
        check_references(input_path, references, student_config)
    given = kw.get("tgt_lang")
    tgt_lang = given if isinstance(given, str) else None  # (--tgt-lang: a string or unset)

    def corpus_of(translator: Translator) -> CorpusEntry:
        _check_languages(translator, src_lang, "--src-lang")
        target = _synthetic_language(translator, tgt_lang)
        return {"src_lang": src_lang, "tgt_lang": target} if src_lang and target else {}

    translator, summary = _run("distill", model_dir, input_path, output_dir, "beam", corpus_of, kw,
                               inputs=tuple(p for p in (references, student_config) if p))
    if student is not None and student_config:  # (both or neither)
        real = (input_path, references) if references else None
        click.echo("train the student with:\n  " + student_command(student, student_config, model_dir[0], output_dir,
                                                                   real), err=True)


def check_references(input_path: str, references: str, student_config: str | None) -> None:
    """A one-line error (usage or ClickException) unless --references is a file with as many lines as
    the input (a file, not stdin) and a student config is given to train on them."""
    if student_config is None:
        raise click.UsageError("--references: only with --student-config (they are the student's real pairs)")
    if input_path == "-":
        raise click.UsageError("--references: the input must be a file (the student trains on its lines)")
    check_input_file(references)
    n_src, n_ref = count_lines(input_path), count_lines(references)
    if n_src != n_ref:
        raise click.ClickException(f"--references {references} has {n_ref:,} lines but the input {input_path} has "
                                   f"{n_src:,}: they must be parallel, line by line")


def teacher_tokenizer(teacher_dir: str) -> dict[str, Path]:
    """The teacher's tokenizer files as the student's tokenizer keys: {"src_model": ..., "tgt_model": ...}
    (one joint spm.model: src_model only)."""
    from seq2seq.text.tokenizer import JOINT_MODEL, SRC_MODEL, TGT_MODEL, TokenizerError

    root = Path(teacher_dir)
    if (root / JOINT_MODEL).is_file():
        return {"src_model": (root / JOINT_MODEL).resolve()}
    if (root / SRC_MODEL).is_file() and (root / TGT_MODEL).is_file():
        return {"src_model": (root / SRC_MODEL).resolve(), "tgt_model": (root / TGT_MODEL).resolve()}
    raise TokenizerError(f"no tokenizer in {teacher_dir}: expected {JOINT_MODEL} or {SRC_MODEL} + {TGT_MODEL}")


def tokenizer_overrides(teacher_dir: str) -> list[str]:
    """The `--set` values that make a student train with the teacher's tokenizer."""
    files = teacher_tokenizer(teacher_dir)
    return [f"tokenizer.joint={'true' if len(files) == 1 else 'false'}",
            *(f"tokenizer.{key}={path}" for key, path in files.items())]


def check_student_tokenizer(tok: TokenizerConfig, config: str, teacher_dir: str, output_dir: str) -> None:
    """ClickException, one line, when the student config names tokenizer model files whose bytes differ
    from the teacher's (or a joint/separate layout the teacher does not have)."""
    files = teacher_tokenizer(teacher_dir)
    wanted = {"src_model": files["src_model"], "tgt_model": files.get("tgt_model", files["src_model"])}
    given = {"src_model": tok.src_model, "tgt_model": tok.src_model if tok.joint else tok.tgt_model}
    for key, path in given.items():
        if path is None:
            continue
        same = Path(path).is_file() and Path(path).read_bytes() == wanted[key].read_bytes()
        if not same:
            raise click.ClickException(
                f"--student-config {config}: tokenizer.{key} {path} is not the teacher's tokenizer ({wanted[key]}); "
                f"a distilled student must use the teacher's: train it with "
                f"{' '.join('--set ' + shlex.quote(o) for o in tokenizer_overrides(teacher_dir))}")


def student_command(student: Config, config: str, teacher_dir: str, output_dir: str,
                    real: tuple[str, str] | None = None) -> str:
    """The `seq2seq train` command line that trains the student on the distilled corpus with the
    teacher's tokenizer (and the teacher's validation files where the student config has none);
    `real` (source file, reference file): the real pairs too, as a second data.corpora entry."""
    from seq2seq.storage.model_dir import ModelDir

    out = Path(output_dir).resolve()
    data = student.data
    overrides = tokenizer_overrides(teacher_dir)
    if data.corpora or real:
        pairs = [(out / SRC_FILE, out / TGT_FILE), *([tuple(Path(f).resolve() for f in real)] if real else [])]
        entries = ", ".join(f"{{train_src: {src}, train_tgt: {tgt}}}" for src, tgt in pairs)
        overrides.append(f"data.corpora=[{entries}]")
    else:
        overrides += [f"data.train_src={out / SRC_FILE}", f"data.train_tgt={out / TGT_FILE}"]
    if not (data.valid_src or data.valid or data.valid_sets):
        teacher = ModelDir(teacher_dir).config().data
        if teacher.valid_src and teacher.valid_tgt:
            overrides += [f"data.valid_src={Path(teacher.valid_src).resolve()}",
                          f"data.valid_tgt={Path(teacher.valid_tgt).resolve()}"]
    return shlex.join(["seq2seq", "train", config, *(x for o in overrides for x in ("--set", o))])
