"""The word lexicon of a language pair (seq2seq.text.lexicon) and what the word alignment makes of it
(seq2seq.documents.alignment): Dice scores counted by hand, the file round trip and its errors, the
alignment it corrects, the reading of the attention it picks, the pipeline reading it from the model
directory, and training writing it."""

from __future__ import annotations

import pytest

from seq2seq.documents.alignment import word_alignment
from seq2seq.inference.results import Translation
from seq2seq.storage.model_dir import ModelDir
from seq2seq.text.lexicon import LEXICON_HEADER, Lexicon, lexicon_word

from conftest import FakeEngine

PAIRS = [("A dog runs.", "Ein Hund rennt."), ("A cat sleeps.", "Eine Katze schläft."),
         ("The dog sleeps.", "Der Hund schläft!"), ("A dog, a cat.", "Ein Hund, eine Katze.")]


def test_dice_of_every_pair_counted_by_hand() -> None:
    lex = Lexicon.build(PAIRS, min_pairs=1)
    # "dog" is in 3 pairs, "hund" in 3, together in 3: 2 * 3 / (3 + 3)
    assert lex.scores["dog", "hund"] == 1.0
    # "a": pairs 1, 2, 4 (3); "ein": pairs 1, 4 (2); together 2: 2 * 2 / (3 + 2)
    assert lex.scores["a", "ein"] == 0.8
    # "sleeps": pairs 2, 3; "katze": pairs 2, 4; together once: 2 * 1 / 4
    assert lex.scores["sleeps", "katze"] == 0.5
    assert ("the", "katze") not in lex.scores  # never in one pair
    assert lexicon_word("«Hund!»") == "hund"


def test_rare_pairs_and_all_but_the_best_targets_are_dropped() -> None:
    lex = Lexicon.build(PAIRS, min_pairs=2)
    assert ("sleeps", "katze") not in lex.scores  # one pair only
    assert lex.scores["dog", "hund"] == 1.0
    best = Lexicon.build(PAIRS, min_pairs=1, top=1)
    assert {t for s, t in best.scores if s == "dog"} == {"hund"}
    assert len({s for s, _ in best.scores}) == len(best.scores)  # one target per source word


