"""Training-time text modifiers (data.modifiers): upper, title, typos, merge, drawn per (seed, epoch, row)."""

import json
import re

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner
from safetensors.torch import load_file

from seq2seq.cli import cli
from seq2seq.config import ConfigError, DataConfig, TokenizerConfig, load_config
from seq2seq.config.data_section import MODIFIERS, ModifierConfig
from seq2seq.data.modifiers import (MAX_MERGED, MAX_TYPO_WORDS, NEIGHBOURS, PairModifier, merge, title, typo, typos,
                                    upper)
from seq2seq.data.sampling import SubwordSampler
from seq2seq.text.terminology import TERM
from seq2seq.text.tokenizer import EOS_ID, PAD_ID, UNK_ID, TokenizerPair, train_tokenizer
from seq2seq.training.experiment import text_training_data

SOURCES = [
    "A man in a blue shirt is standing on a ladder.",
    "Two dogs play with 3 balls at http://example.com/park today!",
    "\"Quickly,\" she said, (and left) at 10:30 with anna@mail.org.",
    "The USA's team wins; the {name} of %s is `code` here",
    "Straße und Fluß",
    "1 2 3 4",
    "",
]
TARGETS = ["Ein Mann in einem blauen Hemd steht auf einer Leiter.", "Zwei Hunde spielen mit 3 Bällen.",
           "„Schnell“, sagte sie.", "Das Team der USA gewinnt.", "Die Straße am Fluss.", "1 2 3 4", ""]


