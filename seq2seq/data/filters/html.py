"""`html`: what a crawl leaves in text: tags, character entities and boilerplate phrases
("Click here", cookie banners, "All rights reserved"), on either side (`clean.html`)."""

from __future__ import annotations

import re

from seq2seq.config.clean_section import CleanConfig
from seq2seq.data.filters.base import PairFilter

TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:-]*(?:\s[^<>]*)?/?>|<!--|-->")
ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")
# Phrases of web pages' chrome, not of sentences: matched as whole words, case-insensitively. ("cookie"
# alone is a biscuit: only the banner's phrases.)
# ("read more", "powered by", "lire la suite" are left out: sentences say them too.)
BOILERPLATE = (
    "click here", "click to enlarge", "skip to content", "skip to main content", "all rights reserved",
    "accept cookies", "accept all cookies", "uses cookies", "use of cookies", "cookie policy", "cookie settings",
    "privacy policy", "terms of use", "terms and conditions", "javascript is disabled", "enable javascript",
    "sign up for our newsletter", "subscribe to our newsletter", "log in to reply",
    "hier klicken", "alle rechte vorbehalten", "verwendet cookies", "cookies akzeptieren",
    "datenschutzerklärung", "zum inhalt springen",
    "cliquez ici", "tous droits réservés", "utilise des cookies", "accepter les cookies",
    "politique de confidentialité", "aller au contenu",
    "haga clic aquí", "haz clic aquí", "todos los derechos reservados", "utiliza cookies",
    "política de privacidad",
)


def boilerplate_phrases(cfg: CleanConfig) -> tuple[str, ...]:
    """The phrases looked for (`BOILERPLATE` and clean.html.extra_phrases), casefolded."""
    return tuple(sorted({p.casefold().strip() for p in (*BOILERPLATE, *cfg.html.extra_phrases) if p.strip()}))


class HtmlFilter(PairFilter):
    """Reasons: `tag`, `entity`, `boilerplate`."""

    name = "html"
    reasons = ("tag", "entity", "boilerplate")

    def __init__(self, cfg: CleanConfig) -> None:
        super().__init__(cfg)
        self.phrases = boilerplate_phrases(cfg)
        self.whole_words = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in self.phrases) + r")\b")

    def boilerplate(self, text: str) -> bool:
        folded = text.casefold()
        # (substring tests first: a regex of 50 alternatives costs ten times as much on every line)
        return any(p in folded for p in self.phrases) and self.whole_words.search(folded) is not None

    def keep(self, src: str, tgt: str) -> str | None:
        rules = self.cfg.html
        for side in (src, tgt):
            if rules.tags and "<" in side and TAG.search(side):
                return "tag"
            if rules.entities and "&" in side and ENTITY.search(side):
                return "entity"
            if rules.boilerplate and self.boilerplate(side):
                return "boilerplate"
        return None
