"""`seq2seq clean` and its filters (seq2seq.data.filters): each filter on crafted pairs, the report's counts,
input order under two workers, traceable removals, atomic outputs, the `clean` config section, and the
one-line errors for a missing file or files that differ in length."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import MULTI30K, require_data, run_benchmark

from seq2seq.cli import cli
from seq2seq.config import ConfigError, load_config
from seq2seq.config.clean_section import DEFAULT_FILTERS, CleanConfig, DcceRules, RatioRules
from seq2seq.data.filters import FilterError, PairFilter, build_filters, filter_names, register_filter
from seq2seq.data.filters.corpus import clean_corpus
from seq2seq.data.filters.normalise import fold
from seq2seq.data.filters.numbers import numbers
from seq2seq.data.filters.pipeline import judge, verdicts
from seq2seq.data.filters.ratio import expected_ratio

CFG = CleanConfig(src_lang="en", tgt_lang="de")
PAIRS = [  # clean en-de pairs, every filter keeps them
    ("A man in a blue shirt is riding a bicycle down the street.",
     "Ein Mann in einem blauen Hemd fährt mit dem Fahrrad die Straße hinunter."),
    ("Two young girls are playing with a brown dog in the park.",
     "Zwei junge Mädchen spielen im Park mit einem braunen Hund."),
    ("A woman is cooking dinner in a small kitchen.", "Eine Frau kocht in einer kleinen Küche das Abendessen."),
    ("Three children jump into the lake on a sunny day.", "Drei Kinder springen an einem sonnigen Tag in den See."),
    ("An old man sits on a bench and reads the newspaper.", "Ein alter Mann sitzt auf einer Bank und liest die Zeitung."),
    ("A group of people is waiting for the train at the station.",
     "Eine Gruppe von Menschen wartet am Bahnhof auf den Zug."),
]


def one(name: str, cfg: CleanConfig = CFG, sample=PAIRS) -> PairFilter:
    rule = build_filters(replace(cfg, filters=[name]))[0]
    rule.prepare(sample)
    return rule


@pytest.mark.parametrize("name", [n for n in DEFAULT_FILTERS])
def test_every_filter_keeps_clean_pairs(name):
    rule = one(name)
    assert [rule.keep(s, t) for s, t in PAIRS] == [None] * len(PAIRS)


CRAFTED = [  # (filter, src, tgt, reason)
    ("length", "", "Ein Hund.", "empty"),
    ("length", "A dog runs.", " ".join(["Wort"] * 201), "too_long"),
    ("html", "A <b>dog</b> runs.", "Ein Hund rennt.", "tag"),
    ("html", "A dog runs.", "Ein Hund<br/> rennt.", "tag"),
    ("html", "Salt &amp; pepper.", "Salz und Pfeffer.", "entity"),
    ("html", "A dog runs. Click here to read more.", "Ein Hund rennt.", "boilerplate"),
    ("html", "This website uses cookies to improve your experience.", "Diese Website verwendet Cookies.",
     "boilerplate"),
    ("html", "A girl is eating a cookie.", "Ein Mädchen isst einen Keks.", None),  # a biscuit, not a banner
    ("html", "A car powered by the sun.", "Ein Auto, das mit Sonnenenergie fährt.", None),
    ("html", "Tom & Jerry", "Tom & Jerry", None),  # a bare ampersand is not an entity
    ("urls", "See www.example.com for more.", "Mehr auf www.example.org.", "different_urls"),
    ("urls", "Mail info@example.com today.", "Schreiben Sie heute an info@example.com.", None),
    ("numbers", "The 3 men carry 12 boxes.", "Die 3 Männer tragen 13 Kisten.", "different_numbers"),
    ("numbers", "It costs 1,000 dollars.", "Es kostet 1.000 Dollar.", None),
    ("numbers", "2 kids play in the snow.", "Zwei Kinder spielen im Schnee.", None),  # spelled out
    ("numbers", "3 men walk by.", "2 Männer gehen vorbei.", "different_numbers"),  # changed, not spelled out
    ("numbers", "Built in 1887 by the city.", "Von der Stadt erbaut.", "different_numbers"),
    ("copy", "A man rides a bike.", "A man rides a bike.", "identical"),
    ("copy", "A man rides a bike.", "a man rides a bike!", "identical"),
    ("copy", "A man rides a red bike down the hill.", "A man rides a red bike down the Berg.", "near_identical"),
    ("ratio", "A man in a blue shirt is riding a bicycle.", "Ein Mann.", "long_source"),
    ("ratio", "A dog runs fast.", "Ein Hund rennt sehr schnell über die große grüne Wiese hinter dem Haus.",
     "long_target"),
    ("truncation", "A man in a blue shirt is riding a bicycle down the street.",
     "Ein Mann in einem blauen Hemd fährt mit", "truncated_target"),
    ("script", "A man rides a bike.", "Мужчина едет на велосипеде.", "target_script"),
    ("script", "Ein Mann fährt Fahrrad.", "Ein Mann fährt Fahrrad.", None),  # Latin with umlauts
    ("language", "A man in a blue shirt is riding a bicycle.",
     "Un homme en chemise bleue fait du vélo dans la rue.", "target_language"),
    ("language", "Ein Mann in einem blauen Hemd fährt Fahrrad.",
     "Ein Mann in einem blauen Hemd fährt Fahrrad.", "source_language"),
]


@pytest.mark.parametrize("name,src,tgt,reason", CRAFTED)
def test_each_filter_on_crafted_pairs(name, src, tgt, reason):
    rule = one(name)
    assert rule.keep(src, tgt) == reason
    assert reason is None or reason in rule.reasons


def test_the_expected_ratio_is_the_corpus_median_and_the_tolerance_is_relative_to_it():
    sample = [("x" * 20, "y" * 40)] * 5 + [("x" * 20, "y" * 20)]  # a corpus whose targets are twice as long
    assert expected_ratio(sample) == 2.0
    rule = one("ratio", sample=sample)
    assert rule.prepare(sample)["expected_ratio"] == 2.0
    assert rule.keep("x" * 20, "y" * 60) is None  # 1.5x the expected ratio: within 1.6
    assert rule.keep("x" * 20, "y" * 70) == "long_target"
    assert rule.keep("x" * 20, "y" * 24) == "long_source"  # 0.6x
    assert rule.keep("x" * 5, "y" * 15) is None  # the longer side at most exempt_chars: not judged
    fixed = one("ratio", replace(CFG, ratio=RatioRules(expected=1.0)), sample)
    assert fixed.keep("x" * 20, "y" * 40) == "long_target"


def test_the_lexicon_learns_translations_from_the_corpus_and_finds_misaligned_pairs():
    import random

    letters = [a + b for a in "abcdefg" for b in "aeiou"]  # 35 words a side, each the other's translation
    en = {w: "t" + w for w in letters}
    rng = random.Random(1)
    sample = []
    for _ in range(1000):
        picked = rng.sample(letters, 2)
        sample.append(("the " + " the ".join(picked) + ".", "der " + " der ".join(en[w] for w in picked) + "."))
    rule = one("lexicon", sample=sample)
    assert rule.forward["ba"] == {"tba"} and rule.backward["tba"] == {"ba"}
    assert "the" not in rule.forward and "der" not in rule.backward  # in every pair: left out
    assert rule.keep("The ba and the ce.", "Der tba und die tce.") is None
    assert rule.keep("The ba and the ce.", "Der tdo und die tgu.") == "misaligned"
    assert rule.keep("The ba and the ce and fi.", "Der tba und die tce und tga.") is None  # 4 of 6 found
    assert rule.keep("The ba.", "Der tdo.") is None  # 2 known words: too few to judge


def test_fold_and_numbers_goldens():
    assert fold("The 2 dogs -- barking!") == "the 0 dogs barking"
    assert fold("  ÄRGER, 1999 ") == "ärger 0"
    assert numbers("Von 1,5 auf 2.000 und 007 und ٣") == {"15", "2000", "7", "3"}


def test_dedup_keeps_the_first_copy_and_finds_near_duplicates():
    rule = one("dedup")
    got = [rule.keep(s, t) for s, t in [("A dog.", "Ein Hund."), ("A dog.", "Ein Hund."), ("a DOG", "ein hund!"),
                                        ("A cat.", "Ein Hund."), ("A dog 3.", "Ein Hund 3."), ("A dog 4.", "Ein Hund 4.")]]
    assert got == [None, "duplicate", "near_duplicate", None, None, "near_duplicate"]
    by_source = one("dedup", replace(CFG, dedup=replace(CFG.dedup, key="source", near=False)))
    assert [by_source.keep(s, t) for s, t in [("A dog.", "Ein Hund."), ("A dog.", "Der Hund."),
                                              ("a dog", "Hund")]] == [None, "duplicate", None]


def test_judge_names_the_first_filter_that_rejects():
    filters = list(enumerate(build_filters(CFG)))
    for rule in (f for _, f in filters):
        rule.prepare(PAIRS)
    got = judge(filters, [PAIRS[0], ("A <b>man</b> rides.", "A <b>man</b> rides."), ("", "")])
    names = [None if v is None else (filters[v[0]][1].name, v[1]) for v in got]
    assert names == [None, ("html", "tag"), ("length", "empty")]  # html comes before copy


def corpus(tmp_path: Path, n: int = 600) -> tuple[Path, Path, list[tuple[str, str]]]:
    """n pairs: the clean ones made distinct, with copies (i % 10 == 3), HTML (5) and duplicates (7) mixed in."""
    pairs = []
    for i in range(n):
        s, t = PAIRS[i % len(PAIRS)]
        kind = i % 10
        if kind == 3:
            pairs.append((s, s))
        elif kind == 5:
            pairs.append((s, "<p>" + t + "</p>"))
        elif kind == 7:
            pairs.append((s, t))  # an exact duplicate after the first few
        else:
            tag = "".join(chr(97 + (i // 26 ** k) % 26) for k in range(3))  # a distinct word: no near duplicates
            pairs.append((f"{s[:-1]} with {tag}.", f"{t[:-1]} mit {tag}."))
    src, tgt = tmp_path / "in.en", tmp_path / "in.de.gz"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    with gzip.open(tgt, "wt", encoding="utf-8") as f:
        f.write("".join(t + "\n" for _, t in pairs))
    return src, tgt, pairs


def test_clean_corpus_keeps_input_order_with_two_workers_and_traces_every_removal(tmp_path):
    src, tgt, pairs = corpus(tmp_path)
    before = (src.read_bytes(), tgt.read_bytes())
    outs = {}
    cfg = replace(CFG, filters=[f for f in DEFAULT_FILTERS if f != "language"], examples=2)
    for workers in (1, 2):
        d = tmp_path / f"w{workers}"
        d.mkdir()
        report = clean_corpus(str(src), str(tgt), str(d / "out.en"), str(d / "out.de.gz"), cfg, workers=workers,
                              removed_path=str(d / "removed.jsonl"), chunk_pairs=37)
        with gzip.open(d / "out.de.gz", "rt", encoding="utf-8") as f:
            outs[workers] = ((d / "out.en").read_text(encoding="utf-8"), f.read(),
                             (d / "removed.jsonl").read_text(encoding="utf-8"), report.as_json())
    assert (src.read_bytes(), tgt.read_bytes()) == before  # inputs never modified
    assert outs[1][:3] == outs[2][:3]
    kept_src, kept_tgt, removed_text, report = outs[2]
    removed = [json.loads(line) for line in removed_text.splitlines()]
    # every pair is either kept, in order, or removed with its line, filter and reason
    removed_lines = {r["line"] for r in removed}
    expect_kept = [p for i, p in enumerate(pairs, 1) if i not in removed_lines]
    assert list(zip(kept_src.splitlines(), kept_tgt.splitlines())) == expect_kept
    assert all(pairs[r["line"] - 1] == (r["src"], r["tgt"]) for r in removed)
    counts = {f["name"]: f["removed"] for f in report["filters"]}
    assert counts["copy"] == 60 and counts["html"] == 60
    assert counts["dedup"] == 60 - 3  # PAIRS[1], [5] and [3] in turn: the first copy of each stays
    assert sum(counts.values()) == 177 and report["pairs"] == 600 and report["kept"] == 600 - 177 == len(expect_kept)
    html = next(f for f in report["filters"] if f["name"] == "html")
    assert html["reasons"]["tag"]["removed"] == 60 and len(html["reasons"]["tag"]["examples"]) == 2
    assert html["reasons"]["tag"]["examples"][0]["line"] == 6


def test_cli_writes_outputs_report_and_summary(tmp_path):
    src, tgt, _ = corpus(tmp_path, 100)
    config = tmp_path / "clean.yaml"
    config.write_text(yaml.safe_dump({"clean": {"filters": ["length", "copy", "html", "language"],
                                                "language": {"candidates": ["en", "de", "fr"]}}}))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["clean", "--src", str(src), "--tgt", str(tgt), "--src-lang", "en", "--tgt-lang",
                                      "de", "--out-src", f"{out}.en", "--out-tgt", f"{out}.de", "--report",
                                      str(tmp_path / "report.json"), "--config", str(config), "--workers", "1",
                                      "--set", "clean.examples=1"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert [f["name"] for f in report["filters"]] == ["length", "copy", "html", "language"]
    assert report["config"]["src_lang"] == "en" and report["config"]["examples"] == 1
    assert report["kept"] == len(Path(f"{out}.en").read_text().splitlines()) == 80
    assert "kept 80 of 100 pairs, removed 20 (20.00%)" in result.output
    assert "copy" in result.output and "(identical 10)" in result.output


@pytest.mark.parametrize("case", ["missing", "short_target", "short_source", "empty_target"])
def test_one_line_errors_name_the_file_and_line_and_leave_no_output(tmp_path, case):
    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("One.\nTwo.\nThree.\n")
    tgt.write_text({"short_target": "Eins.\nZwei.\n", "empty_target": ""}.get(case, "Eins.\nZwei.\nDrei.\nVier.\n"))
    out_src, out_tgt = tmp_path / "out.en", tmp_path / "out.de"
    out_tgt.write_text("what was there\n")
    given = str(tmp_path / "nope.en") if case == "missing" else str(src)
    result = CliRunner().invoke(cli, ["clean", "--src", given, "--tgt", str(tgt), "--out-src", str(out_src),
                                      "--out-tgt", str(out_tgt), "--workers", "1", "--set", "clean.sample_size=1",
                                      "--set", "clean.filters=[length]"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    message = result.output.strip().splitlines()[-1]
    expected = {"missing": f"Error: input file not found: {given}",
                "short_target": f"Error: {tgt} ends after line 2 but {src} goes on (line 3): the files must be "
                                "aligned line by line",
                "short_source": f"Error: {src} ends after line 3 but {tgt} goes on (line 4): the files must be "
                                "aligned line by line",
                "empty_target": f"Error: {tgt} is empty but {src} goes on (line 1): the files must be aligned line "
                                "by line"}[case]
    assert message == expected
    assert not out_src.exists() and out_tgt.read_text() == "what was there\n"  # atomic: nothing half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.de", "a.en", "out.de"]  # no temporary left


def test_config_errors_name_the_key():
    with pytest.raises(FilterError, match=r"clean.filters\[1\]: unknown filter 'dedupe'. Did you mean 'dedup'\?"):
        build_filters(replace(CFG, filters=["length", "dedupe"]))
    with pytest.raises(ConfigError, match="clean.ratio.tolerance must be above 1"):
        load_config(None, ["clean.ratio.tolerance=0.5"])
    with pytest.raises(ConfigError, match="unknown config key 'clean.ratio.tolerence'"):
        load_config(None, ["clean.ratio.tolerence=2"])
    with pytest.raises(FilterError, match="clean.tgt_lang: py3langid does not know the language 'xx'"):
        build_filters(replace(CFG, tgt_lang="xx", filters=["language"]))


def test_the_clean_section_is_optional_and_round_trips():
    assert load_config(None).clean is None  # train without a clean: section is as before
    cfg = load_config(None, ["clean.src_lang=en", "clean.filters=[length,dedup]", "clean.dedup.near=false"])
    assert cfg.clean == CleanConfig(src_lang="en", filters=["length", "dedup"], dedup=replace(CFG.dedup, near=False))
    from seq2seq.config import from_dict, to_dict
    assert from_dict(CleanConfig, to_dict(cfg.clean)) == cfg.clean


class Shout(PairFilter):
    """A model-based filter's shape: judged in the main process, in batches."""

    name = "shout"
    reasons = ("upper",)
    in_workers = False
    batches: list[int] = []

    def keep_batch(self, pairs):
        Shout.batches.append(len(pairs))
        return ["upper" if s.isupper() else None for s, _ in pairs]