def levenshtein(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


# ------------------------------------------------------------------------------------------- the modifiers


@pytest.mark.parametrize("src, tgt", list(zip(SOURCES, TARGETS)))
def test_upper_upper_cases_both_sides_and_the_target_sharp_s_as_a_capital(src, tgt):
    rng = np.random.default_rng(0)
    up_src, up_tgt = upper(src, tgt, rng)
    assert up_src == src.upper()
    assert up_tgt == tgt.replace("ß", "ẞ").upper() and "ß" not in up_tgt
    assert up_tgt.lower().replace("ẞ".lower(), "ß") == tgt.lower()  # lower-cases back (ẞ -> ß)
    assert rng.random() == np.random.default_rng(0).random()  # casing draws nothing


def test_upper_writes_ss_for_a_vocabulary_without_the_capital_sharp_s():
    assert upper("a street", "die Straße", sharp_s="SS") == ("A STREET", "DIE STRASSE")
    src, tgt = corpus(50)
    tgt[3] = "die Straße."
    out = PairModifier(ModifierConfig(upper=1.0), src, tgt, sharp_s="SS").pair(0, 3)
    assert out is not None and out.tgt == "DIE STRASSE."


def test_upper_and_title_keep_reserved_pieces_as_written():
    assert upper(f"a dog {TERM} Hund", "ein Hund") == (f"A DOG {TERM} HUND", "EIN HUND")
    assert title("a <blank> dog <b>runs</b>", "x") == ("A <blank> Dog <b>Runs</b>", "X")


@pytest.mark.parametrize("src, tgt", list(zip(SOURCES, TARGETS)))
def test_title_capitalises_every_word_and_changes_nothing_else(src, tgt):
    for before, after in zip((src, tgt), title(src, tgt, np.random.default_rng(0))):
        assert re.split(r"(\s+)", after)[1::2] == re.split(r"(\s+)", before)[1::2]  # the spacing kept
        for old, new in zip(before.split(), after.split()):
            letters = [j for j, c in enumerate(old) if c.isalpha()]
            if not letters or any(c.isdigit() for c in old[:letters[0]]):
                assert new == old  # no letter, or a number first ("3rd")
                continue
            j = letters[0]
            assert new[j] == old[j].upper() and new[:j] == old[:j] and new[j + 1:] == old[j + 1:]
    assert title("the USA is here, o'clock 3rd", "die straße")[0] == "The USA Is Here, O'clock 3rd"


def test_a_typo_is_one_edit_of_its_kind_keeping_the_case():
    seen = set()
    for seed in range(400):
        word = ["Hello", "world", "ab", "ÄÖüß", "aa"][seed % 5]
        out = typo(word, np.random.default_rng(seed))
        assert out != word and 1 <= levenshtein(word, out) <= 2 and out.isalpha()
        if len(out) == len(word) and levenshtein(word, out) == 1:  # a keyboard neighbour, case kept
            j = next(j for j, (a, b) in enumerate(zip(word, out)) if a != b)
            assert out[j].lower() in NEIGHBOURS[word[j].lower()] and out[j].isupper() == word[j].isupper()
            seen.add("neighbour")
        elif len(out) == len(word):  # a swap of two different adjacent letters, each place keeping its case
            j = next(j for j, (a, b) in enumerate(zip(word, out)) if a != b)
            assert out[j].lower() == word[j + 1].lower() and out[j + 1].lower() == word[j].lower()
            assert [c.isupper() for c in out] == [c.isupper() for c in word]
            seen.add("swap")
        else:
            seen.add("drop" if len(out) < len(word) else "repeat")
            assert len(out) > 1  # never leaves a single letter
    assert seen == {"swap", "drop", "repeat", "neighbour"}
    assert set(NEIGHBOURS["s"]) == set("weadzx") and set(NEIGHBOURS["p"]) == set("ol")


def test_typos_edit_a_few_words_of_the_source_and_never_numbers_urls_or_the_target():
    protected = re.compile(r"[\d/@{}%`:]")
    changed = 0
    for seed in range(300):
        for src, tgt in zip(SOURCES, TARGETS):
            new_src, new_tgt = typos(src, tgt, np.random.default_rng([seed, len(src)]))
            assert new_tgt == tgt
            before, after = re.split(r"(\s+)", src), re.split(r"(\s+)", new_src)
            assert len(before) == len(after) and before[1::2] == after[1::2]  # the words and spacing kept
            edited = [(a, b) for a, b in zip(before, after) if a != b]
            assert len(edited) <= MAX_TYPO_WORDS
            assert levenshtein(src, new_src) <= 2 * len(edited)
            assert all(not protected.search(a) for a, _ in edited)  # digits, URLs, e-mails, {x}, %s, `code`
            changed += bool(edited)
            if src in ("1 2 3 4", ""):
                assert new_src == src  # nothing to misspell
    assert changed == 300 * 5  # every source with a word of letters gets a typo


def test_merge_joins_the_pairs_with_one_space():
    assert merge(("A dog runs. ", "Ein Hund rennt."), [(" Two men.", "Zwei Männer. "), ("Hi!", "Hallo!")]) == \
        ("A dog runs. Two men. Hi!", "Ein Hund rennt. Zwei Männer. Hallo!")
    assert merge(("a", "b"), []) == ("a", "b")


# ------------------------------------------------------------------------------------- which rows, and how


def corpus(n):
    rng = np.random.default_rng(1)
    words = ["dog", "man", "runs", "the", "blue", "red", "house", "street", "walks", "big"]
    src = [" ".join(rng.choice(words, size=int(rng.integers(2, 8)))) + "." for _ in range(n)]
    return src, [s.replace("the", "die") for s in src]


def test_shares_are_honoured_each_modifier_on_its_own():
    src, tgt = corpus(10_000)
    shares = dict(upper=0.1, title=0.05, typos=0.3, merge=0.2)
    modifier = PairModifier(ModifierConfig(**shares), src, tgt, seed=3)
    for epoch in (0, 1):
        drawn = modifier.chosen(epoch)
        for j, name in enumerate(MODIFIERS):
            assert abs(drawn[:, j].mean() - shares[name]) < 0.015, (name, drawn[:, j].mean())
        applied = [modifier.pair(epoch, i) for i in range(len(src))]
        counts = {name: sum(m is not None and name in m.applied for m in applied) / len(src) for name in MODIFIERS}
        assert abs(counts["upper"] - 0.1) < 0.015 and abs(counts["typos"] - 0.3) < 0.015
        assert abs(counts["merge"] - 0.2) < 0.015
        assert abs(counts["title"] - 0.05 * 0.9) < 0.015  # a row drawn for both is upper-cased
        untouched = ~drawn.any(axis=1)
        assert all((m is None) == u for m, u in zip(applied, untouched))  # every drawn row changes here
    assert (modifier.chosen(0) != modifier.chosen(1)).any()  # drawn anew each epoch
    # one share changing leaves the other modifiers' rows as they were
    other = PairModifier(ModifierConfig(**{**shares, "typos": 0.6}), src, tgt, seed=3)
    same = [j for j, name in enumerate(MODIFIERS) if name != "typos"]
    assert (other.chosen(0)[:, same] == modifier.chosen(0)[:, same]).all()
    assert not PairModifier(ModifierConfig(), src, tgt).chosen(0).any()


def test_an_epoch_modified_pairs_are_a_function_of_seed_epoch_and_row():
    src, tgt = corpus(500)
    cfg = ModifierConfig(upper=0.2, title=0.2, typos=0.5, merge=0.3)

    def epoch(seed, e):
        modifier = PairModifier(cfg, src, tgt, seed=seed)  # fresh generators every time
        return [modifier.pair(e, i) for i in range(len(src))]

    first = epoch(7, 2)
    assert epoch(7, 2) == first
    assert [PairModifier(cfg, src, tgt, seed=7).pair(2, i) for i in (400, 3, 17)] == [first[400], first[3], first[17]]
    assert epoch(7, 3) != first and epoch(8, 2) != first
    merged = [m for m in first if m is not None and "merge" in m.applied]
    assert merged and all(2 <= len(re.findall(r"\.", m.tgt)) <= 1 + MAX_MERGED for m in merged)


def test_merge_partners_are_other_rows_of_the_same_corpus_never_annotated_ones():
    src = [f"s{i}." for i in range(30)]
    src[12] = f"s12. {TERM} x"
    tgt = [f"t{i}." for i in range(30)]
    modifier = PairModifier(ModifierConfig(merge=1.0), src, tgt, seed=0, sizes=[10, 15, 5])
    bounds = [(0, 10), (10, 25), (25, 30)]
    alone = 0
    for epoch in range(20):
        for i in range(30):
            out = modifier.pair(epoch, i)
            if i == 12:
                assert out is None  # annotated with terms when prepared: never modified
                continue
            if out is None:  # its only partner drawn was row 12
                assert 10 <= i < 25
                alone += 1
                continue
            assert out.applied == ("merge",)
            rows = [int(s[1:-1]) for s in out.src.split()]
            assert rows[0] == i and 2 <= len(rows) <= 1 + MAX_MERGED and len(set(rows)) == len(rows)
            lo, hi = next(b for b in bounds if b[0] <= i < b[1])
            assert all(lo <= r < hi for r in rows) and 12 not in rows
            assert out.tgt == " ".join(f"t{r}." for r in rows)
    assert alone < 0.1 * 20 * 15
    assert PairModifier(ModifierConfig(merge=1.0), src[:1], tgt[:1]).pair(0, 0) is None  # nothing to merge with


# ------------------------------------------------------------------------------------------ in the sampler


def spelt(tokens, out):
    """Can the vocabulary spell the modified pair `out` without <unk> (else the sampler keeps the pair)?"""
    return UNK_ID not in tokens.src.encode([out.src])[0] + tokens.tgt.encode([out.tgt])[0]


@pytest.fixture(scope="module")
def pair(multi30k_small):
    en = multi30k_small["train.en"].read_text(encoding="utf-8").splitlines()
    de = multi30k_small["train.de"].read_text(encoding="utf-8").splitlines()
    tok = train_tokenizer(en + de, 400, TokenizerConfig())
    return TokenizerPair(tok, tok, joint=True), en, de


def test_rows_without_a_modifier_keep_their_cached_ids_and_modified_ones_are_encoded_anew(pair):
    tokens, en, de = pair
    best_src = [[7] + ids + [EOS_ID] for ids in tokens.src.encode(en)]  # 7: a language tag before every source
    best_tgt = tokens.tgt.encode(de)
    modifier = PairModifier(ModifierConfig(upper=0.2, typos=0.2, merge=0.1), en, de, seed=4)
    segmenter = SubwordSampler(tokens, en, de, best_src, best_tgt, alpha=None, max_len=1000, seed=4,
                               prefixes=[[7]] * len(en), modifier=modifier)
    for epoch in range(2):
        src_ids, tgt_ids = segmenter.epoch(epoch)
        changed = 0
        for i in range(len(en)):
            out = modifier.pair(epoch, i)
            if out is None or not spelt(tokens, out):  # the very lists of the cache
                assert src_ids[i] is best_src[i] and tgt_ids[i] is best_tgt[i]
                continue
            changed += 1
            assert src_ids[i] == [7] + tokens.src.encode([out.src])[0] + [EOS_ID]
            assert tgt_ids[i] == tokens.tgt.encode([out.tgt])[0]
        assert 0.25 * len(en) < changed < 0.6 * len(en)
    # a modified pair over max_len keeps its cached ids
    short = SubwordSampler(tokens, en, de, best_src, best_tgt, alpha=None, max_len=12, seed=4,
                           prefixes=[[7]] * len(en), modifier=PairModifier(ModifierConfig(merge=1.0), en, de))
    src_ids, tgt_ids = short.epoch(0)
    assert all(len(s) <= 14 or s is b for s, b in zip(src_ids, best_src))
    # with subword regularization, a modified pair is sampled (and spells its modified text)
    sampled = SubwordSampler(tokens, en, de, best_src, best_tgt, alpha=0.2, max_len=1000, seed=4,
                             prefixes=[[7]] * len(en), modifier=PairModifier(ModifierConfig(upper=1.0), en, de))
    src_ids, _ = sampled.epoch(0)
    uppers = tokens.src.encode([s.upper() for s in en])
    known = [spelt(tokens, sampled.modifier.pair(0, i)) for i in range(len(en))]
    assert 0.2 * len(en) < sum(known) < len(en)  # this 400-line vocabulary lacks some capitals (Q, Ü, ...)
    for ids, text, best, ok in zip(src_ids, en, best_src, known):
        # a pair the vocabulary cannot spell upper-cased stays as it was (here: sampled, as without modifiers)
        assert tokens.src.decode([ids[1:-1]])[0] == (text.upper() if ok else tokens.src.decode([best[1:-1]])[0])
    assert sum(s[1:-1] != b for s, b in zip(src_ids, uppers)) > len(en) / 3  # sampled, not the best pieces
    unspelt = SubwordSampler(tokens, en, de, best_src, best_tgt, alpha=None, max_len=1000, seed=4,
                             prefixes=[[7]] * len(en), modifier=PairModifier(ModifierConfig(upper=1.0), en, de))
    src_ids, tgt_ids = unspelt.epoch(0)
    assert all((s is b) != ok for s, b, ok in zip(src_ids, best_src, known))


# ---------------------------------------------------------------------------------------------- the config


@pytest.mark.parametrize("key, value, written", [("upper", 1.5, "1.5"), ("title", -0.1, "-0.1"),
                                                 ("typos", float("nan"), ".nan"), ("merge", 2, "2")])
def test_a_share_outside_0_1_is_refused_naming_the_key(key, value, written):
    with pytest.raises(ConfigError, match=rf"^data\.modifiers\.{key} must be in \[0, 1\], got {value}$"):
        ModifierConfig(**{key: value})
    with pytest.raises(ConfigError, match=rf"^data\.modifiers\.{key} must be in \[0, 1\]"):
        load_config(None, [f"data.modifiers.{key}={written}"])


def test_modifier_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="Did you mean 'data.modifiers.upper'"):
        load_config(None, ["data.modifiers.uper=0.1"])
    with pytest.raises(ConfigError, match="data.modifiers.title needs cased texts, but data.lowercase is true"):
        DataConfig(lowercase=True, modifiers=ModifierConfig(title=0.1))
    assert DataConfig(lowercase=True, modifiers=ModifierConfig(typos=0.1, merge=0.1)).modifiers.on
    cfg = load_config(None, ["data.modifiers.merge=0.25"])
    assert cfg.data.modifiers == ModifierConfig(merge=0.25) and not ModifierConfig().on
    with pytest.raises(AttributeError):
        cfg.data.modifiers.merge = 0.5  # type: ignore[misc]  # frozen


