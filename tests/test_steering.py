"""Steering from text: the Python API, glossaries and the command line's steering options, on the tiny
trained model (`tiny_model_dir`); the search itself is tested in test_steering_search.py."""

from __future__ import annotations

import json
import random
import re

import pytest
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config.diagnostics import Diagnostic
from seq2seq.inference.glossary import Glossary
from seq2seq.inference.steering import SteeringError
from seq2seq.inference.translator import Translator

SOURCES = ["A man rides a bike.", "Two dogs play in the snow.", "", "A woman is cooking in a kitchen.",
           "Children play on the street."]
WORDS = ["Hund", "Frau", "Straße", "Mann", "Kinder", "spielen", "einem roten", "auf der"]


@pytest.fixture(scope="module")
def translator(tiny_model_dir) -> Translator:
    return Translator.load(tiny_model_dir, device="cpu")


def token_ids(translator: Translator, phrase: str) -> list[int]:
    return translator.tokenizers.tgt.encode([phrase])[0]


def contains(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


# ---- the Python API ------------------------------------------------------------------------------


def test_outputs_start_with_their_prefix(translator):
    prefixes = ["Ein Hund", "Zwei", "", "Eine Frau steht", None]
    out = translator.translate(SOURCES, prefix=prefixes, beam=4)
    assert out[2] == ""  # an empty source stays empty
    for prefix, text in zip(prefixes, out):
        assert text.startswith(prefix or "")


@pytest.mark.parametrize("seed", range(3))
def test_every_constraint_appears_in_every_output(translator, seed):
    rng = random.Random(seed)
    constraints = [rng.sample(WORDS, rng.randint(1, 3)) for _ in SOURCES]
    results = translator.translate_nbest(SOURCES, constraints=constraints, beam=5, nbest=2, max_len_b=40,
                                         no_repeat_ngram=rng.choice([0, 4]), lenpen=rng.choice([0.6, 1.0]))
    for wanted, nbest in zip(constraints, results):
        for h in nbest:
            for phrase in wanted:
                assert contains(h.token_ids, token_ids(translator, phrase)), (phrase, h.text)
                assert re.search(rf"(?<![\w'’-]){phrase}(?!\w|[-'’]\w)", h.text), (phrase, h.text)  # whole words


def test_banned_phrases_never_appear_for_every_line_or_per_line(translator):
    plain = translator.translate_nbest(SOURCES, beam=4, nbest=2)
    chosen = [h[0].pieces[1:3] for h in plain if h]
    banned = sorted({translator.tokenizers.tgt.decode([token_ids_of(translator, p)])[0] for p in chosen})
    assert banned  # phrases the plain search produced
    for avoid in (banned, [banned] * len(SOURCES)):
        for nbest in translator.translate_nbest(SOURCES, avoid=avoid, beam=4, nbest=2):
            for h in nbest:
                assert not any(contains(h.token_ids, token_ids(translator, b)) for b in banned), h.text


def token_ids_of(translator: Translator, pieces: list[str]) -> list[int]:
    return [translator.tokenizers.tgt._sp.piece_to_id(p) for p in pieces]


def test_empty_steering_is_the_plain_translation(translator):
    plain = translator.translate_nbest(SOURCES, beam=4, nbest=2)
    steered = translator.translate_nbest(SOURCES, beam=4, nbest=2, prefix=[""] * 5, constraints=[[]] * 5, avoid=[])
    assert [[(h.text, h.score) for h in n] for n in steered] == [[(h.text, h.score) for h in n] for n in plain]


def test_constraints_that_cannot_be_met_warn_and_fall_back_to_the_unconstrained_search(translator):
    warnings: list[str] = []
    options = dict(beam=4, max_len_a=0.0, max_len_b=3)
    out = translator.translate(SOURCES[:2], constraints=[[], ["einem roten Hund auf der Straße"]],
                               prefix=["", "Zwei"], warn=warnings.append, first_line=7, **options)
    assert warnings == [Diagnostic("its constraints cannot all be met within its length limit; translated without them",
                                   line=8, field="constraints", code="constraints_unmet")]
    assert str(warnings[0]).startswith("line 8: its constraints")
    assert out == translator.translate(SOURCES[:2], prefix=["", "Zwei"], **options)


@pytest.mark.parametrize("kwargs, message", [
    (dict(constraints=[["Hund"]] * 4 + [[" "]]), "line 5: an empty constraint"),
    (dict(constraints=[["Hund"]] * 5, greedy=True), "line 1: constraints need beam search"),
    (dict(constraints=[["Hund", "Frau", "Mann"]] * 5, beam=3), "line 1: 3 constraints, but a beam of 3 holds at most 2"),
    (dict(avoid=["Ж"]), r"line 1: the banned phrase 'Ж' cannot be written .*'Ж' would become <unk>"),
    (dict(prefix=["", "", "", "ein Hund " * 20, ""], max_len_a=0.0, max_len_b=5),
     "line 4: the target prefix has .* tokens, more than this sentence's length limit of 5"),
    (dict(prefix=["x"]), "prefix has 1 entries for 5 inputs"),
    (dict(constraints="Hund"), "constraints must be a list with one entry per input"),
])
def test_steering_that_cannot_be_honoured_is_refused_naming_the_line(translator, kwargs, message):
    with pytest.raises(SteeringError, match=message):
        translator.translate(SOURCES, **kwargs)


# ---- glossaries ---------------------------------------------------------------------------------


def test_glossary_terms_match_whole_words_case_insensitively_longest_first(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("source\ttarget\n# a comment\n\ndog\tHund\nuser account\tKundenkonto\naccount\tKonto\n")
    glossary = Glossary.load(path)
    assert glossary.entries == [("dog", "Hund"), ("user account", "Kundenkonto"), ("account", "Konto")]
    assert glossary.constraints_for("The Dog opened a user account.") == ["Hund", "Kundenkonto"]
    assert glossary.constraints_for("Dogs and hotdog; an account, a dog, another dog.") == ["Konto", "Hund"]
    assert glossary.constraints_for("nothing here") == []


@pytest.mark.parametrize("text, message", [
    ("dog\tHund\ncat\n", "line 2: expected 'source term<TAB>target term', got 'cat'"),
    ("dog\tHund\ncat\tKatze\textra\n", "line 2: expected"),
    ("dog\t \n", "line 1: expected"),
    ("# only a comment\n", "has no entries"),
])
def test_a_malformed_glossary_is_refused_naming_the_line(tmp_path, text, message):
    path = tmp_path / "bad.tsv"
    path.write_text(text)
    with pytest.raises(SteeringError, match=message):
        Glossary.load(path)


def test_glossary_terms_become_constraints(translator, tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("bike\tStraße\ndogs\tFrau\n")
    out = translator.translate(SOURCES, glossary=str(path), beam=4, max_len_b=40)
    assert "Straße" in out[0] and "Frau" in out[1]


def test_a_source_term_given_twice_with_different_targets_is_refused_naming_both_lines(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("source\ttarget\nAccount\tKonto\ndog\tHund\nDOG\tHund\n\n account \tKundenkonto\n")
    with pytest.raises(SteeringError) as e:
        Glossary.load(path)
    assert str(e.value) == (f"glossary {path} lines 2 and 6: the source term 'account' is given twice, with target "
                            "terms 'Konto' and 'Kundenkonto'; keep one")
    path.write_text("dog\tHund\nStraße\tstreet\nDOG\tHund\nSTRASSE\tSTREET\n")  # ß is not "ss" to re either
    glossary = Glossary.load(path)
    assert glossary.entries == [("dog", "Hund"), ("Straße", "street"), ("STRASSE", "STREET")]  # the repeat kept once
    assert glossary.lines == [1, 2, 4]
    with pytest.raises(SteeringError, match="glossary <glossary> entries 1 and 3: the source term 'ıt' is given"):
        Glossary([("it", "es"), ("dog", "Hund"), ("ıt", "er")])  # re.IGNORECASE takes ı as i


def test_a_glossary_target_the_model_cannot_write_is_refused_before_any_text_naming_its_line(translator, tmp_path):
    from seq2seq.serve.app import check_glossary

    path = tmp_path / "terms.tsv"
    path.write_text("source\ttarget\ndog\tHund\ncat\tЖ Katze\n")
    message = f"glossary {path} line 3: the target term 'Ж Katze' cannot be written with the model's target " \
              "vocabulary ('Ж' would become <unk>)"
    calls = (lambda g: translator.translate(["A man."], glossary=g, beam=4), lambda g: check_glossary(translator, g))
    for call in calls:
        with pytest.raises(SteeringError) as e:  # though no input holds "cat"
            call(Glossary.load(path))
        assert str(e.value) == message
    path.write_text("dog\tHund\n")
    glossary = Glossary.load(path)
    assert translator.translate(["A dog."], glossary=glossary, beam=4) == translator.translate(
        ["A dog."], constraints=[["Hund"]], beam=4)
    assert glossary._checked == [translator.tokenizers.tgt]  # checked once, not per call


# The matcher the glossary had before issue 59 (one expression per term), the reference of the tests below.

def reference_constraints(entries: list[tuple[str, str]], text: str) -> list[str]:
    by_length = sorted(range(len(entries)), key=lambda i: -len(entries[i][0]))
    patterns = [(re.compile(rf"(?<!\w){re.escape(entries[i][0])}(?!\w)", re.IGNORECASE), entries[i][1])
                for i in by_length]
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, str]] = []
    for pattern, target in patterns:  # longest source terms first
        for m in pattern.finditer(text):
            if all(m.end() <= a or m.start() >= b for a, b in taken):
                taken.append(m.span())
                found.append((m.start(), target))
    return list(dict.fromkeys(t for _, t in sorted(found)))


TERM_CHARACTERS = "abab" + "sSßẞſ" + "iIİı" + "éÉ" + "σΣς\u0345" + "1_" + " -.'+"


def random_text(rng: random.Random, terms: list[str]) -> str:
    """Glossary terms (each character upper- or lower-cased at random) among random characters, mostly
    with a space or a punctuation mark between them."""
    text = ""
    for _ in range(rng.randint(0, 7)):
        if terms and rng.random() < 0.6:
            piece = "".join(rng.choice((c, c.upper(), c.lower())) for c in rng.choice(terms))
        else:
            piece = "".join(rng.choice(TERM_CHARACTERS) for _ in range(rng.randint(1, 3)))
        text += rng.choice(("", " ", " ", ", ", "-")) + piece if text else piece
    return text


def test_glossary_matching_is_what_one_expression_per_term_found_on_random_glossaries():
    rng = random.Random(59)
    compared = refused = hits = 0
    for _ in range(3000):
        pool = ["".join(rng.choice(TERM_CHARACTERS) for _ in range(rng.randint(1, 4))) for _ in range(4)]
        pool += [a + rng.choice(" -") + b for a, b in zip(pool, reversed(pool))]  # terms that overlap others
        entries = [(rng.choice(pool), rng.choice("ABCD")) for _ in range(rng.randint(1, 8))]
        texts = [random_text(rng, [s for s, _ in entries]) for _ in range(4)]
        conflict = any(re.fullmatch(re.escape(a), b, re.IGNORECASE) and x != y
                       for i, (a, x) in enumerate(entries) for b, y in entries[i + 1:])
        if conflict:
            with pytest.raises(SteeringError, match="is given twice"):
                Glossary(entries)
            refused += 1
            continue
        glossary = Glossary(entries)
        for text in texts:
            found = glossary.constraints_for(text)
            assert found == reference_constraints(entries, text), (entries, text)
            compared, hits = compared + 1, hits + (len(found) > 1)
    assert compared > 4500 and refused > 1000 and hits > 900, (compared, refused, hits)  # hits: 2+ terms


def test_fold_compares_characters_as_re_ignorecase_does():
    import sys

    from seq2seq.inference.glossary import fold

    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    folded = fold(everything)
    assert len(folded) == len(everything)
    cased = "".join(sorted({c for c, f in zip(everything, folded) if c != f or c.upper() != c or c.lower() != c}))
    assert set(fold(cased)) <= set(cased)  # so a character without case folds, and is equal, only to itself
    for i, c in enumerate(cased):
        by_re = [m.start() for m in re.finditer(re.escape(c), cased, re.IGNORECASE)]
        assert by_re == [j for j, f in enumerate(fold(cased)) if f == fold(c)], (c, hex(ord(c)))


def test_a_termbase_of_100000_entries_matches_as_the_expressions_did():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.glossary import generated_glossary, generated_sentences
    from seq2seq.inference.glossary import fold

    entries = generated_glossary(100_000)
    sentences = generated_sentences(entries, 1000)
    glossary = Glossary(entries, "generated")
    assert len(glossary.entries) == 100_000
    found = [glossary.constraints_for(s) for s in sentences]  # the whole run
    assert sum(map(len, found)) > 2000
    folded = [(fold(s), s, t) for s, t in entries]
    for sentence, terms in zip(sentences[:40], found):  # the expressions of the terms that may occur (all others
        text = fold(sentence)                            # find nothing): 100,000 expressions a sentence are slow
        assert terms == reference_constraints([(s, t) for f, s, t in folded if f in text], sentence), sentence
    small = entries[:2000]
    glossary = Glossary(small)
    for sentence in generated_sentences(small, 150, seed=1):
        assert glossary.constraints_for(sentence) == reference_constraints(small, sentence), sentence


def test_the_glossary_benchmark_runs_at_its_smallest():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, str(root / "benchmarks" / "glossary.py"), "--entries", "300",
                             "--sentences", "40", "--old-sentences", "10"], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "300 entries, 40 sentences" in out and "the matchers agree on the 10 sentences both ran" in out
    assert "(measured on 10 sentences" in out and "scaled to 40)" in out
    assert re.search(r"ratio \(old / new\), matching: [\d,]+x", out), out


# ---- the command line ---------------------------------------------------------------------------


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


@pytest.fixture()
def files(tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("\n".join(SOURCES) + "\n")
    return tmp_path, src


def test_translate_with_steering_files_keeps_one_line_per_input(tiny_model_dir, files):
    tmp, src = files
    (tmp / "prefix.txt").write_text("Ein\n\n\nEine Frau\n\n")
    (tmp / "constraints.txt").write_text("Hund\n\tStraße\n\nspielen\tauf der\nMann\n")
    (tmp / "avoid.txt").write_text("\n\n\nKinder\n\n")
    out = tmp / "out.txt"
    result = run("translate", tiny_model_dir, "-i", src, "-o", out, "--prefix-file", tmp / "prefix.txt",
                 "--constraints-file", tmp / "constraints.txt", "--avoid-file", tmp / "avoid.txt", "--avoid", "Mädchen",
                 "--max-len-b", "40", "--beam", "4")
    assert result.exit_code == 0, result.output
    lines = out.read_text().split("\n")[:-1]
    assert len(lines) == len(SOURCES) and lines[2] == ""
    assert lines[0].startswith("Ein") and "Hund" in lines[0]
    assert "Straße" in lines[1]
    assert lines[3].startswith("Eine Frau") and "spielen" in lines[3] and "auf der" in lines[3]
    assert "Kinder" not in lines[3] and not any("Mädchen" in line for line in lines)


def test_json_input_carries_each_lines_steering(tiny_model_dir):
    lines = [{"text": "A dog runs.", "prefix": "Zwei"}, {"text": "A woman.", "constraints": ["Straße"]}, {"text": ""}]
    result = run("translate", tiny_model_dir, "--json-input", "--max-len-b", "40",
                 input="".join(json.dumps(x) + "\n" for x in lines))
    assert result.exit_code == 0, result.output
    out = result.stdout.split("\n")[:-1]
    assert len(out) == 3 and out[0].startswith("Zwei") and "Straße" in out[1] and out[2] == ""


@pytest.mark.parametrize("setup, args, message", [
    ({"prefix.txt": "Ein\n"}, ["--prefix-file", "prefix.txt"], "prefix.txt has 1 lines, but the input has more"),
    ({"prefix.txt": "a\n" * 9}, ["--prefix-file", "prefix.txt"], r"prefix.txt has more lines than the input \(5\)"),
    ({"c.txt": "Hund\n\n\n\t\t\nЖ\n"}, ["--constraints-file", "c.txt"], "line 5: the constraint 'Ж' cannot be"),
    ({"g.tsv": "dog\tHund\nbad row\n"}, ["--glossary", "g.tsv"], "g.tsv line 2: expected"),
    ({"g.tsv": "dog\tHund\ncat\tЖ\n"}, ["--glossary", "g.tsv"], "g.tsv line 2: the target term 'Ж' cannot be"),
    ({"g.tsv": "dog\tHund\nDog\tRüde\n"}, ["--glossary", "g.tsv"], "g.tsv lines 1 and 2: the source term 'Dog'"),
    ({}, ["--glossary", "missing.tsv"], "glossary .*missing.tsv not found"),
    ({"c.txt": "Hund\n" * 5}, ["--constraints-file", "c.txt", "--greedy"], "line 1: constraints need beam search"),
])
def test_bad_steering_input_is_one_line_exit_1_and_no_output(tiny_model_dir, files, monkeypatch, setup, args, message):
    tmp, src = files
    monkeypatch.chdir(tmp)
    for name, text in setup.items():
        (tmp / name).write_text(text)
    result = run("translate", tiny_model_dir, "-i", src, "-o", tmp / "out.txt", *args)
    assert result.exit_code == 1
    assert re_search(message, result.output) and "Traceback" not in result.output
    assert not (tmp / "out.txt").exists()


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def test_json_input_lines_that_are_not_objects_are_named(tiny_model_dir):
    result = run("translate", tiny_model_dir, "--json-input", input='{"text": "A dog."}\nnot json\n')
    assert result.exit_code == 1 and "input line 2 is not JSON" in result.output
    result = run("translate", tiny_model_dir, "--json-input", input='{"text": "A dog.", "prefx": "Ein"}\n')
    assert result.exit_code == 1 and "input line 1 has unknown field(s) 'prefx'" in result.output


def test_test_command_scores_the_constrained_output(tiny_model_dir, files):
    tmp, src = files
    ref = tmp / "ref.txt"
    ref.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n\nEine Frau kocht.\nKinder spielen.\n")
    (tmp / "c.txt").write_text("Mann\nHunde\n\nFrau\nKinder\n")
    result = run("test", tiny_model_dir, "--src", src, "--ref", ref, "-o", tmp / "hyp.txt", "--metrics", "bleu",
                 "--constraints-file", tmp / "c.txt", "--max-len-b", "40")
    assert result.exit_code == 0, result.output
    hyps = (tmp / "hyp.txt").read_text().split("\n")
    for hyp, word in zip(hyps, ["Mann", "Hunde", "", "Frau", "Kinder"]):
        assert word in hyp


def test_glossary_terms_beyond_what_the_beam_holds_are_dropped_with_a_warning(translator, tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("man\tMann\nrides\tfährt\nbike\tFahrrad\n")
    warnings: list[str] = []
    out = translator.translate_nbest(["A man rides a bike."], glossary=Glossary.load(path), beam=3, max_len_b=40,
                                     warn=warnings.append)
    assert [str(w) for w in warnings] == ["line 1: a beam of 3 holds 2 constraints; glossary term(s) ['Fahrrad'] "
                                          "not enforced (pass a larger --beam)"]
    assert (warnings[0].field, warnings[0].code) == ("glossary", "terms_dropped")
    assert "Mann" in out[0][0].text and "fährt" in out[0][0].text


def test_constraint_lenpen_is_the_lenpen_of_the_sentences_with_constraints_only(translator):
    texts = ["A dog runs in the park.", "A man.", "Two women walk."]
    constraints = [["Hund", "Park"], None, ["Frauen"]]

    def run(**options):  # texts, and scores to float noise (a sentence searched in another batch)
        return [[(h.text, round(h.score, 4)) for h in n] for n in translator.translate_nbest(texts, beam=4, **options)]

    mixed = run(constraints=constraints, lenpen=1.0, constraint_lenpen=0.3)
    assert mixed[1] == run(lenpen=1.0)[1]  # a sentence without constraints: exactly as without the option
    alone = run(constraints=constraints, lenpen=0.3)
    assert [mixed[0], mixed[2]] == [alone[0], alone[2]]  # the constrained ones: as if lenpen were 0.3
    assert run(constraints=constraints) == run(constraints=constraints, constraint_lenpen=None)
    assert mixed[0] != run(constraints=constraints, lenpen=1.0)[0]  # the option does something here
    with pytest.raises(ValueError, match="constraint_lenpen must be a number"):
        translator.search_config(constraint_lenpen="low")