def test_a_registered_filter_judges_in_batches_after_the_worker_filters():
    register_filter("shout", Shout)
    assert "shout" in filter_names()
    filters = build_filters(replace(CFG, filters=["shout", "copy"]))
    for rule in filters:
        rule.prepare([])
    chunks = [[("A DOG.", "Ein Hund."), ("A dog.", "A dog."), ("A CAT.", "A CAT.")], [("A cow.", "Eine Kuh.")]]
    got = [v for _, vs in verdicts(chunks, filters, workers=1) for v in vs]
    assert got == [(0, "upper"), (1, "identical"), (1, "identical"), None]  # copy judged first, shout on the rest
    assert Shout.batches == [1, 1]
    with pytest.raises(FilterError, match="built-in"):
        register_filter("copy", Shout)


def test_the_benchmark_runs_at_its_smallest():
    require_data(MULTI30K)
    out = run_benchmark("clean.py", "--limit", 400, "--workers", 1, "--rate", 0.05).stdout
    assert "Multi30K train en-de: 400 clean pairs, 5% of each noise kind" in out
    table = out.split("removed by\n", 1)[1].split("\nall noise", 1)[0]
    rows = {line.split()[0]: line.split() for line in table.splitlines()}
    for kind in ("wrong_language", "copy", "html", "number", "duplicate"):
        assert rows[kind][1] == "20" and float(rows[kind][3].rstrip("%")) >= 90.0, out
    assert "pairs/s" in out and "peak RSS" in out


