"""Built-in synthetic English -> German corpus for `seq2seq quickstart`.

A small seeded synchronous grammar generates aligned sentence pairs. Each clause is
`subject verb object [prepositional phrase]`, optionally with a modal (can / must / want to).
Clauses are combined into five sentence shapes:

* plain main clause (verb second):      "Der Mann sieht den Hund im Garten."
* fronted adverb or PP (V2 inversion):  "Heute sieht der Mann den Hund."
* main + subordinate (verb final):      "..., weil die Frau dem Kind hilft."
* subordinate first, then inversion:    "Wenn der Hund den Ball findet, sieht die Katze den Mann."
* reported clause:                      "I know that ..." -> "Ich weiß, dass ..."

Noun phrases agree in gender, number and case: nominative subjects, accusative objects (dative
for helfen / folgen / danken) and dative after prepositions (with "in dem" -> "im"). Adjectives
take weak endings after der-words, mixed endings after ein-words and strong endings without an
article (after a bare number). Numbers 2..99 are written as words via `num2words`, so the model
has to learn German compounding ("forty-two" -> "zweiundvierzig"). All word forms live in the
tables below; the code only picks from them.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from pathlib import Path

from num2words import num2words

SLOT = {"m": 0, "f": 1, "n": 2}  # column in the ending tables; plural is column 3
Table = dict[str, tuple[str, str, str, str]]  # case -> (masc, fem, neut, plural)

# --- ending tables: rows are cases, columns masc / fem / neut / plural --------------------------
DEF_ENDINGS: Table = {  # d- : der die das die
    "nom": ("er", "ie", "as", "ie"),
    "acc": ("en", "ie", "as", "ie"),
    "dat": ("em", "er", "em", "en"),
}
DER_ENDINGS: Table = {  # dies- : dieser diese dieses diese
    "nom": ("er", "e", "es", "e"),
    "acc": ("en", "e", "es", "e"),
    "dat": ("em", "er", "em", "en"),
}
EIN_ENDINGS: Table = {  # ein-, kein-, mein-, sein-, ihr-, unser- : ein eine ein (keine)
    "nom": ("", "e", "", "e"),
    "acc": ("en", "e", "", "e"),
    "dat": ("em", "er", "em", "en"),
}
WEAK: Table = {  # adjective after a der-word: der große Hund
    "nom": ("e", "e", "e", "en"),
    "acc": ("en", "e", "e", "en"),
    "dat": ("en", "en", "en", "en"),
}
MIXED: Table = {  # adjective after an ein-word: ein großer Hund
    "nom": ("er", "e", "es", "en"),
    "acc": ("en", "e", "es", "en"),
    "dat": ("en", "en", "en", "en"),
}
STRONG: Table = DER_ENDINGS  # adjective without article: zwei große Hunde (equal outside the genitive)

@dataclass(frozen=True)
class Det:
    en_sg: str | None  # None: not allowed in the singular
    en_pl: str | None  # None: not allowed in the plural
    stem: str
    endings: Table | None  # None: no German article (bare plural after a number)
    adj: Table


DETERMINERS: dict[str, Det] = {
    "the": Det("the", "the", "d", DEF_ENDINGS, WEAK),
    "this": Det("this", "these", "dies", DER_ENDINGS, WEAK),
    "a": Det("a", None, "ein", EIN_ENDINGS, MIXED),
    "no": Det("no", "no", "kein", EIN_ENDINGS, MIXED),
    "my": Det("my", "my", "mein", EIN_ENDINGS, MIXED),
    "his": Det("his", "his", "sein", EIN_ENDINGS, MIXED),
    "her": Det("her", "her", "ihr", EIN_ENDINGS, MIXED),
    "our": Det("our", "our", "unser", EIN_ENDINGS, MIXED),
    "": Det(None, "", "", None, STRONG),  # "forty-two dogs" -> "zweiundvierzig Hunde"
}
DET_WEIGHTS_SG = {"the": 45, "a": 25, "this": 8, "no": 4, "my": 6, "his": 4, "her": 4, "our": 4}
DET_WEIGHTS_PL = {"the": 35, "": 35, "this": 8, "no": 4, "my": 6, "his": 4, "her": 4, "our": 4}


@dataclass(frozen=True)
class Noun:
    en_sg: str
    en_pl: str
    gender: str
    de_sg: str
    de_pl: str
    kind: str  # "animate" (can be a subject) or "thing"
    tags: tuple[str, ...] = ()  # narrower classes some verbs/prepositions ask for: "small", "in", "on"

    def fits(self, takes: str) -> bool:
        return takes in ("any", self.kind) or takes in self.tags

    def de(self, case: str, plural: bool) -> str:
        if not plural:
            return self.de_sg  # no weak masculine nouns in the lexicon, no archaic dative -e
        if case == "dat" and not self.de_pl.endswith(("n", "s")):
            return self.de_pl + "n"  # dative plural: den Hunden, den Kindern (but den Autos)
        return self.de_pl


_A, _T = "animate", "thing"
_NOUN_TABLE = """
# en_sg   en_pl     gender de_sg      de_pl       kind     tags
man       men       m      Mann       Männer      animate
woman     women     f      Frau       Frauen      animate
child     children  n      Kind       Kinder      animate
dog       dogs      m      Hund       Hunde       animate
cat       cats      f      Katze      Katzen      animate
horse     horses    n      Pferd      Pferde      animate
teacher   teachers  m      Lehrer     Lehrer      animate
doctor    doctors   m      Arzt       Ärzte       animate
bird      birds     m      Vogel      Vögel       animate
mouse     mice      f      Maus       Mäuse       animate
king      kings     m      König      Könige      animate
cook      cooks     m      Koch       Köche       animate
girl      girls     n      Mädchen    Mädchen     animate
friend    friends   m      Freund     Freunde     animate
sister    sisters   f      Schwester  Schwestern  animate
book      books     n      Buch       Bücher      thing    small
table     tables    m      Tisch      Tische      thing    on
car       cars      n      Auto       Autos       thing    in
house     houses    n      Haus       Häuser      thing    in
apple     apples    m      Apfel      Äpfel       thing    small
door      doors     f      Tür        Türen       thing
chair     chairs    m      Stuhl      Stühle      thing    on
bed       beds      n      Bett       Betten      thing    in,on
letter    letters   m      Brief      Briefe      thing    small
ball      balls     m      Ball       Bälle       thing    small
bottle    bottles   f      Flasche    Flaschen    thing    small
box       boxes     f      Kiste      Kisten      thing    in,small
key       keys      m      Schlüssel  Schlüssel   thing    small
window    windows   n      Fenster    Fenster     thing
bag       bags      f      Tasche     Taschen     thing    in,small
picture   pictures  n      Bild       Bilder      thing    small
flower    flowers   f      Blume      Blumen      thing    small
boat      boats     n      Boot       Boote       thing    in,on
garden    gardens   m      Garten     Gärten      thing    in
street    streets   f      Straße     Straßen     thing    on
tree      trees     m      Baum       Bäume       thing    on
"""
NOUNS: dict[str, Noun] = {
    cols[0]: Noun(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], tuple(cols[6].split(",")) if len(cols) > 6 else ())
    for cols in (line.split() for line in _NOUN_TABLE.strip().splitlines()[1:])
}

# English -> (German declension stem, which nouns it may modify). The stem takes every ending:
# müd+e = müde, teur+es = teures, dunkl+en = dunklen.
ADJECTIVES: dict[str, tuple[str, str]] = {
    "big": ("groß", "any"), "small": ("klein", "any"), "old": ("alt", "any"), "beautiful": ("schön", "any"),
    "black": ("schwarz", "any"), "white": ("weiß", "any"), "brown": ("braun", "any"), "dirty": ("schmutzig", "any"),
    "new": ("neu", _T), "red": ("rot", _T), "blue": ("blau", _T), "green": ("grün", _T), "yellow": ("gelb", _T),
    "expensive": ("teur", _T), "cheap": ("billig", _T), "dark": ("dunkl", _T), "clean": ("sauber", _T),
    "young": ("jung", _A), "hungry": ("hungrig", _A), "tired": ("müd", _A), "happy": ("glücklich", _A),
    "friendly": ("freundlich", _A),
}


@dataclass(frozen=True)
class Verb:
    en_sg: str
    en_base: str
    de_sg: str
    de_pl: str  # = infinitive for every verb here
    obj: str  # which nouns it takes as object: "any", "animate", "thing" or a noun tag
    case: str = "acc"


VERBS: dict[str, Verb] = {v.en_base: v for v in [
    Verb("sees", "see", "sieht", "sehen", "any"), Verb("finds", "find", "findet", "finden", "any"),
    Verb("hears", "hear", "hört", "hören", "any"), Verb("loves", "love", "liebt", "lieben", "any"),
    Verb("paints", "paint", "malt", "malen", "any"), Verb("washes", "wash", "wäscht", "waschen", "any"),
    Verb("looks for", "look for", "sucht", "suchen", "any"), Verb("needs", "need", "braucht", "brauchen", "any"),
    Verb("catches", "catch", "fängt", "fangen", "any"), Verb("counts", "count", "zählt", "zählen", "any"),
    Verb("buys", "buy", "kauft", "kaufen", _T), Verb("sells", "sell", "verkauft", "verkaufen", _T),
    Verb("carries", "carry", "trägt", "tragen", "small"), Verb("holds", "hold", "hält", "halten", "small"),
    Verb("forgets", "forget", "vergisst", "vergessen", "any"), Verb("visits", "visit", "besucht", "besuchen", _A),
    Verb("calls", "call", "ruft", "rufen", _A), Verb("meets", "meet", "trifft", "treffen", _A),
    Verb("helps", "help", "hilft", "helfen", _A, "dat"), Verb("follows", "follow", "folgt", "folgen", _A, "dat"),
    Verb("thanks", "thank", "dankt", "danken", _A, "dat"),
]}
MODALS: dict[str, tuple[str, str, str, str]] = {  # en 3sg, en pl, de 3sg, de pl
    "can": ("can", "can", "kann", "können"), "must": ("must", "must", "muss", "müssen"),
    "want": ("wants to", "want to", "will", "wollen"),
}
# English -> (German, which nouns it takes). All are locative here (no verb of motion such as "throw"
# or "put" is in the lexicon, which would make in/auf/unter/... directional and accusative), so all
# govern the dative.
PREPOSITIONS: dict[str, tuple[str, str]] = {
    "with": ("mit", "any"), "in": ("in", "in"), "on": ("auf", "on"), "under": ("unter", _T),
    "behind": ("hinter", "any"), "next to": ("neben", "any"), "in front of": ("vor", "any"),
}
CONTRACTIONS = {("in", "dem"): "im"}
ADVERBS = [("today", "heute"), ("now", "jetzt"), ("sometimes", "manchmal"), ("often", "oft"),
           ("every day", "jeden Tag"), ("in the morning", "am Morgen"), ("in the evening", "am Abend")]
SUBORDINATORS = [("because", "weil"), ("although", "obwohl"), ("when", "wenn"), ("while", "während")]
# Reporting frames: English pronoun, German pronoun, person ("1sg", "3sg", "pl").
PRONOUNS = [("I", "ich", "1sg"), ("he", "er", "3sg"), ("she", "sie", "3sg"), ("we", "wir", "pl"), ("they", "sie", "pl")]
REPORT_VERBS = [  # en 3sg, en base, de 1sg, de 3sg, de pl
    ("knows", "know", "weiß", "weiß", "wissen"), ("says", "say", "sage", "sagt", "sagen"),
    ("thinks", "think", "denke", "denkt", "denken"), ("believes", "believe", "glaube", "glaubt", "glauben"),
    ("hopes", "hope", "hoffe", "hofft", "hoffen"),
]


@functools.lru_cache(maxsize=None)
def number_words(n: int) -> tuple[str, str]:
    """Cardinal `n` as (English, German) words: 42 -> ("forty-two", "zweiundvierzig")."""
    return num2words(n, lang="en"), num2words(n, lang="de")


@dataclass(frozen=True)
class NP:
    noun: str  # key of NOUNS
    det: str = "the"  # key of DETERMINERS
    plural: bool = False
    adj: str | None = None  # key of ADJECTIVES
    count: int | None = None  # 2..99, plural only

    def __post_init__(self) -> None:
        d = DETERMINERS[self.det]
        if (d.en_pl if self.plural else d.en_sg) is None:
            raise ValueError(f"determiner {self.det!r} has no {'plural' if self.plural else 'singular'}: {self}")
        if self.count is not None and (not self.plural or self.det in ("a", "no")):
            raise ValueError(f"a number needs a plural noun and a compatible determiner: {self}")
        if self.det == "" and self.count is None:
            raise ValueError(f"a bare plural needs a number: {self}")

    def en(self) -> str:
        d, n = DETERMINERS[self.det], NOUNS[self.noun]
        words = [number_words(self.count)[0]] if self.count else []
        words += [self.adj] if self.adj else []
        words.append(n.en_pl if self.plural else n.en_sg)
        art = d.en_pl if self.plural else d.en_sg
        if art == "a" and words[0][0] in "aeiou":
            art = "an"
        return " ".join([art] + words if art else words)

    def de(self, case: str) -> str:
        d, n = DETERMINERS[self.det], NOUNS[self.noun]
        col = 3 if self.plural else SLOT[n.gender]
        words = [d.stem + d.endings[case][col]] if d.endings else []
        words += [number_words(self.count)[1]] if self.count else []
        words += [ADJECTIVES[self.adj][0] + d.adj[case][col]] if self.adj else []
        return " ".join(words + [n.de(case, self.plural)])


def noun_phrase(det: str, noun: str, case: str = "nom", plural: bool = False,
                adj: str | None = None, count: int | None = None) -> tuple[str, str]:
    """(English, German) for one noun phrase, e.g. ("the", "dog", "acc", adj="big") -> den großen Hund."""
    np_ = NP(noun, det, plural, adj, count)
    return np_.en(), np_.de(case)


def prep_phrase(prep: str, np_: NP) -> tuple[str, str]:
    """(English, German) prepositional phrase; the object is dative, "in dem" contracts to "im"."""
    de_prep, de_np = PREPOSITIONS[prep][0], np_.de("dat")
    art, _, rest = de_np.partition(" ")
    if (de_prep, art) in CONTRACTIONS:
        return f"{prep} {np_.en()}", f"{CONTRACTIONS[de_prep, art]} {rest}"
    return f"{prep} {np_.en()}", f"{de_prep} {de_np}"


@dataclass(frozen=True)
class Clause:
    subj: NP
    verb: str  # key of VERBS (English base form)
    obj: NP
    pp: tuple[str, NP] | None = None  # (preposition, object)
    modal: str | None = None  # key of MODALS

    def en(self) -> str:
        v, pl = VERBS[self.verb], self.subj.plural
        if self.modal:
            verb = f"{MODALS[self.modal][1 if pl else 0]} {v.en_base}"
        else:
            verb = v.en_base if pl else v.en_sg
        pp = [prep_phrase(*self.pp)[0]] if self.pp else []
        return " ".join([self.subj.en(), verb, self.obj.en()] + pp)

    def _de_parts(self) -> tuple[str, str, list[str]]:
        """(finite verb, subject, middle field incl. infinitive at the end)."""
        v, pl = VERBS[self.verb], self.subj.plural
        finite = (MODALS[self.modal][3 if pl else 2]) if self.modal else (v.de_pl if pl else v.de_sg)
        middle = [self.obj.de(v.case)] + ([prep_phrase(*self.pp)[1]] if self.pp else [])
        return finite, self.subj.de("nom"), middle + ([v.de_pl] if self.modal else [])

    def de_main(self, front: str | None = None) -> str:
        """Verb-second main clause; with `front`, that constituent comes first and the subject follows the verb."""
        finite, subj, middle = self._de_parts()
        head = [front, finite, subj] if front else [subj, finite]
        return " ".join(head + middle)

    def de_sub(self) -> str:
        """Verb-final subordinate clause: "der Mann den Hund sehen kann"."""
        finite, subj, middle = self._de_parts()
        return " ".join([subj] + middle + [finite])


def _pick(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _random_np(rng: random.Random, takes: str, avoid: str | None = None, negative: bool = True) -> NP:
    nouns = [k for k, n in NOUNS.items() if n.fits(takes) and k != avoid]
    noun = rng.choice(nouns)
    plural = rng.random() < 0.4
    weights = DET_WEIGHTS_PL if plural else DET_WEIGHTS_SG
    det = _pick(rng, weights if negative else {k: w for k, w in weights.items() if k != "no"})
    count = None
    if det == "" or (plural and det != "no" and rng.random() < 0.25):
        count = rng.randint(2, 99)
    adjs = [a for a, (_, k) in ADJECTIVES.items() if k == "any" or k == NOUNS[noun].kind]
    adj = rng.choice(adjs) if rng.random() < 0.4 else None
    return NP(noun, det, plural, adj, count)


def _random_pp(rng: random.Random) -> tuple[str, NP]:
    prep = rng.choice(list(PREPOSITIONS))
    return prep, _random_np(rng, PREPOSITIONS[prep][1], negative=False)


def _random_clause(rng: random.Random, pp: bool | None = None) -> Clause:
    verb = rng.choice(list(VERBS))
    subj = _random_np(rng, _A)
    obj = _random_np(rng, VERBS[verb].obj, avoid=subj.noun)
    with_pp = rng.random() < 0.3 if pp is None else pp
    modal = rng.choice(list(MODALS)) if rng.random() < 0.2 else None
    return Clause(subj, verb, obj, _random_pp(rng) if with_pp else None, modal)


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _random_sentence(rng: random.Random) -> tuple[str, str]:
    shape = rng.choices(["plain", "front", "main_sub", "sub_main", "report"], weights=[30, 20, 20, 12, 18])[0]
    fronted_pp = shape == "front" and rng.random() < 0.5
    c = _random_clause(rng, pp=False if fronted_pp else None)
    if shape == "plain":
        en, de = c.en(), c.de_main()
    elif shape == "front":
        if fronted_pp:
            en_front, de_front = prep_phrase(*_random_pp(rng))
        else:
            en_front, de_front = rng.choice(ADVERBS)
        en, de = f"{en_front} {c.en()}", c.de_main(front=de_front)
    elif shape in ("main_sub", "sub_main"):
        en_sub, de_sub = rng.choice(SUBORDINATORS)
        c2 = _random_clause(rng, pp=False)
        if shape == "main_sub":
            en, de = f"{c.en()} {en_sub} {c2.en()}", f"{c.de_main()}, {de_sub} {c2.de_sub()}"
        else:
            en, de = f"{en_sub} {c2.en()}, {c.en()}", c.de_main(front=f"{de_sub} {c2.de_sub()},")
    else:
        if rng.random() < 0.5:
            en_subj, de_subj, person = rng.choice(PRONOUNS)
        else:
            s = _random_np(rng, _A)
            en_subj, de_subj, person = s.en(), s.de("nom"), "pl" if s.plural else "3sg"
        v = rng.choice(REPORT_VERBS)
        en_verb = v[0] if person == "3sg" else v[1]
        de_verb = {"1sg": v[2], "3sg": v[3], "pl": v[4]}[person]
        en, de = f"{en_subj} {en_verb} that {c.en()}", f"{de_subj} {de_verb}, dass {c.de_sub()}"
    return _cap(en) + ".", _cap(de) + "."


def generate_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """`n` distinct (English, German) pairs, deterministic in `seed`; a prefix of the list for larger `n`."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 20 * n + 1000:
            raise RuntimeError(f"could not generate {n} distinct sentences")
        en, de = _random_sentence(rng)
        if en not in seen:
            seen.add(en)
            pairs.append((en, de))
    return pairs


def make_splits(n_train: int = 20000, n_valid: int = 500, n_test: int = 500,
                seed: int = 1) -> dict[str, list[tuple[str, str]]]:
    """Train/valid/test splits, disjoint by English side. Valid and test do not depend on `n_train`."""
    if min(n_train, n_valid, n_test) < 0:
        raise ValueError(f"split sizes must be >= 0, got {n_train}, {n_valid}, {n_test}")
    pairs = generate_pairs(n_valid + n_test + n_train, seed)
    return {
        "train": pairs[n_valid + n_test:],
        "valid": pairs[:n_valid],
        "test": pairs[n_valid:n_valid + n_test],
    }


def write_splits(splits: dict[str, list[tuple[str, str]]], out_dir: Path) -> dict[str, tuple[Path, Path]]:
    """Write `{split}.en` / `{split}.de` (UTF-8, one sentence per line); returns split -> (en, de) paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, tuple[Path, Path]] = {}
    for split, pairs in splits.items():
        en_path, de_path = out_dir / f"{split}.en", out_dir / f"{split}.de"
        en_path.write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
        de_path.write_text("".join(de + "\n" for _, de in pairs), encoding="utf-8")
        paths[split] = (en_path, de_path)
    return paths