def test_image_and_audio_sources_refuse_modifiers(tmp_path):
    from seq2seq.training.experiment import run_training

    cfg = load_config(None, ["model.encoder.type=audio", "data.train=x.tsv", "data.modifiers.upper=0.1",
                             f"training.output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"data.modifiers \(training-time text modifiers\) are for text sources"):
        run_training(cfg)


# ------------------------------------------------------------------------------------------------ training


def write_config(tmp_path, files, out, **training):
    cfg = {
        "data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                 "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"]),
                 "modifiers": {"upper": 0.1, "title": 0.05, "typos": 0.2, "merge": 0.2}},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "share_embeddings": True},
        "training": {"output_dir": str(out), "max_steps": 14, "valid_every": 7, "checkpoint_every": 7,
                     "max_tokens": 6000, "lr": 2e-3, "warmup_steps": 4, "device": "cpu", "valid_bleu": False,
                     **training},
    }
    path = tmp_path / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_training_batches_are_modified_and_validation_is_not(tmp_path, multi30k_small):
    config = write_config(tmp_path, multi30k_small, tmp_path / "m")
    data = text_training_data(load_config(config), tmp_path / "m")
    plain = text_training_data(load_config(config, ["data.modifiers.upper=0", "data.modifiers.title=0",
                                                    "data.modifiers.typos=0", "data.modifiers.merge=0"]),
                               tmp_path / "m")
    rows = list(range(40))
    modifier = data.sampler.segmenter.modifier
    best = plain.collate(rows)

    def ids(batch, k):
        return [t for t in batch.src[k].tolist() if t != PAD_ID], [t for t in batch.tgt_out[k].tolist() if t != PAD_ID]

    changed = 0
    for epoch in (0, 1):
        data.sampler.set_epoch(epoch)
        batch = data.collate(rows)
        for k, i in enumerate(rows):
            out = modifier.pair(epoch, i)
            kept = out is None or not spelt(data.tokenizers, out)
            assert (ids(batch, k) == ids(best, k)) == kept, (epoch, i)
            changed += not kept
    assert changed > 0.2 * 2 * len(rows)
    for va, vb in zip(data.valid.batches, plain.valid.batches):
        assert torch.equal(va.src, vb.src) and torch.equal(va.tgt_out, vb.tgt_out)