def test_the_benchmark_trains_on_the_clean_noisy_and_cleaned_corpus_at_its_smallest():
    require_data(MULTI30K)
    tiny = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.layers=1", "tokenizer.vocab_size=300",
            "training.warmup_steps=2", "training.max_tokens=800", "training.precision=fp32", "decoding.beam=1"]
    out = run_benchmark("clean.py", "--limit", 400, "--workers", 1, "--rate", 0.05, "--train-steps", 10,
                        "--eval-limit", 20, *[a for kv in tiny for a in ("--train-set", kv)]).stdout
    table = out.split("\ncorpus ", 1)[1].split("\nBLEU: sacreBLEU", 1)[0].splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:4]}
    assert list(rows) == ["clean", "noisy", "cleaned"], out
    pairs = {name: int(row[1].replace(",", "")) for name, row in rows.items()}
    assert pairs["clean"] == 400 < pairs["noisy"] and 0 < pairs["cleaned"] < pairs["noisy"], out
    scores = {name: [float(v) for v in row[3:]] for name, row in rows.items()}
    differences = {line.split(" - ")[0] + "-" + line.split(" - ")[1].split()[0]: [float(v) for v in line.split()[3:]]
                   for line in table[4:7]}
    for a, b in (("cleaned", "clean"), ("cleaned", "noisy"), ("noisy", "clean")):
        assert differences[f"{a}-{b}"] == pytest.approx([x - y for x, y in zip(scores[a], scores[b])], abs=0.011)
    assert "nrefs:1|case:mixed|eff:no|tok:13a" in out.split("BLEU: sacreBLEU", 1)[1], out