def test_the_file_round_trips_and_a_malformed_one_is_named(tmp_path) -> None:
    lex = Lexicon.build(PAIRS, min_pairs=1)
    path = tmp_path / "lexicon.tsv"
    path.write_text(lex.tsv(), encoding="utf-8")
    assert Lexicon.load(path) == lex
    path.write_text(LEXICON_HEADER + "\ndog\thund\t1.0\ndog hund 1.0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"lexicon.tsv, line 3: expected source word, target word and dice"):
        Lexicon.load(path)
    path.write_text("dog\thund\t1.0\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a seq2seq lexicon"):
        Lexicon.load(path)


def translation(src: str, tgt: str, attention: list[list[float]] | None) -> Translation:
    s, t = src.split(), tgt.split()
    return Translation(text=tgt, score=0.0, logprob=0.0, token_ids=list(range(len(t))),
                       pieces=["▁" + w for w in t], token_logprobs=[0.0] * (len(t) + 1),
                       src_pieces=["▁" + w for w in s] + ["</s>"], attention=attention)


def rows(targets: list[int], n_src: int) -> list[list[float]]:
    """One attention row per target word and EOS, each all on the source word `targets[i]`."""
    return [[0.9 if j == k else 0.1 / n_src for j in range(n_src + 1)] for k in targets]


def test_the_lexicon_corrects_an_attention_one_word_off() -> None:
    lex = Lexicon({("small", "kleiner"): 0.9, ("dog", "hund"): 0.95, ("a", "ein"): 0.8})
    # the predicting step of each word looks at the next source word
    t = translation("a small dog", "ein kleiner hund", rows([1, 2, 2, 2], 3))
    assert word_alignment(t, "a small dog", shift=False) == [(0, 0), (1, 0), (2, 1), (2, 2)]
    assert word_alignment(t, "a small dog", lex) == [(0, 0), (1, 1), (2, 2)]


def test_the_reading_that_agrees_with_the_lexicon_is_taken() -> None:
    lex = Lexicon({("small", "kleiner"): 0.2, ("dog", "hund"): 0.2, ("a", "ein"): 0.2})
    # each word's source word is looked at by the step that reads it (the next row): shift-att's model.
    # The lexicon alone is too weak to move a word against the attention (0.3 * 0.9 > 0.7 * 0.2).
    t = translation("a small dog", "ein kleiner hund", rows([2, 0, 1, 2], 3))
    assert word_alignment(t, "a small dog", shift=True) == [(0, 0), (1, 1), (2, 2)]
    assert word_alignment(t, "a small dog", lex) == [(0, 0), (1, 1), (2, 2)]
    assert word_alignment(t, "a small dog") == word_alignment(t, "a small dog", shift=False) != [(0, 0), (1, 1), (2, 2)]


class OffByOneEngine(FakeEngine):
    """Copies each text; each word's attention looks at the next source word (the last at itself)."""

    def __init__(self, path) -> None:
        self.path = path

    def translate_nbest(self, texts, batch_tokens=4000, first_line=1, warn=None, **kw):
        out = []
        for text in texts:
            n = len(text.split())
            asked = kw.get("attention_layer") is not None
            out.append([translation(text, text, rows([min(i + 1, n - 1) for i in range(n)] + [n], n) if asked else None)])
        return out


def test_translate_lines_places_tags_with_the_model_directory_s_lexicon(tmp_path) -> None:
    from seq2seq.documents.line_translation import translate_lines

    line = "The <b>black</b> dog runs fast."
    words = "the black dog runs fast".split()
    without = translate_lines(OffByOneEngine(tmp_path), [line], markup=True, casing=False)[0][0].text
    assert without != line  # the attention alone puts the tag one word off
    lex = Lexicon({(w, w): 1.0 for w in words})
    ModelDir(tmp_path).path.joinpath(ModelDir.LEXICON).write_text(lex.tsv(), encoding="utf-8")
    assert translate_lines(OffByOneEngine(tmp_path), [line], markup=True, casing=False)[0][0].text == line


def test_training_writes_the_lexicon_of_its_pairs(tiny_model_dir, multi30k_small) -> None:
    lex = ModelDir(tiny_model_dir).lexicon()
    assert lex is not None
    src = multi30k_small["train.en"].read_text(encoding="utf-8").splitlines()
    tgt = multi30k_small["train.de"].read_text(encoding="utf-8").splitlines()
    assert lex == Lexicon.build(zip(src, tgt))  # every training pair counted (fewer than LEXICON_PAIRS)
    assert max(lex.scores.get(("dog", t), 0.0) for t in ("hund", "hunde")) > 0.5


def test_lexicon_command_writes_one_for_a_model_directory_and_refuses_unequal_files(tiny_model_dir, tmp_path) -> None:
    import shutil

    from click.testing import CliRunner

    from seq2seq.cli import cli

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / ModelDir.LEXICON).unlink()
    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("\n".join(s for s, _ in PAIRS) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(t for _, t in PAIRS) + "\n", encoding="utf-8")
    ok = CliRunner().invoke(cli, ["lexicon", str(model), str(src), str(tgt)])
    assert ok.exit_code == 0, ok.output
    assert ModelDir(model).lexicon() == Lexicon.build(PAIRS)
    tgt.write_text("Ein Hund.\n", encoding="utf-8")
    bad = CliRunner().invoke(cli, ["lexicon", str(model), str(src), str(tgt)])
    assert bad.exit_code == 1
    assert bad.output.strip() == f"Error: {src} has 4 lines and {tgt} 1; parallel files have one sentence a line, " \
                                 "the same number of lines"
    assert ModelDir(model).lexicon() == Lexicon.build(PAIRS)  # the lexicon written before is kept
    src.write_text("\n", encoding="utf-8")
    tgt.write_text("\n", encoding="utf-8")
    empty = CliRunner().invoke(cli, ["lexicon", str(model), str(src), str(tgt)])
    assert empty.exit_code == 1 and "hold no sentence pair" in empty.output, empty.output
    assert ModelDir(model).lexicon() == Lexicon.build(PAIRS)