def test_a_run_with_modifiers_resumes_exactly_and_is_no_longer_sentence_level(tmp_path, multi30k_small):
    def train(config, *extra):
        result = CliRunner().invoke(cli, ["train", str(config), *extra])
        assert result.exit_code == 0, result.output
        return json.loads((config.parent / config.stem / "metadata.json").read_text())

    full = write_config(tmp_path, multi30k_small, tmp_path / "full")
    assert train(full)["sentence_level"] is False  # merged pairs: lines of several sentences
    part = write_config(tmp_path, multi30k_small, tmp_path / "part", max_steps=7)
    train(part)
    state = json.loads((tmp_path / "part" / "train_state" / "state.json").read_text())
    assert train(part, "--resume", "--set", "training.max_steps=14")["step"] == 14
    assert state["sampler"]["epoch"] == 1 and state["sampler"]["position"] > 0  # stopped in the 2nd epoch
    wa, wb = (load_file(str(tmp_path / run / "checkpoints" / "step_14.safetensors")) for run in ("full", "part"))
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], atol=1e-6, rtol=1e-5, msg=key)
    merge_off = write_config(tmp_path, multi30k_small, tmp_path / "single", max_steps=1)
    assert train(merge_off, "--set", "data.modifiers.merge=0")["sentence_level"] is True