# ---- `seq2seq train` with a clean: section ---------------------------------------------------------------

def test_train_cleans_each_corpus_once_into_the_cache_and_reads_the_kept_pairs(tmp_path):
    from seq2seq.config.data_section import DataConfig
    from seq2seq.data.filters.training import cleaned_data

    src, tgt, pairs = corpus(tmp_path)
    data = DataConfig(train_src=str(src), train_tgt=str(tgt), valid_src=str(src), valid_tgt=str(tgt),
                      cache_dir=str(tmp_path / "cache"))
    clean = replace(CFG, filters=["copy", "html", "dedup"])
    cleaned = cleaned_data(data, clean)
    assert (cleaned.valid_src, cleaned.valid_tgt) == (data.valid_src, data.valid_tgt)  # validation never cleaned
    kept = gzip.open(cleaned.train_src, "rt", encoding="utf-8").read().splitlines()
    report = json.loads((Path(cleaned.train_src).parent / "report.json").read_text(encoding="utf-8"))
    assert len(kept) == report["kept"] == 600 - 177 and kept[0] == pairs[0][0]
    stamp = Path(cleaned.train_src).stat().st_mtime_ns
    again = cleaned_data(data, clean)  # the same files and section: the cache's, not cleaned again
    assert again == cleaned and Path(again.train_src).stat().st_mtime_ns == stamp
    other = cleaned_data(data, replace(clean, filters=["copy"]))
    assert other.train_src != cleaned.train_src
    with pytest.raises(ConfigError, match="clean: filters a pair of text files"):
        cleaned_data(DataConfig(train=str(tmp_path / "t.tsv"), valid=str(tmp_path / "t.tsv")), clean)