def test_several_corpora_merge_within_their_corpus(tmp_path, multi30k_small):
    files = multi30k_small
    config = write_config(tmp_path, files, tmp_path / "mix")
    cfg = yaml.safe_load(config.read_text())
    for key in ("train_src", "train_tgt"):
        del cfg["data"][key]
    cfg["data"]["corpora"] = [{"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"])},
                              {"train_src": str(files["val.en"]), "train_tgt": str(files["val.de"]), "tag": "<BT>"}]
    cfg["data"]["modifiers"] = {"merge": 1.0}
    config.write_text(yaml.safe_dump(cfg))
    data = text_training_data(load_config(config), tmp_path / "mix")
    segmenter = data.sampler.segmenter
    sizes = [c["pairs"] for c in data.corpora]
    assert list(segmenter.modifier.ends) == [sizes[0], sum(sizes)]
    tag = data.tokenizers.src.piece_id("<BT>")
    src_ids, _ = segmenter.epoch(0)
    for i, ids in enumerate(src_ids):  # a tagged pair merged with tagged ones only: one tag, first
        assert ids.count(tag) == (i >= sizes[0]) and (i < sizes[0] or ids[0] == tag)
    texts = segmenter.src_texts
    for i in (0, sizes[0] + 3):
        merged = segmenter.modifier.pair(0, i)
        assert merged is not None and merged.src.startswith(texts[i].strip())
        rest = merged.src[len(texts[i].strip()) + 1:]
        lo, hi = (0, sizes[0]) if i < sizes[0] else (sizes[0], sum(sizes))
        assert any(rest.startswith(texts[j].strip()) for j in range(lo, hi) if j != i)
    data.sampler.set_epoch(0)
    batch = data.collate(next(iter(data.sampler)))
    assert batch.src.size(0) > 0