@pytest.mark.parametrize("rules, message", [
    ({}, "give clean.dcce.forward and clean.dcce.backward"),
    ({"forward": "f", "backward": "b"}, "clean.dcce needs threshold"),
    ({"forward": "f", "backward": "b", "threshold": 2.0}, r"in \(0, 1\]; got 2.0"),
])
def test_the_dcce_filter_needs_its_models_and_one_rule(rules, message):
    with pytest.raises(ConfigError, match=message):
        CleanConfig(filters=["length", "dcce"], dcce=DcceRules(**rules))


def test_the_dcce_filter_is_registered_by_the_front_ends_and_judges_with_both_models(tiny_model_dir):
    from seq2seq.data.dcce import DualCrossEntropyFilter
    from seq2seq.inference.scoring import register_model_filters

    register_model_filters()
    cfg = CleanConfig(filters=["dcce"], dcce=DcceRules(forward=str(tiny_model_dir), backward=str(tiny_model_dir),
                                                       keep_share=0.5))
    (dcce,) = build_filters(cfg)
    assert isinstance(dcce, DualCrossEntropyFilter) and "dcce" in filter_names()
    pairs = [("A man rides a bike.", "Ein Mann fährt Fahrrad."), ("A dog runs.", "Zzz qqq xxx yyy."),
             ("Two women walk.", "Zwei Frauen gehen."), ("A cat.", "Haus Haus Haus Haus Haus Haus.")]
    learnt = dcce.prepare(pairs)
    # Judged in the batch the threshold was learnt from, so each pair's score is the one ranked: a pair scored
    # alone may differ from its batched score in the last bits (other kernels), enough to cross the threshold.
    verdicts_ = dcce.keep_batch(pairs)
    adequacy = [s.adequacy for s in dcce.scores([s for s, _ in pairs], [t for _, t in pairs])]
    best_two = sorted(range(4), key=lambda i: -adequacy[i])[:2]
    assert [i for i, v in enumerate(verdicts_) if v is None] == sorted(best_two)  # the best half of the sample
    assert learnt == {"threshold": adequacy[best_two[1]], "sample_pairs": 4}
